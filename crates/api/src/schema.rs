//! Schema adjustments that make the generated OpenAPI schemas what a Kubernetes API server
//! understands.

use schemars::Schema;
use schemars::transform::transform_subschemas;

/// Integer formats: Kubernetes knows `int32` and `int64` only, and warns of any other
/// (`unrecognized format "uint32"`) while ignoring it. Unsigned Rust integers are declared
/// `int64` (schemars keeps their `minimum: 0`); none of tenantplane's counts comes near
/// `i64::MAX`.
pub(crate) fn kubernetes_integer_formats(schema: &mut Schema) {
    transform_subschemas(&mut kubernetes_integer_formats, schema);
    let unsigned = schema
        .get("format")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|format| format.starts_with("uint"));
    if unsigned {
        schema.insert("format".into(), "int64".into());
    }
}
