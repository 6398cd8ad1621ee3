//! Fields of a tenant pod the host must decide on, and what the translation does with them:
//! dropped, and said so in the decision's message (the policy refuses the others, see
//! default_policy.rs).

use serde_json::{Value, json};
use tenantplane_api::Tenant;
use tenantplane_core::decision::Outcome;
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Planner, TenantObject};

fn planned(pod: Value) -> (Value, String) {
    let tenant = Tenant::new("acme", Default::default());
    let planner = Planner::new(&tenant, CompiledPolicy::builtin_default());
    let object = TenantObject::from_value(pod).unwrap();
    let plan = planner.plan(&object, &HostState::default());
    assert_eq!(plan.outcome, Outcome::Synced, "{}", plan.message);
    let desired = planner
        .translate(
            &object,
            &plan,
            &HostState::default().in_namespace("tenant-acme"),
        )
        .unwrap();
    (desired.object, plan.message)
}

#[test]
fn node_name_control_plane_tolerations_and_finalizers_are_dropped_and_said_so() {
    let (host, message) = planned(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "finalizers": ["example.com/keep"]},
        "spec": {"nodeName": "control-plane-1",
                 "tolerations": [
                     {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                     {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
                     {"operator": "Exists"},
                     {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
                 "containers": [{"name": "app", "image": "nginx"}]}}));
    assert!(host["spec"].get("nodeName").is_none());
    assert_eq!(
        host["spec"]["tolerations"],
        json!([{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}])
    );
    assert!(host["metadata"].get("finalizers").is_none());
    for said in [
        "spec.nodeName dropped: the host's scheduler places the pod",
        "3 of spec.tolerations dropped: they tolerate the host's control-plane taints",
        "metadata.finalizers not carried: only the host's own controllers finalize a host pod",
    ] {
        assert!(message.contains(said), "{message}");
    }
}

#[test]
fn external_name_services_are_kept() {
    let tenant = Tenant::new("acme", Default::default());
    let planner = Planner::new(&tenant, CompiledPolicy::builtin_default());
    let object = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": "team"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"}}))
    .unwrap();
    let plan = planner.plan(&object, &HostState::default());
    assert_eq!(plan.outcome, Outcome::Synced);
}
