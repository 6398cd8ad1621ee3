//! Label and field selectors as list and watch accept them
//! (`labelSelector=app=web,tier!=db,env in (a,b),!legacy`,
//! `fieldSelector=metadata.name=web`).

use serde_json::Value;

use crate::storage::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_set(key: &str, rest: &str, original: &str) -> ApiResult<(String, Vec<String>)> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: {original}: expected a (value,...) set"
            ))
        })?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.trim().to_string(), values))
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let requirement = if let Some((k, v)) = term.split_once("!=") {
                LabelRequirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                LabelRequirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                LabelRequirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                let (k, values) = parse_set(k, rest, term)?;
                LabelRequirement::NotIn(k, values)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                let (k, values) = parse_set(k, rest, term)?;
                LabelRequirement::In(k, values)
            } else if let Some(k) = term.strip_prefix('!') {
                LabelRequirement::DoesNotExist(k.trim().into())
            } else if term.contains(' ') || term.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {term}"
                )));
            } else {
                LabelRequirement::Exists(term.into())
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub fn from_object(selector: &Value) -> ApiResult<Self> {
        let mut requirements: Vec<LabelRequirement> = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                LabelRequirement::Equals(k.clone(), v.as_str().unwrap_or_default().into())
            })
            .collect();
        for e in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            requirements.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => LabelRequirement::In(key, values),
                Some("NotIn") => LabelRequirement::NotIn(key, values),
                Some("Exists") => LabelRequirement::Exists(key),
                Some("DoesNotExist") => LabelRequirement::DoesNotExist(key),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            });
        }
        Ok(Self(requirements))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// A parsed field selector: `field=value` / `field!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Field selector labels every kind supports.
const COMMON_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// Extra field labels per kind, as the real API server registers them.
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter for objects of `kind`.
    pub fn parse(text: &str, kind: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for term in split_terms(text) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !COMMON_FIELDS.contains(&field) && !kind_fields(kind).contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether the object's fields satisfy every term (a missing field is "").
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = match field.as_str() {
                // Events: the source component, or the reporting controller
                // of new-style Events that have none.
                "source" if object.pointer("/source/component").is_none_or(|c| c == "") => {
                    "/reportingComponent".to_string()
                }
                "source" => "/source/component".to_string(),
                _ => format!("/{}", field.replace('.', "/")),
            };
            let actual = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let obj = json!({"metadata": {"labels": {"app": "web", "env": "prod"}}});
        let yes = [
            "app=web",
            "app==web,env!=dev",
            "env in (prod, staging)",
            "tier notin (db)",
            "app",
            "!tier",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        let no = ["app=db", "env notin (prod)", "!app", "tier", "env in (dev)"];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
    }

    #[test]
    fn field_selector_rejects_unknown_fields() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=a", "ConfigMap")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("status.phase=Running", "Pod")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=ns", "Pod")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=a", "ConfigMap")
                .unwrap_err()
                .code,
            400
        );
    }
}
