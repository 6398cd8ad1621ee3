//! `explain-sync --planner ADDR` asks a running planner service and prints exactly what the
//! offline run prints.

use std::process::Command;

use tenantplane_grpc::PlannerService;
use tokio_stream::wrappers::TcpListenerStream;

const EXAMPLES: &[&str] = &[
    "explain-sync",
    "examples/workloads",
    "--tenant",
    "examples/tenant.yaml",
    "--policy",
    "examples/syncpolicy.yaml",
    "--host",
    "examples/host",
];

/// The pods an IsolationProfile refuses and admits.
const POD_SECURITY: &[&str] = &[
    "explain-sync",
    "examples/hostile/tenant/pod-security.yaml",
    "--tenant",
    "examples/hostile/tenant.yaml",
    "--profile",
    "examples/hostile/isolationprofile.yaml",
];

fn explain(extra: &[&str]) -> std::process::Output {
    run(EXAMPLES, extra)
}

fn run(args: &[&str], extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .args(extra)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_planner_service_and_the_offline_run_print_the_same_table() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PlannerService::new().into_server())
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let planner = format!("http://{addr}");
    for args in [EXAMPLES, POD_SECURITY] {
        let planner = planner.clone();
        let (offline, remote) = tokio::task::spawn_blocking(move || {
            (run(args, &[]), run(args, &["--planner", &planner]))
        })
        .await
        .unwrap();
        assert!(!offline.stdout.is_empty());
        assert_eq!(
            String::from_utf8(remote.stdout).unwrap(),
            String::from_utf8(offline.stdout).unwrap()
        );
        assert_eq!(remote.status.code(), offline.status.code());
    }
}

#[tokio::test]
async fn an_unreachable_planner_is_a_clear_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let planner = format!("http://{closed}");
    let out = tokio::task::spawn_blocking(move || explain(&["--planner", &planner]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("connecting to the planner at http://127.0.0.1:"),
        "{stderr}"
    );
}
