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

/// A host object edited on the host and put back: `why` shows the drift (who changed which
/// field) and the decision that corrected it, which is the one the object names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_host_object_shows_who_changed_it_and_the_correction() {
    let world = World::start().await;
    let (created, drifted, corrected) = (
        "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a50",
        "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a51",
        "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a52",
    );
    let decision = |id: &str, outcome: &str, action: &str, reason: &str, drift| {
        let mut d = json!({
            "id": id, "time": "2026-12-04T10:00:00Z", "tenant": "acme",
            "subject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "shop",
                        "name": "web", "uid": "u1", "resourceVersion": "5"},
            "target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
                       "name": "web-x-shop"},
            "outcome": outcome, "action": action, "reason": reason, "message": reason,
            "inputDigest": "sha256:00", "mappingVersion": "v2",
            "component": "tenantplane-syncer", "componentVersion": "0.1.0",
        });
        if let Some(drift) = drift {
            d["drift"] = drift;
        }
        serde_json::from_value::<tenantplane_core::decision::Decision>(d).unwrap()
    };
    let log = tenantplane_decision_log::open(
        &world.dir.path().join("decisions.db").display().to_string(),
    )
    .await
    .unwrap();
    log.append_batch(vec![
        decision(created, "Synced", "Create", "WorkloadKind", None),
        decision(
            drifted,
            "Drifted",
            "None",
            "HostObjectEdited",
            Some(json!({
            "change": "Edited", "times": 1, "fields": [
                {"path": "data.k", "change": "Changed",
                 "by": {"manager": "kubectl-patch", "operation": "Update",
                        "time": "2026-12-04T10:05:00Z"}},
                {"path": "data.injected", "change": "Added",
                 "by": {"manager": "kubectl-patch", "operation": "Update"}}]})),
        ),
        decision(
            corrected,
            "Synced",
            "Update",
            "HostEditReverted",
            Some(json!({
            "change": "Edited", "corrects": drifted, "times": 1})),
        ),
    ])
    .await
    .unwrap();
    world
        .create::<ConfigMap>(config_map(
            "web-x-shop",
            json!({"tenantplane.io/tenant": "acme", "tenantplane.io/managed": "true",
                   "tenantplane.io/source-namespace": "shop", "tenantplane.io/source-uid": "u1"}),
            json!({"tenantplane.io/source-kind": "ConfigMap", "tenantplane.io/source-name": "web",
                   "tenantplane.io/source-api-version": "v1", "tenantplane.io/mapping-version": "v2",
                   "tenantplane.io/decision-id": corrected}),
        ))
        .await;
    let (code, out) = world.why(&["ConfigMap/default/web-x-shop"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("Drifted         decision {drifted} (#2)")),
        "{out}"
    );
    assert!(
        out.contains("data.k changed by kubectl-patch (Update, 2026-12-04T10:05:00Z)"),
        "{out}"
    );
    assert!(
        out.contains("data.injected added by kubectl-patch (Update)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "corrected by decision {corrected} (#3), HostEditReverted"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("Last changed by decision {corrected}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("  corrects      drift decision {drifted}")),
        "{out}"
    );
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

fn example(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path)
        .display()
        .to_string()
}

impl World {
    /// Installs the tenantplane CRDs and a Tenant `acme` that names no SyncPolicy (the built-in
    /// default is in force).
    async fn with_tenant_acme(self) -> World {
        let client = self.server.client().await.unwrap();
        let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            kube::Api::all(client.clone());
        for crd in tenantplane_api::crds() {
            crds.create(&Default::default(), &crd).await.unwrap();
        }
        kube::Api::<tenantplane_api::Tenant>::all(client)
            .create(
                &Default::default(),
                &tenantplane_api::Tenant::new("acme", Default::default()),
            )
            .await
            .unwrap();
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_object_the_syncer_does_not_watch_is_explained_from_the_tenants_policy() {
    let world = World::start().await.with_tenant_acme().await;

    let (code, out) = world.why(&["--tenant", "acme", "Deployment/shop/web"]);
    assert_eq!(code, 0, "the policy accounts for it: {out}");
    assert!(
        out.contains("Tenant object   Deployment shop/web (apps/v1)"),
        "{out}"
    );
    assert!(out.contains("NotWatched      KindNotSynced: no Sync rule of SyncPolicy tenantplane-default names Deployment.apps"), "{out}");
    assert!(
        out.contains("SyncPolicy tenantplane-default revision sha256:"),
        "{out}"
    );
    assert!(out.contains("rule (the policy default)"), "{out}");
    assert!(
        out.contains("  would decide  Skip (NotSyncedByPolicy)"),
        "{out}"
    );
    assert!(out.contains("History         0 in the log"), "{out}");

    let (code, out) = world.why(&["--tenant", "acme", "clusterrolebindings/shop-admin"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ClusterRoleBinding shop-admin"), "{out}");
    assert!(
        out.contains(
            "ClusterScoped: ClusterRoleBinding.rbac.authorization.k8s.io is cluster-scoped"
        ),
        "{out}"
    );

    let (code, out) = world.why(&["--tenant", "acme", "Namespace/shop/shop"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Namespace is cluster-scoped: the object is Namespace/shop"),
        "{out}"
    );

    let (code, out) = world.why(&["--tenant", "acme", "ConfigMap/shop/web-config"]);
    assert_eq!(code, 1, "watched, yet nothing recorded: {out}");
    assert!(
        out.contains("never seen: SyncPolicy tenantplane-default"),
        "{out}"
    );
    assert!(out.contains("the syncer watches it"), "{out}");

    let (code, out) = world.why(&["--tenant", "ghost", "Deployment/shop/web"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("the host cluster has no Tenant ghost"),
        "{out}"
    );

    let (code, out) = world.why(&["--tenant", "acme", "Widget/lab/w1"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("\"Widget\" is not a built-in Kubernetes kind: give --tenant-kubeconfig"),
        "{out}"
    );

    let (code, out) = world.why(&["--tenant", "acme", "ConfigMap/shop/web-config/x"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("nor KIND/NAME for a cluster-scoped kind"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_says_what_explain_sync_predicted_for_each_unwatched_object() {
    let world = World::start().await;
    // The tenant control plane serves the corpus's CRDs: the custom kinds come from its discovery.
    let client = world.server.client().await.unwrap();
    let crds: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        client,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let corpus = std::fs::read_to_string(example("unwatched/custom-resources.yaml")).unwrap();
    for document in tenantplane_core::documents::parse("corpus", &corpus) {
        let value = document.unwrap().value;
        if value["kind"] == "CustomResourceDefinition" {
            crds.create(&Default::default(), &serde_json::from_value(value).unwrap())
                .await
                .unwrap();
        }
    }
    let tenant_kubeconfig = world.dir.path().join("host.kubeconfig");
    let policy = example("syncpolicy.yaml");
    let predicted = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "explain-sync",
            &example("unwatched"),
            "--policy",
            &policy,
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    let predicted: serde_json::Value = serde_json::from_slice(&predicted.stdout).unwrap();
    let mut answered = 0;
    for result in predicted.as_array().unwrap() {
        let Some(fate) = result.get("unrecorded") else {
            continue;
        };
        let subject = &fate["subject"];
        let (kind, namespace, name) = (
            subject["kind"].as_str().unwrap(),
            subject["namespace"].as_str().unwrap(),
            subject["name"].as_str().unwrap(),
        );
        let object = match namespace {
            "" => format!("{kind}/{name}"),
            ns => format!("{kind}/{ns}/{name}"),
        };
        let (code, out) = world.why(&[
            "--tenant",
            "acme",
            &object,
            "--policy",
            &policy,
            "--tenant-kubeconfig",
            tenant_kubeconfig.to_str().unwrap(),
            "-o",
            "json",
        ]);
        if kind == "Gizmo" {
            // No CRD: neither explain-sync nor the tenant control plane knows it.
            assert_eq!(code, 2, "{out}");
            assert!(out.contains("serves no resource named \"Gizmo\""), "{out}");
            continue;
        }
        assert_eq!(code, 0, "{object}: {out}");
        let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
        let answer = &answer["unrecorded"];
        assert_eq!(
            answer["fate"], fate["fate"],
            "{object}: {answer:#} vs {fate:#}"
        );
        assert_eq!(answer["subject"], fate["subject"], "{object}");
        assert_eq!(answer["verdict"], fate["verdict"], "{object}");
        assert_eq!(answer["verdict"]["policy"], "acme-sync", "{object}");
        answered += 1;
    }
    assert_eq!(
        answered, 9,
        "every unwatched object of the corpus but the Gizmo: {predicted:#}"
    );
}
