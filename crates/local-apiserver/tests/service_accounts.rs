//! Service accounts through kube-rs: TokenRequest (defaults, validation, bound objects),
//! TokenReview and SelfSubjectReview of the tokens it issues, and the ServiceAccount
//! admission of pods. Runs against the local server, or against a real cluster when
//! `TENANTPLANE_E2E_KUBECONFIG` is set, with the same assertions. A real kube-apiserver
//! caches successful token authentications for ten seconds, so the refusals that follow a
//! deletion are polled for. Expiry, which needs the server's clock moved, is in
//! `local_server.rs`.

mod support;

use data_encoding::BASE64URL_NOPAD;
use k8s_openapi::api::authentication::v1::{
    SelfSubjectReview, TokenRequest, TokenReview, TokenReviewStatus,
};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{Value, json};
use support::{Target, eventually, status};

const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A fresh namespace with a ServiceAccount `builder` (and its `default` one, which a real
/// cluster's controller-manager creates shortly after the namespace).
async fn namespace_with_builder(target: &Target, builder: Value) -> String {
    let ns = target.namespace().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let mut account = json!({"metadata": {"name": "builder"}});
    json_patch::merge(&mut account, &builder);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(account).unwrap(),
        )
        .await
        .unwrap();
    eventually("the namespace's default ServiceAccount", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.unwrap().is_some() }
    })
    .await;
    ns
}

async fn create_pod(target: &Target, ns: &str, pod: Value) -> Result<Pod, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), ns);
    let mut body = json!({"spec": {"containers": [{"name": "app", "image": "app:1"}]}});
    json_patch::merge(&mut body, &pod);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
}

async fn request_token(
    target: &Target,
    ns: &str,
    account: &str,
    request: Value,
) -> Result<TokenRequest, kube::Error> {
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), ns);
    accounts
        .create_token_request(
            account,
            &PostParams::default(),
            &serde_json::from_value(request).unwrap(),
        )
        .await
}

fn bound_to(kind: &str, object: &impl ResourceExt) -> Value {
    json!({"spec": {"boundObjectRef": {
        "kind": kind, "apiVersion": "v1", "name": object.name_any(), "uid": object.uid(),
    }}})
}

fn token_of(request: &TokenRequest) -> String {
    request.status.as_ref().expect("status").token.clone()
}

/// The claims of a JWT (not verified: the server does that).
fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap()
}

async fn review(target: &Target, token: &str, audiences: &[&str]) -> TokenReviewStatus {
    let reviews: Api<TokenReview> = Api::all(target.client.clone());
    let review = json!({"spec": {"token": token, "audiences": audiences}});
    reviews
        .create(
            &PostParams::default(),
            &serde_json::from_value(review).unwrap(),
        )
        .await
        .unwrap()
        .status
        .expect("an answered review")
}

/// Polls until the token's review fails with `reason` (after kube-apiserver's loopback
/// authenticator's `invalid bearer token`).
async fn eventually_refused(target: &Target, token: &str, reason: &str) {
    let error = format!("[invalid bearer token, {reason}]");
    let error = error.as_str();
    eventually(&format!("the token refused with {error:?}"), || async {
        let status = review(target, token, &[]).await;
        status.authenticated != Some(true) && status.error.as_deref() == Some(error)
    })
    .await;
}

/// A client of the target whose only credential is `token`.
async fn client_with_token(target: &Target, token: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(&target.kubeconfig).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info = AuthInfo {
        token: Some(token.to_string().into()),
        ..AuthInfo::default()
    };
    Client::try_from(config).unwrap()
}

async fn whoami(client: Client) -> Result<SelfSubjectReview, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    reviews
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({})).unwrap(),
        )
        .await
}

#[tokio::test]
async fn token_requests_get_defaults_and_kube_apiserver_claims() {
    let target = Target::start().await;
    let ns = namespace_with_builder(&target, json!({})).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let builder = accounts.get("builder").await.unwrap();
    let issued = request_token(&target, &ns, "builder", json!({"spec": {}}))
        .await
        .unwrap();
    assert_eq!(issued.metadata.name.as_deref(), Some("builder"));
    assert_eq!(issued.metadata.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(issued.metadata.uid, builder.uid());
    assert_eq!(issued.spec.expiration_seconds, Some(3600));
    let audiences = issued.spec.audiences.clone();
    assert!(!audiences.is_empty(), "defaulted to the API audiences");
    let created = issued.metadata.creation_timestamp.clone().unwrap().0;
    let expires = issued.status.as_ref().unwrap().expiration_timestamp.0;
    assert_eq!(expires.as_second() - created.as_second(), 3600);
    let claims = claims_of(&token_of(&issued));
    assert_eq!(claims["sub"], format!("system:serviceaccount:{ns}:builder"));
    assert_eq!(claims["aud"], json!(audiences));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );
    assert_eq!(claims["nbf"], claims["iat"]);
    assert!(!claims["jti"].as_str().unwrap().is_empty());
    assert_eq!(
        claims["kubernetes.io"],
        json!({"namespace": ns, "serviceaccount": {"name": "builder", "uid": builder.uid()}})
    );

    // The kubelet's pod-bound tokens (3607 s) live a year, and say when they would have
    // expired; the request reports the expiry it asked for.
    let pod = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let mut request = bound_to("Pod", &pod);
    request["spec"]["expirationSeconds"] = json!(3607);
    let issued = request_token(&target, &ns, "builder", request)
        .await
        .unwrap();
    let created = issued.metadata.creation_timestamp.clone().unwrap().0;
    let expires = issued.status.as_ref().unwrap().expiration_timestamp.0;
    assert_eq!(expires.as_second() - created.as_second(), 3607);
    let claims = claims_of(&token_of(&issued));
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 365 * 24 * 3600);
    assert_eq!(
        claims["kubernetes.io"]["warnafter"].as_i64().unwrap() - iat,
        3607
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"],
        json!({"name": "web", "uid": pod.uid()})
    );
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn token_requests_are_refused_as_kube_apiserver_refuses_them() {
    let target = Target::start().await;
    let ns = namespace_with_builder(&target, json!({})).await;
    let refused = |result: Result<TokenRequest, kube::Error>| {
        let status = status(result);
        (status.code, status.message)
    };
    assert_eq!(
        refused(request_token(&target, &ns, "builder", json!({"spec": {"expirationSeconds": 599}})).await),
        (422, "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes".to_string())
    );
    assert_eq!(
        refused(request_token(&target, &ns, "ghost", json!({"spec": {}})).await),
        (404, "serviceaccounts \"ghost\" not found".to_string())
    );
    assert_eq!(
        refused(request_token(&target, &ns, "builder", json!({"metadata": {"name": "other"}, "spec": {}})).await),
        (422, "TokenRequest.authentication.k8s.io \"builder\" is invalid: metadata.name: Invalid value: \"other\": must match the service account name if specified".to_string())
    );
    let ghost =
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "ghost"}}});
    assert_eq!(
        refused(request_token(&target, &ns, "builder", ghost).await),
        (404, "pods \"ghost\" not found".to_string())
    );
    let other = create_pod(&target, &ns, json!({"metadata": {"name": "other"}}))
        .await
        .unwrap();
    assert_eq!(
        refused(request_token(&target, &ns, "builder", bound_to("Pod", &other)).await),
        (400, "cannot bind token for serviceaccount \"builder\" to pod running with different serviceaccount name.".to_string())
    );
    let pod = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let mut stale = bound_to("Pod", &pod);
    stale["spec"]["boundObjectRef"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    assert_eq!(
        refused(request_token(&target, &ns, "builder", stale).await),
        (409, "Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (00000000-0000-0000-0000-000000000000) does not match the UID in record. The object might have been deleted and then recreated".to_string())
    );
    let config_map =
        json!({"spec": {"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}});
    assert_eq!(
        refused(request_token(&target, &ns, "builder", config_map).await),
        (
            400,
            "cannot bind token to object of type /v1, Kind=ConfigMap".to_string()
        )
    );

    // A Secret may be bound too; its token names it.
    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), &ns);
    let secret = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "anchor"}})).unwrap(),
        )
        .await
        .unwrap();
    let issued = request_token(&target, &ns, "builder", bound_to("Secret", &secret))
        .await
        .unwrap();
    assert_eq!(
        claims_of(&token_of(&issued))["kubernetes.io"]["secret"],
        json!({"name": "anchor", "uid": secret.uid()})
    );
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn token_reviews_authenticate_until_the_bound_pod_goes() {
    let target = Target::start().await;
    let ns = namespace_with_builder(&target, json!({})).await;
    let builder: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let builder_uid = builder.get("builder").await.unwrap().uid().unwrap();
    let pod = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let issued = request_token(&target, &ns, "builder", bound_to("Pod", &pod))
        .await
        .unwrap();
    let token = token_of(&issued);
    let jti = claims_of(&token)["jti"].as_str().unwrap().to_string();

    let accepted = review(&target, &token, &[]).await;
    assert_eq!(accepted.authenticated, Some(true), "{accepted:?}");
    assert_eq!(accepted.audiences, Some(issued.spec.audiences.clone()));
    let user = accepted.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{ns}:builder").as_str())
    );
    assert_eq!(user.uid.as_deref(), Some(builder_uid.as_str()));
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".to_string(),
        ]
    );
    let extra = user.extra.unwrap();
    assert_eq!(extra["authentication.kubernetes.io/pod-name"], ["web"]);
    assert_eq!(
        extra["authentication.kubernetes.io/pod-uid"],
        [pod.uid().unwrap()]
    );
    assert_eq!(
        extra["authentication.kubernetes.io/credential-id"],
        [format!("JTI={jti}")]
    );

    let elsewhere = review(&target, &token, &["https://vault.example"]).await;
    assert_eq!(elsewhere.authenticated, None);
    assert_eq!(
        elsewhere.error.unwrap(),
        format!(
            "[invalid bearer token, token audiences {} is invalid for the target audiences [\"https://vault.example\"]]",
            go_quoted(&issued.spec.audiences)
        )
    );
    assert_eq!(
        review(&target, "not-a-token", &[]).await.error.as_deref(),
        Some("invalid bearer token")
    );
    let reviews: Api<TokenReview> = Api::all(target.client.clone());
    let empty = serde_json::from_value(json!({"spec": {}})).unwrap();
    let refused = status(reviews.create(&PostParams::default(), &empty).await);
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (400, "token is required for TokenReview in authentication")
    );

    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &ns);
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("the pod gone", || async {
        pods.get_opt("web").await.unwrap().is_none()
    })
    .await;
    eventually_refused(
        &target,
        &token,
        "service account token has been invalidated",
    )
    .await;
    let again = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let refusal = format!(
        "pod UID ({}) does not match service account pod ref claim ({})",
        again.uid().unwrap(),
        pod.uid().unwrap()
    );
    eventually_refused(&target, &token, &refusal).await;
    target.cleanup(&ns).await;
}

/// Go's `%q` of a string list, as kube-apiserver's audience error prints it.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

#[tokio::test]
async fn tokens_go_with_their_service_account() {
    let target = Target::start().await;
    let ns = namespace_with_builder(&target, json!({})).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let old_uid = accounts.get("builder").await.unwrap().uid().unwrap();
    let token = token_of(
        &request_token(&target, &ns, "builder", json!({"spec": {}}))
            .await
            .unwrap(),
    );
    assert_eq!(review(&target, &token, &[]).await.authenticated, Some(true));
    accounts
        .delete("builder", &DeleteParams::default())
        .await
        .unwrap();
    eventually_refused(&target, &token, "serviceaccounts \"builder\" not found").await;
    let again = accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap(),
        )
        .await
        .unwrap();
    let refusal = format!(
        "service account UID ({}) does not match claim ({old_uid})",
        again.uid().unwrap()
    );
    eventually_refused(&target, &token, &refusal).await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn self_subject_reviews_answer_for_the_bearer_token() {
    let target = Target::start().await;
    let ns = namespace_with_builder(&target, json!({})).await;
    let pod = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let token = token_of(
        &request_token(&target, &ns, "builder", bound_to("Pod", &pod))
            .await
            .unwrap(),
    );
    let own = whoami(target.client.clone()).await.unwrap();
    let own = own.status.unwrap().user_info.unwrap().username.unwrap();
    assert!(!own.starts_with("system:serviceaccount:"), "{own}");

    let as_pod = whoami(client_with_token(&target, &token).await)
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap();
    assert_eq!(
        as_pod.username.unwrap(),
        format!("system:serviceaccount:{ns}:builder")
    );
    assert_eq!(
        as_pod.extra.unwrap()["authentication.kubernetes.io/pod-name"],
        ["web"]
    );

    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &ns);
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let client = client_with_token(&target, &token).await;
    eventually("the deleted pod's token refused with 401", || {
        let client = client.clone();
        async move {
            matches!(whoami(client).await, Err(kube::Error::Api(s)) if s.code == 401 && s.reason == "Unauthorized")
        }
    })
    .await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn pods_get_the_service_account_token_volume_as_kube_apiserver_adds_it() {
    let target = Target::start().await;
    let ns = namespace_with_builder(
        &target,
        json!({"automountServiceAccountToken": false, "imagePullSecrets": [{"name": "registry"}]}),
    )
    .await;
    let pod = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "web"}, "spec": {
            "initContainers": [{"name": "init", "image": "init:1"}],
            "containers": [
                {"name": "app", "image": "app:1"},
                {"name": "own", "image": "own:1", "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]},
            ],
            "volumes": [{"name": "mine", "emptyDir": {}}],
        }}),
    )
    .await
    .unwrap();
    let pod = serde_json::to_value(&pod).unwrap();
    let spec = &pod["spec"];
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(spec["serviceAccount"], "default");
    let volume = &spec["volumes"][1];
    let name = volume["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5,
        "{name}"
    );
    assert_eq!(volume["projected"]["defaultMode"], 420);
    let sources = volume["projected"]["sources"].as_array().unwrap();
    assert_eq!(
        sources[..3],
        [
            json!({"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}),
            json!({"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
            json!({"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}),
        ]
    );
    // OpenShift's fork of kube-apiserver, which tests/real-kube builds, adds its service CA.
    assert!(
        sources[3..]
            .iter()
            .all(|s| s["configMap"]["name"] == "openshift-service-ca.crt"),
        "{sources:?}"
    );
    let mount = json!([{"name": name, "readOnly": true, "mountPath": MOUNT_PATH}]);
    assert_eq!(spec["initContainers"][0]["volumeMounts"], mount);
    assert_eq!(spec["containers"][0]["volumeMounts"], mount);
    assert_eq!(
        spec["containers"][1]["volumeMounts"],
        json!([{"name": "mine", "mountPath": MOUNT_PATH}])
    );
    assert!(
        spec["imagePullSecrets"].is_null(),
        "the default SA has none"
    );

    // automountServiceAccountToken: the pod's, else its ServiceAccount's.
    let volumes = |pod: Pod| serde_json::to_value(pod).unwrap()["spec"]["volumes"].clone();
    let off = json!({"metadata": {"name": "off"}, "spec": {"automountServiceAccountToken": false}});
    assert!(volumes(create_pod(&target, &ns, off).await.unwrap()).is_null());
    let builder = create_pod(
        &target,
        &ns,
        json!({"metadata": {"name": "builder"}, "spec": {"serviceAccountName": "builder"}}),
    )
    .await
    .unwrap();
    let builder_spec = serde_json::to_value(&builder).unwrap()["spec"].clone();
    assert!(builder_spec["volumes"].is_null());
    assert_eq!(
        builder_spec["imagePullSecrets"],
        json!([{"name": "registry"}])
    );
    let on = json!({"metadata": {"name": "on"}, "spec": {"serviceAccountName": "builder", "automountServiceAccountToken": true}});
    assert!(volumes(create_pod(&target, &ns, on).await.unwrap()).is_array());

    let ghost =
        json!({"metadata": {"generateName": "web-"}, "spec": {"serviceAccountName": "ghost"}});
    let refused = status(create_pod(&target, &ns, ghost).await);
    assert_eq!(
        (refused.code, refused.reason.as_str(), refused.message),
        (
            403,
            "Forbidden",
            format!(
                "pods \"web-\" is forbidden: error looking up service account {ns}/ghost: serviceaccount \"ghost\" not found"
            )
        )
    );

    // The pod read back can be written back: the injected fields are the pod's own.
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &ns);
    let mut read = pods.get("web").await.unwrap();
    read.spec.as_mut().unwrap().containers[0].image = Some("app:2".into());
    pods.replace("web", &PostParams::default(), &read)
        .await
        .unwrap();
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn token_apis_are_in_discovery() {
    let target = Target::start().await;
    let get = |path: &'static str| {
        let client = target.client.clone();
        async move {
            let request = axum::http::Request::get(path).body(Vec::new()).unwrap();
            serde_json::from_str::<Value>(&client.request_text(request).await.unwrap()).unwrap()
        }
    };
    let entry = |list: &Value, name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not listed"))
    };
    let core = get("/api/v1").await;
    let token = entry(&core, "serviceaccounts/token");
    assert_eq!(
        (
            &token["group"],
            &token["version"],
            &token["kind"],
            &token["verbs"]
        ),
        (
            &json!("authentication.k8s.io"),
            &json!("v1"),
            &json!("TokenRequest"),
            &json!(["create"])
        )
    );
    let authentication = get("/apis/authentication.k8s.io/v1").await;
    for (name, kind) in [
        ("tokenreviews", "TokenReview"),
        ("selfsubjectreviews", "SelfSubjectReview"),
    ] {
        let resource = entry(&authentication, name);
        assert_eq!(
            (
                &resource["kind"],
                &resource["namespaced"],
                &resource["verbs"]
            ),
            (&json!(kind), &json!(false), &json!(["create"]))
        );
    }
    let ns = target.namespace().await;
    target.cleanup(&ns).await;
}
