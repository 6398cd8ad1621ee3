//! One Event store behind core/v1 Events and events.k8s.io/v1 Events, as in
//! kube-apiserver: Events are stored in the core/v1 shape and converted field
//! by field (`pkg/apis/events/v1/conversion.go`) for the events.k8s.io API:
//!
//! | events.k8s.io/v1 | core/v1 |
//! | --- | --- |
//! | `note` | `message` |
//! | `regarding` | `involvedObject` |
//! | `reportingController` | `reportingComponent` |
//! | `deprecatedSource` | `source` |
//! | `deprecatedFirstTimestamp`, `deprecatedLastTimestamp` | `firstTimestamp`, `lastTimestamp` |
//! | `deprecatedCount` | `count` |
//!
//! and `eventTime`, `series`, `action`, `reason`, `related`,
//! `reportingInstance`, `type` under the same names. Each form is rendered
//! with the fields Go's JSON encoding of the typed object always writes
//! (`"eventTime": null`, `"source": {}`, `"reportingComponent": ""`, ...),
//! and fields unknown to the type are dropped.
//!
//! Validation follows `ValidateEventCreate` / `ValidateEventUpdate`: the
//! legacy rules for both APIs, and the strict rules (eventTime, reporting
//! controller and instance, action, no deprecated fields, DNS-1123 subdomain
//! names, immutable fields on update) for events.k8s.io/v1. Field selectors
//! on events.k8s.io (`regarding.name`, `reportingController`, ...) map to
//! the core/v1 field labels, as the API server's field label conversion does.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::storage::error::{ApiError, ApiResult, Cause};
use crate::storage::names;
use crate::storage::resources::{EVENTS_GROUP, ResourceType};

const EVENTS_API_VERSION: &str = "events.k8s.io/v1";
const CORE_API_VERSION: &str = "v1";

/// Whether the resource is events.k8s.io's Event.
fn is_events_api(rt: &ResourceType) -> bool {
    rt.is_event() && rt.group == EVENTS_GROUP
}

fn text<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The value of an RFC 3339 time field rendered as the API server renders
/// it: `metav1.Time` to the second, `metav1.MicroTime` to the microsecond,
/// `null` when unset.
fn time(value: Option<&Value>, micro: bool) -> Value {
    let Some(Value::String(s)) = value else {
        return Value::Null;
    };
    if s.is_empty() {
        return Value::Null;
    }
    match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => {
            let format = if micro {
                chrono::SecondsFormat::Micros
            } else {
                chrono::SecondsFormat::Secs
            };
            json!(t.with_timezone(&chrono::Utc).to_rfc3339_opts(format, true))
        }
        Err(_) => json!(s),
    }
}

/// Go's `RFC3339Micro` layout, the only one `metav1.MicroTime` decodes.
const MICRO_TIME_LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

/// Whether a string decodes as a `metav1.MicroTime`: exactly six fractional
/// digits, then `Z` or a `±hh:mm` offset.
fn is_micro_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|b| b.iter().all(u8::is_ascii_digit))
    };
    let at = |i: usize, c: u8| bytes.get(i) == Some(&c);
    let zone = match bytes.get(26) {
        Some(b'Z') => bytes.len() == 27,
        Some(b'+' | b'-') => bytes.len() == 32 && digits(27..29) && at(29, b':') && digits(30..32),
        _ => false,
    };
    digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26)
        && zone
        && chrono::DateTime::parse_from_rfc3339(text).is_ok()
}

/// Refuses, as the API server's decoder does (400), an Event whose
/// `eventTime` or `series.lastObservedTime` is not in the `MicroTime`
/// layout.
pub fn check_micro_times(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    for pointer in ["/eventTime", "/series/lastObservedTime"] {
        if let Some(Value::String(text)) = object.pointer(pointer)
            && !is_micro_time(text)
        {
            return Err(ApiError::bad_request(format!(
                "Event in version \"{}\" cannot be handled as a Event: parsing time \"{text}\" as \"{MICRO_TIME_LAYOUT}\"",
                rt.version
            )));
        }
    }
    Ok(())
}

fn is_zero_time(value: Option<&Value>) -> bool {
    time(value, true).is_null()
}

/// A struct of string fields with `omitempty` (ObjectReference, EventSource):
/// empty strings and nulls are not written.
fn string_struct(value: Option<&Value>) -> Value {
    let mut out = Map::new();
    if let Some(Value::Object(fields)) = value {
        for (key, value) in fields {
            match value {
                Value::Null => {}
                Value::String(s) if s.is_empty() => {}
                other => {
                    out.insert(key.clone(), other.clone());
                }
            }
        }
    }
    Value::Object(out)
}

fn put_text(out: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        out.insert(key.into(), json!(value));
    }
}

fn count(value: Option<&Value>) -> i64 {
    value.and_then(Value::as_i64).unwrap_or(0)
}

/// core/v1 → events.k8s.io/v1 (`Convert_core_Event_To_v1_Event`).
pub fn to_events_api(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(EVENTS_API_VERSION));
    out.insert("kind".into(), json!("Event"));
    out.insert(
        "metadata".into(),
        core.get("metadata").cloned().unwrap_or(json!({})),
    );
    out.insert("eventTime".into(), time(core.get("eventTime"), true));
    if let Some(series) = core.get("series").filter(|s| s.is_object()) {
        out.insert(
            "series".into(),
            json!({
                "count": count(series.get("count")),
                "lastObservedTime": time(series.get("lastObservedTime"), true),
            }),
        );
    }
    put_text(
        &mut out,
        "reportingController",
        text(core, "reportingComponent"),
    );
    put_text(
        &mut out,
        "reportingInstance",
        text(core, "reportingInstance"),
    );
    put_text(&mut out, "action", text(core, "action"));
    put_text(&mut out, "reason", text(core, "reason"));
    out.insert(
        "regarding".into(),
        string_struct(core.get("involvedObject")),
    );
    if let Some(related) = core.get("related").filter(|r| r.is_object()) {
        out.insert("related".into(), string_struct(Some(related)));
    }
    put_text(&mut out, "note", text(core, "message"));
    put_text(&mut out, "type", text(core, "type"));
    out.insert("deprecatedSource".into(), string_struct(core.get("source")));
    out.insert(
        "deprecatedFirstTimestamp".into(),
        time(core.get("firstTimestamp"), false),
    );
    out.insert(
        "deprecatedLastTimestamp".into(),
        time(core.get("lastTimestamp"), false),
    );
    let n = count(core.get("count"));
    if n != 0 {
        out.insert("deprecatedCount".into(), json!(n));
    }
    Value::Object(out)
}

/// events.k8s.io/v1 → core/v1 (`Convert_v1_Event_To_core_Event`).
pub fn to_core(event: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(CORE_API_VERSION));
    out.insert("kind".into(), json!("Event"));
    out.insert(
        "metadata".into(),
        event.get("metadata").cloned().unwrap_or(json!({})),
    );
    out.insert(
        "involvedObject".into(),
        string_struct(event.get("regarding")),
    );
    put_text(&mut out, "reason", text(event, "reason"));
    put_text(&mut out, "message", text(event, "note"));
    out.insert(
        "source".into(),
        string_struct(event.get("deprecatedSource")),
    );
    out.insert(
        "firstTimestamp".into(),
        time(event.get("deprecatedFirstTimestamp"), false),
    );
    out.insert(
        "lastTimestamp".into(),
        time(event.get("deprecatedLastTimestamp"), false),
    );
    let n = count(event.get("deprecatedCount"));
    if n != 0 {
        out.insert("count".into(), json!(n));
    }
    put_text(&mut out, "type", text(event, "type"));
    out.insert("eventTime".into(), time(event.get("eventTime"), true));
    if let Some(series) = event.get("series").filter(|s| s.is_object()) {
        let mut core_series = Map::new();
        let n = count(series.get("count"));
        if n != 0 {
            core_series.insert("count".into(), json!(n));
        }
        core_series.insert(
            "lastObservedTime".into(),
            time(series.get("lastObservedTime"), true),
        );
        out.insert("series".into(), Value::Object(core_series));
    }
    put_text(&mut out, "action", text(event, "action"));
    if let Some(related) = event.get("related").filter(|r| r.is_object()) {
        out.insert("related".into(), string_struct(Some(related)));
    }
    out.insert(
        "reportingComponent".into(),
        json!(text(event, "reportingController")),
    );
    out.insert(
        "reportingInstance".into(),
        json!(text(event, "reportingInstance")),
    );
    Value::Object(out)
}

/// The stored (core/v1) form of an Event written through either API.
pub fn to_storage(object: &Value) -> Value {
    if object.get("apiVersion").and_then(Value::as_str) == Some(EVENTS_API_VERSION) {
        to_core(object)
    } else {
        // Through the other form and back: the typed core/v1 shape.
        to_core(&to_events_api(object))
    }
}

/// An Event (stored or written through either API) as `rt` serves it;
/// other kinds are returned unchanged.
pub fn view(rt: &ResourceType, object: Value) -> Value {
    if !rt.is_event() {
        return object;
    }
    let core = to_storage(&object);
    if is_events_api(rt) {
        to_events_api(&core)
    } else {
        core
    }
}

fn required(field: &str) -> Cause {
    Cause::required(field, "")
}

/// `validation.IsQualifiedName` (a label key): an optional DNS subdomain
/// prefix and '/', and a name of at most 63 characters.
fn qualified_name_errors(value: &str) -> Vec<String> {
    const KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
    const KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
    let regex_error = format!(
        "{KEY_MSG} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{KEY_FMT}')"
    );
    let parts: Vec<&str> = value.split('/').collect();
    let mut errors = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(
                    names::dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {regex_error} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 bytes".to_string());
    }
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    let valid = match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first)
                && alnum(last)
                && bytes
                    .iter()
                    .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    };
    if !valid {
        errors.push(format!("name part {regex_error}"));
    }
    errors
}

/// `legacyValidateEvent`, on the core/v1 form.
fn legacy_causes(core: &Value, events_api: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let namespace = core
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let involved_namespace = core
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mismatch = || {
        Cause::invalid(
            "involvedObject.namespace",
            involved_namespace,
            "does not match event.namespace",
        )
    };
    if is_zero_time(core.get("eventTime")) {
        let matches = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_namespace
        };
        if !matches {
            causes.push(mismatch());
        }
        return causes;
    }
    if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
        causes.push(mismatch());
    }
    let controller_field = if events_api {
        "reportingController"
    } else {
        "reportingComponent"
    };
    let controller = text(core, "reportingComponent");
    if controller.is_empty() {
        causes.push(required(controller_field));
    }
    for message in qualified_name_errors(controller) {
        causes.push(Cause::invalid(controller_field, controller, &message));
    }
    for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
        let value = text(core, field);
        if value.is_empty() {
            causes.push(required(field));
        }
        if value.len() > limit {
            causes.push(Cause::invalid(
                field,
                "",
                &format!("can have at most {limit} characters"),
            ));
        }
    }
    if text(core, "message").len() > 1024 {
        causes.push(Cause::invalid(
            "message",
            "",
            "can have at most 1024 characters",
        ));
    }
    causes
}

/// `validateV1EventSeries`.
fn series_causes(core: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(series) = core.get("series").filter(|s| s.is_object()) {
        if count(series.get("count")) < 2 {
            causes.push(Cause::invalid("series.count", "", "should be at least 2"));
        }
        if is_zero_time(series.get("lastObservedTime")) {
            causes.push(required("series.lastObservedTime"));
        }
    }
    causes
}

/// The validation errors of an Event created through `rt` (`ValidateEventCreate`),
/// given the name errors of its kind's rule. Field paths are those of the
/// core/v1 form, as the API server reports them for both APIs.
pub fn create_causes(rt: &ResourceType, object: &Value, name_causes: Vec<Cause>) -> Vec<Cause> {
    let core = to_storage(object);
    let mut causes = legacy_causes(&core, is_events_api(rt));
    if !is_events_api(rt) {
        // core/v1 validates no name rule of its own: the generic
        // path-segment check runs once the Event is otherwise valid.
        if causes.is_empty() {
            causes = name_causes;
        }
        return causes;
    }
    causes.extend(name_causes);
    causes.extend(series_causes(&core));
    if is_zero_time(core.get("eventTime")) {
        causes.push(required("eventTime"));
    }
    let kind = text(&core, "type");
    if kind != "Normal" && kind != "Warning" {
        causes.push(Cause::invalid(
            "type",
            "",
            &format!("has invalid value: {kind}"),
        ));
    }
    for field in ["firstTimestamp", "lastTimestamp"] {
        if !is_zero_time(core.get(field)) {
            causes.push(Cause::invalid(field, "", "needs to be unset"));
        }
    }
    if count(core.get("count")) != 0 {
        causes.push(Cause::invalid("count", "", "needs to be unset"));
    }
    if core
        .get("source")
        .is_some_and(|s| !text(s, "component").is_empty() || !text(s, "host").is_empty())
    {
        causes.push(Cause::invalid("source", "", "needs to be unset"));
    }
    causes
}

/// The validation errors of an update through `rt` (`ValidateEventUpdate`):
/// the legacy rules, and for events.k8s.io/v1 the immutable fields.
pub fn update_causes(rt: &ResourceType, new: &Value, old: &Value) -> Vec<Cause> {
    let (new, old) = (to_storage(new), to_storage(old));
    let mut causes = legacy_causes(&new, is_events_api(rt));
    if !is_events_api(rt) {
        return causes;
    }
    if new.get("series") != old.get("series") {
        causes.extend(series_causes(&new));
    }
    let immutable = |field: &str| {
        let value = new.get(field).cloned().unwrap_or(Value::Null);
        (value != old.get(field).cloned().unwrap_or(Value::Null)).then(|| match &value {
            Value::String(s) => Cause::invalid(field, s, "field is immutable"),
            Value::Null => Cause::invalid(field, "", "field is immutable"),
            other => Cause::invalid_json(field, other, "field is immutable"),
        })
    };
    for field in [
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "action",
        "related",
    ] {
        causes.extend(immutable(field));
    }
    for (field, core_field) in [
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ] {
        let value = text(&new, core_field);
        if value != text(&old, core_field) {
            causes.push(Cause::invalid(field, value, "field is immutable"));
        }
    }
    causes
}

/// events.k8s.io field labels and the core/v1 labels they select
/// (`AddFieldLabelConversionsForEvent`).
const EVENTS_FIELD_LABELS: &[(&str, &str)] = &[
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
    ("metadata.namespace", "metadata.namespace"),
    ("metadata.name", "metadata.name"),
];

/// A field selector for `rt` in terms of the stored (core/v1) fields:
/// events.k8s.io labels are mapped, unknown ones refused; other kinds'
/// selectors are returned as they are.
pub fn field_selector<'a>(rt: &ResourceType, selector: &'a str) -> ApiResult<Cow<'a, str>> {
    if !is_events_api(rt) || selector.trim().is_empty() {
        return Ok(Cow::Borrowed(selector));
    }
    let mut terms = Vec::new();
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some(at) = term.find(['=', '!']) else {
            // Not a term: the selector parser reports it.
            terms.push(term.to_string());
            continue;
        };
        let (label, rest) = term.split_at(at);
        let label = label.trim();
        let mapped = EVENTS_FIELD_LABELS
            .iter()
            .find(|(events, _)| *events == label)
            .map(|(_, core)| *core)
            .ok_or_else(|| ApiError::bad_request(format!("field label not supported: {label}")))?;
        terms.push(format!("{mapped}{rest}"));
    }
    Ok(Cow::Owned(terms.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core_event() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "ns", "uid": ""},
            "reason": "Started",
            "message": "started the container",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2024-01-02T03:04:05Z",
            "lastTimestamp": "2024-01-02T03:04:06+00:00",
            "count": 3,
            "type": "Normal",
            "unknownField": 1,
        })
    }

    #[test]
    fn core_events_convert_field_by_field() {
        let events = to_events_api(&core_event());
        assert_eq!(
            events,
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "e", "namespace": "ns"},
                "eventTime": null,
                "reason": "Started",
                "regarding": {"kind": "Pod", "name": "web", "namespace": "ns"},
                "note": "started the container",
                "type": "Normal",
                "deprecatedSource": {"component": "kubelet", "host": "node-1"},
                "deprecatedFirstTimestamp": "2024-01-02T03:04:05Z",
                "deprecatedLastTimestamp": "2024-01-02T03:04:06Z",
                "deprecatedCount": 3,
            })
        );
        let back = to_core(&events);
        assert_eq!(back["message"], "started the container");
        assert_eq!(back["involvedObject"]["name"], "web");
        assert_eq!(back["count"], 3);
        assert_eq!(back["reportingComponent"], "");
        assert_eq!(back["eventTime"], Value::Null);
        assert!(back.get("unknownField").is_none());
    }

    #[test]
    fn new_style_events_convert_both_ways() {
        let events = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2024-01-02T03:04:05.123456Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-02T03:04:06Z"},
            "reportingController": "example.com/ctl",
            "reportingInstance": "ctl-1",
            "action": "Sync",
            "reason": "Synced",
            "regarding": {"kind": "Pod", "name": "web", "namespace": "ns"},
            "related": {"kind": "Node", "name": "n1"},
            "note": "synced",
            "type": "Normal",
        });
        let core = to_core(&events);
        assert_eq!(core["reportingComponent"], "example.com/ctl");
        assert_eq!(core["reportingInstance"], "ctl-1");
        assert_eq!(core["message"], "synced");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["related"]["name"], "n1");
        assert_eq!(core["source"], json!({}));
        assert_eq!(
            core["series"]["lastObservedTime"],
            "2024-01-02T03:04:06.000000Z"
        );
        let mut expected = events.clone();
        expected["series"]["lastObservedTime"] = json!("2024-01-02T03:04:06.000000Z");
        expected["deprecatedSource"] = json!({});
        expected["deprecatedFirstTimestamp"] = Value::Null;
        expected["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(to_events_api(&core), expected);
    }

    #[test]
    fn micro_times_have_six_fractional_digits() {
        assert!(is_micro_time("2024-01-02T03:04:05.123456Z"));
        assert!(is_micro_time("2024-01-02T03:04:05.123456+01:00"));
        assert!(!is_micro_time("2024-01-02T03:04:05Z"));
        assert!(!is_micro_time("2024-01-02T03:04:05.1234567Z"));
        assert!(!is_micro_time("2024-13-02T03:04:05.123456Z"));
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name_errors("example.com/my-controller").is_empty());
        assert!(qualified_name_errors("kubelet").is_empty());
        assert_eq!(qualified_name_errors("").len(), 2);
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
        assert_eq!(qualified_name_errors("-x").len(), 1);
    }
}
