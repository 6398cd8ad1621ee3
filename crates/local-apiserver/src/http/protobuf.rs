//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), which
//! kubectl's typed commands send (`kubectl create namespace|deployment|configmap|...`,
//! `kubectl auth can-i`), turned into the JSON objects the server stores.
//!
//! A body is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` envelope whose
//! `typeMeta` names the kind and whose `raw` holds the message. Both are decoded with
//! prost-reflect against the descriptors `build.rs` compiles from the Kubernetes `.proto`
//! files the k8s-rs-pb crate ships (its packages drop Kubernetes' `k8s.io.` prefix:
//! `api.core.v1.Pod`): there is no code per type. Kubernetes protobuf field names are the
//! JSON field names, so a message becomes JSON field by field; the few types with their own
//! JSON form (Time, MicroTime, Quantity, IntOrString, RawExtension, FieldsV1, the
//! apiextensions JSON schema types) are converted by name.
//!
//! Where Go's JSON differs from plain protobuf, the OpenAPI schema of the message's type
//! (k8s-openapi's, as `http/openapi.rs` publishes them; `api.core.v1.Volume` is
//! `io.k8s.api.core.v1.Volume`) says so. Protobuf carries every plain Go field, zero or not,
//! while JSON leaves out the zero values of `omitempty` fields: a zero scalar (or a zero
//! Time) is dropped unless the schema lists the field as `required` (Kubernetes' required
//! fields are those without `omitempty`). And embedded structs (`json:",inline"`, such as a
//! Volume's VolumeSource) have their fields put in the parent object: a message field that
//! is not a property of the parent's schema, but whose own fields are, is inlined. A body
//! thus reads as the same object in either encoding.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use data_encoding::BASE64;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value,
};
use serde_json::{Map, Value as Json, json};

use crate::http::openapi;
use crate::storage::error::{ApiError, ApiResult};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

const UNKNOWN: &str = "apimachinery.pkg.runtime.Unknown";
const META_V1: &str = "apimachinery.pkg.apis.meta.v1";
const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const APIEXTENSIONS_V1: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1";

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(
        include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes_descriptor.bin")).as_slice(),
    )
    .expect("the descriptor set build.rs compiled is valid")
});

/// How a message's JSON differs from plain protobuf, read from its type's OpenAPI schema.
#[derive(Debug, Default)]
struct JsonRules {
    /// Fields whose zero value JSON keeps: the schema's `required` (no `omitempty` in Go).
    keep_zero: HashSet<String>,
    /// Embedded Go structs, at any depth of embedding, whose fields JSON puts in the object.
    inline: HashSet<String>,
    /// Fields whose protobuf name is their Go name rather than their JSON name (a
    /// ValidatingAdmissionPolicy Variable's `Name` is `name` in JSON).
    rename: HashMap<String, String>,
}

/// The rules of every message that has a schema, keyed by message name.
static JSON_RULES: LazyLock<HashMap<String, JsonRules>> = LazyLock::new(|| {
    let definitions = openapi::builtin_definitions();
    POOL.all_messages()
        .filter_map(|message| {
            let schema = definitions.get(&definition_name(message.full_name()))?;
            let properties: HashSet<&str> = schema
                .get("properties")
                .and_then(Json::as_object)
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let mut rules = JsonRules {
                keep_zero: schema
                    .get("required")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|name| name.as_str().map(str::to_string))
                    .collect(),
                ..JsonRules::default()
            };
            rules.read_fields(&message, &properties, 0);
            Some((message.full_name().to_string(), rules))
        })
        .collect()
});

impl JsonRules {
    /// Reads the fields of a message (or of a struct embedded in it) that are not properties
    /// of the message's schema: embedded structs, and fields named after their Go name.
    fn read_fields(
        &mut self,
        message: &MessageDescriptor,
        properties: &HashSet<&str>,
        depth: usize,
    ) {
        for field in message.fields() {
            let name = field.name();
            if properties.contains(name) {
                continue;
            }
            if let Some(embedded) = embedded_struct(&field, properties, depth) {
                self.inline.insert(name.to_string());
                self.read_fields(&embedded, properties, depth + 1);
            } else if let Some(json_name) = go_name_property(name, properties) {
                self.rename.insert(name.to_string(), json_name.to_string());
            }
        }
    }
}

/// The OpenAPI definition name of a message: `api.core.v1.Volume` is
/// `io.k8s.api.core.v1.Volume`, apiextensions' package is spelled `apiextensions-apiserver`.
fn definition_name(message: &str) -> String {
    match message.strip_prefix("apiextensions_apiserver.") {
        Some(rest) => format!("io.k8s.apiextensions-apiserver.{rest}"),
        None => format!("io.k8s.{message}"),
    }
}

/// The property a field named after its Go field (`Name`) stands for (`name`).
fn go_name_property<'a>(name: &str, properties: &HashSet<&'a str>) -> Option<&'a str> {
    let mut chars = name.chars();
    let first = chars.next().filter(char::is_ascii_uppercase)?;
    let json_name = format!("{}{}", first.to_ascii_lowercase(), chars.as_str());
    properties.get(json_name.as_str()).copied()
}

/// The struct a field embeds in the message whose schema has `properties`: a single message
/// that is not itself a property, but whose fields are (or are embedded structs in turn, as
/// RuleWithOperations' Rule in NamedRuleWithOperations).
fn embedded_struct(
    field: &FieldDescriptor,
    properties: &HashSet<&str>,
    depth: usize,
) -> Option<MessageDescriptor> {
    let Kind::Message(message) = field.kind() else {
        return None;
    };
    if depth > 3 || field.is_list() || field.is_map() || properties.contains(field.name()) {
        return None;
    }
    let embedded = message.fields().len() > 0
        && message.fields().all(|f| {
            properties.contains(f.name())
                || go_name_property(f.name(), properties).is_some()
                || embedded_struct(&f, properties, depth + 1).is_some()
        });
    embedded.then_some(message)
}

/// Whether a `Content-Type` (without parameters) is Kubernetes protobuf.
pub fn is_protobuf(media_type: &str) -> bool {
    media_type.eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Decodes a protobuf body into a JSON object. `api_version` and `kind` name the type to
/// expect when the envelope does not say (it always does when client-go sends it).
pub fn decode(body: &[u8], api_version: &str, kind: &str) -> ApiResult<Json> {
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request(
            "the body is not a Kubernetes protobuf message: it does not start with the \"k8s\\0\" prefix",
        )
    })?;
    let envelope = decode_message(POOL.get_message_by_name(UNKNOWN), raw, "runtime.Unknown")?;
    let string = |message: &DynamicMessage, name: &str| -> String {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let (envelope_version, envelope_kind) = match envelope.get_field_by_name("typeMeta").as_deref()
    {
        Some(Value::Message(meta)) => (string(meta, "apiVersion"), string(meta, "kind")),
        _ => Default::default(),
    };
    let content_encoding = string(&envelope, "contentEncoding");
    if !content_encoding.is_empty() {
        return Err(ApiError::unsupported_media_type(&format!(
            "{MEDIA_TYPE} with contentEncoding {content_encoding:?}"
        )));
    }
    let inner = match envelope.get_field_by_name("raw").as_deref() {
        Some(Value::Bytes(bytes)) => bytes.clone(),
        _ => Default::default(),
    };
    let api_version = if envelope_version.is_empty() {
        api_version
    } else {
        &envelope_version
    };
    let kind = if envelope_kind.is_empty() {
        kind
    } else {
        &envelope_kind
    };
    let mut object = match string(&envelope, "contentType").as_str() {
        "" => {
            let descriptor = message_for(api_version, kind).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "no kind \"{kind}\" is registered for version \"{api_version}\" in protobuf (this local test server decodes the groups it serves)"
                ))
            })?;
            let message = decode_message(Some(descriptor), &inner, kind)?;
            message_json(&message)?.unwrap_or_else(|| json!({}))
        }
        "application/json" => serde_json::from_slice(&inner).map_err(|e| {
            ApiError::bad_request(format!("the embedded JSON object is not valid: {e}"))
        })?,
        other => {
            return Err(ApiError::unsupported_media_type(&format!(
                "{MEDIA_TYPE} wrapping {other:?}"
            )));
        }
    };
    if let Json::Object(map) = &mut object {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(object)
}

fn decode_message(
    descriptor: Option<MessageDescriptor>,
    bytes: &[u8],
    what: &str,
) -> ApiResult<DynamicMessage> {
    let descriptor =
        descriptor.ok_or_else(|| ApiError::internal(format!("no descriptor for {what}")))?;
    DynamicMessage::decode(descriptor, bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body could not be decoded as a Kubernetes protobuf {what}: {e}"
        ))
    })
}

/// The message of a kind: `api.{first label of the group}.{version}.{Kind}`, the
/// apiextensions package, or the meta/v1 package (DeleteOptions, Status, ...), which every
/// group version carries.
fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group {
        "" => format!("api.core.{version}"),
        "apiextensions.k8s.io" => APIEXTENSIONS_V1.replace(".v1", &format!(".{version}")),
        "meta.k8s.io" => META_V1.replace(".v1", &format!(".{version}")),
        group => format!("api.{}.{version}", group.split('.').next().unwrap_or(group)),
    };
    POOL.get_message_by_name(&format!("{package}.{kind}"))
        .or_else(|| POOL.get_message_by_name(&format!("{META_V1}.{kind}")))
}

/// A message as Kubernetes JSON; `None` for a value JSON leaves out (a zero Time).
fn message_json(message: &DynamicMessage) -> ApiResult<Option<Json>> {
    let descriptor = message.descriptor();
    let field = |name: &str| message.get_field_by_name(name);
    match descriptor.full_name() {
        TIME | MICRO_TIME => {
            let seconds = field("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
            let nanos = field("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
            if seconds == 0 && nanos == 0 {
                return Ok(None);
            }
            let time = chrono::DateTime::from_timestamp(seconds, u32::try_from(nanos).unwrap_or(0))
                .ok_or_else(|| ApiError::bad_request(format!("time out of range: {seconds}s")))?;
            let format = if descriptor.full_name() == TIME {
                "%Y-%m-%dT%H:%M:%SZ"
            } else {
                "%Y-%m-%dT%H:%M:%S%.6fZ"
            };
            return Ok(Some(json!(time.format(format).to_string())));
        }
        QUANTITY => {
            let text = field("string").and_then(|v| v.as_str().map(str::to_string));
            return Ok(Some(json!(text.unwrap_or_default())));
        }
        INT_OR_STRING => {
            return Ok(Some(match field("type").and_then(|v| v.as_i64()) {
                Some(1) => json!(field("strVal").and_then(|v| v.as_str().map(str::to_string))),
                _ => json!(field("intVal").and_then(|v| v.as_i32()).unwrap_or(0)),
            }));
        }
        RAW_EXTENSION | FIELDS_V1 => {
            let name = if descriptor.full_name() == FIELDS_V1 {
                "Raw"
            } else {
                "raw"
            };
            return raw_json(field(name).as_deref());
        }
        name if name.starts_with(APIEXTENSIONS_V1) => {
            if let Some(json) = schema_json(message, &name[APIEXTENSIONS_V1.len() + 1..])? {
                return Ok(Some(json));
            }
        }
        _ => {}
    }
    // Named slices (authorization's ExtraValue, meta's Verbs) are wrapped in a message with
    // one repeated `items` field; their JSON is the slice itself.
    let mut fields = descriptor.fields();
    if let (Some(only), None) = (fields.next(), fields.next())
        && only.name() == "items"
        && only.is_list()
    {
        return Ok(Some(
            value_json(field("items").as_deref(), false)?.unwrap_or(json!([])),
        ));
    }
    let mut object = Map::new();
    fields_json(message, JSON_RULES.get(descriptor.full_name()), &mut object)?;
    Ok(Some(Json::Object(object)))
}

/// The fields of a message into a JSON object, following the rules of the message's schema
/// (the embedding message's, for an embedded struct).
fn fields_json(
    message: &DynamicMessage,
    rules: Option<&JsonRules>,
    object: &mut Map<String, Json>,
) -> ApiResult<()> {
    let descriptor = message.descriptor();
    let schema_props = descriptor.full_name().ends_with(".JSONSchemaProps")
        && descriptor.full_name().starts_with(APIEXTENSIONS_V1);
    for (field, value) in message.fields() {
        let name = field.name();
        if let (Some(rules), Value::Message(embedded)) = (rules, value)
            && rules.inline.contains(name)
        {
            fields_json(embedded, Some(rules), object)?;
            continue;
        }
        let keep = rules.is_some_and(|r| r.keep_zero.contains(name));
        let json = match value_json(Some(value), keep)? {
            Some(json) => json,
            // A required zero Time or empty RawExtension: Go writes null.
            None if keep => Json::Null,
            None => continue,
        };
        let key = if schema_props {
            schema_field_name(name)
        } else {
            match rules.and_then(|r| r.rename.get(name)) {
                Some(json_name) => json_name.clone(),
                None => name.to_string(),
            }
        };
        object.insert(key, json);
    }
    Ok(())
}

/// A field's value; `None` for a zero scalar JSON leaves out (unless `keep_zero`).
fn value_json(value: Option<&Value>, keep_zero: bool) -> ApiResult<Option<Json>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let zero = match value {
        Value::Bool(b) => !b,
        Value::I32(n) | Value::EnumNumber(n) => *n == 0,
        Value::I64(n) => *n == 0,
        Value::U32(n) => *n == 0,
        Value::U64(n) => *n == 0,
        Value::F32(n) => *n == 0.0,
        Value::F64(n) => *n == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::Message(_) | Value::List(_) | Value::Map(_) => false,
    };
    if zero && !keep_zero {
        return Ok(None);
    }
    Ok(match value {
        Value::Bool(b) => Some(json!(b)),
        Value::I32(n) | Value::EnumNumber(n) => Some(json!(n)),
        Value::I64(n) => Some(json!(n)),
        Value::U32(n) => Some(json!(n)),
        Value::U64(n) => Some(json!(n)),
        Value::F32(n) => Some(json!(n)),
        Value::F64(n) => Some(json!(n)),
        Value::String(s) => Some(json!(s)),
        Value::Bytes(b) => Some(json!(BASE64.encode(b))),
        Value::Message(m) => message_json(m)?,
        Value::List(items) => Some(Json::Array(
            items
                .iter()
                .map(|item| Ok(value_json(Some(item), true)?.unwrap_or(Json::Null)))
                .collect::<ApiResult<_>>()?,
        )),
        Value::Map(entries) => {
            let mut map = Map::new();
            for (key, item) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                map.insert(key, value_json(Some(item), true)?.unwrap_or(Json::Null));
            }
            Some(Json::Object(map))
        }
    })
}

/// Raw JSON bytes embedded in a message (RawExtension, FieldsV1, apiextensions JSON); an
/// embedded protobuf object (RawExtension of a typed object) is decoded in turn.
fn raw_json(raw: Option<&Value>) -> ApiResult<Option<Json>> {
    let Some(Value::Bytes(bytes)) = raw else {
        return Ok(None);
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.starts_with(MAGIC) {
        return decode(bytes, "", "").map(Some);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| ApiError::bad_request(format!("an embedded JSON value is not valid: {e}")))
}

/// The apiextensions types whose JSON is not their fields: `JSON` (raw JSON) and the
/// `JSONSchemaPropsOr*` unions (a schema, or a bool / an array).
fn schema_json(message: &DynamicMessage, name: &str) -> ApiResult<Option<Json>> {
    let field = |name: &str| message.get_field_by_name(name);
    let schema = || -> ApiResult<Option<Json>> {
        match field("schema").as_deref() {
            Some(Value::Message(m)) if message.has_field_by_name("schema") => message_json(m),
            _ => Ok(None),
        }
    };
    Ok(match name {
        "JSON" => Some(raw_json(field("raw").as_deref())?.unwrap_or(Json::Null)),
        "JSONSchemaPropsOrBool" => match schema()? {
            Some(schema) => Some(schema),
            None => Some(json!(
                field("allows").and_then(|v| v.as_bool()).unwrap_or(false)
            )),
        },
        "JSONSchemaPropsOrArray" => match schema()? {
            Some(schema) => Some(schema),
            None => Some(value_json(field("jSONSchemas").as_deref(), true)?.unwrap_or(json!([]))),
        },
        "JSONSchemaPropsOrStringArray" => match schema()? {
            Some(schema) => Some(schema),
            None => Some(value_json(field("property").as_deref(), true)?.unwrap_or(json!([]))),
        },
        _ => None,
    })
}

/// JSONSchemaProps fields whose protobuf names are not their JSON names: `$ref`,
/// `$schema` and the `x-kubernetes-*` extensions.
fn schema_field_name(name: &str) -> String {
    match name {
        "ref" => "$ref".into(),
        "schema" => "$schema".into(),
        _ => match name.strip_prefix("xKubernetes") {
            Some(rest) => {
                let mut out = String::from("x-kubernetes");
                for c in rest.chars() {
                    if c.is_ascii_uppercase() {
                        out.push('-');
                    }
                    out.push(c.to_ascii_lowercase());
                }
                out
            }
            None => name.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rules_come_from_the_schemas() {
        let rules = |message: &str| {
            JSON_RULES
                .get(message)
                .unwrap_or_else(|| panic!("no schema for {message}"))
        };
        // Embedded Go structs, found by their fields being the parent's properties.
        for (message, field) in [
            ("api.core.v1.Volume", "volumeSource"),
            ("api.core.v1.Probe", "handler"),
            ("api.core.v1.ConfigMapKeySelector", "localObjectReference"),
            ("api.core.v1.EphemeralContainer", "ephemeralContainerCommon"),
            (
                "api.admissionregistration.v1.NamedRuleWithOperations",
                "ruleWithOperations",
            ),
            // Embedded in turn, in the embedded RuleWithOperations.
            (
                "api.admissionregistration.v1.NamedRuleWithOperations",
                "rule",
            ),
        ] {
            assert!(rules(message).inline.contains(field), "{message}.{field}");
        }
        let inline: usize = JSON_RULES.values().map(|r| r.inline.len()).sum();
        assert!(inline < 40, "only embedded structs are inlined: {inline}");
        // Required fields keep their zero values; others (omitempty) drop them.
        let port = rules("api.core.v1.ContainerPort");
        assert!(port.keep_zero.contains("containerPort"));
        assert!(!port.keep_zero.contains("hostPort"));
        assert!(!rules("api.core.v1.Volume").inline.contains("name"));
        // Protobuf names that are Go names.
        let variable = rules("api.admissionregistration.v1.Variable");
        assert_eq!(variable.rename["Name"], "name");
        assert_eq!(variable.rename["Expression"], "expression");
        assert!(
            rules(&format!("{APIEXTENSIONS_V1}.CustomResourceDefinitionSpec"))
                .keep_zero
                .contains("group")
        );
    }

    #[test]
    fn schema_field_names() {
        assert_eq!(schema_field_name("ref"), "$ref");
        assert_eq!(
            schema_field_name("xKubernetesPreserveUnknownFields"),
            "x-kubernetes-preserve-unknown-fields"
        );
        assert_eq!(schema_field_name("properties"), "properties");
    }

    #[test]
    fn bodies_without_the_prefix_are_rejected() {
        let err = decode(b"{}", "v1", "ConfigMap").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("k8s\\0"), "{}", err.message);
    }
}
