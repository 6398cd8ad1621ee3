//! Drift: a host object tenantplane manages, edited or deleted on the host by someone else, is a
//! Drifted decision saying which fields differ and who changed them (the host's managedFields),
//! followed by the decision that corrects it (`spec.drift: Revert`), or left as edited with the
//! Tenant's Drifted condition True (`Record`). A label another field manager adds is not drift;
//! a controller that keeps changing a field tenantplane sets is one tug of war whose corrections
//! back off. Local API servers by default; real ones with the e2e kubeconfigs.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tenantplane_core::decision::{Decision, HostAction, Outcome};
use tenantplane_core::drift::{DriftChange, FieldChange};
use tenantplane_e2e::{
    Env, all_decisions, create, delete, events_regarding, eventually, get, list, resource,
    tenant_status,
};

/// Merge-patches a host object as the field manager `manager` (a person's kubectl, a controller).
async fn patch_as(env: &Env, manager: &str, host_ns: &str, kind: &str, name: &str, patch: Value) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.host.client.clone(), host_ns, &resource("v1", kind));
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patching {kind} {host_ns}/{name} as {manager}: {e}"));
}

/// A run: its Env, whose syncer records into a decision log of its own (at `url`), kept in
/// `_dir`.
struct Run {
    env: Env,
    url: String,
    _dir: tempfile::TempDir,
}

impl Run {
    async fn start() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("decisions.db").display());
        let env = Env::start_with_log(Some(url.clone())).await.unwrap();
        Run {
            env,
            url,
            _dir: dir,
        }
    }

    /// A tenant namespace `base` and a SyncPolicy (the default) that syncs only it.
    async fn namespace_and_policy(&self, base: &str) -> (String, String) {
        let ns = self.env.tenant_namespace(base).await.unwrap();
        let policy = self
            .env
            .default_policy_in(&format!("{base}-policy"), std::slice::from_ref(&ns), false)
            .await
            .unwrap();
        (ns, policy)
    }
}

/// The decisions of `tenant` about the tenant object `name`, oldest first.
async fn decisions_about(url: &str, tenant: &str, name: &str) -> Vec<Decision> {
    let store = tenantplane_decision_log::open(url).await.unwrap();
    all_decisions(store.as_ref(), tenant)
        .await
        .into_iter()
        .filter(|d| d.subject.name == name)
        .collect()
}

/// Waits for a Drifted decision about `name` with `reason` after the first `after` decisions
/// about it, and the decision that corrects it; returns both.
async fn drifted_and_corrected(
    url: &str,
    tenant: &str,
    name: &str,
    reason: &str,
    after: usize,
) -> (Decision, Decision) {
    eventually(
        &format!("a {reason} drift of {name}, corrected"),
        || async {
            let all = decisions_about(url, tenant, name).await;
            drift_and_correction(all.get(after..)?, reason)
        },
    )
    .await
}

/// The fields a Drifted decision names: path, how it differs, the manager that did it.
fn fields_of(drifted: &Decision) -> Vec<(&str, FieldChange, Option<&str>)> {
    let drift = drifted
        .drift
        .as_ref()
        .expect("a Drifted decision carries its drift");
    drift
        .fields
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.change,
                f.by.as_ref().map(|b| b.manager.as_str()),
            )
        })
        .collect()
}

/// Among `decisions`, the Drifted one with `reason` and the decision that corrects it.
fn drift_and_correction(decisions: &[Decision], reason: &str) -> Option<(Decision, Decision)> {
    let drifted = decisions
        .iter()
        .find(|d| d.outcome == Outcome::Drifted && d.reason == reason)?;
    let correction = decisions.iter().find(|d| {
        d.drift
            .as_ref()
            .is_some_and(|x| x.corrects.as_deref() == Some(drifted.id.as_str()))
    })?;
    Some((drifted.clone(), correction.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_edits_and_deletes_are_drift_recorded_with_who_did_it_and_corrected() {
    let run = Run::start().await;
    let (env, url) = (&run.env, run.url.as_str());
    let (ns, policy) = run.namespace_and_policy("drift").await;
    let t = env
        .create_tenant_with("drift", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let host_ns = format!("tenant-{t}");
    let c = &env.tenant_cp.client;
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {"k": "1"}}),
    )
    .await
    .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": ns}}),
    )
    .await
    .unwrap();
    let (cm, sa) = (format!("cfg-x-{ns}"), format!("robot-x-{ns}"));
    let host = |kind: &'static str, name: String| {
        let (client, host_ns) = (env.host.client.clone(), host_ns.clone());
        async move { get(&client, "v1", kind, Some(&host_ns), &name).await }
    };
    eventually("the host ConfigMap", || host("ConfigMap", cm.clone())).await;
    let first_sa = eventually("the host ServiceAccount", || {
        host("ServiceAccount", sa.clone())
    })
    .await;

    // A person changes a value tenantplane sets and adds a key to the tenant's data.
    let before = decisions_about(url, &t, "cfg").await.len();
    patch_as(
        env,
        "kubectl-patch",
        &host_ns,
        "ConfigMap",
        &cm,
        json!({"data": {"k": "evil", "injected": "by-someone"}}),
    )
    .await;
    let (drifted, correction) =
        drifted_and_corrected(url, &t, "cfg", "HostObjectEdited", before).await;
    let drift = drifted.drift.as_ref().unwrap();
    assert_eq!(drift.change, DriftChange::Edited);
    let fields = fields_of(&drifted);
    assert!(
        fields.contains(&("data.k", FieldChange::Changed, Some("kubectl-patch"))),
        "{fields:?}"
    );
    assert!(
        fields.contains(&("data.injected", FieldChange::Added, Some("kubectl-patch"))),
        "{fields:?}"
    );
    assert_eq!(drifted.action, HostAction::None);
    assert_eq!(
        (correction.outcome, correction.action),
        (Outcome::Synced, HostAction::Update)
    );
    assert_eq!(correction.reason, "HostEditReverted");
    let event = eventually("a Warning Event on the host ConfigMap", || async {
        events_regarding(&env.host.client, &host_ns, &cm)
            .await
            .into_iter()
            .find(|e| e["reason"] == "HostObjectEdited")
    })
    .await;
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("data.k changed by kubectl-patch"),
        "{event}"
    );
    let reverted = eventually("the host ConfigMap as the tenant has it", || async {
        host("ConfigMap", cm.clone())
            .await
            .filter(|v| v["data"] == json!({"k": "1"}))
    })
    .await;
    assert_eq!(
        reverted["metadata"]["annotations"]["tenantplane.io/decision-id"],
        json!(correction.id),
        "the host object names the decision that corrected it"
    );

    // Another field manager adds a label tenantplane does not set: its own business. Then a
    // person removes the tenant label tenantplane set: provenance drift, and only that.
    patch_as(
        env,
        "label-bot",
        &host_ns,
        "ConfigMap",
        &cm,
        json!({"metadata": {"labels": {"team": "payments"}}}),
    )
    .await;
    let before = decisions_about(url, &t, "cfg").await.len();
    patch_as(
        env,
        "kubectl-label",
        &host_ns,
        "ConfigMap",
        &cm,
        json!({"metadata": {"labels": {"tenantplane.io/tenant": null}}}),
    )
    .await;
    let (drifted, correction) =
        drifted_and_corrected(url, &t, "cfg", "HostProvenanceRemoved", before).await;
    let paths: Vec<String> = drifted
        .drift
        .as_ref()
        .unwrap()
        .fields
        .iter()
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(
        paths,
        [r#"metadata.labels["tenantplane.io/tenant"]"#],
        "the team label is no drift"
    );
    assert_eq!(correction.reason, "HostProvenanceRestored");
    let restored = eventually("the tenant label back on the host ConfigMap", || async {
        host("ConfigMap", cm.clone())
            .await
            .filter(|v| v["metadata"]["labels"]["tenantplane.io/tenant"] == json!(t))
    })
    .await;
    assert_eq!(
        restored["metadata"]["labels"]["team"], "payments",
        "another's label stays"
    );
    let all = decisions_about(url, &t, "cfg").await;
    assert!(
        !all.iter().any(|d| d.message.contains("team")),
        "no decision took the label another manager added for drift"
    );

    // A person deletes the host ServiceAccount: drift, then re-created by a decision that says so.
    let before = decisions_about(url, &t, "robot").await.len();
    delete(
        &env.host.client,
        "v1",
        "ServiceAccount",
        Some(&host_ns),
        &sa,
    )
    .await
    .unwrap();
    let (drifted, correction) =
        drifted_and_corrected(url, &t, "robot", "HostObjectDeleted", before).await;
    assert_eq!(drifted.drift.as_ref().unwrap().change, DriftChange::Deleted);
    assert_eq!(
        (correction.action, correction.reason.as_str()),
        (HostAction::Create, "HostObjectRecreated")
    );
    let again = eventually("the host ServiceAccount re-created", || async {
        host("ServiceAccount", sa.clone())
            .await
            .filter(|v| v["metadata"]["uid"] != first_sa["metadata"]["uid"])
    })
    .await;
    let robot: Vec<(Outcome, String, String)> = decisions_about(url, &t, "robot")
        .await
        .into_iter()
        .map(|d| (d.outcome, d.reason, d.id))
        .collect();
    assert_eq!(
        again["metadata"]["annotations"]["tenantplane.io/decision-id"],
        json!(correction.id),
        "{robot:?}\n{again}"
    );
    eventually("the Tenant counting its drifts", || async {
        let s = tenant_status(env, &t).await;
        (s["counts"]["drifted"].as_u64().unwrap_or(0) >= 3).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fighting_controller_is_one_tug_of_war_and_record_mode_leaves_the_edit() {
    let run = Run::start().await;
    let (env, url) = (&run.env, run.url.as_str());
    let (ns, policy) = run.namespace_and_policy("tug").await;
    let fought = env
        .create_tenant_with("tug", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let recorded = env
        .create_tenant_with("glass", json!({"syncPolicyRef": policy, "drift": "Record"}))
        .await
        .unwrap();
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {"k": "1"}}),
    )
    .await
    .unwrap();
    let cm = format!("cfg-x-{ns}");
    for t in [&fought, &recorded] {
        let host_ns = format!("tenant-{t}");
        eventually("the host ConfigMap", || async {
            get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm).await
        })
        .await;
    }

    // A controller that sets data.k back whenever it is not its value, for six seconds.
    let host_ns = format!("tenant-{fought}");
    let before = decisions_about(url, &fought, "cfg").await.len();
    let fight_until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < fight_until {
        let live = get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm).await;
        if live.is_some_and(|v| v["data"]["k"] != "fight") {
            patch_as(
                env,
                "fighter",
                &host_ns,
                "ConfigMap",
                &cm,
                json!({"data": {"k": "fight"}}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eventually(
        "the host ConfigMap as the tenant has it, once the fight is over",
        || async {
            get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm)
                .await
                .filter(|v| v["data"]["k"] == "1")
        },
    )
    .await;
    let fight = decisions_about(url, &fought, "cfg").await.split_off(before);
    let drifts: Vec<&Decision> = fight
        .iter()
        .filter(|d| d.outcome == Outcome::Drifted)
        .collect();
    let corrections = fight
        .iter()
        .filter(|d| d.reason == "HostEditReverted")
        .count();
    let most = drifts
        .iter()
        .filter_map(|d| d.drift.as_ref())
        .map(|d| d.times)
        .max()
        .unwrap_or(0);
    assert!(most >= 4, "the drifts in a row are counted: {most}");
    assert!(
        drifts.len() < most as usize,
        "a tug of war is not recorded drift by drift: {} Drifted decisions for {most} drifts",
        drifts.len()
    );
    assert!(
        drifts.iter().any(|d| d.message.contains("times in a row")),
        "the tug of war is said"
    );
    // Corrected at once for the first two drifts, then after 200 ms, 400 ms, 800 ms and the
    // tests' longest backoff (1 s): about eight corrections in six seconds, where a write loop
    // would make one per round trip.
    assert!(
        corrections <= 12,
        "corrections back off: {corrections} in six seconds"
    );

    // Record: the edit stays, the Tenant says it has drifted, and says so no more once the host
    // object holds what tenantplane set again.
    let host_ns = format!("tenant-{recorded}");
    let before = decisions_about(url, &recorded, "cfg").await.len();
    patch_as(
        env,
        "break-glass",
        &host_ns,
        "ConfigMap",
        &cm,
        json!({"data": {"k": "hotfix"}}),
    )
    .await;
    let drifted = eventually("a Drifted decision under Record", || async {
        decisions_about(url, &recorded, "cfg")
            .await
            .split_off(before)
            .into_iter()
            .find(|d| d.outcome == Outcome::Drifted)
    })
    .await;
    assert!(
        drifted.message.contains("left as it is"),
        "{}",
        drifted.message
    );
    let condition = |want: &'static str| {
        let (env, recorded) = (&env, &recorded);
        async move {
            eventually(&format!("the Drifted condition {want}"), || async {
                let s = tenant_status(env, recorded).await;
                s["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Drifted" && c["status"] == want)
                    .cloned()
            })
            .await
        }
    };
    condition("True").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let live = get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm)
        .await
        .unwrap();
    assert_eq!(
        live["data"]["k"], "hotfix",
        "Record leaves the host object as edited"
    );
    assert!(
        !decisions_about(url, &recorded, "cfg")
            .await
            .iter()
            .any(|d| d.drift.as_ref().is_some_and(|x| x.corrects.is_some())),
        "nothing corrected under Record"
    );
    patch_as(
        env,
        "break-glass",
        &host_ns,
        "ConfigMap",
        &cm,
        json!({"data": {"k": "1"}}),
    )
    .await;
    condition("False").await;

    // Under Record, a host object deleted by hand stays deleted, recorded once.
    let before = decisions_about(url, &recorded, "cfg").await.len();
    delete(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm)
        .await
        .unwrap();
    eventually("a HostObjectDeleted drift under Record", || async {
        decisions_about(url, &recorded, "cfg")
            .await
            .split_off(before)
            .into_iter()
            .find(|d| d.outcome == Outcome::Drifted && d.reason == "HostObjectDeleted")
    })
    .await;
    condition("True").await;
    // A change of the tenant object is what brings it back: the next sync creates it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &cm)
            .await
            .is_none(),
        "Record leaves the host object deleted"
    );
    let deleted_drifts = decisions_about(url, &recorded, "cfg")
        .await
        .split_off(before)
        .into_iter()
        .filter(|d| d.reason == "HostObjectDeleted")
        .count();
    assert_eq!(deleted_drifts, 1, "the delete is recorded once");
    let _ = delete(&env.tenant_cp.client, "v1", "ConfigMap", Some(&ns), "cfg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_of_a_compiled_network_policy_is_drift_and_is_reverted() {
    let run = Run::start().await;
    let (env, url) = (&run.env, run.url.as_str());
    let h = &env.host.client;
    let profile = env.name("drift-fence");
    create(
        h,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
        "metadata": {"name": profile}, "spec": {"level": "restricted"}}),
    )
    .await
    .unwrap();
    let policy = env
        .default_policy_in("fence-policy", &[env.name("fence")], false)
        .await
        .unwrap();
    let t = env
        .create_tenant_with(
            "fenced",
            json!({"isolationProfileRef": profile, "syncPolicyRef": policy}),
        )
        .await
        .unwrap();
    let host_ns = format!("tenant-{t}");
    let netpol = "networking.k8s.io/v1";
    let name = "tenantplane-default-deny";
    let compiled = eventually("the compiled default-deny NetworkPolicy", || async {
        get(h, netpol, "NetworkPolicy", Some(&host_ns), name).await
    })
    .await;
    let types = compiled["spec"]["policyTypes"].clone();
    assert_eq!(types, json!(["Ingress", "Egress"]), "{compiled}");

    // Someone lets egress out by hand.
    let about_it = || async {
        decisions_about(url, &t, &profile)
            .await
            .into_iter()
            .filter(|d| d.target.as_ref().is_some_and(|x| x.name == name))
            .collect::<Vec<_>>()
    };
    let before = about_it().await.len();
    let api: Api<DynamicObject> =
        Api::namespaced_with(h.clone(), &host_ns, &resource(netpol, "NetworkPolicy"));
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    api.patch(
        name,
        &params,
        &Patch::Merge(json!({"spec": {"policyTypes": ["Ingress"]}})),
    )
    .await
    .unwrap();
    let (drifted, correction) = eventually(
        "the edit of the compiled NetworkPolicy, reverted",
        || async { drift_and_correction(&about_it().await[before..], "HostObjectEdited") },
    )
    .await;
    let fields: Vec<String> = drifted
        .drift
        .as_ref()
        .unwrap()
        .fields
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        fields.iter().any(|f| f.starts_with("spec.policyTypes")),
        "{fields:?}"
    );
    assert_eq!(drifted.subject.kind, "IsolationProfile");
    assert_eq!(
        drifted.profile.as_ref().map(|p| p.name.as_str()),
        Some(profile.as_str())
    );
    assert_eq!(correction.reason, "HostEditReverted");
    eventually("egress denied again", || async {
        get(h, netpol, "NetworkPolicy", Some(&host_ns), name)
            .await
            .filter(|np| np["spec"]["policyTypes"] == types)
    })
    .await;

    // Someone deletes it: drift too, and it is created again.
    let before = about_it().await.len();
    let uid = get(h, netpol, "NetworkPolicy", Some(&host_ns), name)
        .await
        .unwrap()["metadata"]["uid"]
        .clone();
    delete(h, netpol, "NetworkPolicy", Some(&host_ns), name)
        .await
        .unwrap();
    let (drifted, correction) = eventually("the deleted NetworkPolicy, re-created", || async {
        drift_and_correction(&about_it().await[before..], "HostObjectDeleted")
    })
    .await;
    assert_eq!(drifted.outcome, Outcome::Drifted);
    assert_eq!(
        (correction.action, correction.reason.as_str()),
        (HostAction::Create, "HostObjectRecreated")
    );
    eventually("the NetworkPolicy back", || async {
        get(h, netpol, "NetworkPolicy", Some(&host_ns), name)
            .await
            .filter(|np| np["metadata"]["uid"] != uid)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_token_secret_edited_or_deleted_on_the_host_is_drift_and_gets_new_tokens() {
    let run = Run::start().await;
    let (env, url) = (&run.env, run.url.as_str());
    let (ns, policy) = run.namespace_and_policy("tokens").await;
    let t = env
        .create_tenant_with("tokens", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let host_ns = format!("tenant-{t}");
    let c = &env.tenant_cp.client;
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": ns}}),
    )
    .await
    .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": ns},
        "spec": {"serviceAccountName": "robot",
                 "containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
    )
    .await
    .unwrap();
    let name = format!("app-x-{ns}.sa-token");
    let secret = || {
        let (client, host_ns, name) = (env.host.client.clone(), host_ns.clone(), name.clone());
        async move { get(&client, "v1", "Secret", Some(&host_ns), &name).await }
    };
    let first = eventually("the pod's token Secret", secret).await;
    let token = first["data"]["token"].as_str().unwrap().to_string();

    // A person puts a token of their own into it: drift, by them; new tokens replace it.
    let planted = "cGxhbnRlZA=="; // "planted"
    let before = decisions_about(url, &t, "app").await.len();
    patch_as(
        env,
        "kubectl-edit",
        &host_ns,
        "Secret",
        &name,
        json!({"data": {"token": planted}}),
    )
    .await;
    let (drifted, correction) =
        drifted_and_corrected(url, &t, "app", "HostObjectEdited", before).await;
    assert_eq!(drifted.target.as_ref().unwrap().name, name);
    let fields = fields_of(&drifted);
    assert_eq!(
        fields,
        [("data.token", FieldChange::Changed, Some("kubectl-edit"))]
    );
    assert_eq!(
        (correction.reason.as_str(), correction.action),
        ("ServiceAccountTokenIssued", HostAction::Update)
    );
    assert!(!correction.tokens.is_empty(), "{correction:?}");
    let replaced = eventually("new tokens in the token Secret", || async {
        secret().await.filter(|s| {
            s["metadata"]["annotations"]["tenantplane.io/decision-id"] == json!(correction.id)
        })
    })
    .await;
    let new_token = replaced["data"]["token"].as_str().unwrap().to_string();
    assert!(
        new_token != planted && new_token != token,
        "neither the planted token nor the one it replaced"
    );

    // A person deletes it: drift; re-created with new tokens by a decision that says so.
    let before = decisions_about(url, &t, "app").await.len();
    delete(&env.host.client, "v1", "Secret", Some(&host_ns), &name)
        .await
        .unwrap();
    let (drifted, correction) =
        drifted_and_corrected(url, &t, "app", "HostObjectDeleted", before).await;
    assert_eq!(drifted.drift.as_ref().unwrap().change, DriftChange::Deleted);
    assert_eq!(correction.action, HostAction::Create);
    eventually("the token Secret re-created", || async {
        secret()
            .await
            .filter(|s| s["metadata"]["uid"] != replaced["metadata"]["uid"])
    })
    .await;
    let recorded = format!("{:?}", decisions_about(url, &t, "app").await);
    for held in [planted, &token, &new_token] {
        assert!(!recorded.contains(held), "a token in a decision");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_an_admission_binding_in_the_tenant_control_plane_is_drift_at_once() {
    let mut run = Run::start().await;
    // Only the edit's event can reconcile the Tenant in time: its resync is an hour away.
    run.env.stop_syncer().await;
    let mut config = run.env.syncer_config().await.unwrap();
    config.tenant_resync = Duration::from_secs(3600);
    run.env.start_syncer_with(config);
    let (env, url) = (&run.env, run.url.as_str());
    let (_, policy) = run.namespace_and_policy("gate").await;
    let t = env
        .create_tenant_with("gate", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let c = &env.tenant_cp.client;
    let admission = "admissionregistration.k8s.io/v1";
    let kind = "ValidatingAdmissionPolicyBinding";
    let binding = eventually("an admission binding of the Tenant", || async {
        list(c, admission, kind, None)
            .await
            .ok()?
            .into_iter()
            .find(|b| b["metadata"]["labels"]["tenantplane.io/tenant"] == json!(t))
    })
    .await;
    let name = binding["metadata"]["name"].as_str().unwrap().to_string();
    let actions = binding["spec"]["validationActions"].clone();
    assert_ne!(actions, json!(["Audit"]), "{binding}");

    // Someone turns its enforcement off in the tenant control plane, twice: the second time
    // long after the Tenant's first reconciles, whose own writes reconcile it again a few times.
    let about_it = || async {
        decisions_about(url, &t, &policy)
            .await
            .into_iter()
            .filter(|d| d.target.as_ref().is_some_and(|x| x.name == name))
            .collect::<Vec<_>>()
    };
    let api: Api<DynamicObject> = Api::all_with(c.clone(), &resource(admission, kind));
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    for _ in 0..2 {
        let before = about_it().await.len();
        api.patch(
            &name,
            &params,
            &Patch::Merge(json!({"spec": {"validationActions": ["Audit"]}})),
        )
        .await
        .unwrap();
        let (drifted, correction) = eventually("the edit of the binding, reverted", || async {
            drift_and_correction(&about_it().await[before..], "HostObjectEdited")
        })
        .await;
        let by = &drifted.drift.as_ref().unwrap().fields[0].by;
        assert_eq!(
            by.as_ref().map(|b| b.manager.as_str()),
            Some("kubectl-edit")
        );
        assert_eq!(drifted.subject.kind, "SyncPolicy");
        assert_eq!(correction.reason, "HostEditReverted");
        eventually("enforced again", || async {
            get(c, admission, kind, None, &name)
                .await
                .filter(|b| b["spec"]["validationActions"] == actions)
        })
        .await;
    }
}
