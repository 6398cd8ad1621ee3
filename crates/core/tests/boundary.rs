//! The planner under a Tenant's IsolationProfile: what the host's admission would refuse is
//! decided in the plan (Rejected, with the profile, the rule, the field and the host's own
//! message), nothing is written, and what it admits is planned as before.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_core::boundary::{Boundary, POD_SECURITY_FORBIDDEN, PROFILE_ADMISSION_FORBIDDEN};
use tenantplane_core::decision::{HostAction, Outcome, ProfileRef, Stamp};
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Planner, TenantObject};

fn tenant() -> Tenant {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": "x", "name": "y"}},
                 "isolationProfileRef": "shared", "mappingVersion": "v2"},
    }))
    .unwrap()
}

fn profile(spec: Value) -> IsolationProfile {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
        "metadata": {"name": "shared", "generation": 3}, "spec": spec,
    }))
    .unwrap()
}

fn planner(spec: Value) -> Planner {
    let tenant = tenant();
    Planner::new(&tenant, CompiledPolicy::builtin_default())
        .with_boundary(Boundary::compile(&tenant, &profile(spec)).unwrap())
}

fn pod(name: &str, spec: Value) -> TenantObject {
    TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop"}, "spec": spec}))
    .unwrap()
}

fn hardened(container: Value) -> Value {
    let mut c = json!({"name": "app", "image": "nginx:1.27",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}});
    c.as_object_mut()
        .unwrap()
        .extend(container.as_object().unwrap().clone());
    json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
           "containers": [c]})
}

#[test]
fn a_pod_pod_security_refuses_is_rejected_with_the_hosts_message_and_nothing_is_written() {
    let planner = planner(json!({"level": "restricted"}));
    let object = pod(
        "web",
        json!({"containers": [{"name": "app", "image": "nginx:1.27"}]}),
    );
    let plan = planner.plan(&object, &HostState::default());
    assert_eq!(
        (plan.outcome, plan.action),
        (Outcome::Rejected, HostAction::None)
    );
    assert_eq!(plan.reason, POD_SECURITY_FORBIDDEN);
    let host = "pods \"web-x-shop\" is forbidden: violates PodSecurity \"restricted:v1.34\": \
        allowPrivilegeEscalation != false (container \"app\" must set \
        securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \
        \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod \
        or container \"app\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or \
        container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \
        \"Localhost\")";
    assert_eq!(
        plan.message,
        format!(
            "the host refuses it under IsolationProfile shared \
             (PodSecurity/allowPrivilegeEscalation): {host}"
        )
    );
    let decision = plan.to_decision("acme", &object, Stamp::now("test"));
    assert_eq!(
        decision.profile,
        Some(ProfileRef {
            name: "shared".into(),
            generation: 3,
            field_path: "spec.level".into(),
            rule: Some("PodSecurity/allowPrivilegeEscalation".into()),
        })
    );
    assert_eq!(
        decision.field_path.as_deref(),
        Some("spec.containers[0].securityContext.allowPrivilegeEscalation")
    );
    assert_eq!(
        decision.policy.unwrap().rule.as_deref(),
        Some("sync-workloads"),
        "the SyncPolicy rule that let it through is kept"
    );
}

#[test]
fn the_profiles_admission_policies_refuse_after_pod_security_in_binding_order() {
    let planner = planner(json!({"level": "strict"}));
    // Meets Pod Security restricted, but neither pulls Always nor runs gVisor.
    let object = pod(
        "web",
        hardened(json!({"image": "registry.example/web:1.0"})),
    );
    let plan = planner.plan(&object, &HostState::default());
    assert_eq!(plan.outcome, Outcome::Rejected);
    assert_eq!(plan.reason, PROFILE_ADMISSION_FORBIDDEN);
    assert_eq!(
        plan.message,
        "the host refuses it under IsolationProfile shared \
         (ValidatingAdmissionPolicy/tenantplane-acme-image-pull-always): pods \"web-x-shop\" is \
         forbidden: ValidatingAdmissionPolicy 'tenantplane-acme-image-pull-always' with binding \
         'tenantplane-acme-image-pull-always' denied request: every container of a tenant pod \
         must use imagePullPolicy: Always, so that a private image cached on a node is pulled \
         again with the tenant's own credentials"
    );
    assert_eq!(
        plan.verdict.field_path.as_deref(),
        Some("spec.containers[].imagePullPolicy")
    );

    // An untagged image defaults to Always on the host, as on any API server.
    let latest = pod("web", hardened(json!({"image": "nginx"})));
    let plan = planner.plan(&latest, &HostState::default());
    assert_eq!(
        plan.profile.unwrap().rule.as_deref(),
        Some("ValidatingAdmissionPolicy/tenantplane-acme-runtime-class")
    );

    let admitted = pod(
        "web",
        json!({"runtimeClassName": "gvisor",
               "securityContext": hardened(json!({}))["securityContext"],
               "containers": hardened(json!({"imagePullPolicy": "Always"}))["containers"]}),
    );
    let plan = planner.plan(&admitted, &HostState::default());
    assert_eq!(
        (plan.outcome, plan.action),
        (Outcome::Synced, HostAction::Create)
    );
    assert_eq!(plan.profile, None);
}

#[test]
fn baseline_admits_what_restricted_refuses_and_other_kinds_meet_only_their_policies() {
    let planner = planner(json!({"level": "baseline"}));
    let ordinary = pod(
        "web",
        json!({"containers": [{"name": "app", "image": "nginx:1.27"}]}),
    );
    assert_eq!(
        planner.plan(&ordinary, &HostState::default()).outcome,
        Outcome::Synced
    );
    let unmasked = pod(
        "web",
        json!({"containers": [{"name": "app", "image": "nginx:1.27",
                                "securityContext": {"procMount": "Unmasked"}}]}),
    );
    let plan = planner.plan(&unmasked, &HostState::default());
    assert!(
        plan.message.ends_with(
            "violates PodSecurity \"baseline:v1.34\": procMount (container \"app\" must not set \
             securityContext.procMount to \"Unmasked\")"
        ),
        "{}",
        plan.message
    );

    // The restricted level refuses node ports at admission; the built-in SyncPolicy refuses
    // them first, so a policy that syncs every Service shows the profile's own refusal.
    let tenant = tenant();
    let syncs_services = CompiledPolicy::from_yaml(
        &json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
                "metadata": {"name": "all"},
                "spec": {"rules": [{"name": "all", "action": "Sync", "reason": "All"}],
                         "default": {"action": "Skip", "reason": "None"}}})
        .to_string(),
    )
    .unwrap();
    let planner = Planner::new(&tenant, syncs_services).with_boundary(
        Boundary::compile(&tenant, &profile(json!({"level": "restricted"}))).unwrap(),
    );
    let service = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "admin", "namespace": "ops"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]}}))
    .unwrap();
    let plan = planner.plan(&service, &HostState::default());
    assert_eq!(plan.verdict.field_path.as_deref(), Some("spec.type"));
    assert!(
        plan.message.ends_with(
            "services \"admin-x-ops\" is forbidden: ValidatingAdmissionPolicy \
             'tenantplane-acme-no-node-ports' with binding 'tenantplane-acme-no-node-ports' denied \
             request: a tenant Service may not open ports on the host's nodes (type NodePort or \
             LoadBalancer)"
        ),
        "{}",
        plan.message
    );
    let config = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ops"}}))
    .unwrap();
    assert_eq!(
        planner.plan(&config, &HostState::default()).outcome,
        Outcome::Synced,
        "protect-managed judges who writes: the syncer is the writer it admits"
    );
}
