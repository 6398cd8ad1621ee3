//! API errors and their wire form: every failure leaves the server as a
//! Kubernetes `Status` object with the HTTP code and `reason` a real API
//! server would use, so clients (kube-rs, kubectl) react to them unchanged
//! (the HTTP layer sends it: `crate::http::router`).

use serde_json::{Value, json};

/// One cause inside `Status.details.causes` (field errors, SSA conflicts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable kind, e.g. `FieldValueInvalid` or `FieldManagerConflict`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Dotted field path the cause is about.
    pub field: String,
}

impl Cause {
    /// `field.Invalid`: `Invalid value: "VALUE": DETAIL`.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".to_string(),
            message: format!("Invalid value: {value:?}: {detail}"),
            field: field.to_string(),
        }
    }

    /// `field.Invalid` with a value that is not a string, rendered as JSON.
    pub fn invalid_json(field: &str, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".to_string(),
            message: format!("Invalid value: {value}: {detail}"),
            field: field.to_string(),
        }
    }

    /// `field.Required`: `Required value` and the detail, if any.
    pub fn required(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueRequired".to_string(),
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
            field: field.to_string(),
        }
    }
}

/// A failed API call: rendered as a `Status` with `status: Failure`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `AlreadyExists`, `Conflict`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details` (name, group, kind, causes), when known.
    pub details: Option<Box<Details>>,
}

/// `Status.details`: the object the error is about and the causes.
#[derive(Debug, Clone, Default)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub causes: Vec<Cause>,
}

/// Result type of every API operation.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes: Vec::new(),
        }));
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized, as kube-apiserver answers credentials that do not authenticate.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 Forbidden for a named object of a resource, as admission refuses it (`pods "web"
    /// is forbidden: WHY`).
    pub fn forbidden_object(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = qualified_resource(group, resource);
        Self::new(
            403,
            "Forbidden",
            format!("{qualified} \"{name}\" is forbidden: {why}"),
        )
        .with_details(group, resource, name)
    }

    /// 404 NotFound for a named object of a resource (`pods "web" not found`).
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified_resource(group, resource);
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .with_details(group, resource, name)
    }

    /// 404 NotFound for a path that names no resource at all.
    pub fn unknown_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified_resource(group, resource);
        Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = qualified_resource(group, resource);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict for server-side apply field ownership, one cause per field.
    pub fn apply_conflict(conflicts: Vec<(String, String)>) -> Self {
        let summary: Vec<String> = conflicts
            .iter()
            .map(|(manager, field)| format!("conflict with \"{manager}\": {field}"))
            .collect();
        let message = format!(
            "Apply failed with {} conflict(s): {}",
            conflicts.len(),
            summary.join("; ")
        );
        let causes = conflicts
            .into_iter()
            .map(|(manager, field)| Cause {
                reason: "FieldManagerConflict".to_string(),
                message: format!("conflict with \"{manager}\""),
                field,
            })
            .collect();
        let mut err = Self::new(409, "Conflict", message);
        err.details = Some(Box::new(Details {
            causes,
            ..Details::default()
        }));
        err
    }

    /// 410 Gone: the requested resourceVersion is older than the watch history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (built-in kinds), application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 422 Invalid with one field cause; the cause's reason follows the
    /// message (`Required value...` is `FieldValueRequired`, and so on).
    pub fn invalid(group: &str, kind: &str, name: &str, field: &str, message: &str) -> Self {
        let reason = [
            ("Required value", "FieldValueRequired"),
            ("Forbidden", "FieldValueForbidden"),
            ("Unsupported value", "FieldValueNotSupported"),
            ("Duplicate value", "FieldValueDuplicate"),
            ("Too long", "FieldValueTooLong"),
        ]
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason);
        Self::invalid_causes(
            group,
            kind,
            name,
            vec![Cause {
                reason: reason.to_string(),
                message: message.to_string(),
                field: field.to_string(),
            }],
        )
    }

    /// 422 Invalid as `NewInvalid` renders a field error list: the message
    /// names the kind qualified by its group (`Event.events.k8s.io "x" is
    /// invalid: ...`) and lists `field: message` (in brackets when there are
    /// several distinct ones); one cause per error.
    pub fn invalid_causes(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut listed: Vec<String> = Vec::new();
        for cause in &causes {
            let line = format!("{}: {}", cause.field, cause.message);
            if !listed.contains(&line) {
                listed.push(line);
            }
        }
        let message = match listed.as_slice() {
            [] => format!("{qualified_kind} \"{name}\" is invalid"),
            [one] => format!("{qualified_kind} \"{name}\" is invalid: {one}"),
            many => format!(
                "{qualified_kind} \"{name}\" is invalid: [{}]",
                many.join(", ")
            ),
        };
        let mut err = Self::new(422, "Invalid", message).with_details(group, kind, name);
        if let Some(details) = err.details.as_mut() {
            details.causes = causes;
        }
        err
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object a real API server would send.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            let mut d = serde_json::Map::new();
            if !details.name.is_empty() {
                d.insert("name".into(), json!(details.name));
            }
            if !details.group.is_empty() {
                d.insert("group".into(), json!(details.group));
            }
            if !details.kind.is_empty() {
                d.insert("kind".into(), json!(details.kind));
            }
            if !details.causes.is_empty() {
                let causes: Vec<Value> = details
                    .causes
                    .iter()
                    .map(|c| {
                        // Empty fields are omitted, as Go's `omitempty` does.
                        let mut cause = serde_json::Map::new();
                        for (key, value) in [
                            ("reason", &c.reason),
                            ("message", &c.message),
                            ("field", &c.field),
                        ] {
                            if !value.is_empty() {
                                cause.insert(key.into(), json!(value));
                            }
                        }
                        Value::Object(cause)
                    })
                    .collect();
                d.insert("causes".into(), Value::Array(causes));
            }
            status["details"] = Value::Object(d);
        }
        status
    }
}

/// `pods` for the core group, `ingresses.networking.k8s.io` otherwise.
fn qualified_resource(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}
