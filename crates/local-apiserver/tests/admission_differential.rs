//! The SyncPolicy language means the same at both ends: every Reject rule of the built-in default
//! policy, compiled into ValidatingAdmissionPolicies ([`CompiledPolicy::tenant_admission`]), refuses
//! at admission exactly the objects tenantplane's own evaluation refuses, with the same rule.
//!
//! A corpus of objects trips and does not trip each rule. Each object is first created with
//! `dryRun=All` before any policy exists, which gives the object as the server would store it
//! (what the syncer evaluates); tenantplane's verdict on it is the expectation. Then the compiled
//! policies are created (their bindings scoped to the test's namespace) and, once in effect, each
//! object is created again with `dryRun=All`: the server's admission must refuse exactly the
//! objects tenantplane refuses, naming the same rule, with kube-apiserver's Status. Runs against
//! the local server, or a real one with `TENANTPLANE_E2E_KUBECONFIG`.

mod support;

use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::{Target, eventually};
use tenantplane_api::SyncAction;
use tenantplane_core::{CompiledPolicy, TenantObject};

fn api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies".to_string(),
        "Ingress" => "ingresses".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "app", "image": "busybox"}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn container(extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "busybox"});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

fn service(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["ports"] = json!([{"port": 80}]);
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn service_account(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": name, "annotations": annotations}})
}

fn ingress(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "annotations": annotations},
           "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})
}

/// Objects that trip each Reject rule of the default policy, and objects that do not.
fn corpus() -> Vec<Value> {
    let privileged = |v: bool| json!({"securityContext": {"privileged": v}});
    let escalation = |v: bool| json!({"securityContext": {"allowPrivilegeEscalation": v}});
    vec![
        pod("plain", json!({})),
        pod("host-network", json!({"hostNetwork": true})),
        pod("host-network-false", json!({"hostNetwork": false})),
        pod("host-pid", json!({"hostPID": true})),
        pod("host-pid-false", json!({"hostPID": false})),
        pod("host-ipc", json!({"hostIPC": true})),
        pod(
            "host-network-and-pid",
            json!({"hostNetwork": true, "hostPID": true}),
        ),
        pod(
            "host-path",
            json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        ),
        pod(
            "empty-dir",
            json!({"volumes": [{"name": "scratch", "emptyDir": {}}]}),
        ),
        pod(
            "privileged",
            json!({"containers": [container(privileged(true))]}),
        ),
        pod(
            "unprivileged",
            json!({"containers": [container(privileged(false))]}),
        ),
        pod(
            "privileged-init",
            json!({"initContainers": [container(json!({"name": "init", "securityContext": {"privileged": true}}))],
                   "containers": [container(json!({}))]}),
        ),
        pod(
            "escalation",
            json!({"containers": [container(escalation(true))]}),
        ),
        pod(
            "no-escalation",
            json!({"containers": [container(escalation(false))]}),
        ),
        pod(
            "cap-add",
            json!({"containers": [container(json!({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}))]}),
        ),
        pod(
            "cap-drop",
            json!({"containers": [container(json!({"securityContext": {"capabilities": {"drop": ["ALL"]}}}))]}),
        ),
        pod(
            "host-port",
            json!({"containers": [container(json!({"ports": [{"containerPort": 80, "hostPort": 8080}]}))]}),
        ),
        pod(
            "container-port",
            json!({"containers": [container(json!({"ports": [{"containerPort": 80}]}))]}),
        ),
        service("cluster-ip", json!({})),
        service("node-port", json!({"type": "NodePort"})),
        service("load-balancer", json!({"type": "LoadBalancer"})),
        service("external-ips", json!({"externalIPs": ["203.0.113.7"]})),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
               "data": {"hostNetwork": "true"}}),
        pod(
            "git-repo",
            json!({"volumes": [{"name": "src", "gitRepo": {"repository": "https://example.com/x.git"}}]}),
        ),
        service_account(
            "irsa",
            json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}),
        ),
        service_account(
            "gke",
            json!({"iam.gke.io/gcp-service-account": "x@p.iam.gserviceaccount.com"}),
        ),
        service_account(
            "azure",
            json!({"azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000000"}),
        ),
        service_account("annotated", json!({"team": "shop"})),
        ingress(
            "snippet",
            json!({"nginx.ingress.kubernetes.io/server-snippet": "location / {}"}),
        ),
        ingress(
            "rewrite",
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/"}),
        ),
    ]
}

/// What the server's admission did with a dry-run create: `None` admitted, or the policy that
/// refused and the Status.
async fn admission(client: &Client, ns: &str, object: &Value) -> Result<Value, kube::core::Status> {
    let api = api(
        client,
        object["apiVersion"].as_str().unwrap(),
        object["kind"].as_str().unwrap(),
        Some(ns),
    );
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(created) => Ok(serde_json::to_value(created).unwrap()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(e) => panic!("creating {}: {e}", object.metadata.name.unwrap_or_default()),
    }
}

/// The rule whose policy refused, from kube-apiserver's message.
fn refusing_rule(status: &kube::core::Status, prefix: &str) -> Option<String> {
    let start = status
        .message
        .find(&format!("ValidatingAdmissionPolicy '{prefix}"))?;
    let rest = &status.message[start + "ValidatingAdmissionPolicy '".len() + prefix.len()..];
    Some(rest[..rest.find('\'')?].to_string())
}

#[tokio::test]
async fn the_default_policy_refuses_at_admission_exactly_what_tenantplane_refuses() {
    let target = Target::start().await;
    let client = target.client.clone();
    let ns = target.namespace().await;
    let policy = CompiledPolicy::builtin_default();
    let tenant = format!("diff-{}", &ns[ns.len() - 5..]);
    let prefix = format!("tenantplane-{tenant}-");

    // Tenantplane's verdict on each object as the server stores it.
    let mut expected = Vec::new();
    for object in corpus() {
        let stored = admission(&client, &ns, &object).await.unwrap_or_else(|s| {
            panic!(
                "{} is a valid object: {}",
                object["metadata"]["name"], s.message
            )
        });
        let verdict = policy.evaluate(&TenantObject::from_value(stored).unwrap());
        let refused_by =
            (verdict.action == SyncAction::Reject).then(|| verdict.rule.clone().unwrap());
        expected.push((object, refused_by));
    }
    for rule in policy.tenant_admission(&tenant).rules {
        assert!(
            expected.iter().any(|(_, r)| r.as_ref() == Some(&rule.rule)),
            "the corpus trips rule {}",
            rule.rule
        );
    }

    // The compiled policies, their bindings scoped to the test's namespace.
    let compiled = policy.tenant_admission(&tenant);
    let mut created = Vec::new();
    for object in &compiled.objects {
        let mut object = object.clone();
        if object["kind"] == "ValidatingAdmissionPolicyBinding" {
            object["spec"]["matchResources"] =
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}});
        }
        let kind = object["kind"].as_str().unwrap().to_string();
        let api = api(&client, "admissionregistration.k8s.io/v1", &kind, None);
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api.create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {}: {e}", object["metadata"]["name"]));
        created.push((
            api,
            object["metadata"]["name"].as_str().unwrap().to_string(),
        ));
    }

    // In effect (a real server's policies take a moment to propagate): every object tenantplane
    // refuses is refused by some policy.
    eventually("every compiled policy in effect", || async {
        for (object, refused_by) in &expected {
            if refused_by.is_some() && admission(&client, &ns, object).await.is_ok() {
                return false;
            }
        }
        true
    })
    .await;

    let mut disagreements = Vec::new();
    let mut report = String::new();
    for (object, refused_by) in &expected {
        let name = object["metadata"]["name"].as_str().unwrap();
        let server = match admission(&client, &ns, object).await {
            Ok(_) => None,
            Err(status) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (403, "Forbidden"),
                    "{}",
                    status.message
                );
                Some(refusing_rule(&status, &prefix).unwrap_or_else(|| status.message.clone()))
            }
        };
        report.push_str(&format!(
            "{:<8} {name:<22} tenantplane: {:<26} admission: {}\n",
            object["kind"].as_str().unwrap(),
            refused_by.as_deref().unwrap_or("admitted"),
            server.as_deref().unwrap_or("admitted"),
        ));
        if &server != refused_by {
            disagreements.push(name.to_string());
        }
    }
    println!(
        "{} rules x {} objects: {} of {} agree\n{report}",
        compiled.rules.len(),
        expected.len(),
        expected.len() - disagreements.len(),
        expected.len()
    );
    assert!(
        disagreements.is_empty(),
        "disagreements: {disagreements:?}\n{report}"
    );

    // The refusal a tenant sees: kube-apiserver's message, naming the rule, its reason, message
    // and field.
    let status = admission(&client, &ns, &pod("sniffer", json!({"hostNetwork": true})))
        .await
        .unwrap_err();
    assert_eq!(
        status.message,
        format!(
            "pods \"sniffer\" is forbidden: ValidatingAdmissionPolicy '{prefix}no-host-network' \
             with binding '{prefix}no-host-network' denied request: HostNetworkForbidden: a tenant \
             pod may not share the node's network namespace (SyncPolicy tenantplane-default, rule \
             no-host-network, field spec.hostNetwork)"
        )
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("sniffer", "pods")
    );

    for (api, name) in created.into_iter().rev() {
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    target.cleanup(&ns).await;
}
