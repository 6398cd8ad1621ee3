//! The hostile corpus (examples/hostile) run through explain-sync and through the syncer, under
//! mapping v1 and v2: every object's predicted decision is the one the syncer records, and the
//! host ends as predicted, object by object.
//!
//! The corpus's tenant objects reach, through every field the translation rewrites, host objects
//! the tenant does not own (the platform's, another tenant's, another of its own objects' under
//! v1), meet at one host name under v1, include a service-account token Secret, and pods the
//! corpus's restricted IsolationProfile refuses (or the SyncPolicy first) and admits. The host
//! namespace gets the corpus's host objects first and the tenant control plane the tenant
//! objects; explain-sync then predicts, over the objects as the control plane stored them and from
//! the live host (`--host-kubeconfig`), as a platform engineer would before creating the Tenant;
//! then the Tenant is created and the syncer does what it does.
//!
//! Runs against local API servers, or the real clusters of the e2e suite's variables
//! (`TENANTPLANE_E2E_HOST_KUBECONFIG`, `TENANTPLANE_E2E_TENANT_KUBECONFIG`). Names are made unique
//! to the run: the tenant namespaces get the run's suffix, and so do the host names that end in
//! one of them.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_core::documents;
use tenantplane_decision_log::{DecisionStore, Filter, ObjectFilter, Query};
use tenantplane_e2e::{Env, create, delete, ensure_namespace, get, timeout};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/hostile");

/// The corpus's documents in `dir` (each file, in name order).
fn read_corpus(dir: &str) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(format!("{CORPUS}/{dir}"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in documents::parse(&file.display().to_string(), &text) {
            objects.push(document.expect("the corpus parses").value);
        }
    }
    objects
}

/// The corpus's IsolationProfile.
fn read_profile() -> Value {
    let text = std::fs::read_to_string(format!("{CORPUS}/isolationprofile.yaml")).unwrap();
    serde_norway::from_str(&text).unwrap()
}

/// The corpus made unique to the run: tenant namespaces `ns` become `ns-RUN`, and so does the
/// tail of a host name `NAME-x-ns` and a host object's source namespace.
struct Renamer {
    run: String,
    namespaces: Vec<String>,
}

impl Renamer {
    fn namespace(&self, ns: &str) -> String {
        format!("{ns}-{}", self.run)
    }

    fn tenant_object(&self, mut object: Value) -> Value {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        object["metadata"]["namespace"] = json!(self.namespace(&ns));
        object
    }

    fn host_object(&self, mut object: Value, host_ns: &str) -> Value {
        object["metadata"]["namespace"] = json!(host_ns);
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let tail = self
            .namespaces
            .iter()
            .find(|ns| name.ends_with(&format!("-x-{ns}")))
            .unwrap_or_else(|| panic!("host object {name} is at no tenant namespace's name"));
        object["metadata"]["name"] = json!(format!("{name}-{}", self.run));
        if let Some(source_ns) = object["metadata"]["labels"]
            .get_mut(provenance::SOURCE_NAMESPACE)
            .filter(|ns| ns.as_str() == Some(tail))
        {
            *source_ns = json!(self.namespace(tail));
        }
        object
    }
}

/// `kind/namespace/name` of a tenant object or of a decision's subject.
fn identity(object: &Value) -> String {
    let (kind, meta) = match object.get("metadata") {
        Some(meta) => (&object["kind"], meta),
        None => (&object["kind"], object),
    };
    format!(
        "{}/{}/{}",
        kind.as_str().unwrap(),
        meta["namespace"].as_str().unwrap(),
        meta["name"].as_str().unwrap()
    )
}

/// What a decision says about an object, for comparing the prediction with the record: the ids,
/// times, traces and input digests differ by nature.
fn said(decision: &Value) -> Value {
    let mut said = json!({});
    for field in [
        "subject",
        "target",
        "outcome",
        "action",
        "policy",
        "profile",
        "reason",
        "message",
        "fieldPath",
        "strippedKeys",
        "mappingVersion",
    ] {
        said[field] = decision.get(field).cloned().unwrap_or(Value::Null);
    }
    for volatile in ["uid", "resourceVersion"] {
        if let Some(subject) = said["subject"].as_object_mut() {
            subject.remove(volatile);
        }
    }
    // What a created pod sees (its API endpoint, the addresses of its DNS and Services) is the
    // live state when its host pod is created: offline, explain-sync says it as far as its
    // inputs tell (tests/tests/pod_world.rs checks the pod world itself).
    if let Some(Value::String(message)) = said.get_mut("message")
        && let Some(at) = message.find("; pod world: ")
    {
        message.truncate(at);
    }
    said
}

/// explain-sync's prediction for `inputs` (a directory), for the Tenant and SyncPolicy in these
/// files, with the host (the Tenant's IsolationProfile included) read from `kubeconfig`: each
/// planned object's decision by identity.
fn explain(
    inputs: &std::path::Path,
    (tenant, policy): (&std::path::Path, &std::path::Path),
    kubeconfig: &std::path::Path,
) -> BTreeMap<String, Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .arg("explain-sync")
        .arg(inputs)
        .arg("--tenant")
        .arg(tenant)
        .arg("--policy")
        .arg(policy)
        .arg("--host-kubeconfig")
        .arg(kubeconfig)
        .args(["-o", "json", "--fail-on", "none"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain-sync failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .into_iter()
        .map(|r| {
            let decision = r
                .get("decision")
                .unwrap_or_else(|| panic!("every corpus object is planned: {r}"))
                .clone();
            (identity(&decision["subject"]), decision)
        })
        .collect()
}

/// The decisions recorded about `object` of `tenant`, oldest first.
async fn recorded(store: &dyn DecisionStore, tenant: &str, object: &str) -> Vec<Value> {
    let mut parts = object.splitn(3, '/');
    let (kind, namespace, name) = (parts.next(), parts.next(), parts.next());
    let filter = Filter {
        tenant: Some(tenant.to_string()),
        subject: ObjectFilter {
            kind: kind.map(str::to_string),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
        },
        ..Filter::default()
    };
    store
        .query(Query::new(filter, 100))
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| serde_json::to_value(e.decision).unwrap())
        .collect()
}

/// Creates `object`, trying again for a while: a real control plane admits a pod once its
/// namespace's ServiceAccount exists, which its controllers create shortly after the namespace.
async fn create_once_admitted(client: &kube::Client, object: &Value) -> Value {
    let mut tries = 0;
    loop {
        match create(client, object.clone()).await {
            Ok(stored) => return stored,
            Err(e) => {
                tries += 1;
                assert!(tries < 100, "creating {}: {e:#}", identity(object));
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}

/// The first recorded decision about an object that is neither the failure of a write (a host
/// write can fail on a real cluster and be tried again, each try a decision of its own) nor a
/// wait (a pod waits for its ServiceAccount on the host), nor about a pod's token Secret.
fn first_decided(decisions: &[Value]) -> Option<&Value> {
    decisions.iter().find(|d| {
        let token_secret = d["subject"]["kind"] == "Pod" && d["target"]["kind"] == "Secret";
        !matches!(d["outcome"].as_str(), Some("Failed" | "Deferred")) && !token_secret
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_prediction_about_the_hostile_corpus_comes_true_under_v1_and_v2() {
    let dir = tempfile::tempdir().unwrap();
    let log = format!("sqlite:{}", dir.path().join("decisions.sqlite").display());
    let env = Env::start_with_log(Some(log.clone())).await.unwrap();
    let store = tenantplane_decision_log::open(&log).await.unwrap();
    let kubeconfig = dir.path().join("host.kubeconfig");
    std::fs::write(&kubeconfig, &env.host.kubeconfig).unwrap();

    let tenant_objects = read_corpus("tenant");
    let mut namespaces: Vec<String> = tenant_objects
        .iter()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let renamer = Renamer {
        run: env.run.clone(),
        namespaces: namespaces.clone(),
    };

    // The tenant's objects, all there before either Tenant exists.
    let inputs = dir.path().join("tenant");
    std::fs::create_dir(&inputs).unwrap();
    for ns in &namespaces {
        env.tenant_namespace(ns).await.unwrap();
    }
    let tenant_objects: Vec<Value> = tenant_objects
        .into_iter()
        .map(|o| renamer.tenant_object(o))
        .collect();
    // explain-sync is given the objects as the tenant control plane stores them, which is what
    // the syncer sees: a real one's admission adds to a pod (its service account token volume).
    let mut corpus_yaml = String::new();
    for object in &tenant_objects {
        let stored = create_once_admitted(&env.tenant_cp.client, object).await;
        corpus_yaml += "---\n";
        corpus_yaml += &serde_norway::to_string(&stored).unwrap();
    }
    std::fs::write(inputs.join("corpus.yaml"), corpus_yaml).unwrap();

    // The Tenants' IsolationProfile, and a SyncPolicy that is the built-in default for the
    // corpus's namespaces only: the profile's Pod Security labels and admission policies go in
    // the namespaces the policy syncs, and a shared tenant control plane has others.
    let profile = env.name("hostile-restricted");
    let mut profile_doc = read_profile();
    profile_doc["metadata"]["name"] = json!(profile);
    create(&env.host.client, profile_doc).await.unwrap();
    let run_namespaces: Vec<String> = namespaces.iter().map(|ns| renamer.namespace(ns)).collect();
    let policy = env
        .default_policy_in("hostile-policy", &run_namespaces, false)
        .await
        .unwrap();
    let policy_file = dir.path().join("policy.yaml");
    let stored_policy = get(
        &env.host.client,
        "tenantplane.io/v1alpha1",
        "SyncPolicy",
        None,
        &policy,
    )
    .await
    .unwrap();
    std::fs::write(
        &policy_file,
        serde_norway::to_string(&stored_policy).unwrap(),
    )
    .unwrap();

    for mapping in ["v1", "v2"] {
        let base = format!("hostile-{mapping}");
        let tenant = env.name(&base);
        let host_ns = format!("tenant-{tenant}");

        // The host namespace as the platform team left it.
        ensure_namespace(&env.host.client, &host_ns).await.unwrap();
        let mut fixtures = BTreeMap::new();
        for object in read_corpus("host") {
            let object = renamer.host_object(object, &host_ns);
            let made = create_once_admitted(&env.host.client, &object).await;
            let key = format!(
                "{}/{}",
                made["kind"].as_str().unwrap(),
                made["metadata"]["name"].as_str().unwrap()
            );
            fixtures.insert(key, made["metadata"]["resourceVersion"].clone());
        }

        // explain-sync's prediction, before the Tenant exists.
        let tenant_file = dir.path().join(format!("{tenant}.yaml"));
        std::fs::write(
            &tenant_file,
            serde_norway::to_string(&json!({
                "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": tenant},
                "spec": {"mappingVersion": mapping, "isolationProfileRef": profile,
                    "syncPolicyRef": policy, "controlPlane": {"kubeconfigSecret":
                    {"namespace": "tenantplane-system", "name": "unused", "key": "config"}}},
            }))
            .unwrap(),
        )
        .unwrap();
        let predicted = {
            let (inputs, tenant_file, policy_file, kubeconfig) = (
                inputs.clone(),
                tenant_file.clone(),
                policy_file.clone(),
                kubeconfig.clone(),
            );
            tokio::task::spawn_blocking(move || {
                explain(&inputs, (&tenant_file, &policy_file), &kubeconfig)
            })
            .await
            .unwrap()
        };
        assert_eq!(predicted.len(), tenant_objects.len(), "{predicted:#?}");

        // What the corpus is there to show, under each scheme.
        let outcome = |object: &str| {
            let ns_object = object.replacen("/lab/", &format!("/{}/", renamer.namespace("lab")), 1);
            let d = &predicted[&ns_object];
            (
                d["outcome"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        };
        assert_eq!(
            outcome("Pod/lab/borrower-secret-volume"),
            ("Rejected".into(), "ReferenceToForeignHostObject".into())
        );
        assert_eq!(
            outcome("Secret/lab/deployer-token"),
            (
                "Rejected".into(),
                "ServiceAccountTokenSecretForbidden".into()
            )
        );
        let collisions: Vec<String> = ["ConfigMap/c/a-x-b", "ConfigMap/b-x-c/a", "Pod/c/reader"]
            .iter()
            .map(|o| {
                let (kind, rest) = o.split_once('/').unwrap();
                let (ns, name) = rest.split_once('/').unwrap();
                let d = &predicted[&format!("{kind}/{}/{name}", renamer.namespace(ns))];
                format!(
                    "{} {}",
                    d["outcome"].as_str().unwrap(),
                    d["reason"].as_str().unwrap()
                )
            })
            .collect();
        let expected = match mapping {
            "v1" => [
                "Conflict HostObjectOwnedByOtherSource",
                "Synced WorkloadKind",
                "Rejected ReferenceToForeignHostObject",
            ],
            _ => [
                "Synced WorkloadKind",
                "Synced WorkloadKind",
                "Synced WorkloadKind",
            ],
        };
        assert_eq!(collisions, expected, "under {mapping}");
        for (pod, expected) in [
            ("fit", ("Synced", "WorkloadKind")),
            ("plain", ("Rejected", "PodSecurityForbidden")),
            ("root", ("Rejected", "PodSecurityForbidden")),
            ("prober", ("Rejected", "PodSecurityForbidden")),
            ("cached", ("Rejected", "ProfileAdmissionForbidden")),
            ("cloner", ("Rejected", "GitRepoVolumeForbidden")),
            ("pinned", ("Synced", "WorkloadKind")),
        ] {
            assert_eq!(
                outcome(&format!("Pod/lab/{pod}")),
                (expected.0.into(), expected.1.into()),
                "{pod} under {mapping}"
            );
        }

        // The syncer's decisions.
        env.create_tenant_with(
            &base,
            json!({"mappingVersion": mapping, "isolationProfileRef": profile,
                   "syncPolicyRef": policy}),
        )
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + timeout() * 2;
        let mismatches = loop {
            let mut mismatches = Vec::new();
            for (object, prediction) in &predicted {
                let decisions = recorded(&*store, &tenant, object).await;
                match first_decided(&decisions) {
                    Some(d) if said(d) == said(prediction) => {}
                    Some(d) => mismatches.push((object.clone(), said(prediction), said(d))),
                    None => mismatches.push((object.clone(), said(prediction), Value::Null)),
                }
            }
            if mismatches.is_empty() || tokio::time::Instant::now() > deadline {
                break mismatches;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        };
        pretty_assertions::assert_eq!(
            mismatches,
            Vec::new(),
            "under {mapping}: (object, predicted, recorded) for each object whose record differs"
        );

        // The host, object by object: a synced object's host object carries its provenance and
        // its decision; a refused object's target is untouched (the platform's object as it was,
        // another source's object, or nothing).
        for (object, prediction) in &predicted {
            let target = &prediction["target"];
            let (api_version, kind, name) = (
                target["apiVersion"].as_str().unwrap(),
                target["kind"].as_str().unwrap(),
                target["name"].as_str().unwrap(),
            );
            let source_name = prediction["subject"]["name"].as_str().unwrap();
            let source_ns = prediction["subject"]["namespace"].as_str().unwrap();
            let is_from_source = |host: &Value| {
                host["metadata"]["annotations"][provenance::SOURCE_NAME] == json!(source_name)
                    && host["metadata"]["labels"][provenance::SOURCE_NAMESPACE] == json!(source_ns)
                    && host["metadata"]["labels"][provenance::TENANT] == json!(tenant)
            };
            if prediction["outcome"] == "Synced" {
                // A real host admits a pod once its ServiceAccount is synced: the syncer's
                // retries take their time.
                let deadline = tokio::time::Instant::now() + timeout() * 2;
                let host = loop {
                    if let Some(host) =
                        get(&env.host.client, api_version, kind, Some(&host_ns), name).await
                    {
                        break host;
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{object} has no host object at {name}; its decisions: {:#}",
                        Value::from(recorded(&*store, &tenant, object).await)
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                };
                assert!(is_from_source(&host), "{object} at {name}: {host:#}");
                let decided = recorded(&*store, &tenant, object).await;
                let id = &host["metadata"]["annotations"][provenance::DECISION_ID];
                assert!(
                    decided.iter().any(|d| &d["id"] == id),
                    "{object}: the host object's decision {id} is one recorded about it"
                );
            } else {
                let host = get(&env.host.client, api_version, kind, Some(&host_ns), name).await;
                if let Some(host) = host {
                    assert!(
                        !is_from_source(&host),
                        "{object} reached the host at {name}"
                    );
                    if let Some(version) = fixtures.get(&format!("{kind}/{name}")) {
                        assert_eq!(
                            &host["metadata"]["resourceVersion"], version,
                            "{object}: the host object at {name} was changed"
                        );
                    }
                }
            }
        }
        // The platform's namespace, made by this test (the Env removes the Tenants).
        delete(&env.host.client, "v1", "Namespace", None, &host_ns)
            .await
            .unwrap();
    }
}
