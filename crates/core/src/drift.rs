//! Drift: a host object tenantplane manages that no longer holds what tenantplane set, and who
//! changed it as far as the host shows.
//!
//! ```text
//!  desired (translate::to_host) ──┐
//!                                 ├─▶ the fields tenantplane sets ──▶ changed by another manager? ─▶ Changed (by M)
//!  live host object ──────────────┤                                   gone from the live object?  ─▶ Removed
//!   (with its managedFields)      └─▶ a tenant content map (data) ──▶ a key the tenant never set? ─▶ Added (by M)
//! ```
//!
//! One rule decides both what is drift and who did it: the fields tenantplane sets are those of
//! the desired host object (its labels and annotations by key, every leaf of its body; for a
//! Pod only what an update may change, [`translate::pod_update`]); the content maps of a
//! ConfigMap or Secret are the tenant's as a whole. A field another field manager owns in the
//! live object's `managedFields` with a value other than the desired one was changed by that
//! manager (the host moves a field's ownership to whoever changes its value); a field that is
//! gone was removed (a removal leaves no owner: the host does not say who); a key in a content
//! map that the tenant did not set was added, by its owner when it has one. What other managers
//! add elsewhere (a label, a sidecar's fields, defaults, status) is theirs and not drift, and a
//! value tenantplane still owns is not drift even when the host normalised it (`1000m` read
//! back as `1`).
//!
//! Pure: the syncer calls it on each host object it reads back, `explain-sync --host` on the
//! host objects it is given.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use k8s_openapi::jiff::Timestamp;

use crate::translate;
use tenantplane_api::tenant::DriftPolicy;

/// The field manager of every write tenantplane's syncer makes: a field it owns in an object's
/// `managedFields` is one it set.
pub const FIELD_MANAGER: &str = "tenantplane-syncer";

/// What happened to a managed host object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DriftChange {
    /// Fields tenantplane sets were changed or removed, or the tenant's content added to.
    Edited,
    /// The host object was deleted while its source still wants it.
    Deleted,
    /// Provenance labels or annotations tenantplane sets were removed or changed.
    ProvenanceRemoved,
}

impl DriftChange {
    /// The reason of the Drifted decision.
    pub fn reason(self) -> &'static str {
        match self {
            DriftChange::Edited => "HostObjectEdited",
            DriftChange::Deleted => "HostObjectDeleted",
            DriftChange::ProvenanceRemoved => "HostProvenanceRemoved",
        }
    }
}

/// How one field differs from what tenantplane set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldChange {
    /// Its value is not the one tenantplane set.
    Changed,
    /// It is gone.
    Removed,
    /// A key the tenant did not set, in a map whose content is the tenant's.
    Added,
}

/// Who wrote a field, as the host's `managedFields` say.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldWriter {
    /// The field manager (`kubectl-patch`, `kubectl-edit`, a controller's name).
    pub manager: String,
    /// `Update` or `Apply`.
    pub operation: String,
    /// When that manager last changed the object, as the host recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Timestamp>,
}

/// One field of a drifted host object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedField {
    // Fields in the order of their JSON keys: the decision log's canonical record writes them
    // as declared.
    /// Who changed it; absent when the host does not say (a removal, a deleted object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<FieldWriter>,
    /// How it differs.
    pub change: FieldChange,
    /// The field, e.g. `data.injected`, `metadata.labels["tenantplane.io/tenant"]`.
    pub path: String,
}

/// The drift of one host object, as a decision records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    // Fields in the order of their JSON keys (see [`DriftedField`]).
    /// What happened.
    pub change: DriftChange,
    /// On the decision that corrects it (re-applies or re-creates): the id of the Drifted
    /// decision it corrects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrects: Option<String>,
    /// The fields that differ (none for a deleted object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<DriftedField>,
    /// How many times in a row this host object drifted and was corrected: above one, something
    /// keeps changing what tenantplane sets (a tug of war).
    pub times: u32,
}

impl Drift {
    /// The drift of a host object that was deleted by someone else.
    pub fn deleted() -> Drift {
        Drift {
            change: DriftChange::Deleted,
            corrects: None,
            fields: Vec::new(),
            times: 1,
        }
    }

    /// The drift a correction of this one carries: the same change and count, naming the
    /// Drifted decision `drift_id` that recorded it.
    pub fn correcting(&self, drift_id: &str) -> Drift {
        Drift {
            change: self.change,
            corrects: Some(drift_id.to_string()),
            fields: Vec::new(),
            times: self.times,
        }
    }

    /// The decision message's account of it: what differs and who did it.
    pub fn describe(&self) -> String {
        if self.change == DriftChange::Deleted {
            return "the host object was deleted on the host while its source still wants it \
                    (the host does not say by whom: its audit log does)"
                .into();
        }
        let fields: Vec<String> = self.fields.iter().map(DriftedField::to_string).collect();
        format!(
            "the host object was edited on the host: {}",
            fields.join("; ")
        )
    }

    /// The message of the Drifted decision: what happened, what is done about it under
    /// `policy`, and a tug of war when it is one.
    pub fn message(&self, policy: DriftPolicy) -> String {
        let next = match policy {
            DriftPolicy::Revert => "corrected next, by a decision of its own",
            DriftPolicy::Record => "left as it is (spec.drift: Record)",
        };
        let fight = if self.times > 1 {
            format!(
                "; drifted {} times in a row: something keeps changing what tenantplane sets, \
                 corrections back off",
                self.times
            )
        } else {
            String::new()
        };
        format!("{}; {next}{fight}", self.describe())
    }
}

impl fmt::Display for DriftedField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.change {
            FieldChange::Changed => "changed",
            FieldChange::Removed => "removed",
            FieldChange::Added => "added",
        };
        write!(f, "{} {what}", self.path)?;
        match &self.by {
            Some(by) => {
                write!(f, " by {} ({}", by.manager, by.operation)?;
                if let Some(time) = &by.time {
                    write!(f, ", {time}")?;
                }
                write!(f, ")")
            }
            None if self.change == FieldChange::Removed => {
                write!(f, " (the host records no manager for a removal)")
            }
            None if self.change == FieldChange::Changed => {
                write!(
                    f,
                    " (by whom is not known: the object came without managedFields)"
                )
            }
            None => Ok(()),
        }
    }
}

/// `path`, a path into `desired`, as the path of the same field in `live`: an item of a list
/// that has a `name` (containers, env, volumes, ports) is the live item of that name wherever it
/// sits, as the API server merges them; one the live list lacks is placed after its items.
fn in_live(desired: &Value, live: &Value, path: &[Step]) -> Path {
    let (mut d, mut l) = (Some(desired), Some(live));
    let mut out = Vec::with_capacity(path.len());
    for step in path {
        let live_step = match step {
            Step::Index(i) => Step::Index(item_in_live(d, l, *i)),
            key => key.clone(),
        };
        d = d.and_then(|v| at(v, std::slice::from_ref(step)));
        l = l.and_then(|v| at(v, std::slice::from_ref(&live_step)));
        out.push(live_step);
    }
    out
}

/// Where the `i`th item of the desired list `desired` sits in the live list `live`.
fn item_in_live(desired: Option<&Value>, live: Option<&Value>, i: usize) -> usize {
    let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
    let Some(items) = desired.and_then(Value::as_array) else {
        return i;
    };
    let Some(wanted) = items.get(i).and_then(name) else {
        return i;
    };
    let have = live
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if let Some(p) = have
        .iter()
        .position(|item| name(item).as_deref() == Some(&wanted))
    {
        return p;
    }
    let missing_before = items[..i]
        .iter()
        .filter(|d| {
            let n = name(d);
            n.is_some() && !have.iter().any(|item| name(item) == n)
        })
        .count();
    have.len() + missing_before
}

/// One step of a path into an object.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

type Path = Vec<Step>;

fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if k.contains(['.', '/']) => out.push_str(&format!("[{k:?}]")),
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn at<'a>(value: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, step| match step {
        Step::Key(k) => v.get(k.as_str()),
        Step::Index(i) => v.get(*i),
    })
}

/// The maps whose content is the tenant's as a whole: a key in them the tenant did not set is
/// drift, whoever added it.
fn content_maps(kind: &str) -> &'static [&'static str] {
    match kind {
        "ConfigMap" => &["data", "binaryData"],
        "Secret" => &["data"],
        _ => &[],
    }
}

/// The fields tenantplane sets in `desired`: its labels and annotations by key and every leaf
/// of its body (empty maps and lists are no leaves: the host drops them).
fn set_fields(desired: &Value) -> Vec<(Path, &Value)> {
    let mut out = Vec::new();
    for part in ["labels", "annotations"] {
        if let Some(Value::Object(map)) = desired.pointer(&format!("/metadata/{part}")) {
            for (k, v) in map {
                out.push((
                    vec![
                        Step::Key("metadata".into()),
                        Step::Key(part.into()),
                        Step::Key(k.clone()),
                    ],
                    v,
                ));
            }
        }
    }
    if let Some(body) = desired.as_object() {
        for (k, v) in body {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                continue;
            }
            leaves(v, &mut vec![Step::Key(k.clone())], &mut out);
        }
    }
    out
}

fn leaves<'a>(value: &'a Value, path: &mut Path, out: &mut Vec<(Path, &'a Value)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                path.push(Step::Key(k.clone()));
                leaves(v, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Step::Index(i));
                leaves(v, path, out);
                path.pop();
            }
        }
        Value::Null => {}
        _ => out.push((path.clone(), value)),
    }
}

/// A field manager's entry of the live object's `managedFields`: who, and the paths it owns
/// (resolved against the live object: `k:{...}` and `v:...` list keys become indexes).
struct Owner {
    writer: FieldWriter,
    paths: Vec<Path>,
}

impl Owner {
    /// Whether it owns `path`: the path itself, or a part of the object that holds it as a
    /// whole (an atomic map or list).
    fn owns(&self, path: &[Step]) -> bool {
        self.paths.iter().any(|p| path.starts_with(p))
    }
}

/// The owners other than `ours` of the live object's fields (status subresource entries aside).
fn owners(live: &Value, ours: &str) -> Vec<Owner> {
    let Some(Value::Array(entries)) = live.pointer("/metadata/managedFields") else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) != Some(ours))
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .filter_map(|e| {
            let fields = e.get("fieldsV1")?.as_object()?;
            let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
            let mut paths = Vec::new();
            owned(fields, Some(live), &mut Vec::new(), &mut paths);
            Some(Owner {
                writer: FieldWriter {
                    manager: text("manager").unwrap_or_default(),
                    operation: text("operation").unwrap_or_default(),
                    time: text("time").and_then(|t| t.parse().ok()),
                },
                paths,
            })
        })
        .collect()
}

/// The paths a `fieldsV1` set owns: a member that is empty (or says `.`) is owned as a whole.
fn owned(fields: &Map<String, Value>, live: Option<&Value>, path: &mut Path, out: &mut Vec<Path>) {
    for (key, sub) in fields {
        if key == "." {
            continue;
        }
        let Some((step, child)) = member(key, live) else {
            continue;
        };
        path.push(step);
        match sub.as_object() {
            Some(inner) if inner.keys().any(|k| k != ".") => owned(inner, child, path, out),
            _ => out.push(path.clone()),
        }
        path.pop();
    }
}

/// One `fieldsV1` member resolved against the live value it describes.
fn member<'a>(key: &str, live: Option<&'a Value>) -> Option<(Step, Option<&'a Value>)> {
    if let Some(name) = key.strip_prefix("f:") {
        return Some((Step::Key(name.into()), live.and_then(|v| v.get(name))));
    }
    let items = live.and_then(Value::as_array)?;
    let index = if let Some(keys) = key.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).ok()?;
        items.iter().position(|item| {
            keys.iter()
                .all(|(k, v)| item.get(k).is_some_and(|x| loosely_equal(x, v)))
        })?
    } else if let Some(value) = key.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        items.iter().position(|item| loosely_equal(item, &value))?
    } else {
        key.strip_prefix("i:")?.parse().ok()?
    };
    Some((Step::Index(index), items.get(index)))
}

/// List keys name numbers as numbers and the object may hold them as numbers or strings.
fn loosely_equal(a: &Value, b: &Value) -> bool {
    a == b || a.to_string().trim_matches('"') == b.to_string().trim_matches('"')
}

/// The drift of `live` from `desired` (the host object tenantplane would write, before its
/// decision id), with who did it; `None` when the live object holds what tenantplane set.
/// `ours` is tenantplane's field manager.
pub fn detect(desired: &Value, live: &Value, ours: &str) -> Option<Drift> {
    detect_withheld(desired, live, ours, &[])
}

/// As [`detect`], for a host object some of whose values tenantplane does not keep (a pod's
/// tokens): each field of `desired` at one of the `withheld` paths (keys from the object's root,
/// e.g. `["data", "token"]`) is changed when another field manager owns it, whatever its value,
/// and removed when it is gone.
pub fn detect_withheld(
    desired: &Value,
    live: &Value,
    ours: &str,
    withheld: &[&[&str]],
) -> Option<Drift> {
    let withheld: Vec<Path> = withheld
        .iter()
        .map(|keys| keys.iter().map(|k| Step::Key((*k).to_string())).collect())
        .collect();
    let kind = desired.get("kind").and_then(Value::as_str).unwrap_or("");
    let desired = updatable(desired);
    let others = owners(live, ours);
    // An object read without its managedFields (`kubectl get -o yaml` hides them) says nobody's
    // ownership: a value that differs is drift, by an unknown hand.
    let attributed = live.pointer("/metadata/managedFields").is_some();
    let writer = |path: &[Step]| {
        others
            .iter()
            .filter(|o| o.owns(path))
            .max_by(|a, b| a.writer.time.cmp(&b.writer.time))
            .map(|o| o.writer.clone())
    };
    let mut fields = Vec::new();
    let mut provenance = false;
    for (path, want) in set_fields(&desired) {
        let path = in_live(&desired, live, &path);
        let change = match at(live, &path) {
            None => FieldChange::Removed,
            Some(_) if withheld.contains(&path) => match writer(&path) {
                Some(_) => FieldChange::Changed,
                None => continue,
            },
            Some(have) if have != want && (writer(&path).is_some() || !attributed) => {
                FieldChange::Changed
            }
            Some(_) => continue,
        };
        provenance |= matches!(&path[..], [Step::Key(m), _, Step::Key(k)]
            if m == "metadata" && tenantplane_api::provenance::is_reserved(k));
        let by = if change == FieldChange::Removed {
            None
        } else {
            writer(&path)
        };
        fields.push(DriftedField {
            by,
            change,
            path: render(&path),
        });
    }
    for map in content_maps(kind) {
        let Some(Value::Object(have)) = live.get(*map) else {
            continue;
        };
        let want = desired.get(*map).and_then(Value::as_object);
        for key in have.keys() {
            if want.is_some_and(|w| w.contains_key(key)) {
                continue;
            }
            let path = vec![Step::Key((*map).into()), Step::Key(key.clone())];
            fields.push(DriftedField {
                by: writer(&path),
                change: FieldChange::Added,
                path: render(&path),
            });
        }
    }
    if fields.is_empty() {
        return None;
    }
    Some(Drift {
        change: if provenance {
            DriftChange::ProvenanceRemoved
        } else {
            DriftChange::Edited
        },
        corrects: None,
        fields,
        times: 1,
    })
}

/// Whether `live`, which no longer carries complete provenance, is a host object tenantplane
/// wrote for `desired` whose provenance someone else removed or changed: tenantplane (`ours`)
/// has written it, and each provenance key it still carries either holds `desired`'s value or
/// was changed by another manager. A host object that names another source in provenance
/// tenantplane wrote is not this one's.
pub fn provenance_removed(desired: &Value, live: &Value, ours: &str) -> bool {
    if !written_by(live, ours) {
        return false;
    }
    let others = owners(live, ours);
    ["labels", "annotations"].iter().all(|part| {
        let Some(Value::Object(have)) = live.pointer(&format!("/metadata/{part}")) else {
            return true;
        };
        // The decision id is the one key tenantplane sets that `desired` cannot carry yet.
        have.iter()
            .filter(|(k, _)| {
                tenantplane_api::provenance::is_reserved(k)
                    && k.as_str() != tenantplane_api::provenance::DECISION_ID
            })
            .all(|(k, v)| {
                let path = [
                    Step::Key("metadata".into()),
                    Step::Key((*part).into()),
                    Step::Key(k.clone()),
                ];
                desired
                    .pointer(&format!("/metadata/{part}"))
                    .and_then(|m| m.get(k))
                    == Some(v)
                    || others.iter().any(|o| o.owns(&path))
            })
    })
}

/// Whether the field manager `manager` has written `live`, as its managedFields say.
pub fn written_by(live: &Value, manager: &str) -> bool {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        })
}

/// The host object a correction writes: `live` with every field tenantplane sets as `desired`
/// has it, and the keys of the tenant's content maps that the tenant did not set removed; its
/// resourceVersion stays, as the precondition of the replace.
pub fn corrected(desired: &Value, live: &Value) -> Value {
    let mut out = live.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let kind = desired.get("kind").and_then(Value::as_str).unwrap_or("");
    let desired = updatable(desired);
    for (path, want) in set_fields(&desired) {
        put(&mut out, &in_live(&desired, live, &path), want.clone());
    }
    for map in content_maps(kind) {
        let want = desired.get(*map).and_then(Value::as_object);
        if let Some(Value::Object(have)) = out.get_mut(*map) {
            have.retain(|k, _| want.is_some_and(|w| w.contains_key(k)));
        }
    }
    out
}

/// What of `desired` a write to an existing host object sets: all of it, but for a Pod only
/// what an update may change.
fn updatable(desired: &Value) -> std::borrow::Cow<'_, Value> {
    let pod = desired.get("kind").and_then(Value::as_str) == Some("Pod")
        && desired.get("apiVersion").and_then(Value::as_str) == Some("v1");
    if pod {
        std::borrow::Cow::Owned(translate::pod_update(desired))
    } else {
        std::borrow::Cow::Borrowed(desired)
    }
}

fn put(target: &mut Value, path: &[Step], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *target = value;
        return;
    };
    let mut node = target;
    for (i, step) in parents.iter().enumerate() {
        let next_is_index = matches!(path[i + 1], Step::Index(_));
        let empty = || {
            if next_is_index {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            }
        };
        node = match step {
            Step::Key(k) => {
                if !node.is_object() {
                    *node = Value::Object(Map::new());
                }
                let map = node.as_object_mut().expect("an object");
                map.entry(k.clone()).or_insert_with(empty)
            }
            Step::Index(i) => {
                if !node.is_array() {
                    *node = Value::Array(Vec::new());
                }
                let items = node.as_array_mut().expect("an array");
                while items.len() <= *i {
                    items.push(empty());
                }
                &mut items[*i]
            }
        };
    }
    match last {
        Step::Key(k) => {
            if !node.is_object() {
                *node = Value::Object(Map::new());
            }
            node.as_object_mut()
                .expect("an object")
                .insert(k.clone(), value);
        }
        Step::Index(i) => {
            if !node.is_array() {
                *node = Value::Array(Vec::new());
            }
            let items = node.as_array_mut().expect("an array");
            while items.len() <= *i {
                items.push(Value::Null);
            }
            items[*i] = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OURS: &str = "tenantplane-syncer";

    fn desired() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings-x-shop", "namespace": "tenant-acme",
                "labels": {"tenantplane.io/tenant": "acme", "app": "web"},
                "annotations": {"tenantplane.io/desired-digest": "sha256:1"}},
            "data": {"k": "v", "mode": "fast"}})
    }

    fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1", "time": time,
            "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    /// The live object as the host holds it after tenantplane's create, with `edit` applied and
    /// `entries` added to its managedFields.
    fn live(edit: impl FnOnce(&mut Value), entries: Vec<Value>) -> Value {
        let mut live = desired();
        live["metadata"]["uid"] = json!("h1");
        live["metadata"]["resourceVersion"] = json!("7");
        let mut managed = vec![entry(
            OURS,
            "Update",
            "2026-12-04T10:00:00Z",
            json!({"f:data": {".": {}, "f:k": {}, "f:mode": {}},
                "f:metadata": {"f:labels": {".": {}, "f:tenantplane.io/tenant": {}, "f:app": {}}}}),
        )];
        managed.extend(entries);
        live["metadata"]["managedFields"] = Value::Array(managed);
        edit(&mut live);
        live
    }

    #[test]
    fn a_value_changed_by_another_manager_is_drift_attributed_to_it() {
        let live = live(
            |l| l["data"]["k"] = json!("patched"),
            vec![entry(
                "kubectl-patch",
                "Update",
                "2026-12-04T10:05:00Z",
                json!({"f:data": {"f:k": {}}}),
            )],
        );
        let drift = detect(&desired(), &live, OURS).expect("drift");
        assert_eq!(drift.change, DriftChange::Edited);
        assert_eq!(drift.fields.len(), 1, "{drift:?}");
        let field = &drift.fields[0];
        assert_eq!(
            (field.path.as_str(), field.change),
            ("data.k", FieldChange::Changed)
        );
        let by = field.by.as_ref().expect("attributed");
        assert_eq!(
            (by.manager.as_str(), by.operation.as_str()),
            ("kubectl-patch", "Update")
        );
        assert_eq!(
            drift.describe(),
            "the host object was edited on the host: data.k changed by kubectl-patch (Update, \
             2026-12-04T10:05:00Z)"
        );
    }

    #[test]
    fn a_key_added_to_the_tenants_content_is_drift_but_a_label_added_by_another_is_not() {
        let live = live(
            |l| {
                l["data"]["injected"] = json!("by-someone");
                l["metadata"]["labels"]["team"] = json!("ops");
            },
            vec![
                entry(
                    "kubectl-patch",
                    "Update",
                    "2026-12-04T10:05:00Z",
                    json!({"f:data": {"f:injected": {}}}),
                ),
                entry(
                    "other",
                    "Apply",
                    "2026-12-04T10:06:00Z",
                    json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
                ),
            ],
        );
        let drift = detect(&desired(), &live, OURS).expect("drift");
        assert_eq!(
            drift
                .fields
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["data.injected added by kubectl-patch (Update, 2026-12-04T10:05:00Z)"]
        );

        let only_label = self::live(
            |l| l["metadata"]["labels"]["team"] = json!("ops"),
            vec![entry(
                "other",
                "Apply",
                "2026-12-04T10:06:00Z",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            )],
        );
        assert_eq!(detect(&desired(), &only_label, OURS), None);
    }

    #[test]
    fn a_removal_is_drift_that_the_host_attributes_to_nobody() {
        let live = live(
            |l| {
                l["data"].as_object_mut().unwrap().remove("mode");
            },
            Vec::new(),
        );
        let drift = detect(&desired(), &live, OURS).expect("drift");
        assert_eq!(drift.fields[0].change, FieldChange::Removed);
        assert_eq!(drift.fields[0].by, None);
        assert!(
            drift
                .describe()
                .contains("data.mode removed (the host records no manager")
        );
    }

    #[test]
    fn a_removed_provenance_label_is_provenance_drift() {
        let live = live(
            |l| {
                l["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("tenantplane.io/tenant");
            },
            Vec::new(),
        );
        let drift = detect(&desired(), &live, OURS).expect("drift");
        assert_eq!(drift.change, DriftChange::ProvenanceRemoved);
        assert_eq!(
            drift.fields[0].path,
            r#"metadata.labels["tenantplane.io/tenant"]"#
        );
    }

    /// A host object whose tenant label someone removed is still the one tenantplane wrote for
    /// this source; one whose remaining provenance tenantplane wrote for another source is not.
    #[test]
    fn provenance_removed_from_an_object_tenantplane_wrote_for_this_source() {
        let stripped = live(
            |l| {
                l["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("tenantplane.io/tenant");
                l["metadata"]["annotations"]["tenantplane.io/decision-id"] = json!("d1");
            },
            Vec::new(),
        );
        assert!(provenance_removed(&desired(), &stripped, OURS));
        let mut other = stripped.clone();
        other["metadata"]["annotations"]["tenantplane.io/desired-digest"] = json!("sha256:2");
        assert!(
            !provenance_removed(&desired(), &other, OURS),
            "provenance tenantplane wrote for another source"
        );
        assert!(
            !provenance_removed(&desired(), &stripped, "someone-else"),
            "an object tenantplane never wrote"
        );
    }

    /// A value tenantplane still owns is not drift even when the host reads it back otherwise
    /// (a quantity normalised); a value another manager set equal to tenantplane's is not either.
    #[test]
    fn what_tenantplane_still_owns_or_another_set_to_the_same_value_is_not_drift() {
        let normalised = live(|l| l["data"]["mode"] = json!("FAST"), Vec::new());
        assert_eq!(detect(&desired(), &normalised, OURS), None);
        let same = live(
            |_| {},
            vec![entry(
                "kubectl-edit",
                "Update",
                "2026-12-04T10:05:00Z",
                json!({"f:data": {"f:k": {}}}),
            )],
        );
        assert_eq!(detect(&desired(), &same, OURS), None);
    }

    /// Containers are keyed by name in managedFields: the owner of an image is found by the
    /// key, wherever the container sits; for a Pod only what an update may change is compared
    /// (the rest of its spec is immutable, and its world is added at create).
    #[test]
    fn a_pods_image_set_by_another_is_found_through_the_list_key() {
        let desired = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-x-shop", "labels": {"tenantplane.io/tenant": "acme"}},
            "spec": {"serviceAccountName": "web-x-shop",
                "containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}});
        let mut live = desired.clone();
        live["spec"]["containers"] = json!([
            {"name": "sidecar", "image": "envoy:1"},
            {"name": "app", "image": "nginx:evil", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]);
        live["spec"]["nodeName"] = json!("node-1");
        live["metadata"]["managedFields"] = json!([entry(
            "kubectl-set",
            "Update",
            "2026-12-04T10:05:00Z",
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}}})
        )]);
        let drift = detect(&desired, &live, OURS).expect("drift");
        let fields: Vec<String> = drift.fields.iter().map(ToString::to_string).collect();
        assert_eq!(
            fields,
            ["spec.containers[1].image changed by kubectl-set (Update, 2026-12-04T10:05:00Z)"],
            "the app container, found by name behind the sidecar; nodeName and the port's \
             defaulted protocol are no drift"
        );
        let corrected = corrected(&desired, &live);
        assert_eq!(corrected["spec"]["containers"][1]["image"], "nginx:1.27");
        assert_eq!(
            corrected["spec"]["containers"][0]["image"], "envoy:1",
            "the sidecar someone else added stays"
        );
    }

    #[test]
    fn the_correction_restores_what_tenantplane_sets_and_keeps_what_others_added() {
        let live = live(
            |l| {
                l["data"]["k"] = json!("patched");
                l["data"]["injected"] = json!("by-someone");
                l["metadata"]["labels"]["team"] = json!("ops");
                l["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("app");
            },
            Vec::new(),
        );
        let fixed = corrected(&desired(), &live);
        assert_eq!(fixed["data"], json!({"k": "v", "mode": "fast"}));
        assert_eq!(fixed["metadata"]["labels"]["app"], "web");
        assert_eq!(
            fixed["metadata"]["labels"]["team"], "ops",
            "another's label stays"
        );
        assert_eq!(
            fixed["metadata"]["resourceVersion"], "7",
            "the precondition"
        );
        assert_eq!(fixed.pointer("/metadata/managedFields"), None);
        assert_eq!(detect(&desired(), &fixed, OURS), None);
    }
}
