//! The shapes of the ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding specs
//! tenantplane compiles: for the host (an IsolationProfile's admission rules) and for a tenant
//! control plane (a SyncPolicy's Reject rules). One place, so both ends write the same shape.

use serde_json::{Value, json};

/// The API version of both kinds.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";
/// The policy kind.
pub const POLICY_KIND: &str = "ValidatingAdmissionPolicy";
/// The binding kind.
pub const BINDING_KIND: &str = "ValidatingAdmissionPolicyBinding";

/// One validation of a policy: a CEL expression that must hold for the request to be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// CEL over `object`, `oldObject`, `request`; false refuses.
    pub expression: String,
    /// The message of a refusal (one line).
    pub message: String,
    /// `Forbidden`, `Invalid`, `Unauthorized` or `RequestEntityTooLarge`.
    pub reason: &'static str,
}

/// A policy spec that fails closed (`failurePolicy: Fail`): `match_constraints` as given,
/// `match_conditions` as (name, expression) pairs, and the validations.
pub fn policy_spec(
    match_constraints: Value,
    match_conditions: &[(String, String)],
    validations: &[Validation],
) -> Value {
    let mut spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": match_constraints,
        "validations": validations.iter().map(|v| {
            json!({ "expression": v.expression, "message": v.message, "reason": v.reason })
        }).collect::<Vec<_>>(),
    });
    if !match_conditions.is_empty() {
        spec["matchConditions"] = match_conditions
            .iter()
            .map(|(name, expression)| json!({ "name": name, "expression": expression }))
            .collect();
    }
    spec
}

/// A binding spec of `policy` with `actions` (`Deny`, `Warn`, `Audit`), restricted by
/// `match_resources` when given.
pub fn binding_spec(policy: &str, actions: &[&str], match_resources: Option<Value>) -> Value {
    let mut spec = json!({ "policyName": policy, "validationActions": actions });
    if let Some(m) = match_resources {
        spec["matchResources"] = m;
    }
    spec
}
