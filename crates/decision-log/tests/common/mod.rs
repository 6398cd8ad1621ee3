//! Decisions to append in tests, the crash-test writer and the benchmark.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use k8s_openapi::jiff::Timestamp;
use tenantplane_core::decision::{
    Decision, HostAction, HostTarget, Outcome, PolicyRef, Subject, new_decision_id,
};

/// Decision number `i`: spread over `tenants` tenants and 1000 objects per tenant, outcomes
/// cycling through every value.
pub fn decision(i: u64, tenants: u64) -> Decision {
    let tenant = format!("tenant-{}", i % tenants);
    let object = (i / tenants) % 1000;
    let outcome = Outcome::ALL[(i % Outcome::ALL.len() as u64) as usize];
    Decision {
        id: new_decision_id(),
        time: Timestamp::now(),
        tenant: tenant.clone(),
        subject: Subject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "default".into(),
            name: format!("cm-{object}"),
            uid: format!("uid-{object}"),
            resource_version: i.to_string(),
        },
        target: Some(HostTarget {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: format!("tp-{tenant}"),
            name: format!("cm-{object}-x-default"),
        }),
        outcome,
        action: HostAction::Update,
        policy: Some(PolicyRef {
            name: "default".into(),
            revision: "sha256:0123456789abcdef".into(),
            rule: Some(format!("rule-{}", i % 3)),
        }),
        profile: None,
        reason: "RuleMatched".into(),
        message: format!("decision {i} for {tenant}"),
        field_path: None,
        stripped_keys: vec![],
        input_digest: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            .into(),
        mapping_version: "v1".into(),
        component: "tenantplane-syncer".into(),
        component_version: "0.1.0".into(),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        span_id: Some("00f067aa0ba902b7".into()),
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}

/// Decisions `from..from + n`.
pub fn decisions(from: u64, n: u64, tenants: u64) -> Vec<Decision> {
    (from..from + n).map(|i| decision(i, tenants)).collect()
}
