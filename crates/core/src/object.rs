//! Tenant objects as the core sees them: an identity plus the untyped object.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who a tenant object is: enough to find it again in the tenant control plane.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceIdentity {
    /// `v1`, `networking.k8s.io/v1`, ...
    pub api_version: String,
    /// `Pod`, `Service`, ...
    pub kind: String,
    /// Namespace in the tenant control plane.
    pub namespace: String,
    /// Name in the tenant control plane.
    pub name: String,
    /// uid in the tenant control plane; empty when unknown (objects read from files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl SourceIdentity {
    /// The API group: `""` for the core group.
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }
}

impl fmt::Display for SourceIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// The API group of an apiVersion (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// A tenant object: its identity and the object itself as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantObject {
    /// Identity, read from apiVersion, kind and metadata.
    pub identity: SourceIdentity,
    /// metadata.resourceVersion, when the object came from an API server.
    pub resource_version: Option<String>,
    /// The whole object.
    pub object: Value,
}

/// Why a document is not a usable tenant object. Each names the offending field.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ObjectError {
    /// The document is not a JSON/YAML mapping.
    #[error("the document is not an object (found {found})")]
    NotAnObject {
        /// What was found instead.
        found: &'static str,
    },
    /// A required field is absent or empty.
    #[error("{field} is required")]
    Missing {
        /// JSON path of the field.
        field: &'static str,
    },
    /// A field has the wrong type or an invalid value.
    #[error("{field} is invalid: {problem}")]
    Invalid {
        /// JSON path of the field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl ObjectError {
    /// The JSON path of the offending field (`""` for the whole document).
    pub fn field(&self) -> &'static str {
        match self {
            ObjectError::NotAnObject { .. } => "",
            ObjectError::Missing { field } | ObjectError::Invalid { field, .. } => field,
        }
    }
}

/// Namespace assumed for a namespaced object that names none, as `kubectl apply` does with the
/// default context.
pub const DEFAULT_NAMESPACE: &str = "default";

impl TenantObject {
    /// Reads the identity of an object. A missing namespace means [`DEFAULT_NAMESPACE`].
    pub fn from_value(object: Value) -> Result<Self, ObjectError> {
        let map = object.as_object().ok_or(ObjectError::NotAnObject {
            found: json_type(&object),
        })?;
        let api_version = required_str(map.get("apiVersion"), "apiVersion")?;
        if api_version.split('/').count() > 2 || api_version.ends_with('/') {
            return Err(ObjectError::Invalid {
                field: "apiVersion",
                problem: format!("{api_version:?} is not of the form [group/]version"),
            });
        }
        let kind = required_str(map.get("kind"), "kind")?;
        let metadata = match map.get("metadata") {
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(ObjectError::Invalid {
                    field: "metadata",
                    problem: format!("expected an object, found {}", json_type(other)),
                });
            }
            None => return Err(ObjectError::Missing { field: "metadata" }),
        };
        let name = required_str(metadata.get("name"), "metadata.name")?;
        let namespace = optional_str(metadata.get("namespace"), "metadata.namespace")?
            .unwrap_or(DEFAULT_NAMESPACE);
        let uid = optional_str(metadata.get("uid"), "metadata.uid")?.unwrap_or_default();
        let resource_version =
            optional_str(metadata.get("resourceVersion"), "metadata.resourceVersion")?
                .map(str::to_string);
        let identity = SourceIdentity {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        };
        Ok(TenantObject {
            identity,
            resource_version,
            object,
        })
    }

    /// The object's labels (empty when it has none).
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        string_map(&self.object, "labels")
    }

    /// The object's annotations (empty when it has none).
    pub fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        string_map(&self.object, "annotations")
    }
}

fn string_map<'a>(object: &'a Value, field: &str) -> impl Iterator<Item = (&'a str, &'a str)> {
    string_entries(object.get("metadata"), field)
}

/// The string entries of the map `field` of `metadata` (labels or annotations).
pub(crate) fn string_entries<'a>(
    metadata: Option<&'a Value>,
    field: &str,
) -> impl Iterator<Item = (&'a str, &'a str)> + Clone {
    metadata
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
}

fn required_str<'a>(value: Option<&'a Value>, field: &'static str) -> Result<&'a str, ObjectError> {
    match optional_str(value, field)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ObjectError::Missing { field }),
    }
}

fn optional_str<'a>(
    value: Option<&'a Value>,
    field: &'static str,
) -> Result<Option<&'a str>, ObjectError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ObjectError::Invalid {
            field,
            problem: format!("expected a string, found {}", json_type(other)),
        }),
    }
}

/// The JSON type name of a value, for error messages.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identity_defaults_the_namespace_and_reads_the_group() {
        let o = TenantObject::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web"}
        }))
        .unwrap();
        assert_eq!(o.identity.namespace, "default");
        assert_eq!(o.identity.group(), "networking.k8s.io");
        assert_eq!(o.identity.to_string(), "Ingress/default/web");
    }

    #[test]
    fn errors_name_the_field() {
        let e =
            TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))
                .unwrap_err();
        assert_eq!(e.field(), "metadata.name");
        let e = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": 3}}))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "metadata.namespace is invalid: expected a string, found a number"
        );
        let e = TenantObject::from_value(json!(["x"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the document is not an object (found a list)"
        );
    }
}
