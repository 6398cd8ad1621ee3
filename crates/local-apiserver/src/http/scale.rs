//! The `scale` subresource of Deployments, ReplicaSets and StatefulSets: an
//! `autoscaling/v1` Scale read from and written to the object's `spec.replicas`, as
//! `kubectl scale` and `kubectl autoscale` expect it. Nothing acts on the new replica
//! count (there are no controllers); `status.replicas` is whatever the object's status says.

use serde_json::{Value, json};

use crate::storage::error::{ApiError, ApiResult};
use crate::storage::patch::{PatchKind, apply_patch};
use crate::storage::resources::ResourceType;
use crate::storage::store::{Store, WriteOptions};

/// Whether a resource has the scale subresource.
pub fn has_scale(rt: &ResourceType) -> bool {
    !rt.custom
        && rt.group == "apps"
        && matches!(
            rt.plural.as_str(),
            "deployments" | "replicasets" | "statefulsets"
        )
}

/// What a scale request does.
#[derive(Debug)]
pub enum Request<'a> {
    Get,
    /// PUT of a whole Scale.
    Update(Value),
    /// PATCH of the Scale.
    Patch(PatchKind, &'a [u8]),
}

/// Serves `GET`, `PUT` and `PATCH` on `.../{name}/scale`.
pub fn serve(
    store: &Store,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    request: Request<'_>,
    write: &WriteOptions,
) -> ApiResult<Value> {
    let object = store.get(rt, namespace, name)?;
    let current = scale_of(&object);
    let wanted = match request {
        Request::Get => return Ok(current),
        Request::Update(scale) => scale,
        Request::Patch(PatchKind::Apply, _) => {
            return Err(ApiError::unsupported_media_type(
                "application/apply-patch+yaml (not served for scale by this local test server)",
            ));
        }
        Request::Patch(kind, body) => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
            let mut scale = current.clone();
            apply_patch(kind, &mut scale, &patch, false)?;
            scale
        }
    };
    let replicas = match wanted.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(value) => value
            .as_i64()
            .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    "spec.replicas",
                    &format!("Invalid value: {value}: must be greater than or equal to 0"),
                )
            })?,
    };
    let mut patch = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    let patched = store.patch(rt, namespace, name, PatchKind::Merge, &patch, false, write)?;
    Ok(scale_of(&patched.object))
}

/// The Scale of an object.
fn scale_of(object: &Value) -> Value {
    let meta = |field: &str| object.pointer(&format!("/metadata/{field}")).cloned();
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = meta(field) {
            metadata.insert(field.into(), value);
        }
    }
    let mut spec = json!({});
    if let Some(replicas) = object
        .pointer("/spec/replicas")
        .filter(|r| r.as_i64().is_some_and(|n| n != 0))
    {
        spec["replicas"] = replicas.clone();
    }
    let mut status = json!({
        "replicas": object.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
    });
    let selector = object
        .pointer("/spec/selector")
        .map(selector_string)
        .unwrap_or_default();
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// A LabelSelector in the string form of `?labelSelector=` (`app=web,tier in (a,b)`).
fn selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            parts.push(format!("{key}={}", value.as_str().unwrap_or_default()));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match expression.get("operator").and_then(Value::as_str) {
            Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
            Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
            Some("Exists") => parts.push(key.to_string()),
            Some("DoesNotExist") => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_as_label_selector_strings() {
        let selector = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        });
        assert_eq!(selector_string(&selector), "app=web,tier in (a,b),!canary");
    }
}
