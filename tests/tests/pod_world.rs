//! A synced pod lives in its tenant's cluster: what it sees on the host (its tenant API, a token
//! of its own ServiceAccount, its tenant's DNS and service links), checked against the API
//! servers, which judge what they can without a kubelet: the token in the host Secret
//! authenticates at the TENANT API server as the pod's ServiceAccount (TokenReview) and stops
//! once the tenant pod is gone; the Secret goes with the host pod; a refresh replaces it; a pod
//! whose ServiceAccount does not automount gets nothing. The syncer runs as a process of its own
//! here, logging at debug level and exporting its spans, so that every output of the run can be
//! searched for the token: none holds it.

use std::time::Duration;

use data_encoding::BASE64;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_core::pod_world::TokenRecord;
use tenantplane_e2e::{
    Env, OtlpReceiver, all_decisions, create, delete, events_regarding, eventually, get, list,
};

/// The syncer as a process of its own, its standard error kept in a file.
struct SyncerProcess {
    child: tokio::process::Child,
    log: std::path::PathBuf,
}

impl SyncerProcess {
    fn start(dir: &std::path::Path, host_kubeconfig: &str, db: &str, otlp: &str) -> Self {
        let kubeconfig = dir.join("host.kubeconfig");
        std::fs::write(&kubeconfig, host_kubeconfig).unwrap();
        let log = dir.join("syncer.log");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenantplane-e2e-syncer"))
            .args([
                format!("--host-kubeconfig={}", kubeconfig.display()),
                "--planner=in-process".into(),
                "--isolation-compiler=in-process".into(),
                format!("--decision-log={db}"),
                "--grpc-addr=127.0.0.1:0".into(),
                "--admin-addr=127.0.0.1:0".into(),
                "--replica-id=pod-world-test".into(),
            ])
            .env(
                "TENANTPLANE_LOG",
                "debug,hyper=info,hyper_util=info,h2=info,tower=info,rustls=info",
            )
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("starting the syncer process");
        SyncerProcess { child, log }
    }

    /// Stops it with SIGTERM (its spans are flushed) and returns what it logged.
    async fn stop(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(self.child.id().expect("pid") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let _ = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// The token in key `key` of the host Secret.
fn token_in(secret: &Value, key: &str) -> String {
    let data = secret["data"][key].as_str().unwrap_or_default();
    String::from_utf8(BASE64.decode(data.as_bytes()).unwrap()).unwrap()
}

/// What the tenant API server's TokenReview says of `token`.
async fn review(tenant: &kube::Client, token: &str) -> Value {
    let review: TokenReview = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    let answer = Api::<TokenReview>::all(tenant.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    serde_json::to_value(answer.status).unwrap()
}

/// The host clusterIP of the tenant Service `ns/name`, once its host Service has one and the
/// tenant Service shows it too (the syncer recreates it with the host's address).
async fn host_cluster_ip(env: &Env, host_ns: &str, ns: &str, name: &str) -> String {
    let host_name = format!("{name}-x-{ns}");
    let cluster_ip = |s: Value| -> Option<String> {
        s.pointer("/spec/clusterIP")?
            .as_str()
            .filter(|ip| !ip.is_empty())
            .map(str::to_string)
    };
    eventually(
        &format!("Service {ns}/{name} at its host address"),
        || async {
            let host = get(&env.host.client, "v1", "Service", Some(host_ns), &host_name).await?;
            let tenant = get(&env.tenant_cp.client, "v1", "Service", Some(ns), name).await?;
            let ip = cluster_ip(host)?;
            (cluster_ip(tenant)? == ip).then_some(ip)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_pod_reaches_its_tenant_api_with_a_bound_token_of_its_own_and_its_tenants_names() {
    let mut env = Env::start().await.unwrap();
    env.stop_syncer().await;
    let (receiver, otlp) = OtlpReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("decisions.db").display());
    let syncer = SyncerProcess::start(dir.path(), &env.host.kubeconfig, &db, &otlp);

    let ns = env.tenant_namespace("world").await.unwrap();
    let policy = env
        .default_policy_in("world-policy", std::slice::from_ref(&ns), false)
        .await
        .unwrap();
    let tenant = env
        .create_tenant_with(
            "world",
            json!({"syncPolicyRef": policy,
                   "dns": {"service": {"namespace": ns, "name": "dns"}}}),
        )
        .await
        .unwrap();
    let host_ns = format!("tenant-{tenant}");
    let c = env.tenant_cp.client.clone();
    for object in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "builder", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "quiet", "namespace": ns},
               "automountServiceAccountToken": false}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": ns},
               "spec": {"selector": {"k8s-app": "dns"},
                        "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "backend", "namespace": ns},
               "spec": {"selector": {"app": "backend"},
                        "ports": [{"name": "http", "port": 8080}]}}),
    ] {
        create(&c, object).await.unwrap();
    }
    let nameserver = host_cluster_ip(&env, &host_ns, &ns, "dns").await;
    let backend = host_cluster_ip(&env, &host_ns, &ns, "backend").await;

    // A pod whose ServiceAccount does not automount, then one whose does: the tenant API server's
    // ServiceAccount admission gives the second, and only it, a token projection.
    let pod = |name: &str, account: &str, extra: Value| {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"serviceAccountName": account,
                     "containers": [{"name": "app", "image": "registry.example/app:1",
                                     "env": [{"name": "URL", "value": "http://$(BACKEND_SERVICE_HOST)"}]}]}});
        if let Value::Object(extra) = extra {
            for (k, v) in extra {
                pod["spec"][k] = v;
            }
        }
        pod
    };
    create(&c, pod("quiet", "quiet", json!({}))).await.unwrap();
    let vault = json!({"name": "vault", "projected": {"sources": [{"serviceAccountToken":
        {"audience": "vault", "expirationSeconds": 900, "path": "vault-token"}}]}});
    let web = create(&c, pod("web", "builder", json!({"volumes": [vault]})))
        .await
        .unwrap();
    let web_uid = web["metadata"]["uid"].as_str().unwrap().to_string();

    let host_pod = eventually("the host pod of web", || async {
        get(
            &env.host.client,
            "v1",
            "Pod",
            Some(&host_ns),
            &format!("web-x-{ns}"),
        )
        .await
    })
    .await;
    let secret_name = format!("web-x-{ns}.sa-token");
    let secret = eventually("the token Secret of web", || async {
        get(
            &env.host.client,
            "v1",
            "Secret",
            Some(&host_ns),
            &secret_name,
        )
        .await
    })
    .await;

    // What the host pod sees.
    let spec = &host_pod["spec"];
    let (endpoint_host, endpoint_port) = {
        let server = env
            .tenant_cp
            .kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap()
            .to_string();
        let authority = server.split("://").nth(1).unwrap().trim_end_matches('/');
        let (h, p) = authority.rsplit_once(':').unwrap();
        (h.to_string(), p.to_string())
    };
    let env_of = |name: &str| {
        spec["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        env_of("KUBERNETES_SERVICE_HOST").as_deref(),
        Some(endpoint_host.as_str())
    );
    assert_eq!(
        env_of("KUBERNETES_SERVICE_PORT").as_deref(),
        Some(endpoint_port.as_str())
    );
    assert_eq!(env_of("BACKEND_SERVICE_HOST"), Some(backend.clone()));
    assert_eq!(env_of("BACKEND_SERVICE_PORT_HTTP").as_deref(), Some("8080"));
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["dnsPolicy"], "None");
    assert_eq!(spec["dnsConfig"]["nameservers"], json!([nameserver]));
    assert_eq!(
        spec["dnsConfig"]["searches"][0],
        format!("{ns}.svc.cluster.local")
    );
    assert_eq!(
        spec["hostAliases"][0]["hostnames"][2], "kubernetes.default.svc",
        "{spec}"
    );
    let mounted: Vec<&Value> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.pointer("/projected/sources"))
        .flat_map(|s| s.as_array().unwrap())
        .filter_map(|s| s.get("secret"))
        .collect();
    assert!(
        mounted.iter().all(|s| s["name"] == secret_name.as_str()) && mounted.len() == 3,
        "token, ca.crt and the vault token, from the token Secret: {mounted:?}"
    );

    // The Secret: the pod's, owned by the host pod, its tokens the tenant's.
    let meta = &secret["metadata"];
    assert_eq!(
        meta["ownerReferences"][0]["uid"],
        host_pod["metadata"]["uid"]
    );
    assert_eq!(meta["labels"][provenance::SOURCE_UID], web_uid.as_str());
    let records: Vec<TokenRecord> = serde_json::from_str(
        meta["annotations"][provenance::SERVICE_ACCOUNT_TOKENS]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert_eq!(r.service_account, format!("{ns}/builder"));
        // The schedule: at 80% of the life asked for (the issue time is the syncer's clock,
        // the expiry the tenant API server's).
        let fifth = Duration::from_secs(r.expiration_seconds as u64 / 5);
        let early = r.expires - fifth;
        let off = (early.as_second() - r.refresh_at.as_second()).abs();
        assert!(off <= 5, "{r:?} is not refreshed at 80% of its life");
    }
    assert_eq!(
        records[0].expiration_seconds, 3600,
        "not the kubelet's year-long 3607"
    );
    assert_eq!(records[1].audiences, vec!["vault".to_string()]);
    let token = token_in(&secret, "token");
    let vault_token = token_in(&secret, "token-2");
    let status = review(&c, &token).await;
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(
        status["user"]["username"],
        format!("system:serviceaccount:{ns}:builder")
    );
    assert_eq!(
        status["user"]["extra"]["authentication.kubernetes.io/pod-uid"],
        json!([web_uid])
    );
    assert!(
        !token_in(&secret, "ca.crt").is_empty() || !env.is_real(),
        "the tenant's CA, from its kubeconfig"
    );

    // A pod whose ServiceAccount does not automount has no token and no Secret.
    let quiet = get(
        &env.host.client,
        "v1",
        "Pod",
        Some(&host_ns),
        &format!("quiet-x-{ns}"),
    )
    .await
    .expect("the quiet pod is synced");
    assert!(!quiet.to_string().contains(".sa-token"), "{quiet}");
    assert!(
        get(
            &env.host.client,
            "v1",
            "Secret",
            Some(&host_ns),
            &format!("quiet-x-{ns}.sa-token")
        )
        .await
        .is_none()
    );

    // A refresh once the Secret's schedule says it is due: new tokens, a decision of its own.
    // The schedule is moved as tenantplane's own field manager: moved by anyone else, it would
    // be drift (tests/tests/drift.rs).
    let past = (Timestamp::now() - Duration::from_secs(60)).to_string();
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        env.host.client.clone(),
        &host_ns,
        &tenantplane_e2e::resource("v1", "Secret"),
    );
    let as_tenantplane = PatchParams {
        field_manager: Some(tenantplane_core::drift::FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    secrets
        .patch(
            &secret_name,
            &as_tenantplane,
            &Patch::Merge(json!({"metadata": {"annotations": {provenance::REFRESH_AT: past}}})),
        )
        .await
        .unwrap();
    let refreshed = eventually("the refreshed token", || async {
        let s = get(
            &env.host.client,
            "v1",
            "Secret",
            Some(&host_ns),
            &secret_name,
        )
        .await?;
        (token_in(&s, "token") != token).then_some(s)
    })
    .await;
    let new_token = token_in(&refreshed, "token");
    assert_eq!(review(&c, &new_token).await["authenticated"], true);
    eventually(
        "a ServiceAccountTokenRefreshed Event on the tenant pod",
        || async {
            events_regarding(&c, &ns, "web")
                .await
                .into_iter()
                .find(|e| e["reason"] == "ServiceAccountTokenRefreshed")
        },
    )
    .await;

    // The tenant pod goes: its tokens stop authenticating (bound to it), its Secret goes with
    // the host pod.
    delete(&c, "v1", "Pod", Some(&ns), "web").await.unwrap();
    eventually("the token refused once the tenant pod is gone", || async {
        // A real kube-apiserver caches a successful authentication for a few seconds.
        (review(&c, &new_token).await["authenticated"] != true).then_some(())
    })
    .await;
    eventually("the token Secret gone with the host pod", || async {
        get(
            &env.host.client,
            "v1",
            "Secret",
            Some(&host_ns),
            &secret_name,
        )
        .await
        .is_none()
        .then_some(())
    })
    .await;

    // The log: one issue and one refresh, naming the ServiceAccount, audiences and expiry.
    let log = syncer.stop().await;
    let store = tenantplane_decision_log::open(&db).await.unwrap();
    let decisions = all_decisions(&*store, &tenant).await;
    let issued: Vec<_> = decisions
        .iter()
        .filter(|d| d.target.as_ref().is_some_and(|t| t.name == secret_name))
        .collect();
    let reasons: Vec<&str> = issued.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(
        reasons,
        ["ServiceAccountTokenIssued", "ServiceAccountTokenRefreshed"],
        "{issued:#?}"
    );
    assert_eq!(issued[0].action, HostAction::Create);
    assert_eq!(issued[0].outcome, Outcome::Synced);
    assert_eq!(issued[0].subject.uid, web_uid);
    assert_eq!(issued[0].tokens.len(), 2);
    assert_eq!(issued[0].tokens[1].audiences, vec!["vault".to_string()]);
    let web_created = decisions
        .iter()
        .find(|d| d.subject.name == "web" && d.action == HostAction::Create)
        .unwrap();
    assert!(
        web_created
            .message
            .contains(&format!("in Secret {secret_name}")),
        "{}",
        web_created.message
    );

    // No output of the run holds a token: the log file, the syncer's log lines, its spans, the
    // Events of both sides, the Tenant.
    let mut outputs = vec![
        (
            "the decision log",
            String::from_utf8_lossy(&std::fs::read(dir.path().join("decisions.db")).unwrap())
                .into_owned(),
        ),
        ("the syncer's log", log),
        ("the spans", format!("{:?}", receiver.spans())),
        (
            "the Tenant",
            get(
                &env.host.client,
                "tenantplane.io/v1alpha1",
                "Tenant",
                None,
                &tenant,
            )
            .await
            .unwrap()
            .to_string(),
        ),
    ];
    for (side, client, namespace) in [
        ("tenant Events", &c, ns.as_str()),
        ("host Events", &env.host.client, host_ns.as_str()),
    ] {
        let events = list(client, "events.k8s.io/v1", "Event", Some(namespace))
            .await
            .unwrap();
        outputs.push((side, serde_json::to_string(&events).unwrap()));
    }
    assert!(
        outputs[2].1.contains("tenantplane.sync.decision"),
        "the spans were exported"
    );
    for (what, text) in &outputs {
        for t in [&token, &vault_token, &new_token] {
            let signature = t.rsplit('.').next().unwrap();
            assert!(
                !text.contains(t.as_str()) && !text.contains(signature),
                "{what} holds a token"
            );
        }
    }
}
