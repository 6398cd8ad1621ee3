//! The Planner service on a loopback socket, called with the generated tonic client.

mod support;

use serde_json::json;
use support::{example, example_documents, json, serve};
use tenantplane_proto::planner::v1::planner_client::PlannerClient;
use tenantplane_proto::planner::v1::{
    CollisionKind, ConflictCause, DecisionForm, ExplainHostObjectRequest, GetVersionRequest,
    NameForm, Ownership, PlacementForm, PlanForm, PlanRequest, SyncAction,
};
use tenantplane_proto::types::v1::{HostAction, Outcome, TenantRef};
use tonic::Code;
use tonic_types::StatusExt;

fn acme() -> Option<TenantRef> {
    Some(TenantRef {
        name: "acme".into(),
        host_namespace: "tenant-acme".into(),
        ..TenantRef::default()
    })
}

fn request(objects: &[serde_json::Value]) -> PlanRequest {
    PlanRequest {
        tenant: acme(),
        sync_policy: Vec::new(),
        objects: objects.iter().map(json).collect(),
        host_objects: Vec::new(),
        trace_contexts: Vec::new(),
        decision_form: DecisionForm::Unspecified.into(),
        placement_form: PlacementForm::Unspecified.into(),
        mapping_version: String::new(),
        plan_form: PlanForm::Unspecified.into(),
        isolation_profile: Vec::new(),
    }
}

/// The single field violation of an INVALID_ARGUMENT status.
fn violation(status: &tonic::Status) -> (String, String) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let bad = status
        .get_details_bad_request()
        .expect("a BadRequest detail");
    assert_eq!(bad.field_violations.len(), 1, "{bad:?}");
    let v = &bad.field_violations[0];
    (v.field.clone(), v.description.clone())
}

#[tokio::test]
async fn plans_a_batch_with_placements_verdicts_collisions_and_decisions() {
    let mut client = PlannerClient::new(serve().await);
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "web-config", "namespace": "shop"}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "node-debugger", "namespace": "ops"},
               "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox"}]}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": "shop"}}),
    ];
    let mut req = request(&objects);
    req.host_objects = example_documents("host/tenant-acme.yaml")
        .iter()
        .map(json)
        .collect();
    let resp = client.plan(req).await.unwrap().into_inner();
    assert_eq!(resp.policy.unwrap().name, "tenantplane-default");
    assert_eq!(resp.plans.len(), 3);

    // A hand-made ConfigMap sits at web-config's host name: refused, never overwritten.
    let conflict = &resp.plans[0];
    assert_eq!(conflict.source.as_ref().unwrap().name, "web-config");
    let target = conflict
        .placement
        .as_ref()
        .unwrap()
        .target
        .as_ref()
        .unwrap();
    assert_eq!(
        (target.namespace.as_str(), target.name.as_str()),
        ("tenant-acme", "web-config-x-shop")
    );
    assert_eq!(
        conflict.placement.as_ref().unwrap().name_form(),
        NameForm::Readable
    );
    assert_eq!(conflict.outcome(), Outcome::Conflict);
    assert_eq!(conflict.action(), HostAction::None);
    let collision = conflict.collision.as_ref().unwrap();
    assert_eq!(collision.kind(), CollisionKind::Conflict);
    assert_eq!(collision.cause(), ConflictCause::NoProvenance);
    assert_eq!(conflict.reason, "HostObjectNotManaged");

    // The host-escape classic is rejected by its rule, naming the field.
    let rejected = &resp.plans[1];
    assert_eq!(rejected.outcome(), Outcome::Rejected);
    let verdict = rejected.verdict.as_ref().unwrap();
    assert_eq!(verdict.action(), SyncAction::Reject);
    assert_eq!(verdict.policy.as_ref().unwrap().rule, "no-host-network");
    assert_eq!(verdict.field_path, "spec.hostNetwork");
    assert!(rejected.collision.is_none());

    // A free name: created.
    let created = &resp.plans[2];
    assert_eq!(created.outcome(), Outcome::Synced);
    assert_eq!(created.action(), HostAction::Create);
    assert_eq!(
        created.collision.as_ref().unwrap().kind(),
        CollisionKind::Create
    );
    let labels = &created.placement.as_ref().unwrap().labels;
    assert_eq!(labels["tenantplane.io/tenant"], "acme");

    // Every plan carries its decision, stamped by the planner service.
    for plan in &resp.plans {
        let d = plan.decision.as_ref().unwrap();
        assert_eq!(d.component, "tenantplane-planner");
        assert_eq!(d.tenant, "acme");
        assert_eq!(d.outcome, plan.outcome);
        assert_eq!(d.mapping_version, "v1");
        assert!(d.input_digest.starts_with("sha256:"));
        assert!(d.time.is_some());
        assert_eq!(d.id.len(), 36, "a UUID: {}", d.id);
    }
    let ids: std::collections::BTreeSet<_> = resp
        .plans
        .iter()
        .map(|p| &p.decision.as_ref().unwrap().id)
        .collect();
    assert_eq!(ids.len(), 3, "decision ids are unique");
}

#[tokio::test]
async fn plans_under_the_given_sync_policy() {
    let mut client = PlannerClient::new(serve().await);
    let mut req = request(&example_documents("workloads/shop.yaml"));
    req.sync_policy = example("syncpolicy.yaml").into_bytes();
    let resp = client.plan(req).await.unwrap().into_inner();
    let policy = resp.policy.unwrap();
    assert_ne!(policy.name, "tenantplane-default");
    assert!(!policy.revision.is_empty());
    for plan in &resp.plans {
        assert_eq!(
            plan.verdict.as_ref().unwrap().policy.as_ref().unwrap().name,
            policy.name
        );
    }
}

#[tokio::test]
async fn plans_under_the_isolation_profile_refusing_what_the_host_would_refuse() {
    let mut client = PlannerClient::new(serve().await);
    let hardened = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "app", "image": "nginx:1.27", "imagePullPolicy": "Always",
                     "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}});
    let ordinary = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plain", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    let mut req = request(&[hardened, ordinary]);
    req.isolation_profile = example("isolationprofile.yaml").into_bytes();
    let resp = client.plan(req.clone()).await.unwrap().into_inner();
    let profile = resp.isolation_profile.unwrap();
    assert_eq!(
        (profile.name.as_str(), profile.generation),
        ("acme-isolation", 0)
    );
    assert_eq!(resp.plans[0].outcome(), Outcome::Synced);
    assert_eq!(resp.plans[0].profile, None);
    let refused = &resp.plans[1];
    assert_eq!(refused.outcome(), Outcome::Rejected);
    assert_eq!(refused.reason, "PodSecurityForbidden");
    assert!(
        refused.message.ends_with(
            "pods \"plain-x-shop\" is forbidden: violates PodSecurity \"restricted:v1.34\": \
             allowPrivilegeEscalation != false (container \"app\" must set \
             securityContext.allowPrivilegeEscalation=false), unrestricted capabilities \
             (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"app\" must set \
             securityContext.runAsNonRoot=true), seccompProfile (pod or container \"app\" must \
             set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        ),
        "{}",
        refused.message
    );
    let rule = refused.profile.as_ref().unwrap();
    assert_eq!(rule.rule, "PodSecurity/allowPrivilegeEscalation");
    assert_eq!(rule.field_path, "spec.level");
    assert_eq!(
        refused.decision.as_ref().unwrap().profile.as_ref(),
        Some(rule)
    );
    assert_eq!(
        refused.verdict.as_ref().unwrap().field_path,
        "spec.containers[0].securityContext.allowPrivilegeEscalation"
    );

    // Minimal plans carry the profile too.
    req.plan_form = PlanForm::Minimal.into();
    req.mapping_version = "v1".into();
    let resp = client.plan(req.clone()).await.unwrap().into_inner();
    assert_eq!(resp.plan_form(), PlanForm::Minimal);
    assert_eq!(resp.plans[1].profile.as_ref(), Some(rule));

    req.isolation_profile = b"spec: {level: extreme}".to_vec();
    let status = client.plan(req).await.unwrap_err();
    let (field, description) = violation(&status);
    assert_eq!(field, "isolation_profile.spec.level");
    assert!(
        description.starts_with("unknown variant `extreme`"),
        "{description}"
    );
}

#[tokio::test]
async fn empty_batch_plans_nothing() {
    let mut client = PlannerClient::new(serve().await);
    let resp = client.plan(request(&[])).await.unwrap().into_inner();
    assert!(resp.plans.is_empty());
}

#[tokio::test]
async fn a_bad_object_fails_the_request_naming_its_field() {
    let mut client = PlannerClient::new(serve().await);
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "x"}}),
    ];
    let status = client.plan(request(&objects)).await.unwrap_err();
    let (field, description) = violation(&status);
    assert_eq!(field, "objects[3].metadata.name");
    assert_eq!(description, "metadata.name is required");
    assert_eq!(
        status.message(),
        "objects[3].metadata.name: metadata.name is required"
    );

    let mut req = request(&objects[..1]);
    req.objects.push(b"{not json".to_vec());
    let (field, description) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "objects[1]");
    assert!(
        description.starts_with("is not a JSON document"),
        "{description}"
    );

    let mut req = request(&objects[..1]);
    req.objects.push(b"{\"kind\": \"Config\xffMap\"}".to_vec());
    let (field, description) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "objects[1]");
    assert_eq!(
        description,
        "is not UTF-8 JSON: invalid utf-8 sequence of 1 bytes from index 16"
    );

    let mut req = request(&objects[..1]);
    req.objects.push(b"[1, 2]".to_vec());
    let (field, _) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "objects[1]");

    let mut req = request(&objects[..1]);
    req.host_objects.push(json(
        &json!({"apiVersion": "v1", "metadata": {"name": "h"}}),
    ));
    let (field, _) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "host_objects[0].kind");

    let mut req = request(&objects[..2]);
    req.trace_contexts = vec!["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()];
    let (field, description) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "trace_contexts");
    assert_eq!(
        description,
        "has 1 entries for 2 objects; send none or one per object"
    );

    // One per object, valid or not, is fine: a bad traceparent is ignored.
    let mut req = request(&objects[..2]);
    req.trace_contexts = vec![
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        "not a traceparent".into(),
    ];
    assert_eq!(client.plan(req).await.unwrap().into_inner().plans.len(), 2);
}

#[tokio::test]
async fn in_a_large_batch_the_first_bad_object_is_named_and_the_rest_keep_their_order() {
    // Large batches are planned on every core, each core a run of the batch: the answer is in
    // request order, and of several bad objects the first one is reported.
    let mut client = PlannerClient::new(serve().await);
    let objects: Vec<_> = (0..1500)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}}))
        .collect();
    let plans = client
        .plan(request(&objects))
        .await
        .unwrap()
        .into_inner()
        .plans;
    let names: Vec<_> = plans
        .iter()
        .map(|p| p.source.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(
        names,
        (0..1500).map(|i| format!("cm-{i}")).collect::<Vec<_>>()
    );

    let mut req = request(&objects);
    req.objects[1400] = b"{not json".to_vec();
    req.objects[900] = json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
    let (field, _) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(field, "objects[900].metadata.name");
}

#[tokio::test]
async fn a_bad_tenant_or_policy_names_its_field() {
    let mut client = PlannerClient::new(serve().await);
    let object = [json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})];

    let mut req = request(&object);
    req.tenant = None;
    assert_eq!(violation(&client.plan(req).await.unwrap_err()).0, "tenant");

    let mut req = request(&object);
    req.tenant.as_mut().unwrap().name = "Not_A_Label".into();
    assert_eq!(
        violation(&client.plan(req).await.unwrap_err()).0,
        "tenant.name"
    );

    let mut req = request(&object);
    req.tenant.as_mut().unwrap().host_namespace = "-bad".into();
    assert_eq!(
        violation(&client.plan(req).await.unwrap_err()).0,
        "tenant.host_namespace"
    );

    let mut req = request(&object);
    req.sync_policy = br#"
apiVersion: tenantplane.io/v1alpha1
kind: SyncPolicy
metadata: {name: broken}
spec:
  rules:
    - name: bad-cel
      match:
        kinds: [Pod]
        conditions:
          - name: c
            expression: "object.spec.("
      action: Skip
      reason: Nope
  default: {action: Sync, reason: Default}
"#
    .to_vec();
    let (field, description) = violation(&client.plan(req).await.unwrap_err());
    assert_eq!(
        field,
        "sync_policy.spec.rules[0].match.conditions[0].expression"
    );
    assert!(description.contains("CEL"), "{description}");

    let mut req = request(&object);
    req.sync_policy = vec![0xff, 0xfe];
    assert_eq!(
        violation(&client.plan(req).await.unwrap_err()).0,
        "sync_policy"
    );

    let mut req = request(&object);
    req.sync_policy = b"spec: [unclosed".to_vec();
    assert_eq!(
        violation(&client.plan(req).await.unwrap_err()).0,
        "sync_policy"
    );
}

#[tokio::test]
async fn explains_host_objects_back_to_their_source() {
    let mut client = PlannerClient::new(serve().await);
    let host = example_documents("host/tenant-acme.yaml");

    // A host object acme synced: its provenance names the source.
    let resp = client
        .explain_host_object(ExplainHostObjectRequest {
            host_object: json(&host[1]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.ownership(), Ownership::Managed);
    let target = resp.host_object.unwrap();
    assert_eq!(
        (target.kind.as_str(), target.name.as_str()),
        ("ConfigMap", "cache-x-shop-x-eu")
    );
    let provenance = resp.provenance.unwrap();
    assert_eq!(provenance.tenant, "acme");
    let source = provenance.source.unwrap();
    assert_eq!(
        (source.namespace.as_str(), source.name.as_str()),
        ("shop-x-eu", "cache")
    );
    assert_eq!(provenance.mapping_version, "v1");
    assert_eq!(
        provenance.decision_id,
        "019ad5e2-7c10-7a3e-9f51-3b0c2f1e8a44"
    );

    // A hand-made object: not tenantplane's.
    let resp = client
        .explain_host_object(ExplainHostObjectRequest {
            host_object: json(&host[0]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.ownership(), Ownership::NotManaged);
    assert!(resp.provenance.is_none());

    // Provenance altered by hand: the missing key is named.
    let mut altered = host[1].clone();
    altered["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("tenantplane.io/source-kind");
    let resp = client
        .explain_host_object(ExplainHostObjectRequest {
            host_object: json(&altered),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.ownership(), Ownership::Incomplete);
    assert_eq!(resp.missing_key, "tenantplane.io/source-kind");

    let status = client
        .explain_host_object(ExplainHostObjectRequest {
            host_object: json(&json!({"apiVersion": "v1", "kind": "ConfigMap"})),
        })
        .await
        .unwrap_err();
    assert_eq!(violation(&status).0, "host_object.metadata");
}

#[tokio::test]
async fn reports_versions() {
    let mut client = PlannerClient::new(serve().await);
    let resp = client
        .get_version(GetVersionRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.mapping_version,
        tenantplane_core::mapping::LATEST_MAPPING_VERSION.as_str()
    );
    assert_eq!(resp.engine_version, tenantplane_core::ENGINE_VERSION);
    let policy = resp.default_policy.unwrap();
    assert_eq!(policy.name, "tenantplane-default");
    assert_eq!(
        policy.revision,
        tenantplane_core::CompiledPolicy::builtin_default().revision()
    );
}
