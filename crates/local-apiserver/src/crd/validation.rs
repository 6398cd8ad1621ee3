//! Validation of CustomResourceDefinitions on create and update, as
//! kube-apiserver does it (apiextensions-apiserver
//! `pkg/apis/apiextensions/validation/validation.go`), so that a CRD a real
//! server refuses is refused here too, with the same field paths and messages:
//!
//! - the OpenAPI schema rules (no `$ref`, `definitions`, `additionalProperties`
//!   with `properties`, list and map types, ...),
//! - structural schemas ([`crate::crd::structural`]),
//! - `x-kubernetes-validations`: every rule compiles as CEL with `self` (and
//!   `oldSelf` where old and new values correlate) of the node's type
//!   ([`crate::cel::check`]), and its estimated cost times the node's maximum
//!   cardinality stays within `StaticEstimatedCostLimit`, all rules of a
//!   schema within `StaticEstimatedCRDCostLimit` ([`crate::cel::cost`]),
//! - a few spec rules (name, storage version, schema present).
//!
//! As kube-apiserver, schemas are validated in the internal form of the CRD:
//! when every version has the same schema it is validated once, at
//! `spec.validation.openAPIV3Schema`, else per version at
//! `spec.versions[i].schema.openAPIV3Schema`.
//!
//! Unrecognized `format`s are accepted with a warning ([`warnings`]).

use std::sync::Arc;

use serde_json::Value;

use crate::cel::check::{self as cel_check, DeclType, Ty, schema_decl_type};
use crate::cel::cost::estimate_cost;
use crate::crd::field::{FieldError, Path, go_quote};
use crate::crd::structural::{
    convertible, default_errors, flag, is_set, properties, str_of, validate_structural,
};
use crate::storage::error::{ApiError, Cause, Details};

/// `StaticEstimatedCostLimit`: the largest estimated cost of one rule.
const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the largest total of a schema's rules.
const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;

const OPENAPI_V3_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// The 422 kube-apiserver answers: one cause per error, and the message
/// aggregating the distinct ones.
fn invalid_crd(name: &str, errs: &[FieldError]) -> ApiError {
    let mut distinct: Vec<String> = Vec::new();
    for e in errs {
        let text = e.to_string();
        if !distinct.contains(&text) {
            distinct.push(text);
        }
    }
    let aggregate = if distinct.len() == 1 {
        distinct.remove(0)
    } else {
        format!("[{}]", distinct.join(", "))
    };
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!(
            "CustomResourceDefinition.apiextensions.k8s.io {} is invalid: {aggregate}",
            go_quote(name)
        ),
        details: Some(Box::new(Details {
            name: name.to_string(),
            group: "apiextensions.k8s.io".to_string(),
            kind: "CustomResourceDefinition".to_string(),
            causes: errs
                .iter()
                .map(|e| Cause {
                    reason: e.kind.to_string(),
                    message: e.body.clone(),
                    field: e.field.to_string(),
                })
                .collect(),
        })),
    }
}

/// Validates a CRD being created (`old` is `None`) or updated; the error is
/// the 422 kube-apiserver would answer.
pub(crate) fn validate(crd: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let errs = crd_errors(crd, old);
    if errs.is_empty() {
        return Ok(());
    }
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(invalid_crd(name, &errs))
}

/// The schemas as the internal CRD holds them: one top-level schema when all
/// versions share it, else one per version.
enum Schemas<'a> {
    TopLevel(Option<&'a Value>),
    PerVersion(Vec<Option<&'a Value>>),
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn schemas(crd: &Value) -> Schemas<'_> {
    let per_version: Vec<Option<&Value>> = versions(crd)
        .iter()
        .map(|v| v.get("schema").filter(|s| !s.is_null()))
        .collect();
    match per_version.first() {
        Some(first) if per_version.iter().all(|s| s == first) => Schemas::TopLevel(*first),
        Some(_) => Schemas::PerVersion(per_version),
        None => Schemas::TopLevel(None),
    }
}

fn status_enabled(version: &Value) -> bool {
    version
        .pointer("/subresources/status")
        .is_some_and(|s| !s.is_null())
}

fn crd_errors(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec_path = Path::root("spec");
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let group = str_of(&spec, "group");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !name.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            Path::root("metadata").child("name"),
            &go_quote(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errs.push(FieldError::required(spec_path.child("group"), ""));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(
            spec_path.child("group"),
            &go_quote(group),
            "should be a domain with at least one dot",
        ));
    }
    match str_of(&spec, "scope") {
        "" => errs.push(FieldError::required(spec_path.child("scope"), "")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(FieldError::not_supported(
            spec_path.child("scope"),
            other,
            &["Cluster", "Namespaced"],
        )),
    }

    let versions = versions(crd);
    let schemas = schemas(crd);
    let old_schemas = old.map(self::versions).unwrap_or_default();
    // A version whose schema did not change keeps its rules even if they are
    // over the per-rule limit (kube-apiserver's ratcheting).
    let unchanged = |version: &str| {
        let find = |vs: &[Value]| {
            vs.iter()
                .find(|v| str_of(v, "name") == version)
                .map(|v| v.get("schema").cloned())
        };
        old.is_some() && find(versions).is_some() && find(versions) == find(old_schemas)
    };
    if let Schemas::TopLevel(None) = schemas {
        for (i, _) in versions.iter().enumerate() {
            errs.push(FieldError::required(
                spec_path
                    .child("versions")
                    .index(i)
                    .child("schema")
                    .child("openAPIV3Schema"),
                "",
            ));
        }
    }
    let mut storage = 0;
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let version_name = str_of(version, "name");
        if flag(version, "storage") {
            storage += 1;
        }
        if seen.contains(&version_name) {
            unique = false;
        }
        seen.push(version_name);
        if let Schemas::PerVersion(per_version) = &schemas {
            let path = spec_path.child("versions").index(i).child("schema");
            match per_version[i] {
                Some(schema) => errs.extend(validation_errors(
                    schema,
                    status_enabled(version),
                    unchanged(version_name),
                    &path,
                )),
                None => errs.push(FieldError::required(path.child("openAPIV3Schema"), "")),
            }
        }
    }
    if !unique {
        errs.push(FieldError::invalid(
            spec_path.child("versions"),
            &go_json(&spec["versions"]),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errs.push(FieldError::invalid(
            spec_path.child("versions"),
            &go_json(&spec["versions"]),
            "must have exactly one version marked as storage version",
        ));
    }
    if plural.is_empty() {
        errs.push(FieldError::required(
            spec_path.child("names").child("plural"),
            "",
        ));
    }
    if crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        errs.push(FieldError::required(
            spec_path.child("names").child("kind"),
            "",
        ));
    }
    if let Schemas::TopLevel(Some(schema)) = schemas {
        let first = versions.first().map(|v| str_of(v, "name")).unwrap_or("");
        errs.extend(validation_errors(
            schema,
            versions.iter().any(status_enabled),
            unchanged(first),
            &spec_path.child("validation"),
        ));
    }
    if flag(&spec, "preserveUnknownFields") {
        errs.push(FieldError::invalid(
            spec_path.child("preserveUnknownFields"),
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    errs
}

/// The fields kube-apiserver allows at the root of a schema when the status
/// subresource is enabled.
const ALLOWED_AT_ROOT: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

/// `validateCustomResourceDefinitionValidation` for one `{openAPIV3Schema}`.
fn validation_errors(
    validation: &Value,
    status_enabled: bool,
    suppress_per_expression_cost: bool,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(schema) = validation.get("openAPIV3Schema").filter(|s| !s.is_null()) else {
        return errs;
    };
    let schema_path = path.child("openAPIV3Schema");
    if status_enabled && let Some(fields) = schema.as_object() {
        if is_set(schema, "type") && str_of(schema, "type") != "object" {
            errs.push(FieldError::invalid(
                path.child("openAPIV3Schema.type"),
                &go_quote(str_of(schema, "type")),
                "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ));
        } else if fields
            .keys()
            .any(|k| !ALLOWED_AT_ROOT.contains(&k.as_str()) && is_set(schema, k))
        {
            errs.push(FieldError::invalid(
                schema_path.clone(),
                &go_internal_schema(schema),
                "only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled",
            ));
        }
    }
    if flag(schema, "nullable") {
        errs.push(FieldError::forbidden(
            path.child("openAPIV3Schema.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut cel = None;
    if convertible(schema) {
        let mut structural = validate_structural(&schema_path, schema);
        if structural.is_empty() {
            default_errors(schema, &schema_path, &mut structural);
        }
        if structural.is_empty() {
            cel = Some(CelContext {
                total: TotalCost::default(),
                suppress_per_expression_cost,
            });
        }
        errs.extend(structural);
    }
    let ssv = Validator {
        allow_defaults: true,
        disallow_defaults_reason: String::new(),
        inside_resource_meta: false,
        uncorrelatable: None,
    };
    let mut schema_errs = Vec::new();
    let mut cel_errs = Vec::new();
    open_api_schema(
        schema,
        &schema_path,
        &ssv,
        true,
        cel.as_mut().map(|c| (c, Some(1))),
        &mut schema_errs,
        &mut cel_errs,
    );
    errs.extend(schema_errs);
    errs.extend(cel_errs);
    if let Some(cel) = cel
        && cel.total.total > STATIC_ESTIMATED_CRD_COST_LIMIT
    {
        for (rule_path, _) in &cel.total.most_expensive {
            errs.push(FieldError::forbidden(
                rule_path.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            schema_path,
            &cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                cel.total.total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    errs
}

/// `getCostErrorMessage`.
fn cost_error_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The running total of a schema's rule costs and its four most expensive
/// rules (those of at least 1% of the limit).
#[derive(Default)]
struct TotalCost {
    total: u64,
    most_expensive: Vec<(Path, u64)>,
}

impl TotalCost {
    fn observe(&mut self, path: Path, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        self.most_expensive.sort_by_key(|r| std::cmp::Reverse(r.1));
        self.most_expensive.truncate(4);
    }
}

/// What CEL checks carry through the schema walk (`CELSchemaContext`).
struct CelContext {
    total: TotalCost,
    suppress_per_expression_cost: bool,
}

/// The factor by which a schema multiplies the cardinality of its children.
fn max_elements(s: &Value) -> Option<u64> {
    let bound = |key: &str| {
        s.get(key)
            .and_then(Value::as_i64)
            .map(|v| u64::try_from(v).unwrap_or(0))
    };
    match str_of(s, "type") {
        "object" if s.get("additionalProperties").is_some_and(|v| !v.is_null()) => {
            bound("maxProperties")
        }
        "array" => bound("maxItems"),
        _ => Some(1),
    }
}

/// `specStandardValidatorV3` with its context.
#[derive(Clone)]
struct Validator {
    allow_defaults: bool,
    disallow_defaults_reason: String,
    inside_resource_meta: bool,
    /// The first ancestor whose old and new values cannot be correlated.
    uncorrelatable: Option<Path>,
}

impl Validator {
    fn forbid_defaults(&self, reason: &str) -> Self {
        Self {
            allow_defaults: false,
            disallow_defaults_reason: reason.to_string(),
            ..self.clone()
        }
    }

    fn inside_meta(&self) -> Self {
        Self {
            inside_resource_meta: true,
            ..self.clone()
        }
    }

    fn forbid_old_self(&self, path: &Path) -> Self {
        if self.uncorrelatable.is_some() {
            return self.clone();
        }
        Self {
            uncorrelatable: Some(path.clone()),
            ..self.clone()
        }
    }

    fn validate(&self, s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
        let ty = str_of(s, "type");
        if !ty.is_empty() && !OPENAPI_V3_TYPES.contains(&ty) {
            errs.push(FieldError::not_supported(
                path.child("type"),
                ty,
                OPENAPI_V3_TYPES,
            ));
        }
        if s.get("default").is_some_and(|d| !d.is_null()) && !self.allow_defaults {
            let mut detail = "must not be set".to_string();
            if !self.disallow_defaults_reason.is_empty() {
                detail.push(' ');
                detail.push_str(&self.disallow_defaults_reason);
            }
            errs.push(FieldError::forbidden(path.child("default"), &detail));
        }
        let unsupported = [
            ("id", "id is not supported"),
            ("additionalItems", "additionalItems is not supported"),
            ("patternProperties", "patternProperties is not supported"),
            ("definitions", "definitions is not supported"),
            ("dependencies", "dependencies is not supported"),
            ("$ref", "$ref is not supported"),
        ];
        for (key, detail) in unsupported {
            let set = match key {
                "additionalItems" | "dependencies" | "$ref" => {
                    s.get(key).is_some_and(|v| !v.is_null())
                }
                _ => is_set(s, key),
            };
            if set {
                errs.push(FieldError::forbidden(path.child(key), detail));
            }
        }
        if ty == "null" {
            errs.push(FieldError::forbidden(
                path.child("type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
        if s.get("items")
            .is_some_and(|i| i.as_array().is_some_and(|a| !a.is_empty()))
        {
            errs.push(FieldError::forbidden(
                path.child("items"),
                "items must be a schema object and not an array",
            ));
        }
        if self.inside_resource_meta && flag(s, "x-kubernetes-embedded-resource") {
            errs.push(FieldError::forbidden(
                path.child("x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            ));
        }
    }
}

/// The CEL context and the node's maximum cardinality: the product of the
/// `maxItems`/`maxProperties` above it, `None` if one of them is unbounded.
type Cel<'c> = Option<(&'c mut CelContext, Option<u64>)>;

/// The CEL context of a child: the cardinality times the parent's factor.
fn child<'c>(cel: &'c mut Cel<'_>, parent: &Value) -> Cel<'c> {
    let (ctx, cardinality) = cel.as_mut()?;
    let cardinality = match (*cardinality, max_elements(parent)) {
        (Some(c), Some(m)) => Some(if c == 0 { 0 } else { c.saturating_mul(m) }),
        _ => None,
    };
    Some((&mut **ctx, cardinality))
}

const META_FIELDS: &[&str] = &["metadata", "kind", "apiVersion"];

/// `ValidateCustomResourceDefinitionOpenAPISchema`: schema errors and CEL
/// errors apart, as kube-apiserver lists all schema errors first.
fn open_api_schema(
    s: &Value,
    path: &Path,
    ssv: &Validator,
    is_root: bool,
    mut cel: Cel<'_>,
    schema_errs: &mut Vec<FieldError>,
    cel_errs: &mut Vec<FieldError>,
) {
    if !s.is_object() {
        return;
    }
    let schema_errs_before = schema_errs.len();
    ssv.validate(s, path, schema_errs);
    if flag(s, "uniqueItems") {
        schema_errs.push(FieldError::forbidden(
            path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let has_properties = !properties(s).is_empty();
    if let Some(additional) = s.get("additionalProperties").filter(|v| !v.is_null()) {
        if has_properties && (additional != &Value::Bool(true)) {
            schema_errs.push(FieldError::forbidden(
                path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ssv.inside_resource_meta {
            ssv.forbid_defaults("inside additionalProperties applying to object metadata")
        } else {
            ssv.clone()
        };
        if additional.is_object() {
            open_api_schema(
                additional,
                &path.child("additionalProperties"),
                &sub,
                false,
                child(&mut cel, s),
                schema_errs,
                cel_errs,
            );
        }
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    for (name, prop) in properties(s) {
        let mut sub = ssv.clone();
        let map_type = s.get("x-kubernetes-map-type").and_then(Value::as_str);
        if !matches!(map_type, None | Some("granular" | "atomic")) {
            sub = sub.forbid_old_self(path);
        }
        if (is_root || embedded) && META_FIELDS.contains(&name.as_str()) {
            sub = sub.inside_meta();
            if is_root {
                sub = sub.forbid_defaults(&format!("in top-level {name}"));
            }
        }
        open_api_schema(
            prop,
            &path.child("properties").key(name),
            &sub,
            false,
            child(&mut cel, s),
            schema_errs,
            cel_errs,
        );
    }
    if let Some(not) = s.get("not") {
        open_api_schema(
            not,
            &path.child("not"),
            ssv,
            false,
            None,
            schema_errs,
            cel_errs,
        );
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        for (i, x) in s
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            open_api_schema(
                x,
                &path.child(key).index(i),
                ssv,
                false,
                None,
                schema_errs,
                cel_errs,
            );
        }
    }
    if let Some(defs) = s.get("definitions").and_then(Value::as_object) {
        for (name, x) in defs {
            open_api_schema(
                x,
                &path.child("definitions").key(name),
                ssv,
                false,
                None,
                schema_errs,
                cel_errs,
            );
        }
    }
    let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    if let Some(items) = s.get("items").filter(|i| !i.is_null()) {
        let sub = if list_type != Some("map") {
            ssv.forbid_old_self(path)
        } else {
            ssv.clone()
        };
        if items.is_object() {
            open_api_schema(
                items,
                &path.child("items"),
                &sub,
                false,
                child(&mut cel, s),
                schema_errs,
                cel_errs,
            );
        }
        for (i, x) in items.as_array().into_iter().flatten().enumerate() {
            open_api_schema(
                x,
                &path.child("items").index(i),
                &sub,
                false,
                child(&mut cel, s),
                schema_errs,
                cel_errs,
            );
        }
    }
    if let Some(deps) = s.get("dependencies").and_then(Value::as_object) {
        for (name, x) in deps {
            open_api_schema(
                x,
                &path.child("dependencies").key(name),
                ssv,
                false,
                None,
                schema_errs,
                cel_errs,
            );
        }
    }
    extension_errors(s, path, schema_errs);
    if is_set(s, "x-kubernetes-validations") {
        rule_errors(
            s,
            path,
            ssv,
            is_root,
            cel,
            schema_errs,
            schema_errs_before,
            cel_errs,
        );
    }
}

/// The checks of the Kubernetes extensions (`x-kubernetes-*`).
fn extension_errors(s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let ty = str_of(s, "type");
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            "false",
            "must be true or undefined",
        ));
    }
    let map_type = s.get("x-kubernetes-map-type").and_then(Value::as_str);
    if map_type.is_some() && ty != "object" {
        let detail = "must be object if x-kubernetes-map-type is specified";
        errs.push(if ty.is_empty() {
            FieldError::required(path.child("type"), detail)
        } else {
            FieldError::invalid(path.child("type"), &go_quote(ty), detail)
        });
    }
    if let Some(m) = map_type
        && m != "atomic"
        && m != "granular"
    {
        errs.push(FieldError::not_supported(
            path.child("x-kubernetes-map-type"),
            m,
            &["atomic", "granular"],
        ));
    }
    let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = s.get("items").filter(|i| i.is_object());
    if list_type.is_some() && ty != "array" {
        let detail = "must be array if x-kubernetes-list-type is specified";
        errs.push(if ty.is_empty() {
            FieldError::required(path.child("type"), detail)
        } else {
            FieldError::invalid(path.child("type"), &go_quote(ty), detail)
        });
    } else if list_type == Some("set")
        && let Some(items) = items
    {
        match str_of(items, "type") {
            "array" => {
                if let Some(lt) = items.get("x-kubernetes-list-type").and_then(Value::as_str)
                    && lt != "atomic"
                {
                    errs.push(FieldError::invalid(
                        path.child("items").child("x-kubernetes-list-type"),
                        &go_quote(lt),
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
            }
            "object"
                if items.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic") =>
            {
                // kube-apiserver shows the items' list type here.
                let value = items
                    .get("x-kubernetes-list-type")
                    .and_then(Value::as_str)
                    .map_or("null".to_string(), go_quote);
                errs.push(FieldError::invalid(
                    path.child("items").child("x-kubernetes-map-type"),
                    &value,
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
            _ => {}
        }
    }
    if let Some(lt) = list_type
        && !["atomic", "set", "map"].contains(&lt)
    {
        errs.push(FieldError::not_supported(
            path.child("x-kubernetes-list-type"),
            lt,
            &["atomic", "set", "map"],
        ));
    }
    let keys: Vec<&str> = s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !keys.is_empty() {
        match list_type {
            None => errs.push(FieldError::required(
                path.child("x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some("map") => {}
            Some(other) => errs.push(FieldError::invalid(
                path.child("x-kubernetes-list-type"),
                &go_quote(other),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match s.get("items").filter(|i| !i.is_null()) {
            None => errs.push(FieldError::required(
                path.child("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(i) if !i.is_object() => errs.push(FieldError::invalid(
                path.child("items"),
                &go_json(i),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            Some(items) if str_of(items, "type") != "object" => errs.push(FieldError::invalid(
                path.child("items").child("type"),
                &go_quote(str_of(items, "type")),
                "must be object if parent array's x-kubernetes-list-type is map",
            )),
            Some(items) => {
                let keys_json = go_json(&s["x-kubernetes-list-map-keys"]);
                let item_props = items.get("properties").and_then(Value::as_object);
                let mut seen: Vec<&str> = Vec::new();
                for k in &keys {
                    match item_props.and_then(|p| p.get(*k)) {
                        Some(p) => {
                            if matches!(str_of(p, "type"), "array" | "object") {
                                errs.push(FieldError::invalid(
                                    path.child("items").child("properties").key(k).child("type"),
                                    &go_quote(str_of(items, "type")),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                ));
                            }
                        }
                        None => errs.push(FieldError::invalid(
                            path.child("x-kubernetes-list-map-keys"),
                            &keys_json,
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(k) {
                        errs.push(FieldError::invalid(
                            path.child("x-kubernetes-list-map-keys"),
                            &keys_json,
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }
    // validateMapListKeysMapSet
    if let (Some(lt @ ("set" | "map")), Some(items)) = (list_type, items) {
        if flag(items, "nullable") {
            errs.push(FieldError::forbidden(
                path.child("items").child("nullable"),
                &format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
            ));
        }
        if lt == "map" {
            let required: Vec<&str> = items
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for k in &keys {
                let Some(p) = items.pointer(&format!(
                    "/properties/{}",
                    k.replace('~', "~0").replace('/', "~1")
                )) else {
                    continue;
                };
                let key_path = path.child("items").child("properties").key(k);
                if !required.contains(k) && p.get("default").is_none_or(Value::is_null) {
                    errs.push(FieldError::required(
                        key_path.child("default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if flag(p, "nullable") {
                    errs.push(FieldError::forbidden(
                        key_path.child("nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}

const SUPPORTED_REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// The checks of `x-kubernetes-validations` on one node, and the CEL ones
/// (compilation, cost) when the schema checks found nothing at or below it.
#[allow(clippy::too_many_arguments)]
fn rule_errors(
    s: &Value,
    path: &Path,
    ssv: &Validator,
    is_root: bool,
    cel: Cel<'_>,
    schema_errs: &mut Vec<FieldError>,
    schema_errs_before: usize,
    cel_errs: &mut Vec<FieldError>,
) {
    let rules = s
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rules_path = path.child("x-kubernetes-validations");
    for (i, rule) in rules.iter().enumerate() {
        let rp = rules_path.index(i);
        let text = str_of(rule, "rule");
        let message = str_of(rule, "message");
        let message_expression = str_of(rule, "messageExpression");
        let field_path = str_of(rule, "fieldPath");
        if text.trim().is_empty() {
            schema_errs.push(FieldError::required(
                rp.child("rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && message.trim().is_empty() {
            schema_errs.push(FieldError::invalid(
                rp.child("message"),
                &go_quote(message),
                "must be non-empty if specified",
            ));
        } else if has_newlines(message.trim()) {
            schema_errs.push(FieldError::invalid(
                rp.child("message"),
                &go_quote(message),
                "must not contain line breaks",
            ));
        } else if has_newlines(text.trim()) && message.trim().is_empty() {
            schema_errs.push(FieldError::required(
                rp.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            schema_errs.push(FieldError::required(
                rp.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !SUPPORTED_REASONS.contains(&reason)
        {
            schema_errs.push(FieldError::not_supported(
                rp.child("reason"),
                reason,
                SUPPORTED_REASONS,
            ));
        }
        if !field_path.is_empty() && field_path.trim().is_empty() {
            schema_errs.push(FieldError::invalid(
                rp.child("fieldPath"),
                &go_quote(field_path),
                "must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            schema_errs.push(FieldError::invalid(
                rp.child("fieldPath"),
                &go_quote(field_path),
                "must not contain line breaks",
            ));
        }
        if !field_path.is_empty() && convertible(s) && !valid_field_path(field_path, s) {
            schema_errs.push(FieldError::invalid(
                rp.child("fieldPath"),
                &go_quote(field_path),
                "must be a valid path",
            ));
        }
    }
    let Some((ctx, cardinality)) = cel else {
        return;
    };
    if schema_errs.len() > schema_errs_before {
        return;
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    let Some(decl) = schema_decl_type(s, is_root || embedded, "selfType") else {
        cel_errs.push(FieldError::internal(
            rules_path,
            "internal error: failed to construct type information for x-kubernetes-validations rules: unable to convert structural schema to CEL declarations",
        ));
        return;
    };
    // Used where the node's own bounds are unknown: how many times the
    // smallest value of the node fits in a request.
    let own_cardinality = MAX_REQUEST_SIZE_BYTES / (decl.min_serialized_size.max(0) as u64 + 1);
    for (i, rule) in rules.iter().enumerate() {
        let rp = rules_path.index(i);
        let text = str_of(rule, "rule");
        if text.trim().is_empty() {
            continue;
        }
        let optional_old_self = rule.get("optionalOldSelf").and_then(Value::as_bool);
        let compiled = compile(text, &decl, optional_old_self == Some(true), Ty::Bool);
        let max_cost = compiled.as_ref().map_or(0, |c| c.cost);
        let cost = multiply(max_cost, cardinality.unwrap_or(own_cardinality));
        if !ctx.suppress_per_expression_cost && cost > STATIC_ESTIMATED_COST_LIMIT {
            cel_errs.push(FieldError::forbidden(
                rp.child("rule"),
                &cost_error_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT),
            ));
        }
        ctx.total.observe(rp.child("rule"), cost);
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => {
                let detail = match e {
                    CompileError::Issues(issues) => format!("compilation failed: {issues}"),
                    CompileError::Type => "cel expression must evaluate to a bool".to_string(),
                };
                cel_errs.push(FieldError::invalid(
                    rp.child("rule"),
                    &rule_json(rule),
                    &detail,
                ));
                if let Some(o) = optional_old_self {
                    cel_errs.push(FieldError::invalid(
                        rp.child("optionalOldSelf"),
                        &o.to_string(),
                        "may not be set if oldSelf is not used in rule",
                    ));
                }
                continue;
            }
        };
        let message_expression = str_of(rule, "messageExpression");
        if !message_expression.is_empty() {
            match compile(
                message_expression,
                &decl,
                optional_old_self == Some(true),
                Ty::String,
            ) {
                Err(e) => cel_errs.push(FieldError::invalid(
                    rp.child("messageExpression"),
                    &rule_json(rule),
                    &match e {
                        CompileError::Issues(issues) => {
                            format!("messageExpression compilation failed: {issues}")
                        }
                        CompileError::Type => {
                            "messageExpression must evaluate to a string".to_string()
                        }
                    },
                )),
                Ok(m) => {
                    if !ctx.suppress_per_expression_cost && m.cost > STATIC_ESTIMATED_COST_LIMIT {
                        cel_errs.push(FieldError::forbidden(
                            rp.child("messageExpression"),
                            &cost_error_message(
                                "estimated messageExpression cost",
                                m.cost,
                                STATIC_ESTIMATED_COST_LIMIT,
                            ),
                        ));
                    }
                    ctx.total.observe(rp.child("messageExpression"), m.cost);
                }
            }
        }
        if compiled.uses_old_self {
            if let Some(uncorrelatable) = &ssv.uncorrelatable {
                cel_errs.push(FieldError::invalid(
                    rp.child("rule"),
                    &go_quote(text),
                    &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {uncorrelatable}"),
                ));
            }
        } else if let Some(o) = optional_old_self {
            cel_errs.push(FieldError::invalid(
                rp.child("optionalOldSelf"),
                &o.to_string(),
                "may not be set if oldSelf is not used in rule",
            ));
        }
    }
}

fn multiply(cost: u64, cardinality: u64) -> u64 {
    if cost == 0 {
        return 0;
    }
    cost.saturating_mul(cardinality)
}

struct Compiled {
    cost: u64,
    uses_old_self: bool,
}

enum CompileError {
    /// cel-go's issues (parse or type errors).
    Issues(String),
    /// The expression does not evaluate to the type wanted.
    Type,
}

/// Compiles one expression as kube-apiserver does.
fn compile(
    text: &str,
    decl: &Arc<DeclType>,
    optional_old_self: bool,
    want: Ty,
) -> Result<Compiled, CompileError> {
    let parsed = cel_check::parse(text).map_err(|e| CompileError::Issues(e.0))?;
    let (checked, ty) = cel_check::check(text, &parsed, &decl.cel_type(), optional_old_self)
        .map_err(|e| CompileError::Issues(e.0))?;
    if ty != want {
        return Err(CompileError::Type);
    }
    Ok(Compiled {
        cost: estimate_cost(&parsed.node, &checked, decl).max,
        uses_old_self: checked.uses_old_self,
    })
}

/// `ValidFieldPath`: a JSON path (`.a.b`, `['a.b']`) to a field of the schema.
fn valid_field_path(path: &str, schema: &Value) -> bool {
    let mut tokens = Vec::new();
    let bytes: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '.' | '[' | ']' => {
                tokens.push(bytes[i].to_string());
                i += 1;
            }
            '\'' => {
                let start = i;
                i += 1;
                while i < bytes.len() && !(bytes[i] == '\'' && bytes[i - 1] != '\\') {
                    i += 1;
                }
                i = (i + 1).min(bytes.len());
                tokens.push(bytes[start..i].iter().collect());
            }
            _ => {
                let start = i;
                while i < bytes.len() && !matches!(bytes[i], '.' | '[' | ']') {
                    i += 1;
                }
                tokens.push(bytes[start..i].iter().collect());
            }
        }
    }
    let mut current = schema.clone();
    let mut it = tokens.into_iter();
    let step = |current: &Value, name: &str| -> Option<Value> {
        if current.get("properties").is_some_and(|p| !p.is_null()) {
            current
                .pointer("/properties")
                .and_then(|p| p.get(name))
                .cloned()
        } else if current
            .get("additionalProperties")
            .is_some_and(|a| !a.is_null())
        {
            Some(current["additionalProperties"].clone())
        } else {
            None
        }
    };
    while let Some(tok) = it.next() {
        let name = match tok.as_str() {
            "[" => {
                let Some(quoted) = it.next() else {
                    return false;
                };
                if quoted.len() < 2 || !quoted.starts_with('\'') || !quoted.ends_with('\'') {
                    return false;
                }
                if it.next().as_deref() != Some("]") {
                    return false;
                }
                quoted[1..quoted.len() - 1]
                    .replace("\\'", "'")
                    .replace("\\\\", "\\")
            }
            "." => match it.next() {
                Some(name) => name,
                None => return false,
            },
            _ => return false,
        };
        match step(&current, &name) {
            Some(next) => current = next,
            None => return false,
        }
    }
    true
}

/// The internal `ValidationRule` as Go's `json.Marshal` prints it (no JSON
/// tags on internal types: Go field names).
fn rule_json(rule: &Value) -> String {
    let reason = rule
        .get("reason")
        .and_then(Value::as_str)
        .map_or("null".to_string(), go_json_string);
    let optional = rule
        .get("optionalOldSelf")
        .and_then(Value::as_bool)
        .map_or("null".to_string(), |b| b.to_string());
    format!(
        "{{\"Rule\":{},\"Message\":{},\"MessageExpression\":{},\"Reason\":{reason},\"FieldPath\":{},\"OptionalOldSelf\":{optional}}}",
        go_json_string(str_of(rule, "rule")),
        go_json_string(str_of(rule, "message")),
        go_json_string(str_of(rule, "messageExpression")),
        go_json_string(str_of(rule, "fieldPath")),
    )
}

/// A JSON string as Go's `encoding/json` writes it (HTML-safe escapes).
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Any JSON value with Go's string escapes (keys sorted, as Go sorts map keys).
fn go_json(v: &Value) -> String {
    match v {
        Value::String(s) => go_json_string(s),
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_json_string(k), go_json(&o[*k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => other.to_string(),
    }
}

/// A number as Go's `encoding/json` writes a float64.
fn go_number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{}", f as i64),
        Some(f) => {
            let text = format!("{f:e}");
            if f.abs() >= 1e21 || f.abs() < 1e-6 {
                text.replace('e', "e+").replace("e+-", "e-")
            } else {
                f.to_string()
            }
        }
        None => v.to_string(),
    }
}

/// A JSON value (a default, an example, an enum value) as Go re-encodes it.
fn go_value(v: &Value) -> String {
    match v {
        Value::Number(_) => go_number(v),
        Value::Array(a) => format!("[{}]", a.iter().map(go_value).collect::<Vec<_>>().join(",")),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_json_string(k), go_value(&o[*k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => go_json(other),
    }
}

/// The internal `JSONSchemaProps` as Go's `json.Marshal` prints it: every
/// field, by its Go name, in declaration order.
fn go_internal_schema(s: &Value) -> String {
    let string = |key: &str| go_json_string(str_of(s, key));
    let boolean = |key: &str| flag(s, key).to_string();
    let pointer = |key: &str| match s.get(key) {
        None | Some(Value::Null) => "null".to_string(),
        Some(v) => go_value(v),
    };
    let list = |key: &str| match s.get(key).and_then(Value::as_array) {
        Some(a) if !a.is_empty() => go_value(&Value::Array(a.clone())),
        _ => "null".to_string(),
    };
    let schemas = |key: &str| match s.get(key).and_then(Value::as_array) {
        Some(a) if !a.is_empty() => {
            format!(
                "[{}]",
                a.iter()
                    .map(go_internal_schema)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
        _ => "null".to_string(),
    };
    let schema_map = |key: &str| match s.get(key).and_then(Value::as_object) {
        Some(m) if !m.is_empty() => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_json_string(k), go_internal_schema(&m[*k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        _ => "null".to_string(),
    };
    let schema_or_bool = |key: &str| match s.get(key) {
        Some(Value::Bool(b)) => format!("{{\"Allows\":{b},\"Schema\":null}}"),
        Some(v @ Value::Object(_)) => {
            format!("{{\"Allows\":true,\"Schema\":{}}}", go_internal_schema(v))
        }
        _ => "null".to_string(),
    };
    let items = match s.get("items") {
        Some(v @ Value::Object(_)) => format!(
            "{{\"Schema\":{},\"JSONSchemas\":null}}",
            go_internal_schema(v)
        ),
        Some(Value::Array(a)) => format!(
            "{{\"Schema\":null,\"JSONSchemas\":[{}]}}",
            a.iter()
                .map(go_internal_schema)
                .collect::<Vec<_>>()
                .join(",")
        ),
        _ => "null".to_string(),
    };
    let dependencies = match s.get("dependencies").and_then(Value::as_object) {
        Some(m) if !m.is_empty() => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .iter()
                .map(|k| match &m[*k] {
                    Value::Array(p) => format!(
                        "{}:{{\"Schema\":null,\"Property\":{}}}",
                        go_json_string(k),
                        go_value(&Value::Array(p.clone()))
                    ),
                    v => format!(
                        "{}:{{\"Schema\":{},\"Property\":null}}",
                        go_json_string(k),
                        go_internal_schema(v)
                    ),
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        _ => "null".to_string(),
    };
    let external_docs = match s.get("externalDocs") {
        Some(d @ Value::Object(_)) => format!(
            "{{\"Description\":{},\"URL\":{}}}",
            go_json_string(str_of(d, "description")),
            go_json_string(str_of(d, "url"))
        ),
        _ => "null".to_string(),
    };
    let validations = match s.get("x-kubernetes-validations").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => format!(
            "[{}]",
            a.iter().map(rule_json).collect::<Vec<_>>().join(",")
        ),
        _ => "null".to_string(),
    };
    let not = match s.get("not") {
        Some(v @ Value::Object(_)) => go_internal_schema(v),
        _ => "null".to_string(),
    };
    let fields = [
        ("ID", string("id")),
        ("Schema", string("$schema")),
        ("Ref", pointer("$ref")),
        ("Description", string("description")),
        ("Type", string("type")),
        ("Nullable", boolean("nullable")),
        ("Format", string("format")),
        ("Title", string("title")),
        ("Default", pointer("default")),
        ("Maximum", pointer("maximum")),
        ("ExclusiveMaximum", boolean("exclusiveMaximum")),
        ("Minimum", pointer("minimum")),
        ("ExclusiveMinimum", boolean("exclusiveMinimum")),
        ("MaxLength", pointer("maxLength")),
        ("MinLength", pointer("minLength")),
        ("Pattern", string("pattern")),
        ("MaxItems", pointer("maxItems")),
        ("MinItems", pointer("minItems")),
        ("UniqueItems", boolean("uniqueItems")),
        ("MultipleOf", pointer("multipleOf")),
        ("Enum", list("enum")),
        ("MaxProperties", pointer("maxProperties")),
        ("MinProperties", pointer("minProperties")),
        ("Required", list("required")),
        ("Items", items),
        ("AllOf", schemas("allOf")),
        ("OneOf", schemas("oneOf")),
        ("AnyOf", schemas("anyOf")),
        ("Not", not),
        ("Properties", schema_map("properties")),
        (
            "AdditionalProperties",
            schema_or_bool("additionalProperties"),
        ),
        ("PatternProperties", schema_map("patternProperties")),
        ("Dependencies", dependencies),
        ("AdditionalItems", schema_or_bool("additionalItems")),
        ("Definitions", schema_map("definitions")),
        ("ExternalDocs", external_docs),
        ("Example", pointer("example")),
        (
            "XPreserveUnknownFields",
            pointer("x-kubernetes-preserve-unknown-fields"),
        ),
        (
            "XEmbeddedResource",
            boolean("x-kubernetes-embedded-resource"),
        ),
        ("XIntOrString", boolean("x-kubernetes-int-or-string")),
        ("XListMapKeys", list("x-kubernetes-list-map-keys")),
        ("XListType", pointer("x-kubernetes-list-type")),
        ("XMapType", pointer("x-kubernetes-map-type")),
        ("XValidations", validations),
    ];
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", body.join(","))
}

// ---------------------------------------------------------------------------
// Warnings: unrecognized formats.
// ---------------------------------------------------------------------------

/// Formats kube-apiserver 1.36 validates (normalised: without `-`).
const SUPPORTED_STRING_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8sshortname",
    "k8slongname",
];

fn unrecognized_format(s: &Value) -> Option<&str> {
    let format = str_of(s, "format");
    if format.is_empty() {
        return None;
    }
    let recognized = match str_of(s, "type") {
        "" | "string" => SUPPORTED_STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        "integer" => format == "int32" || format == "int64",
        "number" => format == "float" || format == "double",
        _ => false,
    };
    (!recognized).then_some(format)
}

/// Every unrecognized format of a schema, in kube-apiserver's traversal order.
fn formats_in<'a>(s: &'a Value, out: &mut Vec<&'a str>) {
    if !s.is_object() {
        return;
    }
    out.extend(unrecognized_format(s));
    match s.get("items") {
        Some(Value::Array(items)) => items.iter().for_each(|i| formats_in(i, out)),
        Some(items) => formats_in(items, out),
        None => {}
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for x in s.get(key).and_then(Value::as_array).into_iter().flatten() {
            formats_in(x, out);
        }
    }
    if let Some(not) = s.get("not") {
        formats_in(not, out);
    }
    for (_, p) in properties(s) {
        formats_in(p, out);
    }
    if let Some(a) = s.get("additionalProperties") {
        formats_in(a, out);
    }
    for key in ["patternProperties", "definitions", "dependencies"] {
        for (_, x) in s.get(key).and_then(Value::as_object).into_iter().flatten() {
            formats_in(x, out);
        }
    }
    if let Some(a) = s.get("additionalItems") {
        formats_in(a, out);
    }
}

fn crd_formats(crd: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    let roots: Vec<Option<&Value>> = match schemas(crd) {
        Schemas::TopLevel(s) => vec![s],
        Schemas::PerVersion(v) => v,
    };
    for schema in roots.into_iter().flatten() {
        if let Some(s) = schema.get("openAPIV3Schema") {
            formats_in(s, &mut out);
        }
    }
    out
}

/// The warnings kube-apiserver sends for a CRD written over `old`: one per
/// unrecognized format the write introduces.
pub(crate) fn warnings(crd: &Value, old: Option<&Value>) -> Vec<String> {
    let before = old.map(crd_formats).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for format in crd_formats(crd) {
        let text = format!("unrecognized format {}", go_quote(format));
        if !before.contains(&format) && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema}}],
            },
        })
    }

    fn errors(schema: Value) -> Vec<String> {
        crd_errors(&crd(schema), None)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn spec(props: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
    }

    #[test]
    fn accepts_ordinary_schemas() {
        assert_eq!(
            errors(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
            Vec::<String>::new()
        );
        let s = spec(json!({
            "cidrs": {"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 43},
                      "x-kubernetes-validations": [{"rule": "self.all(c, isCIDR(c))"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                      "items": {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}}}},
            "size": {"x-kubernetes-int-or-string": true},
        }));
        assert_eq!(errors(s), Vec::<String>::new());
    }

    #[test]
    fn refuses_rules_over_budget_with_the_factor() {
        let s = spec(
            json!({"cidrs": {"type": "array", "maxItems": 64, "items": {"type": "string"},
                                      "x-kubernetes-validations": [{"rule": "self.all(c, isCIDR(c))"}]}}),
        );
        assert_eq!(
            errors(s),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[cidrs].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 2.0x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
            ]
        );
    }

    #[test]
    fn multiplies_by_the_cardinality_of_enclosing_lists() {
        // 100 items, each with 100 strings of up to 10000 characters (40000
        // bytes), each checked: 100 * 100 * (40000 * 0.1 + 1) = 40,010,000.
        let s = spec(
            json!({"items": {"type": "array", "maxItems": 100, "items": {
            "type": "object", "properties": {"names": {"type": "array", "maxItems": 100,
                "items": {"type": "string", "maxLength": 10000,
                          "x-kubernetes-validations": [{"rule": "self.contains('x')"}]}}}}}}),
        );
        let errs = errors(s);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("properties[names].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 4.0x"), "{errs:?}");
    }

    #[test]
    fn refuses_non_structural_schemas() {
        assert_eq!(
            errors(spec(json!({"name": {"description": "no type"}}))),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[name].type: Required value: must not be empty for specified object fields"
            ]
        );
        let both = spec(
            json!({"labels": {"type": "object", "properties": {"a": {"type": "string"}},
                                          "additionalProperties": {"type": "string"}}}),
        );
        assert_eq!(
            errors(both),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[labels].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ]
        );
        let reference = spec(json!({"a": {"$ref": "#/definitions/x"}}));
        assert_eq!(
            errors(reference),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[a].$ref: Forbidden: $ref is not supported"
            ]
        );
        let metadata = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}});
        assert_eq!(
            errors(metadata),
            vec![
                "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            ]
        );
    }

    #[test]
    fn refuses_rules_that_do_not_compile() {
        let s = spec(
            json!({"name": {"type": "string", "x-kubernetes-validations": [{"rule": "isCIDRX(self)"}]}}),
        );
        assert_eq!(
            errors(s),
            vec![concat!(
                "spec.validation.openAPIV3Schema.properties[spec].properties[name].x-kubernetes-validations[0].rule: ",
                "Invalid value: {\"Rule\":\"isCIDRX(self)\",\"Message\":\"\",\"MessageExpression\":\"\",\"Reason\":null,\"FieldPath\":\"\",\"OptionalOldSelf\":null}: ",
                "compilation failed: ERROR: <input>:1:8: undeclared reference to 'isCIDRX' (in container '')\n | isCIDRX(self)\n | .......^"
            )]
        );
        let not_bool = spec(
            json!({"name": {"type": "string", "x-kubernetes-validations": [{"rule": "self"}]}}),
        );
        assert!(errors(not_bool)[0].ends_with("cel expression must evaluate to a bool"));
    }

    #[test]
    fn forbids_old_self_where_values_do_not_correlate() {
        let s = spec(
            json!({"names": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10,
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}),
        );
        assert_eq!(
            errors(s),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].properties[names].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[names]"
            ]
        );
    }

    #[test]
    fn validates_per_version_when_schemas_differ() {
        let mut c = crd(json!({"type": "object"}));
        c["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "string"}}},
        ]);
        let errs: Vec<String> = crd_errors(&c, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.versions[1].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"
            ]
        );
    }

    #[test]
    fn warns_of_unrecognized_formats_once() {
        let c = crd(spec(json!({
            "a": {"type": "integer", "format": "uint32"},
            "b": {"type": "integer", "format": "uint32"},
            "c": {"type": "integer", "format": "int64"},
            "d": {"type": "string", "format": "date-time"},
            "e": {"type": "string", "format": "k8s-short-name"},
        })));
        assert_eq!(warnings(&c, None), vec!["unrecognized format \"uint32\""]);
        assert_eq!(warnings(&c, Some(&c)), Vec::<String>::new());
    }

    #[test]
    fn prints_factors_as_kubernetes() {
        assert!(cost_error_message("x", 20_132_930, 10_000_000).contains("factor of 2.0x"));
        assert!(cost_error_message("x", 10_065_930, 10_000_000).contains("factor of 1.006593x"));
        assert!(
            cost_error_message("x", 2_000_000_000, 10_000_000).contains("factor of more than 100x")
        );
    }
}
