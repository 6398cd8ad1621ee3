//! `tenantplane up` as a newcomer runs it: it starts the services and two local clusters,
//! applies the examples, prints decisions as they happen, and the other commands (`why`,
//! `decisions`, `audit verify`) work against the running system; a service that crashes is
//! restarted and sync goes on, and so is a local API server; SIGTERM stops everything; a missing
//! local API server binary or a port in use stops `up` with a clear error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;

/// A guard against a hung run, not a performance assertion.
const CONVERGE: Duration = Duration::from_secs(120);

/// `tenantplane` as `cargo run` starts it: `up` builds the local API server binary beside it
/// (the `tenantplane-local-apiserver` package, which this one does not depend on) before running
/// it.
fn tenantplane() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantplane"));
    command
        .env("CARGO", env!("CARGO"))
        .env("CARGO_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR"));
    command
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A base port whose +1..+32 range is free right now, another one on each call (the tests of
/// this file run at the same time).
fn free_base_port() -> u16 {
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let offsets = [1, 2, 11, 12, 21, 22, 31, 32];
    let seed = std::process::id() as u16;
    (call * 200..call * 200 + 200)
        .map(|i| 20000 + (seed.wrapping_mul(37).wrapping_add(i.wrapping_mul(97))) % 40000)
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

/// `up`'s stdout, line by line.
fn decision_lines(up: &mut Child) -> Lines<BufReader<ChildStdout>> {
    BufReader::new(up.stdout.take().expect("piped")).lines()
}

/// Reads `up`'s stdout until every wanted (subject, outcome) decision line has appeared.
async fn wait_for_decisions(
    lines: &mut Lines<BufReader<ChildStdout>>,
    wanted: &[(&str, &str)],
) -> Vec<String> {
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

    let mut decisions = decision_lines(&mut up);
    let printed = wait_for_decisions(
        &mut decisions,
        &[
            ("Pod/shop/web-7d4b9c-x2x9q", "Rejected"),
            ("Pod/ops/node-debugger", "Rejected"),
            ("ConfigMap/shop/web-config", "Conflict"),
            // examples/host holds acme's earlier sync of shop-x-eu/cache, whose source the
            // tenant no longer has: deleted, after which eu/cache-x-shop (same host name) is
            // synced there, not refused on a host cache that still showed the deleted object.
            ("ConfigMap/shop-x-eu/cache", "Deleted"),
            ("ConfigMap/eu/cache-x-shop", "Synced"),
            ("Pod/shop/config-reporter", "Synced"),
        ],
    )
    .await;
    // Nobody touches the host in the demo: the syncer's own deletes and writes are no drift.
    let drifted: Vec<&String> = printed
        .iter()
        .filter(|l| l.split_whitespace().any(|w| w == "Drifted"))
        .collect();
    assert!(drifted.is_empty(), "{drifted:#?}");

    // The host holds what the decisions say, and the foreign object is untouched.
    let host = client(&data.path().join("host.kubeconfig")).await;
    let pods: Api<Pod> = Api::namespaced(host.clone(), "tenant-acme");
    // The web pod names its ConfigMap web-config, whose host name the platform's ConfigMap
    // holds: refused, so it never reads the platform's configuration.
    assert!(
        pods.get_opt("web-7d4b9c-x2x9q-x-shop")
            .await
            .unwrap()
            .is_none()
    );
    assert!(pods.get_opt("node-debugger-x-ops").await.unwrap().is_none());
    let account = Api::<ServiceAccount>::namespaced(host.clone(), "tenant-acme")
        .get("web-x-shop")
        .await
        .unwrap();
    assert_eq!(
        account.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "acme"
    );
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
            .arg("serviceaccounts/tenant-acme/web-x-shop"),
    )
    .await;
    assert!(ok, "{why}");
    assert!(
        why.contains("ServiceAccount shop/web in tenant acme"),
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

    let (ok, why) = output(tenantplane().args([
        "why",
        "--server",
        &server,
        "--tenant",
        "acme",
        "Pod/shop/web-7d4b9c-x2x9q",
    ]))
    .await;
    assert!(ok, "{why}");
    assert!(why.contains("ReferenceToForeignHostObject"), "{why}");
    assert!(
        why.contains("spec.containers[0].envFrom[0].configMapRef.name"),
        "{why}"
    );

    // why, from the token Secret of the pod that reads its tenant's API: the decision that
    // issued its tokens, naming them (never their bytes).
    let token = eventually_why(
        &server,
        &data.path().join("host.kubeconfig"),
        "Secret/tenant-acme/config-reporter-x-shop.sa-token",
    )
    .await;
    assert!(
        token.contains("Pod shop/config-reporter in tenant acme"),
        "{token}"
    );
    assert!(token.contains("ServiceAccountTokenIssued"), "{token}");
    assert!(
        token.contains("key token: ServiceAccount shop/web, the tenant API server's audience"),
        "{token}"
    );

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
    stop(&mut up, base).await;
}

/// `why` on a host object, once it answers (the object and its decision may take a moment).
async fn eventually_why(server: &str, kubeconfig: &Path, object: &str) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        let (ok, why) = output(
            tenantplane()
                .args(["why", "--server", server, "--host-kubeconfig"])
                .arg(kubeconfig)
                .arg(object),
        )
        .await;
        if ok {
            return why;
        }
        last = why;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("why {object} never answered: {last}");
}

/// SIGTERM to `up`: it exits 0 and every port it opened is closed.
async fn stop(up: &mut Child, base: u16) {
    signal(up.id().unwrap() as i32, nix::sys::signal::Signal::SIGTERM);
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

fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
}

/// The pid of the child of `parent` that runs `tenantplane service NAME`, from /proc.
fn service_pid(parent: u32, name: &str) -> Option<i32> {
    child_where(parent, |args| {
        args.windows(2)
            .any(|w| w[0] == b"service" && w[1] == name.as_bytes())
    })
}

/// The pid of the child of `parent` one of whose arguments is `arg`.
fn child_pid(parent: u32, arg: &str) -> Option<i32> {
    child_where(parent, |args| args.contains(&arg.as_bytes()))
}

/// The pid of the child of `parent` whose arguments `runs_it`, from /proc.
fn child_where(parent: u32, runs_it: impl Fn(&[&[u8]]) -> bool) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces, not a ')'.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        (ppid == parent && runs_it(&args)).then_some(pid)
    })
}

/// Whether `GET /ready` on an admin port answers 200.
async fn ready(admin: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", admin)).await else {
        return false;
    };
    let request = format!("GET /ready HTTP/1.0\r\nHost: 127.0.0.1:{admin}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

/// Waits until `up` printed a line containing every one of `parts` on stderr.
async fn wait_for_stderr(stderr: &mut mpsc::UnboundedReceiver<String>, parts: &[&str]) -> String {
    let find = async {
        while let Some(line) = stderr.recv().await {
            if parts.iter().all(|p| line.contains(p)) {
                return Some(line);
            }
        }
        None
    };
    tokio::time::timeout(CONVERGE, find)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("up printed no line with {parts:?} on stderr"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_restarts_each_service_killed_and_sync_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let base = free_base_port();
    let mut up = tenantplane()
        .args(["up", "--base-port", &base.to_string(), "--examples"])
        .arg(examples())
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up_pid = up.id().unwrap();
    // up's stderr, echoed for whoever reads the test's output, and kept for the assertions.
    let (stderr_tx, mut stderr) = mpsc::unbounded_channel();
    let mut stderr_lines = BufReader::new(up.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr_lines.next_line().await {
            eprintln!("{line}");
            let _ = stderr_tx.send(line);
        }
    });
    let mut decisions = decision_lines(&mut up);
    wait_for_decisions(&mut decisions, &[("Service/shop/web", "Synced")]).await;

    let tenant = client(&data.path().join("tenant.kubeconfig")).await;
    let host = client(&data.path().join("host.kubeconfig")).await;
    let tenant_config_maps: Api<ConfigMap> = Api::namespaced(tenant, "shop");
    let host_config_maps: Api<ConfigMap> = Api::namespaced(host, "tenant-acme");
    for (service, admin) in [("planner", 2), ("isolation-compiler", 12), ("syncer", 22)] {
        let killed =
            service_pid(up_pid, service).unwrap_or_else(|| panic!("up runs no {service} service"));
        signal(killed, nix::sys::signal::Signal::SIGKILL);
        // Created while the service is down: without a planner the syncer defers the object
        // and retries it once the planner is back; without a syncer, the new one lists it.
        let name = format!("after-{service}-killed");
        let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop"},
            "data": {"killed": service},
        }))
        .unwrap();
        tenant_config_maps
            .create(&Default::default(), &config_map)
            .await
            .unwrap();

        wait_for_stderr(
            &mut stderr,
            &[
                &format!("the {service} service exited (signal: 9"),
                "restarting it (restart 1) in",
            ],
        )
        .await;
        let subject = format!("ConfigMap/shop/{name}");
        wait_for_decisions(&mut decisions, &[(&subject, "Synced")]).await;
        // The decision is recorded as the host write is made: the object follows.
        let on_host = async {
            loop {
                if let Some(synced) = host_config_maps
                    .get_opt(&format!("{name}-x-shop"))
                    .await
                    .unwrap()
                {
                    return synced;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let synced = tokio::time::timeout(CONVERGE, on_host)
            .await
            .unwrap_or_else(|_| panic!("{name} synced but not on the host"));
        assert_eq!(synced.data.unwrap()["killed"], service);

        // A new process on the same ports, ready.
        let back = async {
            loop {
                let pid = service_pid(up_pid, service);
                if pid.is_some_and(|pid| pid != killed) && ready(base + admin).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(CONVERGE, back)
            .await
            .unwrap_or_else(|_| panic!("the {service} service did not come back"));
    }

    // The local API servers are processes of their own, restarted as the services are, on their
    // data.
    let killed =
        child_pid(up_pid, &format!("--port={}", base + 31)).expect("up runs the host API server");
    signal(killed, nix::sys::signal::Signal::SIGKILL);
    wait_for_stderr(
        &mut stderr,
        &[
            "the host API server exited (signal: 9",
            "restarting it (restart 1) in",
        ],
    )
    .await;
    let namespaces = async {
        loop {
            let host = client(&data.path().join("host.kubeconfig")).await;
            let namespace = Api::<Namespace>::all(host).get_opt("tenant-acme").await;
            if let Ok(Some(namespace)) = namespace {
                return namespace;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(CONVERGE, namespaces)
        .await
        .expect("the host API server came back with its objects");
    assert!(child_pid(up_pid, &format!("--port={}", base + 31)).is_some_and(|pid| pid != killed));

    stop(&mut up, base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_stops_when_a_service_fails_three_starts_in_a_row() {
    let data = tempfile::tempdir().unwrap();
    let base = free_base_port();
    // Someone else holds the planner's port: every start of the planner fails.
    let _taken = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let up = tenantplane()
        .args(["up", "--no-demo", "--base-port", &base.to_string()])
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(CONVERGE, up.wait_with_output())
        .await
        .expect("up stops")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for expected in [
        "the planner service exited (exit status: ",
        "before it was ready; restarting it (restart 1) in 1s",
        "before it was ready; restarting it (restart 2) in 2s",
        "before it was ready, 3 starts in a row; last lines of",
        &format!("binding the gRPC port 127.0.0.1:{}", base + 1),
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    // The services that did start were stopped with it.
    for offset in [11, 21, 31, 32] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", base + offset)).is_err(),
            "port {} still open after up stopped",
            base + offset
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_says_when_the_local_api_server_is_missing_or_its_port_taken() {
    let data = tempfile::tempdir().unwrap();
    let base = free_base_port();
    let up = |command: &mut Command| {
        command
            .args(["up", "--no-demo", "--base-port", &base.to_string()])
            .arg("--data-dir")
            .arg(data.path())
            .kill_on_drop(true);
    };

    // An installed `tenantplane` without the server beside it (not started by cargo).
    let installed = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let alone = installed.path().join("tenantplane");
    std::fs::hard_link(env!("CARGO_BIN_EXE_tenantplane"), &alone).unwrap();
    let mut command = Command::new(&alone);
    command.env_remove("CARGO").env_remove("CARGO_MANIFEST_DIR");
    up(&mut command);
    let (ok, text) = output(&mut command).await;
    assert!(!ok, "{text}");
    let expected = format!(
        "no tenantplane-local-apiserver beside {} to run the local clusters: build it with \
         `cargo build -p tenantplane-local-apiserver`",
        alone.display()
    );
    assert!(text.contains(&expected), "no {expected:?} in:\n{text}");

    let missing = installed.path().join("nothing-here");
    let mut command = Command::new(&alone);
    up(&mut command);
    command.arg("--local-apiserver").arg(&missing);
    let (ok, text) = output(&mut command).await;
    assert!(!ok, "{text}");
    let expected = format!("no local API server binary at {}", missing.display());
    assert!(text.contains(&expected), "no {expected:?} in:\n{text}");

    // Someone else holds the host cluster's port: every start of its server fails.
    let _taken = std::net::TcpListener::bind(("127.0.0.1", base + 31)).unwrap();
    let mut command = tenantplane();
    up(&mut command);
    let out = tokio::time::timeout(CONVERGE, command.output())
        .await
        .expect("up stops")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for expected in [
        "the host API server exited (exit status: ",
        "before it was ready, 3 starts in a row; last lines of",
        &format!("binding 127.0.0.1:{}", base + 31),
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    // The tenant cluster's server, which did start, was stopped with it.
    assert!(std::net::TcpStream::connect(("127.0.0.1", base + 32)).is_err());
}
