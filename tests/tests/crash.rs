//! A syncer process killed with SIGKILL in the middle of a backlog: after the restart every
//! object is on the host once, no recorded create is left open (the ones the killed process
//! recorded and never carried out are closed, linked to the decision they close), and the log
//! verifies against the checkpoints the syncer signed with a key from a Secret and published in
//! the host cluster, the last one at its shutdown.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tenantplane_api::provenance::DECISION_ID;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_decision_log::signed::{self, Published};
use tenantplane_e2e::{Env, SYSTEM_NAMESPACE, create, eventually};

/// Tenant ConfigMaps in the backlog: enough for the kill to land mid-way with host writes held
/// back by the rate limit (`--host-qps`), few enough for CI.
const OBJECTS: usize = 240;

struct Syncer {
    args: Vec<String>,
    child: Option<tokio::process::Child>,
}

impl Syncer {
    fn start(&mut self) {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenantplane-e2e-syncer"))
            .args(&self.args)
            .env("TENANTPLANE_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .kill_on_drop(true)
            .spawn()
            .expect("starting the syncer process");
        self.child = Some(child);
    }

    async fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().await.expect("SIGKILL the syncer"); // SIGKILL on Unix.
    }

    async fn terminate(&mut self) {
        let mut child = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id().expect("pid") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the syncer stops on SIGTERM")
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

async fn on_host(host: &kube::Client, ns: &str) -> Vec<ConfigMap> {
    Api::<ConfigMap>::namespaced(host.clone(), ns)
        .list(&ListParams::default().labels("tenantplane.io/managed=true"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syncer_killed_mid_backlog_leaves_no_open_decision() {
    let mut env = Env::start().await.unwrap();
    if env.is_real() {
        // The syncer process is given the host kubeconfig of a local server only.
        eprintln!("skipped against real clusters");
        return;
    }
    let tenant = env.create_tenant("crash", None).await.unwrap();
    let ns = env.tenant_namespace("load").await.unwrap();
    // From here on, only the syncer process below syncs.
    env.stop_syncer().await;
    let tenant_client = env.tenant_cp.client.clone();
    for i in 0..OBJECTS {
        create(
            &tenant_client,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("load-{i:05}"), "namespace": ns},
                "data": {"i": i.to_string()}}),
        )
        .await
        .unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("host.kubeconfig");
    std::fs::write(&kubeconfig, &env.host.kubeconfig).unwrap();
    let db = dir.path().join("decisions.db");
    let (private, public) = signed::generate_key().unwrap();
    let public = signed::verifying_key(public.as_bytes(), "public").unwrap();
    let key_secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "checkpoint-key", "namespace": SYSTEM_NAMESPACE},
        "stringData": {"ed25519.pem": private},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.host.client.clone(), SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &key_secret)
        .await
        .unwrap();
    let mut syncer = Syncer {
        args: [
            format!("--host-kubeconfig={}", kubeconfig.display()),
            "--planner=in-process".into(),
            "--isolation-compiler=in-process".into(),
            format!("--decision-log=sqlite:{}", db.display()),
            "--grpc-addr=127.0.0.1:0".into(),
            "--admin-addr=127.0.0.1:0".into(),
            // Host writes wait for the rate limit after their decision is recorded: a kill
            // finds recorded creates not yet made.
            "--host-qps=120".into(),
            "--host-burst=1".into(),
            format!("--checkpoint-key-secret={SYSTEM_NAMESPACE}/checkpoint-key"),
            format!("--checkpoint-namespace={SYSTEM_NAMESPACE}"),
            "--checkpoint-interval-seconds=1".into(),
            "--replica-id=crash-test".into(),
        ]
        .into(),
        child: None,
    };

    let host = env.host.client.clone();
    let host_ns = format!("tenant-{tenant}");
    syncer.start();
    eventually("a fifth of the backlog on the host", || {
        let (host, host_ns) = (host.clone(), host_ns.clone());
        async move { (on_host(&host, &host_ns).await.len() >= OBJECTS / 5).then_some(()) }
    })
    .await;
    syncer.kill().await;
    let at_kill = on_host(&host, &host_ns).await.len();
    assert!(
        at_kill < OBJECTS,
        "the kill came after the backlog was synced"
    );

    syncer.start();
    let placed = eventually("every object on the host", || {
        let (host, host_ns) = (host.clone(), host_ns.clone());
        async move {
            let all = on_host(&host, &host_ns).await;
            (all.len() == OBJECTS).then_some(all)
        }
    })
    .await;
    let store = tenantplane_decision_log::open(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    // Confirmations reach the log shortly after each write.
    eventually("no open host action", || {
        let store = store.clone();
        let tenant = tenant.clone();
        async move {
            let open = store.open_actions(Some(tenant)).await.unwrap();
            open.is_empty().then_some(())
        }
    })
    .await;

    // Every recorded create took effect (its id is on the host object) or is closed.
    let decisions = tenantplane_e2e::all_decisions(&*store, &tenant).await;
    let on_host_ids: HashMap<String, String> = placed
        .iter()
        .map(|c| {
            let id = c.metadata.annotations.as_ref().unwrap()[DECISION_ID].clone();
            (id, c.metadata.name.clone().unwrap())
        })
        .collect();
    let closed: HashMap<&str, &tenantplane_core::decision::Decision> = decisions
        .iter()
        .filter_map(|d| d.closes.as_deref().map(|c| (c, d)))
        .collect();
    let creates: Vec<_> = decisions
        .iter()
        .filter(|d| d.action == HostAction::Create && d.closes.is_none())
        .filter(|d| d.subject.kind == "ConfigMap" && d.subject.namespace == ns)
        .collect();
    let mut phantoms = Vec::new();
    for d in &creates {
        match (on_host_ids.contains_key(&d.id), closed.get(d.id.as_str())) {
            (true, None) => {}
            (false, Some(closing)) => {
                assert_eq!(closing.outcome, Outcome::Failed);
                assert_eq!(closing.reason, "NotCarriedOut", "{}", closing.message);
                phantoms.push(d.subject.name.clone());
            }
            (true, Some(_)) => panic!("create {} is on the host and closed too", d.id),
            (false, None) => panic!(
                "create {} of {} is neither on the host nor closed: a phantom decision",
                d.id, d.subject.name
            ),
        }
    }
    assert!(
        !phantoms.is_empty(),
        "the kill (after {at_kill} of {OBJECTS}) left no recorded create unmade: the test \
         proves nothing; raise OBJECTS or lower --host-qps"
    );
    eprintln!(
        "killed after {at_kill} of {OBJECTS}: {} recorded creates closed as not carried out",
        phantoms.len()
    );
    let subjects: HashSet<_> = creates.iter().map(|d| &d.subject.name).collect();
    assert_eq!(subjects.len(), OBJECTS, "one create carried out per object");
    assert_eq!(on_host_ids.len(), OBJECTS);

    // The log verifies against the checkpoints published in the host cluster, the last one
    // signed at shutdown covering the head.
    syncer.terminate().await;
    let published = Published {
        checkpoints: tenantplane_syncer::checkpoint::published(&host, SYSTEM_NAMESPACE)
            .await
            .unwrap(),
        keys: vec![public],
    };
    let report = tenantplane_decision_log::verify_against(&*store, None, &published)
        .await
        .unwrap();
    assert!(report.is_ok(), "{report:?}");
    let head = store.head().await.unwrap();
    assert_eq!(
        report.last_signed.map(|c| c.sequence),
        Some(head.sequence),
        "the checkpoint signed at shutdown covers the head"
    );
}
