//! Pod Security admission, as kube-apiserver's PodSecurity plugin enforces it: a pod created in a
//! namespace labelled `pod-security.kubernetes.io/enforce` (and `-version`) is refused when it
//! fails a check of that level of the Pod Security Standards, with kube-apiserver's Status
//! (`pods "<name>" is forbidden: violates PodSecurity "<level>:<version>": ...`, 403, no causes).
//! The checks are tenantplane's port of Kubernetes' own (`tenantplane_core::pod_security`), which
//! the differential test (`tests/pod_security_differential.rs`) holds against a real
//! kube-apiserver.
//!
//! Not served: the audit and warn modes (no audit annotation, no warning header), exemptions,
//! the re-evaluation of a pod whose image changes on update, pod controllers (their templates
//! only ever warn), and the checks of existing pods when a namespace's labels change.

use std::collections::BTreeMap;

use serde_json::Value;
use tenantplane_core::pod_security::{LevelVersion, PodSecurityRefusal};

use crate::admission::request::Request;
use crate::storage::error::{ApiError, ApiResult};

/// Refuses the creation of a pod its namespace's enforced level refuses.
pub fn admit(request: &Request<'_>) -> ApiResult<()> {
    let is_pod = request.rt.group.is_empty() && request.rt.plural == "pods";
    if !is_pod || request.operation != "CREATE" {
        return Ok(());
    }
    let labels: BTreeMap<String, String> = request
        .namespace_object
        .and_then(|ns| ns.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    let enforced = LevelVersion::enforced_by_labels(&labels);
    let findings = enforced.evaluate(request.object);
    if findings.is_empty() {
        return Ok(());
    }
    let refusal = PodSecurityRefusal { enforced, findings };
    Err(ApiError::forbidden(refusal.message(request.name)).with_details("", "pods", request.name))
}
