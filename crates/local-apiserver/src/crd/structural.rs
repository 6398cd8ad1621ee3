//! Structural schema rules for CRD schemas: a port of apiextensions-apiserver
//! `pkg/apiserver/schema` (`NewStructural`'s refusals and
//! `ValidateStructural`) on the JSON form of the schema.
//!
//! A structural schema specifies a type for every node (unless
//! `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`
//! says otherwise), keeps `anyOf`/`allOf`/`oneOf`/`not` to value validations
//! of nodes that exist outside them, and lets `metadata` at the root restrict
//! only `name` and `generateName`.

use serde_json::Value;

use crate::crd::field::{FieldError, Path, go_quote};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

pub(crate) fn str_of<'a>(s: &'a Value, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Whether `key` holds something other than its zero value (Go's view of a
/// field being set).
pub(crate) fn is_set(s: &Value, key: &str) -> bool {
    match s.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(t)) => !t.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(_)) => true,
    }
}

/// The properties of a schema in a stable (sorted) order.
pub(crate) fn properties(s: &Value) -> Vec<(&String, &Value)> {
    let mut props: Vec<(&String, &Value)> = s
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    props.sort_by(|a, b| a.0.cmp(b.0));
    props
}

fn list<'a>(s: &'a Value, key: &str) -> &'a [Value] {
    s.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `NewStructural` refuses these; the OpenAPI checks report them, and no
/// structural or CEL checks run.
pub(crate) fn convertible(s: &Value) -> bool {
    if !s.is_object() {
        return true;
    }
    if is_set(s, "id")
        || is_set(s, "$schema")
        || is_set(s, "$ref")
        || is_set(s, "patternProperties")
        || is_set(s, "dependencies")
        || s.get("additionalItems").is_some_and(|v| !v.is_null())
        || is_set(s, "definitions")
        || s.get("items").is_some_and(Value::is_array)
        || s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false))
    {
        return false;
    }
    let mut children: Vec<&Value> = Vec::new();
    children.extend(s.get("items"));
    children.extend(properties(s).into_iter().map(|(_, v)| v));
    children.extend(s.get("additionalProperties").filter(|v| v.is_object()));
    children.extend(s.get("not"));
    for key in ["allOf", "anyOf", "oneOf"] {
        children.extend(list(s, key));
    }
    children.into_iter().all(convertible)
}

/// `ValidateStructural`: errors sorted as kube-apiserver sorts them.
pub(crate) fn validate_structural(path: &Path, s: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    invariants(s, Level::Root, path, &mut errs);
    completeness(s, path, &mut errs);
    errs.sort_by_key(FieldError::to_string);
    errs
}

fn invariants(s: &Value, level: Level, path: &Path, errs: &mut Vec<FieldError>) {
    let ty = str_of(s, "type");
    if ty == "array" && s.get("items").is_none_or(Value::is_null) {
        errs.push(FieldError::required(
            path.child("items"),
            "must be specified",
        ));
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        invariants(items, Level::Item, &path.child("items"), errs);
    }
    for (name, prop) in properties(s) {
        invariants(
            prop,
            Level::Field,
            &path.child("properties").key(name),
            errs,
        );
    }
    if s.get("additionalProperties").is_some_and(|v| !v.is_null()) {
        if level == Level::Root {
            errs.push(FieldError::forbidden(
                path.child("additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(schema) = s.get("additionalProperties").filter(|v| v.is_object()) {
            invariants(
                schema,
                Level::Field,
                &path.child("additionalProperties"),
                errs,
            );
        }
    }
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-embedded-resource"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(s);
    let skip_first_all_of_any_of = list(s, "allOf")
        .first()
        .is_some_and(is_int_or_string_any_of);
    value_validation(s, skip_any_of, skip_first_all_of_any_of, level, path, errs);

    let check_metadata = level == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(
                path.child("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(FieldError::invalid(
                path.child("type"),
                &go_quote(ty),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(path.child("type"), detail));
    }
    if embedded && s.get("additionalProperties").is_some_and(|v| !v.is_null()) {
        errs.push(FieldError::forbidden(
            path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(FieldError::invalid(
            path.child("type"),
            &go_quote(ty),
            "must be object at the root",
        ));
    }
    let props = s.get("properties").and_then(Value::as_object);
    for meta_field in ["kind", "apiVersion"] {
        if let Some(p) = props.and_then(|p| p.get(meta_field))
            && check_metadata
            && str_of(p, "type") != "string"
        {
            errs.push(FieldError::invalid(
                path.child("properties").key(meta_field).child("type"),
                &go_quote(str_of(p, "type")),
                "must be string",
            ));
        }
    }
    if let Some(metadata) = props.and_then(|p| p.get("metadata")) {
        let meta_path = path.child("properties").key("metadata");
        if check_metadata && str_of(metadata, "type") != "object" {
            errs.push(FieldError::invalid(
                meta_path.child("type"),
                &go_quote(str_of(metadata, "type")),
                "must be object",
            ));
        }
        if level == Level::Root && !metadata_only_names(metadata) {
            errs.push(FieldError::forbidden(
                meta_path,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && properties(s).is_empty() {
        errs.push(FieldError::required(
            path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// The root `metadata` schema may restrict `name` and `generateName` only.
fn metadata_only_names(metadata: &Value) -> bool {
    let Some(m) = metadata.as_object() else {
        return true;
    };
    m.iter().all(|(key, _)| match key.as_str() {
        "type" | "default" => true,
        "properties" => {
            let names: Vec<&String> = properties(metadata).into_iter().map(|(k, _)| k).collect();
            names.iter().all(|n| *n == "name" || *n == "generateName")
        }
        other => !is_set(metadata, other),
    })
}

fn is_int_or_string_any_of(s: &Value) -> bool {
    let any_of = list(s, "anyOf");
    any_of.len() == 2
        && any_of[0] == serde_json::json!({"type": "integer"})
        && any_of[1] == serde_json::json!({"type": "string"})
}

fn value_validation(
    s: &Value,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    level: Level,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, v) in list(s, "anyOf").iter().enumerate() {
            nested(v, false, level, &path.child("anyOf").index(i), errs);
        }
    }
    for (i, v) in list(s, "allOf").iter().enumerate() {
        nested(
            v,
            skip_first_all_of_any_of && i == 0,
            level,
            &path.child("allOf").index(i),
            errs,
        );
    }
    for (i, v) in list(s, "oneOf").iter().enumerate() {
        nested(v, false, level, &path.child("oneOf").index(i), errs);
    }
    if let Some(not) = s.get("not").filter(|v| v.is_object()) {
        nested(not, false, level, &path.child("not"), errs);
    }
    let pattern = str_of(s, "pattern");
    if !pattern.is_empty()
        && let Err(problem) = regex_problem(pattern)
    {
        errs.push(FieldError::invalid(
            path.child("pattern"),
            &go_quote(pattern),
            &format!(
                "must be a valid regular expression, but isn't: error parsing regexp: {problem}"
            ),
        ));
    }
}

/// Whether `pattern` compiles, and if not Go's `regexp` complaint for the
/// common mistakes (unbalanced brackets and parentheses).
fn regex_problem(pattern: &str) -> Result<(), String> {
    if regex::Regex::new(pattern).is_ok() {
        return Ok(());
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '[' => {
                let start = i;
                i += 1;
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    i += 1;
                }
                while i < chars.len() && chars[i] != ']' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    let rest: String = chars[start..].iter().collect();
                    return Err(format!("missing closing ]: `{rest}`"));
                }
            }
            '(' => depth += 1,
            ')' => {
                if depth == 0 {
                    return Err(format!("unexpected ): `{pattern}`"));
                }
                depth -= 1;
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err(format!("missing closing ): `{pattern}`"));
    }
    if let Some(first @ ('*' | '+' | '?')) = chars.first() {
        return Err(format!(
            "missing argument to repetition operator: `{first}`"
        ));
    }
    Err(format!("invalid or unsupported syntax: `{pattern}`"))
}

/// The JSON type name kube-openapi's validator reports for a value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Defaults must be values of their node's type (the first check of
/// kube-apiserver's `ValidateDefaults`; the rest of the schema is not applied
/// to them here).
pub(crate) fn default_errors(s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(default) = s.get("default").filter(|d| !d.is_null()) {
        let actual = json_type(default);
        let ty = str_of(s, "type");
        let fits = match ty {
            "" => true,
            "number" => matches!(actual, "integer" | "number"),
            t => t == actual,
        };
        if !fits {
            errs.push(FieldError::type_invalid(
                path.child("default"),
                &go_quote(actual),
                &format!(" in body must be of type {ty}: {}", go_quote(actual)),
            ));
        }
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        default_errors(items, &path.child("items"), errs);
    }
    for (name, prop) in properties(s) {
        default_errors(prop, &path.child("properties").key(name), errs);
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        default_errors(a, &path.child("additionalProperties"), errs);
    }
}

/// A schema under `anyOf`/`allOf`/`oneOf`/`not`: value validations only.
fn nested(v: &Value, skip_any_of: bool, level: Level, path: &Path, errs: &mut Vec<FieldError>) {
    value_validation(v, skip_any_of, false, level, path, errs);
    if let Some(items) = v.get("items").filter(|i| i.is_object()) {
        nested(items, false, level, &path.child("items"), errs);
    }
    for (name, prop) in properties(v) {
        nested(
            prop,
            false,
            Level::Field,
            &path.child("properties").key(name),
            errs,
        );
    }
    let forbidden = |errs: &mut Vec<FieldError>, key: &str, detail: &str| {
        errs.push(FieldError::forbidden(path.child(key), detail));
    };
    if is_set(v, "type") {
        forbidden(errs, "type", "must be empty to be structural");
    }
    if let Some(Value::Object(_) | Value::Bool(true)) = v.get("additionalProperties") {
        forbidden(
            errs,
            "additionalProperties",
            "must be undefined to be structural",
        );
    }
    if v.get("default").is_some_and(|d| !d.is_null()) {
        forbidden(errs, "default", "must be undefined to be structural");
    }
    if is_set(v, "title") {
        forbidden(errs, "title", "must be empty to be structural");
    }
    if is_set(v, "description") {
        forbidden(errs, "description", "must be empty to be structural");
    }
    if flag(v, "nullable") {
        forbidden(errs, "nullable", "must be false to be structural");
    }
    for key in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(v, key) {
            forbidden(errs, key, "must be false to be structural");
        }
    }
    if is_set(v, "x-kubernetes-list-map-keys") {
        forbidden(
            errs,
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        );
    }
    for key in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if v.get(key).is_some_and(|x| !x.is_null()) {
            forbidden(errs, key, "must be undefined to be structural");
        }
    }
    if is_set(v, "x-kubernetes-validations") {
        forbidden(
            errs,
            "x-kubernetes-validations",
            "must be empty to be structural",
        );
    }
    if v.get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key("metadata"))
    {
        errs.push(FieldError::forbidden(
            path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Every property and items schema named under `anyOf`/`allOf`/`oneOf`/`not`
/// of the root must also be specified structurally.
fn completeness(s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    for (key, v, vpath) in junctors(s, path) {
        let _ = key;
        nested_completeness(v, Some(s), path, &vpath, errs);
    }
}

fn junctors<'a>(v: &'a Value, path: &Path) -> Vec<(&'static str, &'a Value, Path)> {
    let mut out = Vec::new();
    if let Some(not) = v.get("not").filter(|n| n.is_object()) {
        out.push(("not", not, path.child("not")));
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, x) in list(v, key).iter().enumerate() {
            out.push((key, x, path.child(key).index(i)));
        }
    }
    out
}

fn nested_completeness(
    v: &Value,
    s: Option<&Value>,
    spath: &Path,
    vpath: &Path,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            spath.clone(),
            &format!("because it is defined in {vpath}"),
        ));
        return;
    };
    for (_, x, xpath) in junctors(v, vpath) {
        nested_completeness(x, Some(s), spath, &xpath, errs);
    }
    if let Some(items) = v.get("items").filter(|i| i.is_object()) {
        nested_completeness(
            items,
            s.get("items").filter(|i| i.is_object()),
            &spath.child("items"),
            &vpath.child("items"),
            errs,
        );
    }
    let structural = s.get("properties").and_then(Value::as_object);
    for (name, prop) in properties(v) {
        match structural.and_then(|p| p.get(name)) {
            Some(sprop) => nested_completeness(
                prop,
                Some(sprop),
                &spath.child("properties").key(name),
                &vpath.child("properties").key(name),
                errs,
            ),
            None => errs.push(FieldError::required(
                spath.child("properties").key(name),
                &format!(
                    "because it is defined in {}",
                    vpath.child("properties").key(name)
                ),
            )),
        }
    }
}
