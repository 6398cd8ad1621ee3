//! Behaviour of the local server itself, which a real cluster has no
//! counterpart for or cannot be driven into on demand: the binary, several
//! instances side by side, persistence across restarts, and 410 Gone from a
//! deliberately tiny watch history. These always run against local servers.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview, TokenReviewStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{Value, json};
use tenantplane_local_apiserver::{ADMIN, ISSUER, LocalApiServer};

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": value}}))
        .expect("config map")
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}))
        .expect("service")
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_is_gone() {
    let server = LocalApiServer::builder()
        .watch_history(4)
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await.unwrap());
    let created = api
        .create(&PostParams::default(), &config_map("churn", "0"))
        .await
        .unwrap();
    let old_rv = created.resource_version().unwrap();
    for i in 1..10 {
        api.patch(
            "churn",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn persistence_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let server = LocalApiServer::builder()
        .persist_to(&file)
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await.unwrap());
    let created = api
        .create(&PostParams::default(), &config_map("kept", "v"))
        .await
        .unwrap();
    let services: Api<Service> = Api::default_namespaced(server.client().await.unwrap());
    let first_ip = services
        .create(&PostParams::default(), &service("before"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip;
    server.shutdown().await.unwrap();

    let server = LocalApiServer::builder()
        .persist_to(&file)
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await.unwrap());
    let restored = api.get("kept").await.unwrap();
    assert_eq!(restored.uid(), created.uid());
    assert_eq!(restored.data.as_ref().unwrap()["k"], "v");
    let rv = |o: &ConfigMap| o.resource_version().unwrap().parse::<u64>().unwrap();
    let updated = api
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    assert!(
        rv(&updated) > rv(&restored),
        "resourceVersions keep increasing"
    );
    let services: Api<Service> = Api::default_namespaced(server.client().await.unwrap());
    let second_ip = services
        .create(&PostParams::default(), &service("after"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip;
    assert_ne!(first_ip, second_ip, "cluster IPs are not handed out twice");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn instances_side_by_side_are_independent() {
    let host = LocalApiServer::builder().start().await.unwrap();
    let tenant = LocalApiServer::builder().start().await.unwrap();
    assert_ne!(host.addr(), tenant.addr());
    let host_api: Api<ConfigMap> = Api::default_namespaced(host.client().await.unwrap());
    let tenant_api: Api<ConfigMap> = Api::default_namespaced(tenant.client().await.unwrap());
    host_api
        .create(&PostParams::default(), &config_map("only-on-host", "1"))
        .await
        .unwrap();
    assert!(host_api.get_opt("only-on-host").await.unwrap().is_some());
    assert!(tenant_api.get_opt("only-on-host").await.unwrap().is_none());
    host.shutdown().await.unwrap();
    tenant.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_writes_a_kubeconfig_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane-local-apiserver"))
        .args(["--port", "0", "--context", "demo", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the binary");
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions {
            context: Some("demo".into()),
            ..KubeConfigOptions::default()
        },
    )
    .await
    .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(Client::try_from(config).unwrap());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(names.contains(&"default".to_string()), "{names:?}");

    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the server exits cleanly on SIGTERM: {status}"
    );
}

#[tokio::test]
async fn shutdown_ends_open_watches() {
    let server = LocalApiServer::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await.unwrap());
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &config_map("seen", "1"))
        .await
        .unwrap();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.name_any(), "seen"),
        other => panic!("expected the new object, got {other:?}"),
    }
    // A generous guard, not a timing assertion: shutdown must not hang on
    // the open watch.
    tokio::time::timeout(std::time::Duration::from_secs(30), server.shutdown())
        .await
        .expect("shutdown finished with a watch open")
        .unwrap();
    let rest: Vec<_> = stream.collect().await;
    assert!(
        rest.iter().all(|event| event.is_ok()),
        "the watch ended cleanly: {rest:?}"
    );
}

#[tokio::test]
async fn recorded_requests_carry_the_authorization_checks_and_the_impersonated_user() {
    let server = LocalApiServer::builder().start().await.expect("start");
    let api: Api<ConfigMap> = Api::namespaced(server.client().await.expect("client"), "default");
    api.create(&PostParams::default(), &config_map("before", "a"))
        .await
        .expect("create before recording");
    server.record_requests();

    let mut kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig("local")).expect("kubeconfig");
    kubeconfig.auth_infos[0]
        .auth_info
        .get_or_insert_with(Default::default)
        .impersonate = Some("system:serviceaccount:demo:syncer".into());
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    let syncer: Api<ConfigMap> =
        Api::namespaced(Client::try_from(config).expect("client"), "default");
    syncer
        .create(&PostParams::default(), &config_map("cfg", "a"))
        .await
        .expect("create");
    syncer.get("cfg").await.expect("get");
    syncer
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list");
    syncer
        .patch(
            "cfg",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "b"}})),
        )
        .await
        .expect("apply");
    syncer
        .patch(
            "created-by-apply",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "c"}})),
        )
        .await
        .expect("apply creating");
    let mut watch = syncer
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch")
        .boxed();
    while watch.try_next().await.expect("watch event").is_some() {}
    syncer
        .delete("cfg", &Default::default())
        .await
        .expect("delete");
    api.get("before").await.expect("get without impersonation");

    let recorded = server.recorded_requests();
    let seen: Vec<(Option<&str>, &str, Option<&str>)> = recorded
        .iter()
        .map(|r| {
            assert_eq!(
                (r.api_group.as_str(), r.resource.as_str()),
                ("", "configmaps")
            );
            assert_eq!(r.namespace.as_deref(), Some("default"));
            (
                r.user.as_deref(),
                r.verb.as_str(),
                r.label_selector.as_deref(),
            )
        })
        .collect();
    let syncer_user = Some("system:serviceaccount:demo:syncer");
    assert_eq!(
        seen,
        vec![
            (syncer_user, "create", None),
            (syncer_user, "get", None),
            (syncer_user, "list", Some("app=web")),
            (syncer_user, "patch", None),
            (syncer_user, "patch", None),
            (syncer_user, "create", None),
            (syncer_user, "watch", None),
            (syncer_user, "delete", None),
            (None, "get", None),
        ]
    );
    server.shutdown().await.expect("shutdown");
}

/// A client of `server` whose only credential is the bearer token `token`, if any.
async fn client_with_token(server: &LocalApiServer, token: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig("token")).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info = AuthInfo {
        token: Some(token.to_string().into()),
        ..AuthInfo::default()
    };
    Client::try_from(config).unwrap()
}

async fn token_review(client: &Client, token: &str) -> TokenReviewStatus {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
}

async fn whoami(client: Client) -> Result<SelfSubjectReview, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = serde_json::from_value(json!({})).unwrap();
    reviews.create(&PostParams::default(), &review).await
}

#[tokio::test]
async fn tokens_expire_on_the_token_clock_and_do_not_outlive_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let server = LocalApiServer::builder()
        .persist_to(&file)
        .start()
        .await
        .unwrap();
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }))
    .unwrap();
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    let token = |spec: Value| {
        let accounts = accounts.clone();
        async move {
            let request = serde_json::from_value(json!({"spec": spec})).unwrap();
            accounts
                .create_token_request("default", &PostParams::default(), &request)
                .await
                .unwrap()
                .status
                .unwrap()
                .token
        }
    };
    let short = token(json!({"expirationSeconds": 600})).await;
    let kubelet = token(json!({
        "expirationSeconds": 3607,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": pod.uid()},
    }))
    .await;
    let payload = short.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &data_encoding::BASE64URL_NOPAD
            .decode(payload.as_bytes())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (claims["iss"].as_str(), &claims["aud"]),
        (Some(ISSUER), &json!([ISSUER]))
    );

    let admin = whoami(client.clone())
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap();
    assert_eq!(admin.username.as_deref(), Some(ADMIN));
    assert_eq!(
        admin.groups.unwrap(),
        ["system:masters", "system:authenticated"]
    );
    assert!(
        whoami(client_with_token(&server, &short).await)
            .await
            .is_ok()
    );

    // Still valid within go-jose's minute of leeway, expired after it; the kubelet's
    // pod-bound token lives a year.
    server.advance_token_clock(Duration::from_secs(600 + 59));
    assert_eq!(
        token_review(&client, &short).await.authenticated,
        Some(true)
    );
    server.advance_token_clock(Duration::from_secs(2));
    let expired = token_review(&client, &short).await;
    assert_eq!(
        (expired.authenticated, expired.error.as_deref()),
        (
            None,
            Some("[invalid bearer token, service account token has expired]")
        )
    );
    match whoami(client_with_token(&server, &short).await).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.message.as_str()),
                (401, "Unauthorized")
            )
        }
        other => panic!("expected 401 Unauthorized, got {other:?}"),
    }
    assert_eq!(
        token_review(&client, &kubelet).await.authenticated,
        Some(true)
    );
    server.advance_token_clock(Duration::from_secs(365 * 24 * 3600));
    assert_eq!(
        token_review(&client, &kubelet).await.error.as_deref(),
        Some("[invalid bearer token, service account token has expired]")
    );
    server.shutdown().await.unwrap();

    // Never written down, and signed with a key that went with the server.
    let snapshot = std::fs::read_to_string(&file).unwrap();
    assert!(!snapshot.contains(&kubelet) && !snapshot.contains(payload));
    let server = LocalApiServer::builder()
        .persist_to(&file)
        .start()
        .await
        .unwrap();
    let client = server.client().await.unwrap();
    assert_eq!(
        token_review(&client, &kubelet).await.error.as_deref(),
        Some("[invalid bearer token, invalid signature, no keys found]")
    );
    server.shutdown().await.unwrap();
}
