//! What the unit tests of several modules share: a decision to record.

use tenantplane_core::decision::{Decision, HostAction, HostTarget, Outcome, Subject};

use crate::record::COMPONENT;

/// A decision `id` with `outcome` and `reason` about the tenant ConfigMap `web/cfg` of tenant
/// `acme`, its host object `tenant-acme/cfg-x-web` (created when Synced).
pub(crate) fn decision(id: &str, outcome: Outcome, reason: &str) -> Decision {
    Decision {
        id: id.into(),
        time: k8s_openapi::jiff::Timestamp::now(),
        tenant: "acme".into(),
        subject: Subject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "web".into(),
            name: "cfg".into(),
            uid: "u".into(),
            resource_version: "1".into(),
        },
        target: Some(HostTarget {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "tenant-acme".into(),
            name: "cfg-x-web".into(),
        }),
        outcome,
        action: if outcome == Outcome::Synced {
            HostAction::Create
        } else {
            HostAction::None
        },
        policy: None,
        profile: None,
        reason: reason.into(),
        message: "m".into(),
        field_path: None,
        stripped_keys: vec![],
        input_digest: String::new(),
        mapping_version: "v1".into(),
        component: COMPONENT.into(),
        component_version: "0".into(),
        trace_id: None,
        span_id: None,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}
