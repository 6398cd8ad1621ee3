//! Standard status conditions (`metav1.Condition`) used by the three resources.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The Tenant can be served: control plane reachable, isolation applied, sync running.
pub const READY: &str = "Ready";
/// The syncer reached the tenant's control plane with the referenced kubeconfig.
pub const CONTROL_PLANE_REACHABLE: &str = "ControlPlaneReachable";
/// The compiled IsolationProfile objects are present in the host namespace.
pub const ISOLATION_APPLIED: &str = "IsolationApplied";
/// Every tenant object has a current decision (none Deferred or Failed).
pub const SYNCED: &str = "Synced";
/// The SyncPolicy's Reject rules are enforced at admission in the tenant control plane (a
/// ValidatingAdmissionPolicy and binding per rule); False when the tenant control plane serves
/// no ValidatingAdmissionPolicy, and sync goes on with the host-side refusal only.
pub const TENANT_ADMISSION: &str = "TenantAdmission";
/// Synced pods reach the tenant API server: an endpoint they can use
/// (`spec.controlPlane.podEndpoint`, or the kubeconfig's server) and the CA that verifies it.
/// False with the reason when pods get no API access, or when the endpoint is used but pods on a
/// real host cannot reach it (a loopback address) or cannot verify it. Not part of Ready.
pub const POD_API_ACCESS: &str = "PodAPIAccess";
/// Synced pods resolve names with the tenant's DNS Service (`spec.dns`); False with the reason
/// when they keep the host's resolver. Not part of Ready.
pub const TENANT_DNS: &str = "TenantDNS";
/// Host objects tenantplane manages were edited or deleted on the host by someone else and are
/// left as they are (`spec.drift: Record`): True until each holds what tenantplane sets again.
/// Under `Revert` drift is corrected at once and this stays False. Not part of Ready.
pub const DRIFTED: &str = "Drifted";
/// A SyncPolicy or IsolationProfile was parsed, validated and compiled without error.
pub const ACCEPTED: &str = "Accepted";

/// Sets `type_` in `conditions` to the given state, keeping `lastTransitionTime` when the
/// status did not change (the Kubernetes convention).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Time,
) {
    let status = if status { "True" } else { "False" }.to_string();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message.to_string();
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation,
            last_transition_time: now,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut conds = Vec::new();
        set_condition(&mut conds, READY, true, "Ok", "fine", Some(1), at(10));
        set_condition(&mut conds, READY, true, "StillOk", "fine", Some(2), at(20));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, at(10));
        assert_eq!(conds[0].reason, "StillOk");
        set_condition(&mut conds, READY, false, "Broken", "no", Some(3), at(30));
        assert_eq!(conds[0].last_transition_time, at(30));
        assert_eq!(conds[0].status, "False");
    }
}
