//! Deferral: what cannot be decided yet, because what the decision needs does not answer. A
//! tenant object whose batch the planner could not plan, and an API group of the tenant control
//! plane whose discovery failed (none of its kinds is watched): each a Deferred decision,
//! nothing guessed and nothing written, decided again when it answers.

use tenantplane_api::Tenant;
use tenantplane_core::decision::{Decision, HostAction, Outcome, PolicyRef, Stamp, Subject};
use tenantplane_core::mapping::TenantPlacement;
use tenantplane_core::{CompiledPolicy, TenantObject};

use crate::discovery::UnavailableGroup;
use crate::planner::PlanError;

/// The decision about a tenant object that could not be planned (`error`: the planner is
/// unavailable, or refused the request): nothing is guessed and nothing is written; the object
/// is retried with backoff.
pub fn unplanned(
    tenant: &TenantPlacement,
    object: &TenantObject,
    error: &PlanError,
    stamp: Stamp,
) -> Decision {
    let id = &object.identity;
    Decision {
        id: stamp.id,
        time: stamp.time,
        tenant: tenant.tenant.clone(),
        subject: Subject {
            api_version: id.api_version.clone(),
            kind: id.kind.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            uid: id.uid.clone(),
            resource_version: object.resource_version.clone().unwrap_or_default(),
        },
        target: None,
        outcome: Outcome::Deferred,
        action: HostAction::None,
        policy: None,
        profile: None,
        reason: error.reason().into(),
        message: format!("{error}; retried with backoff, nothing guessed"),
        field_path: None,
        stripped_keys: Vec::new(),
        input_digest: tenantplane_core::planner::input_digest(&object.object),
        mapping_version: tenant.mapping.to_string(),
        component: stamp.component,
        component_version: stamp.component_version,
        trace_id: stamp.trace_id,
        span_id: stamp.span_id,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}

/// The decision that `group`, a group version of `tenant`'s control plane that `policy` may sync
/// from, did not answer its discovery: its subject is the group version's APIService in the
/// tenant control plane; nothing of the group is synced until its discovery answers.
pub fn api_group_unavailable(
    group: &UnavailableGroup,
    tenant: &Tenant,
    policy: &CompiledPolicy,
    stamp: Stamp,
) -> Decision {
    Decision {
        id: stamp.id,
        time: stamp.time,
        tenant: tenant.name().to_string(),
        subject: Subject {
            api_version: "apiregistration.k8s.io/v1".into(),
            kind: "APIService".into(),
            namespace: String::new(),
            name: group.api_service(),
            uid: String::new(),
            resource_version: String::new(),
        },
        target: None,
        outcome: Outcome::Deferred,
        action: HostAction::None,
        policy: Some(PolicyRef {
            name: policy.name().to_string(),
            revision: policy.revision().to_string(),
            rule: None,
        }),
        profile: None,
        reason: "APIGroupUnavailable".into(),
        message: format!(
            "the tenant control plane's discovery of {} failed, so none of its kinds is synced \
             until it answers (the other groups are): {}",
            group.group_version(),
            group.error
        ),
        field_path: None,
        stripped_keys: Vec::new(),
        input_digest: group.digest(),
        mapping_version: tenant.mapping_version().to_string(),
        component: stamp.component,
        component_version: stamp.component_version,
        trace_id: stamp.trace_id,
        span_id: stamp.span_id,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::{cm, stamp, tenant};

    #[test]
    fn an_object_the_planner_could_not_plan_is_deferred_with_its_reason() {
        let d = unplanned(
            &tenant(),
            &cm("a"),
            &PlanError::Unavailable("connection refused".into()),
            stamp(),
        );
        assert_eq!(
            (d.outcome, d.action, d.reason.as_str()),
            (Outcome::Deferred, HostAction::None, "PlannerUnavailable")
        );
        assert_eq!(
            d.message,
            "planner unavailable: connection refused; retried with backoff, nothing guessed"
        );
        assert_eq!(d.subject.resource_version, "3");
        assert_eq!(d.target, None);
    }

    #[test]
    fn an_unavailable_group_is_a_deferred_decision_about_its_api_service() {
        let group = UnavailableGroup {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            error: "ServiceUnavailable (503)".into(),
        };
        let d = api_group_unavailable(
            &group,
            &Tenant::new("acme", Default::default()),
            &CompiledPolicy::builtin_default(),
            stamp(),
        );
        assert_eq!(d.outcome, Outcome::Deferred);
        assert_eq!(d.reason, "APIGroupUnavailable");
        assert_eq!(d.subject.kind, "APIService");
        assert_eq!(d.subject.name, "v1beta1.metrics.k8s.io");
        assert!(
            d.message.contains("metrics.k8s.io/v1beta1"),
            "{}",
            d.message
        );
        assert!(
            d.message.contains("ServiceUnavailable (503)"),
            "{}",
            d.message
        );
        assert_eq!(d.input_digest, group.digest());
    }
}
