//! `tenantplane why` on host objects the log cannot account for, on compiled isolation objects
//! (down to the decision that applied them), and on bad input, against a local API server and an empty decision log. (The full chain, from
//! a synced object to its decisions, is exercised by the `up` test.)

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;
use tenantplane_local_apiserver::LocalApiServer;

struct World {
    server: LocalApiServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        let server = LocalApiServer::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        server
            .write_kubeconfig(dir.path().join("host.kubeconfig"), "host")
            .unwrap();
        // An empty decision log file.
        tenantplane_decision_log::open(&dir.path().join("decisions.db").display().to_string())
            .await
            .unwrap();
        World { server, dir }
    }

    async fn create<K>(&self, object: serde_json::Value)
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + serde::de::DeserializeOwned
            + serde::Serialize
            + Clone
            + std::fmt::Debug,
    {
        let client = self.server.client().await.unwrap();
        let object: K = serde_json::from_value(object).unwrap();
        kube::Api::<K>::namespaced(client, "default")
            .create(&Default::default(), &object)
            .await
            .unwrap();
    }

    /// Runs `why` (blocking the test's runtime thread is fine: the server runs on others).
    fn why(&self, args: &[&str]) -> (i32, String) {
        let dir: &Path = self.dir.path();
        let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
            .arg("why")
            .arg("--host-kubeconfig")
            .arg(dir.join("host.kubeconfig"))
            .arg("--db")
            .arg(dir.join("decisions.db"))
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }
}

fn config_map(
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_without_provenance_was_not_created_by_tenantplane() {
    let world = World::start().await;
    world
        .create::<ConfigMap>(config_map(
            "hand-made",
            json!({"owner": "platform"}),
            json!({}),
        ))
        .await;
    let (code, out) = world.why(&["configmaps/default/hand-made"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("has no tenantplane.io/tenant label"), "{out}");
    assert!(out.contains("tenantplane did not create it"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_id_the_log_lacks_is_a_problem() {
    let world = World::start().await;
    world
        .create::<ConfigMap>(
            config_map(
                "web-x-shop",
                json!({"tenantplane.io/tenant": "acme", "tenantplane.io/managed": "true",
                       "tenantplane.io/source-namespace": "shop"}),
                json!({"tenantplane.io/source-kind": "ConfigMap", "tenantplane.io/source-name": "web",
                       "tenantplane.io/source-api-version": "v1", "tenantplane.io/mapping-version": "v1",
                       "tenantplane.io/decision-id": "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a44"}),
            ),
        )
        .await;
    let (code, out) = world.why(&["ConfigMap/default/web-x-shop"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ConfigMap shop/web in tenant acme"),
        "the provenance is still shown: {out}"
    );
    assert!(
        out.contains("decision 019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a44, named on the object, is not in the decision log"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_isolation_object_traces_to_its_profile_fields_and_the_decision_that_applied_it()
{
    let world = World::start().await;
    let id = "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a45";
    // What the syncer records when it applies a compiled object (crates/syncer/src/isolation.rs).
    let decision: tenantplane_core::decision::Decision = serde_json::from_value(json!({
        "id": id, "time": "2026-11-29T23:00:00Z", "tenant": "acme",
        "subject": {"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
                    "namespace": "", "name": "acme-isolation"},
        "target": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "namespace": "default", "name": "tenantplane-default-deny"},
        "outcome": "Synced", "action": "Create",
        "profile": {"name": "acme-isolation", "generation": 3,
                    "fieldPath": "spec.level,spec.network.ingress"},
        "reason": "CompiledFromProfile", "message": "deny all traffic not allowed below",
        "inputDigest": "sha256:00", "mappingVersion": "v1",
        "component": "tenantplane-syncer", "componentVersion": "0.1.0",
    }))
    .unwrap();
    let log = tenantplane_decision_log::open(
        &world.dir.path().join("decisions.db").display().to_string(),
    )
    .await
    .unwrap();
    log.append_batch(vec![decision]).await.unwrap();
    world
        .create::<NetworkPolicy>(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {
                "name": "tenantplane-default-deny", "namespace": "default",
                "labels": {"tenantplane.io/managed": "true", "tenantplane.io/tenant": "acme"},
                "annotations": {
                    "tenantplane.io/isolation-profile": "acme-isolation",
                    "tenantplane.io/isolation-profile-generation": "3",
                    "tenantplane.io/isolation-level": "restricted",
                    "tenantplane.io/isolation-field": "spec.level,spec.network.ingress",
                    "tenantplane.io/decision-id": id,
                },
            },
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        }))
        .await;
    let (code, out) = world.why(&["networkpolicy/default/tenantplane-default-deny"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("IsolationProfile acme-isolation generation 3, level restricted"),
        "{out}"
    );
    assert!(out.contains("spec.level, spec.network.ingress"), "{out}");
    assert!(
        out.contains(&format!("Created by      decision {id}")),
        "{out}"
    );
    assert!(
        out.contains(
            "IsolationProfile acme-isolation generation 3, field spec.level,spec.network.ingress"
        ),
        "the decision names the profile and fields: {out}"
    );
    assert!(out.contains("CompiledFromProfile"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_references_get_specific_errors() {
    let world = World::start().await;
    let (code, out) = world.why(&["web-x-shop"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("is not KIND/NAMESPACE/NAME"), "{out}");

    let (code, out) = world.why(&["widgets/default/x"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("serves no resource named \"widgets\""),
        "{out}"
    );

    let (code, out) = world.why(&["configmaps/default/absent"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("the host cluster has no ConfigMap default/absent"),
        "{out}"
    );
}
