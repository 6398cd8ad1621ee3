//! The authorization reviews of `authorization.k8s.io/v1` (SelfSubjectAccessReview,
//! SelfSubjectRulesReview, SubjectAccessReview, LocalSubjectAccessReview): create-only
//! resources answered on the spot and never stored. The server authorizes nothing, so
//! every review allows everything and says why in `status.reason` (`kubectl auth can-i`
//! prints `yes`; `kubectl auth can-i --list` lists `*.*` with every verb).

use serde_json::{Value, json};

use crate::storage::error::{ApiError, ApiResult};
use crate::storage::resources::ResourceType;
use crate::storage::store::check_type_meta;

/// What every access review answers in `status.reason`.
pub const REASON: &str =
    "tenantplane-local-apiserver has no authorization: every request is allowed";

/// The answered review: the request with its `status` filled in.
pub fn answer(rt: &ResourceType, namespace: &str, mut review: Value) -> ApiResult<Value> {
    let name = review
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let invalid =
        |field: &str, message: &str| ApiError::invalid(&rt.group, &rt.kind, &name, field, message);
    check_type_meta(&review, &rt.api_version(), &rt.kind)?;
    let Some(object) = review.as_object_mut() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    object.insert("apiVersion".into(), json!(rt.api_version()));
    object.insert("kind".into(), json!(rt.kind));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    if rt.namespaced
        && let Some(metadata) = metadata.as_object_mut()
    {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let status = if rt.kind == "SelfSubjectRulesReview" {
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        })
    } else {
        let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
        let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
        if resource.is_some() == non_resource.is_some() {
            return Err(invalid(
                "spec.resourceAttributes",
                "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        if rt.kind == "LocalSubjectAccessReview"
            && let Some(ns) = resource
                .and_then(|r| r.get("namespace"))
                .and_then(Value::as_str)
            && ns != namespace
        {
            return Err(invalid(
                "spec.resourceAttributes.namespace",
                "Invalid value: must be the same namespace as the request",
            ));
        }
        json!({"allowed": true, "reason": REASON})
    };
    object.insert("status".into(), status);
    Ok(review)
}
