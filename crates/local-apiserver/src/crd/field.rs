//! Field errors as apimachinery's `field.ErrorList` prints them: a [`Path`] (`spec.versions[0]`),
//! the error's type and detail, and bad values quoted as Go quotes them ([`go_quote`]).

use std::fmt;

/// A field path printed as kube-apiserver prints `field.Path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn root(name: &str) -> Self {
        Self(name.to_string())
    }

    pub(crate) fn child(&self, name: &str) -> Self {
        Self(format!("{}.{name}", self.0))
    }

    pub(crate) fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    pub(crate) fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `field.Error`: type, path, the bad value as Go renders it, and detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub(crate) kind: &'static str,
    pub(crate) field: Path,
    pub(crate) body: String,
}

impl FieldError {
    fn new(kind: &'static str, field: Path, head: &str, value: Option<&str>, detail: &str) -> Self {
        let mut body = head.to_string();
        if let Some(value) = value {
            body.push_str(": ");
            body.push_str(value);
        }
        if !detail.is_empty() {
            body.push_str(": ");
            body.push_str(detail);
        }
        Self { kind, field, body }
    }

    pub(crate) fn required(field: Path, detail: &str) -> Self {
        Self::new("FieldValueRequired", field, "Required value", None, detail)
    }

    pub(crate) fn forbidden(field: Path, detail: &str) -> Self {
        Self::new("FieldValueForbidden", field, "Forbidden", None, detail)
    }

    /// `value` is rendered as Go renders a bad value (`"text"`, `true`, JSON).
    pub(crate) fn invalid(field: Path, value: &str, detail: &str) -> Self {
        Self::new(
            "FieldValueInvalid",
            field,
            "Invalid value",
            Some(value),
            detail,
        )
    }

    pub(crate) fn type_invalid(field: Path, value: &str, detail: &str) -> Self {
        Self::new(
            "FieldValueTypeInvalid",
            field,
            "Invalid value",
            Some(value),
            detail,
        )
    }

    pub(crate) fn not_supported(field: Path, value: &str, supported: &[&str]) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = format!("supported values: {}", quoted.join(", "));
        Self::new(
            "FieldValueNotSupported",
            field,
            "Unsupported value",
            Some(&go_quote(value)),
            &detail,
        )
    }

    pub(crate) fn internal(field: Path, detail: &str) -> Self {
        Self::new("InternalError", field, "Internal error", None, detail)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body)
    }
}

/// Go's `%q` of a string.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
