//! The four PATCH flavours: JSON patch (RFC 6902) and JSON merge patch
//! (RFC 7386) through the `json-patch` crate, and a strategic merge patch
//! for built-in kinds implemented here over the merge keys the built-ins
//! use. Server-side apply shares [`merge_key`] for its keyed lists.
//!
//! Strategic merge subset: maps merge recursively (`null` deletes a key,
//! `$patch: replace` / `$patch: delete` on maps, `$retainKeys`); lists of
//! objects with a known merge key merge item by item (`$patch: delete` on an
//! item, `$patch: replace` on the list); `finalizers` merge as a set
//! (`$deleteFromPrimitiveList/finalizers`); every other list is replaced.
//! `$setElementOrder` directives are accepted and only affect ordering, which
//! this server leaves as merged.

use serde_json::{Map, Value};

use crate::storage::error::{ApiError, ApiResult};

/// The PATCH content types the server understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchKind {
    /// Maps a request `Content-Type` to a patch kind.
    pub fn from_content_type(content_type: &str) -> ApiResult<Self> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// The merge key of a list field of a built-in kind, looked up by field name
/// (and, for `ports`, by which key the items carry).
pub fn merge_key(field: &str, items: &[&Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "secrets"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "ports" => {
            if items.iter().all(|i| i.get("containerPort").is_some()) {
                "containerPort"
            } else if items.iter().all(|i| i.get("port").is_some()) {
                "port"
            } else {
                return None;
            }
        }
        _ => return None,
    })
}

/// Lists of scalars that merge as sets.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

/// Applies a patch of `kind` (not `Apply`) to `target`.
pub fn apply_patch(
    kind: PatchKind,
    target: &mut Value,
    patch: &Value,
    custom: bool,
) -> ApiResult<()> {
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(target, &ops).map_err(|e| {
                ApiError::invalid(
                    "",
                    "",
                    "",
                    "patch",
                    &format!("the JSON patch could not be applied: {e}"),
                )
            })
        }
        PatchKind::Merge => {
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchKind::Strategic if custom => Err(ApiError::unsupported_media_type(
            "application/strategic-merge-patch+json is not supported for custom resources",
        )),
        PatchKind::Strategic => {
            let merged = strategic_merge(Some(target), patch)?;
            *target = merged.unwrap_or(Value::Null);
            Ok(())
        }
        PatchKind::Apply => Err(ApiError::internal(
            "apply patches go through server-side apply",
        )),
    }
}

/// Strategic merge of a patch value into an original; `None` means "delete".
fn strategic_merge(original: Option<&Value>, patch: &Value) -> ApiResult<Option<Value>> {
    let Value::Object(patch_map) = patch else {
        return Ok(Some(patch.clone()));
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut replaced = patch_map.clone();
            replaced.remove("$patch");
            return Ok(Some(Value::Object(replaced)));
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive $patch: {other}"
            )));
        }
    }
    let mut result = match original {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch_map {
        if key == "$patch" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if key == "$retainKeys" {
            let keep: Vec<&str> = value
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            result.retain(|k, _| keep.contains(&k.as_str()) || patch_map.contains_key(k));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) =
                (result.get_mut(field), value.as_array())
            {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "unsupported strategic merge patch directive {key}"
            )));
        }
        if value.is_null() {
            result.remove(key);
            continue;
        }
        let merged = match (result.get(key), value) {
            (Some(Value::Array(orig)), Value::Array(items)) => Some(merge_list(key, orig, items)?),
            (None, Value::Array(items)) => Some(merge_list(key, &[], items)?),
            (orig, Value::Object(_)) => strategic_merge(orig, value)?,
            (_, other) => Some(other.clone()),
        };
        match merged {
            Some(v) => {
                result.insert(key.clone(), v);
            }
            None => {
                result.remove(key);
            }
        }
    }
    Ok(Some(Value::Object(result)))
}

fn merge_list(field: &str, original: &[Value], patch: &[Value]) -> ApiResult<Value> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let items = patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(Value::Array(items));
    }
    if is_set_list(field) {
        let mut items = original.to_vec();
        for item in patch {
            if !items.contains(item) {
                items.push(item.clone());
            }
        }
        return Ok(Value::Array(element_order(items, patch, original, None)));
    }
    let patch_objects: Vec<&Value> = patch.iter().collect();
    let all_objects = patch.iter().all(Value::is_object);
    let key = if all_objects {
        merge_key(field, &patch_objects)
    } else {
        None
    };
    let Some(key) = key else {
        let cleaned = patch.iter().filter(|i| i.get("$patch").is_none()).cloned();
        return Ok(Value::Array(cleaned.collect()));
    };
    let mut items: Vec<Value> = original.to_vec();
    for item in patch {
        let id = item.get(key);
        let position = items.iter().position(|o| o.get(key) == id && id.is_some());
        match (
            position,
            strategic_merge(position.map(|p| &items[p]), item)?,
        ) {
            (Some(p), Some(merged)) => items[p] = merged,
            (Some(p), None) => {
                items.remove(p);
            }
            (None, Some(merged)) => items.push(merged),
            (None, None) => {}
        }
    }
    Ok(Value::Array(element_order(
        items,
        patch,
        original,
        Some(key),
    )))
}

/// The order of a merged list, as the API server's `normalizeElementOrder`
/// sets it: the items the patch names, in patch order, merged with the
/// items only the server had, in their original order; a server-only item
/// goes first only when both it and the next patch item were in the
/// original and it came first there. (So a new item named alone lands
/// before the existing ones.)
fn element_order(
    merged: Vec<Value>,
    patch: &[Value],
    original: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let id = |item: &Value| -> Option<Value> {
        match key {
            Some(key) => item.get(key).cloned(),
            None => Some(item.clone()),
        }
    };
    let patch_ids: Vec<Value> = patch.iter().filter_map(id).collect();
    let server_order: Vec<Value> = original.iter().filter_map(id).collect();
    let (mut named, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| id(item).is_some_and(|i| patch_ids.contains(&i)));
    named.sort_by_key(|item| id(item).and_then(|i| patch_ids.iter().position(|p| *p == i)));
    let position = |item: &Value| id(item).and_then(|i| server_order.iter().position(|o| *o == i));
    let mut ordered = Vec::with_capacity(named.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        named.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((position(l), position(r)), (Some(a), Some(b)) if a < b),
        };
        let next = if take_left { left.next() } else { right.next() };
        ordered.extend(next);
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_keeps_other_containers_and_deletes_by_directive() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"},
            {"name": "b", "image": "b:1", "env": [{"name": "X", "value": "1"}]}
        ]}, "metadata": {"finalizers": ["f1"], "labels": {"x": "1", "y": "2"}}});
        let patch = json!({
            "spec": {"containers": [
                {"name": "b", "image": "b:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "a", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]},
            "metadata": {"finalizers": ["f2"], "labels": {"x": null}}
        });
        apply_patch(PatchKind::Strategic, &mut pod, &patch, false).unwrap();
        // Items the patch names come first (patch order), as the API server orders them.
        assert_eq!(
            pod,
            json!({"spec": {"containers": [
                {"name": "b", "image": "b:2", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]},
                {"name": "c", "image": "c:1"}
            ]}, "metadata": {"finalizers": ["f2", "f1"], "labels": {"y": "2"}}})
        );
    }

    #[test]
    fn strategic_merge_replace_directive_on_map() {
        let mut obj = json!({"data": {"a": "1", "b": "2"}});
        let patch = json!({"data": {"$patch": "replace", "c": "3"}});
        apply_patch(PatchKind::Strategic, &mut obj, &patch, false).unwrap();
        assert_eq!(obj, json!({"data": {"c": "3"}}));
    }

    #[test]
    fn strategic_merge_is_refused_for_custom_resources() {
        let mut obj = json!({});
        let err = apply_patch(PatchKind::Strategic, &mut obj, &json!({}), true).unwrap_err();
        assert_eq!(err.code, 415);
    }
}
