//! Server-side apply and field ownership (`metadata.managedFields`).
//!
//! Ownership is tracked per leaf path of the JSON object, in the `FieldsV1`
//! notation real servers use (`f:spec`, `k:{"name":"web"}` for keyed list
//! items, `.` for an owned list item). Lists are keyed ([`ListShape`]) by the
//! built-in merge keys [`merge_key`] knows (container/port/env/volume lists
//! and the like) for built-in kinds and for any `metadata`, and by
//! `x-kubernetes-list-type: map` / `x-kubernetes-list-map-keys` of the CRD
//! schema for custom resources; every other list is one atomic leaf.
//! Simplifications against the real structured-merge-diff: no
//! `x-kubernetes-list-type: set` (such lists are atomic), built-in lists have
//! single-field keys, and an empty map is a leaf.
//!
//! Apply: fields the applied configuration sets that another manager owns
//! with a different value are conflicts (409 with one cause per field) unless
//! `force=true`, which takes them over. Fields the manager applied before and
//! no longer applies are removed when no other manager owns them. Updates
//! (PUT, JSON/merge/strategic patches) give the updating manager the fields
//! whose values they changed, taking them away from other managers.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::storage::error::{ApiError, ApiResult};
use crate::storage::patch::merge_key;

/// A path in FieldsV1 tokens, e.g. `["f:spec", "f:containers", "k:{\"name\":\"a\"}", "f:image"]`.
type FieldPath = Vec<String>;
type FieldSet = BTreeSet<FieldPath>;

#[derive(Debug, Clone)]
struct ManagerEntry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

/// Metadata fields that take part in field ownership.
const OWNED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// Where the keys of keyed lists come from: the built-in merge keys, or the
/// node of a CRD's OpenAPI schema that describes the current value.
#[derive(Debug, Clone, Copy)]
pub enum ListShape<'a> {
    Builtin,
    Schema(Option<&'a Value>),
}

impl<'a> ListShape<'a> {
    /// The shape of a field of the current (object) value. A `metadata`
    /// field the schema does not describe is an ObjectMeta: built-in keys.
    fn field(self, name: &str) -> ListShape<'a> {
        match self {
            Self::Builtin => Self::Builtin,
            Self::Schema(node) => {
                let described = node.and_then(|n| {
                    n.pointer(&format!("/properties/{name}"))
                        .or_else(|| n.get("additionalProperties").filter(|a| a.is_object()))
                });
                match described {
                    None if name == "metadata" => Self::Builtin,
                    described => Self::Schema(described),
                }
            }
        }
    }

    /// The shape of the items of the current (list) value.
    fn items(self) -> ListShape<'a> {
        match self {
            Self::Builtin => Self::Builtin,
            Self::Schema(node) => Self::Schema(node.and_then(|n| n.get("items"))),
        }
    }

    /// The key fields of the current list, if it is keyed.
    fn list_keys(self, field: &str, items: &[Value]) -> Option<Vec<String>> {
        match self {
            Self::Builtin => {
                let refs: Vec<&Value> = items.iter().collect();
                merge_key(field, &refs).map(|k| vec![k.to_string()])
            }
            Self::Schema(node) => {
                let node = node?;
                if node.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
                    return None;
                }
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")?
                    .as_array()?
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect();
                (!keys.is_empty()).then_some(keys)
            }
        }
    }
}

/// The set of owned paths an object (or applied configuration) sets.
fn field_set(object: &Value, shape: ListShape<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    let Value::Object(map) = object else {
        return set;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                if let Value::Object(meta) = value {
                    for field in OWNED_METADATA {
                        if let Some(v) = meta.get(field) {
                            collect(
                                field,
                                v,
                                ListShape::Builtin,
                                &mut vec!["f:metadata".to_string()],
                                &mut set,
                            );
                        }
                    }
                }
            }
            _ => collect(key, value, shape.field(key), &mut Vec::new(), &mut set),
        }
    }
    set
}

/// The status paths an object sets (for writes through the status subresource).
fn status_field_set(object: &Value, shape: ListShape<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    if let Some(status) = object.get("status") {
        collect(
            "status",
            status,
            shape.field("status"),
            &mut Vec::new(),
            &mut set,
        );
    }
    set
}

/// `k:{...}` for a keyed list item; None when a key field is missing.
fn item_token(keys: &[String], item: &Value) -> Option<String> {
    let mut id = Map::new();
    for key in keys {
        id.insert(key.clone(), item.get(key)?.clone());
    }
    Some(format!("k:{}", Value::Object(id)))
}

fn same_key(keys: &[String], a: &Value, b: &Value) -> bool {
    keys.iter()
        .all(|k| a.get(k).is_some() && a.get(k) == b.get(k))
}

/// Collects the owned paths under `field`, whose value has the given shape.
fn collect(
    field: &str,
    value: &Value,
    shape: ListShape<'_>,
    prefix: &mut FieldPath,
    set: &mut FieldSet,
) {
    prefix.push(format!("f:{field}"));
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                collect(k, v, shape.field(k), prefix, set);
            }
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
            match shape.list_keys(field, items) {
                Some(keys) => {
                    let item_shape = shape.items();
                    for item in items {
                        let Some(token) = item_token(&keys, item) else {
                            continue;
                        };
                        prefix.push(token);
                        set.insert(prefix.clone());
                        if let Value::Object(fields) = item {
                            for (k, v) in fields {
                                collect(k, v, item_shape.field(k), prefix, set);
                            }
                        }
                        prefix.pop();
                    }
                }
                None => {
                    set.insert(prefix.clone());
                }
            }
        }
        _ => {
            set.insert(prefix.clone());
        }
    }
    prefix.pop();
}

/// Follows a path into an object.
fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for token in path {
        current = step(current, token)?;
    }
    Some(current)
}

fn parse_key_token(token: &str) -> Option<Map<String, Value>> {
    serde_json::from_str(token.strip_prefix("k:")?).ok()
}

fn step<'a>(value: &'a Value, token: &str) -> Option<&'a Value> {
    if let Some(field) = token.strip_prefix("f:") {
        value.get(field)
    } else {
        let key = parse_key_token(token)?;
        value
            .as_array()?
            .iter()
            .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
    }
}

/// Removes the value at a path, if present.
fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut parent = object;
    for token in parent_path {
        let next = if let Some(field) = token.strip_prefix("f:") {
            parent.get_mut(field)
        } else {
            let Some(key) = parse_key_token(token) else {
                return;
            };
            parent.as_array_mut().and_then(|items| {
                items
                    .iter_mut()
                    .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
            })
        };
        match next {
            Some(next) => parent = next,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Value::Object(map) = parent {
            map.remove(field);
        }
    } else if let (Some(key), Value::Array(items)) = (parse_key_token(last), parent) {
        items.retain(|item| !key.iter().all(|(k, v)| item.get(k) == Some(v)));
    }
}

/// Whether a leaf path is the key field of the keyed list item it sits in.
fn is_item_key_field(path: &[String]) -> bool {
    let [.., parent, last] = path else {
        return false;
    };
    match (parse_key_token(parent), last.strip_prefix("f:")) {
        (Some(key), Some(field)) => key.contains_key(field),
        _ => false,
    }
}

/// Renders a field set as a FieldsV1 tree.
fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        insert_path(&mut root, path);
    }
    Value::Object(root)
}

fn insert_path(node: &mut Map<String, Value>, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let child = node
        .entry(first.clone())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(child) = child {
        if !rest.is_empty() {
            insert_path(child, rest);
        } else if first.starts_with("k:") {
            child.insert(".".into(), Value::Object(Map::new()));
        }
    }
}

fn from_fields_v1(tree: &Value, prefix: &mut FieldPath, set: &mut FieldSet) {
    let Value::Object(map) = tree else {
        return;
    };
    if map.is_empty() && !prefix.is_empty() {
        set.insert(prefix.clone());
        return;
    }
    for (token, child) in map {
        if token == "." {
            set.insert(prefix.clone());
            continue;
        }
        prefix.push(token.clone());
        from_fields_v1(child, prefix, set);
        prefix.pop();
    }
}

fn read_entries(object: &Value) -> Vec<ManagerEntry> {
    let Some(entries) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let mut fields = FieldSet::new();
            if let Some(tree) = e.get("fieldsV1") {
                from_fields_v1(tree, &mut Vec::new(), &mut fields);
            }
            ManagerEntry {
                manager: text("manager"),
                operation: text("operation"),
                api_version: text("apiVersion"),
                time: text("time"),
                subresource: e
                    .get("subresource")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                fields,
            }
        })
        .collect()
}

fn write_entries(object: &mut Value, entries: Vec<ManagerEntry>) {
    let rendered: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(sub) = e.subresource {
                v["subresource"] = json!(sub);
            }
            v
        })
        .collect();
    if rendered.is_empty() {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    } else if let Value::Object(map) = object {
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        meta["managedFields"] = Value::Array(rendered);
    }
}

fn path_text(path: &[String]) -> String {
    path.iter()
        .map(|t| match t.strip_prefix("f:") {
            Some(field) => format!(".{field}"),
            None => format!("[{}]", t.trim_start_matches("k:")),
        })
        .collect()
}

/// Deep merge used by apply: maps merge, keyed lists merge by key, other
/// values (and atomic lists) are replaced.
fn merge_applied(target: &mut Value, applied: &Value, field: &str, shape: ListShape<'_>) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) if !v.is_null() => merge_applied(existing, v, k, shape.field(k)),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(t), Value::Array(a)) if a.iter().all(Value::is_object) => {
            match shape.list_keys(field, a) {
                Some(keys) => {
                    for item in a {
                        match t.iter_mut().find(|o| same_key(&keys, item, o)) {
                            Some(existing) => merge_applied(existing, item, "", shape.items()),
                            None => t.push(item.clone()),
                        }
                    }
                }
                None => *t = a.clone(),
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// Who is writing and when: recorded in managedFields.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
}

/// Server-side apply of `applied` onto `current` (None when creating).
/// Returns the merged object with updated managedFields; the caller fills in
/// server-owned metadata.
pub fn server_side_apply(
    current: Option<&Value>,
    applied: &Value,
    writer: &Writer<'_>,
    shape: ListShape<'_>,
    force: bool,
) -> ApiResult<Value> {
    let empty = json!({});
    let base = current.unwrap_or(&empty);
    let mut entries = read_entries(base);
    let new_set = field_set(applied, shape);

    let mut conflicts = Vec::new();
    for entry in &entries {
        if entry.manager == writer.manager && entry.operation == "Apply" {
            continue;
        }
        for path in entry.fields.intersection(&new_set) {
            if path.last().is_some_and(|t| t.starts_with("k:")) {
                continue;
            }
            if value_at(base, path) != value_at(applied, path) {
                conflicts.push((entry.manager.clone(), path.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(ApiError::apply_conflict(
                conflicts
                    .into_iter()
                    .map(|(m, p)| (m, path_text(&p)))
                    .collect(),
            ));
        }
        for (manager, path) in &conflicts {
            for entry in entries.iter_mut().filter(|e| &e.manager == manager) {
                entry.fields.remove(path);
            }
        }
    }

    let previous = entries
        .iter()
        .position(|e| e.manager == writer.manager && e.operation == "Apply");
    let previous_set = previous
        .map(|i| entries[i].fields.clone())
        .unwrap_or_default();
    let mut object = base.clone();
    let owned_by_others = |path: &FieldPath| {
        entries
            .iter()
            .enumerate()
            .any(|(i, e)| Some(i) != previous && e.fields.iter().any(|p| p.starts_with(path)))
    };
    let mut removed: Vec<&FieldPath> = previous_set
        .difference(&new_set)
        .filter(|p| !owned_by_others(p) && !is_item_key_field(p))
        .collect();
    removed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in removed {
        remove_at(&mut object, path);
    }
    merge_applied(&mut object, applied, "", shape);

    let entry = ManagerEntry {
        manager: writer.manager.to_string(),
        operation: "Apply".into(),
        api_version: writer.api_version.to_string(),
        time: writer.time.to_string(),
        subresource: None,
        fields: new_set,
    };
    match previous {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    write_entries(&mut object, entries);
    Ok(object)
}

/// Records a non-apply write (create, update, patch): the writer takes the
/// fields whose values it set or changed; fields that no longer exist leave
/// every manager. `status_only` restricts tracking to `status` (the status
/// subresource).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    writer: &Writer<'_>,
    shape: ListShape<'_>,
    status_only: bool,
) {
    let empty = json!({});
    let old = old.unwrap_or(&empty);
    let mut entries = read_entries(old);
    let (new_set, old_set) = if status_only {
        (status_field_set(new, shape), status_field_set(old, shape))
    } else {
        (field_set(new, shape), field_set(old, shape))
    };
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || value_at(old, p) != value_at(new, p))
        .cloned()
        .collect();
    let subresource = status_only.then(|| "status".to_string());
    for entry in &mut entries {
        if entry.subresource != subresource {
            continue;
        }
        entry
            .fields
            .retain(|p| new_set.contains(p) && !changed.contains(p));
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == writer.manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.time = writer.time.to_string();
            }
            None => entries.push(ManagerEntry {
                manager: writer.manager.to_string(),
                operation: "Update".into(),
                api_version: writer.api_version.to_string(),
                time: writer.time.to_string(),
                subresource,
                fields: changed,
            }),
        }
    }
    write_entries(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            api_version: "v1",
            time: "2024-01-01T00:00:00Z",
        }
    }

    #[test]
    fn apply_conflicts_with_other_manager_and_force_takes_over() {
        let first = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let obj =
            server_side_apply(None, &first, &writer("one"), ListShape::Builtin, false).unwrap();
        let second = json!({"metadata": {"name": "c"}, "data": {"a": "9"}});
        let err = server_side_apply(
            Some(&obj),
            &second,
            &writer("two"),
            ListShape::Builtin,
            false,
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(err.details.unwrap().causes[0].field, ".data.a");
        let forced = server_side_apply(
            Some(&obj),
            &second,
            &writer("two"),
            ListShape::Builtin,
            true,
        )
        .unwrap();
        assert_eq!(forced["data"], json!({"a": "9", "b": "2"}));
        let managers: Vec<&str> = forced["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["one", "two"]);
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying() {
        let first = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let obj = server_side_apply(None, &first, &writer("m"), ListShape::Builtin, false).unwrap();
        let second = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        let obj = server_side_apply(Some(&obj), &second, &writer("m"), ListShape::Builtin, false)
            .unwrap();
        assert_eq!(
            obj["spec"]["containers"],
            json!([{"name": "a", "image": "x"}])
        );
        let tree = &obj["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(
            tree["f:spec"]["f:containers"]["k:{\"name\":\"a\"}"],
            json!({".": {}, "f:name": {}, "f:image": {}})
        );
    }

    #[test]
    fn update_takes_ownership_of_changed_fields() {
        let first = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let applied =
            server_side_apply(None, &first, &writer("applier"), ListShape::Builtin, false).unwrap();
        let mut updated = applied.clone();
        updated["data"]["a"] = json!("2");
        record_update(
            Some(&applied),
            &mut updated,
            &writer("editor"),
            ListShape::Builtin,
            false,
        );
        let again = server_side_apply(
            Some(&updated),
            &first,
            &writer("applier"),
            ListShape::Builtin,
            false,
        )
        .unwrap_err();
        assert_eq!(
            again.details.unwrap().causes[0].message,
            "conflict with \"editor\""
        );
    }

    #[test]
    fn custom_resource_lists_are_keyed_by_the_schema() {
        let schema = json!({"properties": {"spec": {"properties": {"ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "protocol"],
            "items": {"type": "object"}
        }, "tags": {"type": "array", "items": {"type": "object"}}}}}});
        let shape = ListShape::Schema(Some(&schema));
        let first = json!({"spec": {"ports": [{"name": "a", "protocol": "TCP", "port": 1}], "tags": [{"t": 1}]}});
        let obj = server_side_apply(None, &first, &writer("one"), shape, false).unwrap();
        let second = json!({"spec": {"ports": [{"name": "b", "protocol": "TCP", "port": 2}], "tags": [{"t": 2}]}});
        let obj = server_side_apply(Some(&obj), &second, &writer("two"), shape, true).unwrap();
        assert_eq!(
            obj["spec"]["ports"],
            json!([{"name": "a", "protocol": "TCP", "port": 1}, {"name": "b", "protocol": "TCP", "port": 2}]),
            "items of a list-type map merge by key"
        );
        assert_eq!(
            obj["spec"]["tags"],
            json!([{"t": 2}]),
            "other lists are atomic"
        );
    }
}
