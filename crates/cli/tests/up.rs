//! `tenantplane up` as a newcomer runs it: it starts the services and two local clusters,
//! applies the examples, prints decisions as they happen, and the other commands (`why`,
//! `decisions`, `audit verify`) work against the running system; SIGTERM stops everything.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A guard against a hung run, not a performance assertion.
const CONVERGE: Duration = Duration::from_secs(120);

fn tenantplane() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A base port whose +1..+32 range is free right now.
fn free_base_port() -> u16 {
    let offsets = [1, 2, 11, 12, 21, 22, 31, 32];
    let seed = std::process::id() as u16;
    (0..200u16)
        .map(|i| 20000 + (seed.wrapping_mul(37).wrapping_add(i * 97)) % 40000)
        .find(|base| {
            offsets
                .iter()
                .all(|o| std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok())
        })
        .expect("a free port range")
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let config = Kubeconfig::read_from(kubeconfig).expect("up wrote the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Reads `up`'s stdout until every wanted (subject, outcome) decision line has appeared.
async fn wait_for_decisions(up: &mut Child, wanted: &[(&str, &str)]) -> Vec<String> {
    let stdout = up.stdout.as_mut().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let all_seen = |seen: &[String]| {
        wanted.iter().all(|(subject, outcome)| {
            seen.iter()
                .any(|l| l.contains(subject) && l.split_whitespace().any(|w| w == *outcome))
        })
    };
    let read = async {
        while !all_seen(&seen) {
            match lines.next_line().await.unwrap() {
                Some(line) => seen.push(line),
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(CONVERGE, read).await;
    assert!(
        all_seen(&seen),
        "up printed no decision for some of {wanted:?}; it printed:\n{}",
        seen.join("\n")
    );
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_converges_the_demo_and_the_other_commands_explain_it() {
    let data = tempfile::tempdir().unwrap();
    let base = free_base_port();
    let server = format!("http://127.0.0.1:{}", base + 21);
    let mut up = tenantplane()
        .args(["up", "--base-port", &base.to_string(), "--examples"])
        .arg(examples())
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    wait_for_decisions(
        &mut up,
        &[
            ("Pod/shop/web-7d4b9c-x2x9q", "Synced"),
            ("Pod/ops/node-debugger", "Rejected"),
            ("ConfigMap/shop/web-config", "Conflict"),
            // examples/host holds acme's earlier sync of shop-x-eu/cache, whose source the
            // tenant no longer has: deleted, after which eu/cache-x-shop (same host name) is
            // synced there, not refused on a host cache that still showed the deleted object.
            ("ConfigMap/shop-x-eu/cache", "Deleted"),
            ("ConfigMap/eu/cache-x-shop", "Synced"),
        ],
    )
    .await;

    // The host holds what the decisions say, and the foreign object is untouched.
    let host = client(&data.path().join("host.kubeconfig")).await;
    let pods: Api<Pod> = Api::namespaced(host.clone(), "tenant-acme");
    let pod = pods.get("web-7d4b9c-x2x9q-x-shop").await.unwrap();
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["tenantplane.io/tenant"], "acme");
    assert!(pods.get_opt("node-debugger-x-ops").await.unwrap().is_none());
    let foreign = Api::<ConfigMap>::namespaced(host, "tenant-acme")
        .get("web-config-x-shop")
        .await
        .unwrap();
    let labels = foreign.metadata.labels.unwrap();
    assert_eq!(labels["owner"], "platform-team");
    assert!(!labels.contains_key("tenantplane.io/tenant"));

    // why, from the host object and from the refused tenant object.
    let (ok, why) = output(
        tenantplane()
            .args(["why", "--server", &server, "--host-kubeconfig"])
            .arg(data.path().join("host.kubeconfig"))
            .arg("pods/tenant-acme/web-7d4b9c-x2x9q-x-shop"),
    )
    .await;
    assert!(ok, "{why}");
    assert!(
        why.contains("Pod shop/web-7d4b9c-x2x9q in tenant acme"),
        "{why}"
    );
    assert!(why.contains("rule sync-workloads"), "{why}");
    assert!(why.contains("host action create"), "{why}");

    let (ok, why) = output(tenantplane().args([
        "why",
        "--server",
        &server,
        "--tenant",
        "acme",
        "Pod/ops/node-debugger",
    ]))
    .await;
    assert!(ok, "{why}");
    assert!(why.contains("Rejected"), "{why}");
    assert!(why.contains("rule no-host-network"), "{why}");
    assert!(why.contains("spec.hostNetwork"), "{why}");

    // The log the system writes verifies while it runs.
    let (ok, verify) = output(
        tenantplane()
            .args(["audit", "verify", "--db"])
            .arg(data.path().join("decisions.db")),
    )
    .await;
    assert!(ok, "{verify}");
    // ... against the checkpoints the syncer signs with the key up made and publishes in the
    // host cluster.
    let (ok, verify) = output(
        tenantplane()
            .env("KUBECONFIG", data.path().join("host.kubeconfig"))
            .args(["audit", "verify", "--checkpoints-from-cluster", "--db"])
            .arg(data.path().join("decisions.db"))
            .arg("--public-key")
            .arg(data.path().join("checkpoint.pub")),
    )
    .await;
    assert!(ok, "{verify}");
    assert!(
        verify.contains("signed checkpoints matched") && !verify.contains(" 0 signed checkpoints"),
        "{verify}"
    );

    // SIGTERM stops up and every service it started.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(CONVERGE, up.wait())
        .await
        .expect("up stops")
        .unwrap();
    assert!(status.success(), "{status}");
    for offset in [1, 11, 21, 31, 32] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", base + offset)).is_err(),
            "port {} still open after up stopped",
            base + offset
        );
    }
}
