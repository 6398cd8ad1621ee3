//! Type checking of CRD validation rules (CEL) as kube-apiserver compiles them.
//!
//! kube-apiserver compiles every `x-kubernetes-validations` rule with cel-go's
//! type checker in an environment whose `self` (and `oldSelf`) has the type
//! derived from the schema node the rule sits on, plus the Kubernetes CEL
//! libraries. A rule that names an unknown variable, field or function, calls
//! a function with arguments of the wrong types, or does not evaluate to a
//! bool, is a compilation error and the CRD is refused.
//!
//! This module does the same on the AST of the `cel` crate's parser:
//! [`DeclType`] is the port of apiserver's `SchemaDeclType` (the schema as CEL
//! sees it, with the size bounds the cost estimator needs), [`check`] types
//! every node and records which function overloads each call resolves to.
//! [`crate::cel::cost`] then estimates the rule's cost from those types.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::LazyLock;

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use kube_cel::cel::parser::Parser;
use serde_json::Value;

/// The largest request kube-apiserver accepts; unbounded sizes are estimated
/// from it (`celconfig.MaxRequestSizeBytes`).
pub(crate) const MAX_REQUEST_SIZE_BYTES: i64 = 3 * 1024 * 1024;

pub(crate) const IP: &str = "net.IP";
pub(crate) const CIDR: &str = "net.CIDR";
pub(crate) const URL: &str = "kubernetes.URL";
pub(crate) const QUANTITY: &str = "kubernetes.Quantity";
pub(crate) const SEMVER: &str = "kubernetes.Semver";
pub(crate) const FORMAT: &str = "kubernetes.NamedFormat";

/// A CEL type as the checker infers it.
#[derive(Clone, Debug)]
pub(crate) enum Ty {
    Dyn,
    /// The type of an expression that failed to check (errors reported once).
    Error,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    /// An object of the schema (a CEL message type with its fields).
    Object(Arc<DeclType>),
    /// A library type: `net.IP`, `kubernetes.Quantity`, ...
    Opaque(&'static str),
    Optional(Box<Ty>),
    /// A type value (`string`, `type(x)`).
    Type(Box<Ty>),
}

/// cel-go's `types.Kind`, as far as the cost estimator looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dyn,
    Error,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List,
    Map,
    Struct,
    Opaque,
    Type,
}

impl PartialEq for Ty {
    fn eq(&self, other: &Self) -> bool {
        use Ty::*;
        match (self, other) {
            (List(a), List(b)) | (Optional(a), Optional(b)) | (Type(a), Type(b)) => a == b,
            (Map(ka, va), Map(kb, vb)) => ka == kb && va == vb,
            (Object(a), Object(b)) => Arc::ptr_eq(a, b),
            (Opaque(a), Opaque(b)) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Ty {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Ty::Dyn => Kind::Dyn,
            Ty::Error => Kind::Error,
            Ty::Null => Kind::Null,
            Ty::Bool => Kind::Bool,
            Ty::Int => Kind::Int,
            Ty::Uint => Kind::Uint,
            Ty::Double => Kind::Double,
            Ty::String => Kind::String,
            Ty::Bytes => Kind::Bytes,
            Ty::Duration => Kind::Duration,
            Ty::Timestamp => Kind::Timestamp,
            Ty::List(_) => Kind::List,
            Ty::Map(..) => Kind::Map,
            Ty::Object(_) => Kind::Struct,
            // The Kubernetes library declares these as object types.
            Ty::Opaque(name) if [URL, QUANTITY, SEMVER, FORMAT].contains(name) => Kind::Struct,
            Ty::Opaque(_) | Ty::Optional(_) => Kind::Opaque,
            Ty::Type(_) => Kind::Type,
        }
    }

    /// The type parameters (`list(T)` → T, `map(K, V)` → K, V).
    pub(crate) fn parameters(&self) -> Vec<Ty> {
        match self {
            Ty::List(t) | Ty::Optional(t) | Ty::Type(t) => vec![(**t).clone()],
            Ty::Map(k, v) => vec![(**k).clone(), (**v).clone()],
            _ => Vec::new(),
        }
    }

    /// Types whose values have a size known at compile time (cel-go `isScalar`).
    pub(crate) fn is_scalar(&self) -> bool {
        match self {
            Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint => true,
            Ty::Optional(t) => t.is_scalar(),
            _ => false,
        }
    }

    fn is_error(&self) -> bool {
        matches!(self, Ty::Error)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Dyn => f.write_str("dyn"),
            Ty::Error => f.write_str("*error*"),
            Ty::Null => f.write_str("null"),
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::String => f.write_str("string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::Duration => f.write_str("google.protobuf.Duration"),
            Ty::Timestamp => f.write_str("google.protobuf.Timestamp"),
            Ty::List(t) => write!(f, "list({t})"),
            Ty::Map(k, v) => write!(f, "map({k}, {v})"),
            Ty::Object(d) => f.write_str(&d.name),
            Ty::Opaque(name) => f.write_str(name),
            Ty::Optional(t) => write!(f, "optional_type({t})"),
            Ty::Type(t) => write!(f, "type({t})"),
        }
    }
}

// ---------------------------------------------------------------------------
// The schema as CEL sees it (apiserver cel/common/schemas.go SchemaDeclType).
// ---------------------------------------------------------------------------

/// A schema node as declared to CEL: its type, its maximum number of elements
/// (characters for strings, items for lists, properties for maps) and the
/// smallest size it can take serialized, from which unbounded sizes are
/// estimated.
#[derive(Debug)]
pub(crate) struct DeclType {
    pub name: String,
    pub kind: DeclKind,
    pub max_elements: i64,
    pub min_serialized_size: i64,
}

#[derive(Debug)]
pub(crate) enum DeclKind {
    /// Fields by their escaped CEL names.
    Object(BTreeMap<String, Arc<DeclType>>),
    List(Arc<DeclType>),
    /// Key (always string) and value types.
    Map(Arc<DeclType>, Arc<DeclType>),
    Simple(Ty),
}

impl DeclType {
    fn simple(name: &str, ty: Ty, min_size: i64) -> Self {
        Self {
            name: name.to_string(),
            kind: DeclKind::Simple(ty),
            max_elements: 0,
            min_serialized_size: min_size,
        }
    }

    /// The CEL type of values of this declaration.
    pub(crate) fn cel_type(self: &Arc<Self>) -> Ty {
        match &self.kind {
            DeclKind::Object(_) => Ty::Object(self.clone()),
            DeclKind::List(elem) => Ty::List(Box::new(elem.cel_type())),
            DeclKind::Map(key, elem) => {
                Ty::Map(Box::new(key.cel_type()), Box::new(elem.cel_type()))
            }
            DeclKind::Simple(ty) => ty.clone(),
        }
    }

    /// The element type of a list or map.
    pub(crate) fn elem(&self) -> Option<&Arc<DeclType>> {
        match &self.kind {
            DeclKind::List(e) | DeclKind::Map(_, e) => Some(e),
            _ => None,
        }
    }

    /// The key type of a map.
    pub(crate) fn key(&self) -> Option<&Arc<DeclType>> {
        match &self.kind {
            DeclKind::Map(k, _) => Some(k),
            _ => None,
        }
    }

    /// A field of an object, by escaped name.
    pub(crate) fn field(&self, name: &str) -> Option<&Arc<DeclType>> {
        match &self.kind {
            DeclKind::Object(fields) => fields.get(name),
            _ => None,
        }
    }
}

fn str_of<'a>(s: &'a Value, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn int_of(s: &Value, key: &str) -> Option<i64> {
    let v = s.get(key)?;
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
        .or_else(|| v.as_f64().map(|f| f as i64))
}

fn zero_if_negative(v: i64) -> i64 {
    v.max(0)
}

/// `schema.AdditionalProperties().Schema()`: the schema of `additionalProperties`
/// when it is one (not a bare `true`/`false`).
pub(crate) fn additional_properties_schema(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|v| v.is_object())
}

/// The CEL declaration of a structural schema, `None` where CEL does not see
/// the node (no type, or a list or map of such nodes). `resource_root` adds
/// `apiVersion`, `kind` and `metadata.name`/`generateName` as the root of a
/// custom resource (and every embedded resource) always has them.
pub(crate) fn schema_decl_type(
    s: &Value,
    resource_root: bool,
    name: &str,
) -> Option<Arc<DeclType>> {
    if flag(s, "x-kubernetes-int-or-string") {
        let mut dyn_type = DeclType::simple("dyn", Ty::Dyn, 1);
        dyn_type.max_elements = match int_of(s, "maxLength") {
            Some(max) => zero_if_negative(max) * 4,
            None => MAX_REQUEST_SIZE_BYTES - 2,
        };
        return Some(Arc::new(dyn_type));
    }
    let with_meta;
    let s = if resource_root {
        with_meta = with_type_and_object_meta(s);
        &with_meta
    } else {
        s
    };
    match str_of(s, "type") {
        "array" => {
            let items = s.get("items").filter(|i| i.is_object())?;
            let items_type = schema_decl_type(
                items,
                flag(items, "x-kubernetes-embedded-resource"),
                &format!("{name}.@idx"),
            )?;
            let max_items = match int_of(s, "maxItems") {
                Some(max) => zero_if_negative(max),
                None => (MAX_REQUEST_SIZE_BYTES - 2) / (items_type.min_serialized_size + 1),
            };
            Some(Arc::new(DeclType {
                name: "list".to_string(),
                kind: DeclKind::List(items_type),
                max_elements: max_items,
                min_serialized_size: 2,
            }))
        }
        "object" => {
            if let Some(props) = additional_properties_schema(s) {
                let props_type = schema_decl_type(
                    props,
                    flag(props, "x-kubernetes-embedded-resource"),
                    &format!("{name}.@elem"),
                )?;
                let max_properties = match int_of(s, "maxProperties") {
                    Some(max) => zero_if_negative(max),
                    None => (MAX_REQUEST_SIZE_BYTES - 2) / (props_type.min_serialized_size + 6),
                };
                let key = Arc::new(DeclType::simple("string", Ty::String, 2));
                return Some(Arc::new(DeclType {
                    name: "map".to_string(),
                    kind: DeclKind::Map(key, props_type),
                    max_elements: max_properties,
                    min_serialized_size: 2,
                }));
            }
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut fields = BTreeMap::new();
            let mut min_size = 2;
            if let Some(properties) = s.get("properties").and_then(Value::as_object) {
                for (prop_name, prop) in properties {
                    let escaped = escape(prop_name);
                    let field_name = format!("{name}.{}", escaped.as_deref().unwrap_or(prop_name));
                    let Some(field_type) = schema_decl_type(
                        prop,
                        flag(prop, "x-kubernetes-embedded-resource"),
                        &field_name,
                    ) else {
                        continue;
                    };
                    if required.contains(&prop_name.as_str()) && prop.get("default").is_none() {
                        min_size += prop_name.len() as i64 + field_type.min_serialized_size + 4;
                    }
                    if let Some(escaped) = escaped {
                        fields.insert(escaped, field_type);
                    }
                }
            }
            Some(Arc::new(DeclType {
                name: name.to_string(),
                kind: DeclKind::Object(fields),
                max_elements: 0,
                min_serialized_size: min_size,
            }))
        }
        "string" => {
            let max_length = int_of(s, "maxLength");
            let unbounded = MAX_REQUEST_SIZE_BYTES - 2;
            let decl = match str_of(s, "format") {
                "byte" => {
                    let mut t = DeclType::simple("bytes", Ty::Bytes, 2);
                    t.max_elements = max_length.map_or(unbounded, zero_if_negative);
                    t
                }
                "duration" => {
                    let mut t = DeclType::simple("duration", Ty::Duration, 3);
                    t.max_elements = 32;
                    t
                }
                "date" => {
                    let mut t = DeclType::simple("timestamp", Ty::Timestamp, 12);
                    t.max_elements = 12;
                    t
                }
                "date-time" => {
                    let mut t = DeclType::simple("timestamp", Ty::Timestamp, 21);
                    t.max_elements = 32;
                    t
                }
                _ => {
                    let mut t = DeclType::simple("string", Ty::String, 2);
                    let enum_values = s.get("enum").and_then(Value::as_array);
                    t.max_elements = match (max_length, enum_values) {
                        (Some(max), _) => zero_if_negative(max) * 4,
                        (None, Some(values)) if !values.is_empty() => values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|v| v.len() as i64)
                            .max()
                            .unwrap_or(0),
                        _ => unbounded,
                    };
                    t
                }
            };
            Some(Arc::new(decl))
        }
        "boolean" => Some(Arc::new(DeclType::simple("bool", Ty::Bool, 4))),
        "number" => Some(Arc::new(DeclType::simple("double", Ty::Double, 1))),
        "integer" => Some(Arc::new(DeclType::simple("int", Ty::Int, 1))),
        _ => None,
    }
}

/// apiextensions `model.WithTypeAndObjectMeta`: the root of a resource always
/// has string `kind` and `apiVersion` and `metadata.name`/`generateName`.
fn with_type_and_object_meta(s: &Value) -> Value {
    let props = s.get("properties").and_then(Value::as_object);
    let typed = |v: Option<&Value>, t: &str| v.is_some_and(|v| str_of(v, "type") == t);
    if let Some(p) = props {
        let meta = p.get("metadata");
        let meta_props = meta.and_then(|m| m.get("properties"));
        if typed(p.get("kind"), "string")
            && typed(p.get("apiVersion"), "string")
            && typed(meta, "object")
            && meta_props.is_some()
            && typed(meta_props.and_then(|m| m.get("name")), "string")
            && typed(meta_props.and_then(|m| m.get("generateName")), "string")
        {
            return s.clone();
        }
    }
    let mut result = s.clone();
    let string = serde_json::json!({"type": "string"});
    let mut new_props = props.cloned().unwrap_or_default();
    new_props.insert("kind".into(), string.clone());
    new_props.insert("apiVersion".into(), string.clone());
    new_props.insert(
        "metadata".into(),
        serde_json::json!({"type": "object", "properties": {"name": string, "generateName": string}}),
    );
    if let Some(obj) = result.as_object_mut() {
        obj.insert("properties".into(), Value::Object(new_props));
    }
    result
}

const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// apiserver `cel.Escape`: the CEL identifier of a property name, `None` for
/// names CEL cannot reach.
pub(crate) fn escape(ident: &str) -> Option<String> {
    let first = ident.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if CEL_RESERVED.contains(&ident) {
        return Some(format!("__{ident}__"));
    }
    if !ident
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
    {
        return None;
    }
    let mut out = String::with_capacity(ident.len());
    let mut rest = ident;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// The AST, normalised as cel-go's checker leaves it.
// ---------------------------------------------------------------------------

/// A literal value.
#[derive(Clone, Debug)]
pub(crate) enum Lit {
    Bool(bool),
    Int(i64),
    Uint,
    Double,
    /// Strings keep their text (for regex and field names); size is in code points.
    String(String),
    /// Bytes keep their length.
    Bytes(usize),
    Null,
}

/// An expression node. Namespaced functions (`sets.contains`, `optional.of`)
/// are global calls and `cel.bind` is a comprehension, as after cel-go's
/// checker.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub id: u64,
    pub kind: NodeKind,
}

#[derive(Clone, Debug)]
pub(crate) enum NodeKind {
    Lit(Lit),
    Ident(String),
    Select {
        operand: Box<Node>,
        field: String,
        test: bool,
    },
    Call {
        func: String,
        target: Option<Box<Node>>,
        args: Vec<Node>,
    },
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Struct(String),
    Comprehension(Box<Comprehension>),
}

#[derive(Clone, Debug)]
pub(crate) struct Comprehension {
    pub range: Node,
    pub iter_var: String,
    pub accu_var: String,
    pub accu_init: Node,
    pub cond: Node,
    pub step: Node,
    pub result: Node,
}

/// The accumulator of the macros' comprehensions (cel-go's hidden name).
pub(crate) const ACCUMULATOR: &str = "@result";
/// cel-go's traditional accumulator name, also hidden from size paths.
pub(crate) const LEGACY_ACCUMULATOR: &str = "__result__";

/// Functions that are called with a dotted name.
const NAMESPACED: &[&str] = &[
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "optional.of",
    "optional.ofNonZeroValue",
    "optional.none",
    "strings.quote",
    "ip.isCanonical",
    "lists.range",
    "format.named",
    "format.dns1123Label",
    "format.dns1123Subdomain",
    "format.dns1035Label",
    "format.qualifiedName",
    "format.dns1123LabelPrefix",
    "format.dns1123SubdomainPrefix",
    "format.dns1035LabelPrefix",
    "format.labelValue",
    "format.uri",
    "format.uuid",
    "format.byte",
    "format.date",
    "format.datetime",
];

/// Converts the `cel` crate's AST, recording each node's source offset.
struct Converter<'a> {
    /// Source info of a probe parse (see [`parse`]), for node offsets.
    info: Option<&'a SourceInfo>,
    offsets: HashMap<u64, usize>,
}

impl Converter<'_> {
    fn node(&mut self, e: &IdedExpr) -> Node {
        if let Some((start, _)) = self.info.and_then(|i| i.offset_for(e.id)) {
            self.offsets.insert(e.id, start as usize);
        }
        let kind = match &e.expr {
            Expr::Unspecified => NodeKind::Lit(Lit::Null),
            Expr::Literal(lit) => NodeKind::Lit(match lit {
                LiteralValue::Boolean(b) => Lit::Bool(**b),
                LiteralValue::Int(i) => Lit::Int(**i),
                LiteralValue::UInt(_) => Lit::Uint,
                LiteralValue::Double(_) => Lit::Double,
                LiteralValue::String(s) => Lit::String(s.to_string()),
                LiteralValue::Bytes(b) => Lit::Bytes(b.len()),
                LiteralValue::Null => Lit::Null,
            }),
            Expr::Ident(name) => NodeKind::Ident(name.clone()),
            Expr::Select(sel) => NodeKind::Select {
                operand: Box::new(self.node(&sel.operand)),
                field: sel.field.clone(),
                test: sel.test,
            },
            Expr::Call(call) => {
                let namespace = call.target.as_deref().and_then(|t| match &t.expr {
                    Expr::Ident(ns) => Some(ns.as_str()),
                    _ => None,
                });
                let qualified = namespace.map(|ns| format!("{ns}.{}", call.func_name));
                match qualified {
                    Some(q) if NAMESPACED.contains(&q.as_str()) => NodeKind::Call {
                        func: q,
                        target: None,
                        args: call.args.iter().map(|a| self.node(a)).collect(),
                    },
                    _ => NodeKind::Call {
                        func: call.func_name.clone(),
                        target: call.target.as_deref().map(|t| Box::new(self.node(t))),
                        args: call.args.iter().map(|a| self.node(a)).collect(),
                    },
                }
            }
            Expr::List(list) => {
                NodeKind::List(list.elements.iter().map(|e| self.node(e)).collect())
            }
            Expr::Map(map) => NodeKind::Map(
                map.entries
                    .iter()
                    .filter_map(|entry| match &entry.expr {
                        EntryExpr::MapEntry(m) => Some((self.node(&m.key), self.node(&m.value))),
                        EntryExpr::StructField(_) => None,
                    })
                    .collect(),
            ),
            Expr::Struct(s) => NodeKind::Struct(s.type_name.clone()),
            Expr::Comprehension(c) => NodeKind::Comprehension(Box::new(Comprehension {
                range: self.node(&c.iter_range),
                iter_var: c.iter_var.clone(),
                accu_var: c.accu_var.clone(),
                accu_init: self.node(&c.accu_init),
                cond: self.node(&c.loop_cond),
                step: self.node(&c.loop_step),
                result: self.node(&c.result),
            })),
        };
        Node { id: e.id, kind }
    }
}

/// A compilation error, displayed as cel-go's `issues.String()` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompileErrors(pub String);

/// A parsed rule: the normalised AST and where each node starts in the source.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub node: Node,
    offsets: HashMap<u64, usize>,
}

fn parser() -> Parser {
    Parser::new().enable_optional_syntax(true)
}

/// Parses a rule into the normalised AST.
pub(crate) fn parse(source: &str) -> Result<Parsed, CompileErrors> {
    let parsed = parser().parse(source).map_err(|errors| {
        let text: Vec<String> = errors
            .errors
            .iter()
            .map(|e| {
                let line = usize::try_from(e.pos.0).unwrap_or(1).max(1);
                // The `cel` crate counts columns from 1.
                let column = usize::try_from(e.pos.1).unwrap_or(1).saturating_sub(1);
                display_error(source, line, column, &e.msg)
            })
            .collect();
        CompileErrors(text.join("\n"))
    })?;
    // The parser keeps node positions only on failure: parse once more with
    // a stray `)` after the rule (skipped by the parser's error recovery, so
    // the nodes and their ids are the same) to learn where each node starts.
    let probe = parser().parse(&format!("{source}\n)")).err();
    let info = probe
        .as_ref()
        .and_then(|e| e.errors.first())
        .and_then(|e| e.source_info.clone());
    let mut converter = Converter {
        info: info.as_deref(),
        offsets: HashMap::new(),
    };
    let node = converter.node(&parsed);
    Ok(Parsed {
        node,
        offsets: converter.offsets,
    })
}

/// `ERROR: <input>:L:C: msg` with the source line and a caret, as cel-go
/// prints it (`column` is 0-based).
fn display_error(source: &str, line: usize, column: usize, message: &str) -> String {
    let mut out = format!("ERROR: <input>:{line}:{}: {message}", column + 1);
    if let Some(text) = source.lines().nth(line - 1) {
        out.push_str(&format!("\n | {text}\n | {}^", ".".repeat(column)));
    }
    out
}

/// Line (from 1) and column (from 0) of a character offset.
fn line_and_column(source: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 0;
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
        }
    }
    (line, column)
}

// ---------------------------------------------------------------------------
// Function declarations of the Kubernetes CEL environment.
// ---------------------------------------------------------------------------

/// A parameter or result type pattern; single capital letters are type
/// parameters.
#[derive(Clone, Debug)]
enum Pat {
    Ty(Ty),
    Param(char),
    List(Box<Pat>),
    Map(Box<Pat>, Box<Pat>),
    Optional(Box<Pat>),
    Type(Box<Pat>),
}

fn pat(text: &str) -> Pat {
    let text = text.trim();
    if let Some(inner) = text.strip_prefix("list(").and_then(|t| t.strip_suffix(')')) {
        return Pat::List(Box::new(pat(inner)));
    }
    if let Some(inner) = text
        .strip_prefix("optional(")
        .and_then(|t| t.strip_suffix(')'))
    {
        return Pat::Optional(Box::new(pat(inner)));
    }
    if let Some(inner) = text.strip_prefix("type(").and_then(|t| t.strip_suffix(')')) {
        return Pat::Type(Box::new(pat(inner)));
    }
    if let Some(inner) = text.strip_prefix("map(").and_then(|t| t.strip_suffix(')')) {
        let (k, v) = split_top(inner);
        return Pat::Map(Box::new(pat(k)), Box::new(pat(v)));
    }
    Pat::Ty(match text {
        "dyn" => Ty::Dyn,
        "null" => Ty::Null,
        "bool" => Ty::Bool,
        "int" => Ty::Int,
        "uint" => Ty::Uint,
        "double" => Ty::Double,
        "string" => Ty::String,
        "bytes" => Ty::Bytes,
        "duration" => Ty::Duration,
        "timestamp" => Ty::Timestamp,
        "IP" => Ty::Opaque(IP),
        "CIDR" => Ty::Opaque(CIDR),
        "URL" => Ty::Opaque(URL),
        "Quantity" => Ty::Opaque(QUANTITY),
        "Semver" => Ty::Opaque(SEMVER),
        "Format" => Ty::Opaque(FORMAT),
        p if p.len() == 1 => return Pat::Param(p.chars().next().unwrap_or('A')),
        other => unreachable!("unknown type pattern {other}"),
    })
}

/// Splits `a, b` at the top-level comma.
fn split_top(text: &str) -> (&str, &str) {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => return (&text[..i], &text[i + 1..]),
            _ => {}
        }
    }
    (text, "")
}

fn params(text: &str) -> Vec<Pat> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (head, tail) = split_top(rest);
        out.push(pat(head));
        rest = tail.trim();
    }
    out
}

/// One overload: `member` ones take their target as the first parameter.
#[derive(Debug)]
struct Overload {
    func: &'static str,
    member: bool,
    id: &'static str,
    params: Vec<Pat>,
    result: Pat,
}

const G: bool = false;
const M: bool = true;

/// (function, member, overload id, parameters, result)
type Decl = (&'static str, bool, &'static str, &'static str, &'static str);

const DECLS: &[Decl] = &[
    // Operators.
    ("!_", G, "logical_not", "bool", "bool"),
    ("-_", G, "negate_int64", "int", "int"),
    ("-_", G, "negate_double", "double", "double"),
    ("_&&_", G, "logical_and", "bool, bool", "bool"),
    ("_||_", G, "logical_or", "bool, bool", "bool"),
    ("_?_:_", G, "conditional", "bool, A, A", "A"),
    (
        "@not_strictly_false",
        G,
        "not_strictly_false",
        "bool",
        "bool",
    ),
    ("_==_", G, "equals", "A, A", "bool"),
    ("_!=_", G, "not_equals", "A, A", "bool"),
    ("_+_", G, "add_int64", "int, int", "int"),
    ("_+_", G, "add_uint64", "uint, uint", "uint"),
    ("_+_", G, "add_double", "double, double", "double"),
    ("_+_", G, "add_string", "string, string", "string"),
    ("_+_", G, "add_bytes", "bytes, bytes", "bytes"),
    ("_+_", G, "add_list", "list(A), list(A)", "list(A)"),
    (
        "_+_",
        G,
        "add_timestamp_duration",
        "timestamp, duration",
        "timestamp",
    ),
    (
        "_+_",
        G,
        "add_duration_timestamp",
        "duration, timestamp",
        "timestamp",
    ),
    (
        "_+_",
        G,
        "add_duration_duration",
        "duration, duration",
        "duration",
    ),
    ("_-_", G, "subtract_int64", "int, int", "int"),
    ("_-_", G, "subtract_uint64", "uint, uint", "uint"),
    ("_-_", G, "subtract_double", "double, double", "double"),
    (
        "_-_",
        G,
        "subtract_timestamp_timestamp",
        "timestamp, timestamp",
        "duration",
    ),
    (
        "_-_",
        G,
        "subtract_timestamp_duration",
        "timestamp, duration",
        "timestamp",
    ),
    (
        "_-_",
        G,
        "subtract_duration_duration",
        "duration, duration",
        "duration",
    ),
    ("_*_", G, "multiply_int64", "int, int", "int"),
    ("_*_", G, "multiply_uint64", "uint, uint", "uint"),
    ("_*_", G, "multiply_double", "double, double", "double"),
    ("_/_", G, "divide_int64", "int, int", "int"),
    ("_/_", G, "divide_uint64", "uint, uint", "uint"),
    ("_/_", G, "divide_double", "double, double", "double"),
    ("_%_", G, "modulo_int64", "int, int", "int"),
    ("_%_", G, "modulo_uint64", "uint, uint", "uint"),
    ("_[_]", G, "index_list", "list(A), int", "A"),
    ("_[_]", G, "index_map", "map(K, V), K", "V"),
    ("@in", G, "in_list", "A, list(A)", "bool"),
    ("@in", G, "in_map", "K, map(K, V)", "bool"),
    // size
    ("size", G, "size_string", "string", "int"),
    ("size", G, "size_bytes", "bytes", "int"),
    ("size", G, "size_list", "list(A)", "int"),
    ("size", G, "size_map", "map(K, V)", "int"),
    ("size", M, "string_size", "string", "int"),
    ("size", M, "bytes_size", "bytes", "int"),
    ("size", M, "list_size", "list(A)", "int"),
    ("size", M, "map_size", "map(K, V)", "int"),
    // Conversions.
    ("int", G, "int64_to_int64", "int", "int"),
    ("int", G, "uint64_to_int64", "uint", "int"),
    ("int", G, "double_to_int64", "double", "int"),
    ("int", G, "string_to_int64", "string", "int"),
    ("int", G, "timestamp_to_int64", "timestamp", "int"),
    ("uint", G, "uint64_to_uint64", "uint", "uint"),
    ("uint", G, "int64_to_uint64", "int", "uint"),
    ("uint", G, "double_to_uint64", "double", "uint"),
    ("uint", G, "string_to_uint64", "string", "uint"),
    ("double", G, "double_to_double", "double", "double"),
    ("double", G, "int64_to_double", "int", "double"),
    ("double", G, "uint64_to_double", "uint", "double"),
    ("double", G, "string_to_double", "string", "double"),
    ("string", G, "string_to_string", "string", "string"),
    ("string", G, "int64_to_string", "int", "string"),
    ("string", G, "uint64_to_string", "uint", "string"),
    ("string", G, "double_to_string", "double", "string"),
    ("string", G, "bool_to_string", "bool", "string"),
    ("string", G, "bytes_to_string", "bytes", "string"),
    ("string", G, "timestamp_to_string", "timestamp", "string"),
    ("string", G, "duration_to_string", "duration", "string"),
    ("string", G, "ip_to_string", "IP", "string"),
    ("string", G, "cidr_to_string", "CIDR", "string"),
    ("bytes", G, "bytes_to_bytes", "bytes", "bytes"),
    ("bytes", G, "string_to_bytes", "string", "bytes"),
    ("bool", G, "bool_to_bool", "bool", "bool"),
    ("bool", G, "string_to_bool", "string", "bool"),
    (
        "duration",
        G,
        "duration_to_duration",
        "duration",
        "duration",
    ),
    ("duration", G, "string_to_duration", "string", "duration"),
    (
        "timestamp",
        G,
        "timestamp_to_timestamp",
        "timestamp",
        "timestamp",
    ),
    ("timestamp", G, "string_to_timestamp", "string", "timestamp"),
    ("timestamp", G, "int64_to_timestamp", "int", "timestamp"),
    ("dyn", G, "to_dyn", "A", "dyn"),
    ("type", G, "type", "A", "type(A)"),
    // Strings.
    ("contains", M, "contains_string", "string, string", "bool"),
    (
        "startsWith",
        M,
        "starts_with_string",
        "string, string",
        "bool",
    ),
    ("endsWith", M, "ends_with_string", "string, string", "bool"),
    ("matches", G, "matches", "string, string", "bool"),
    ("matches", M, "matches_string", "string, string", "bool"),
    // Timestamps and durations.
    ("getFullYear", M, "timestamp_to_year", "timestamp", "int"),
    (
        "getFullYear",
        M,
        "timestamp_to_year_with_tz",
        "timestamp, string",
        "int",
    ),
    ("getMonth", M, "timestamp_to_month", "timestamp", "int"),
    (
        "getMonth",
        M,
        "timestamp_to_month_with_tz",
        "timestamp, string",
        "int",
    ),
    (
        "getDayOfYear",
        M,
        "timestamp_to_day_of_year",
        "timestamp",
        "int",
    ),
    (
        "getDayOfYear",
        M,
        "timestamp_to_day_of_year_with_tz",
        "timestamp, string",
        "int",
    ),
    (
        "getDayOfMonth",
        M,
        "timestamp_to_day_of_month",
        "timestamp",
        "int",
    ),
    (
        "getDayOfMonth",
        M,
        "timestamp_to_day_of_month_with_tz",
        "timestamp, string",
        "int",
    ),
    (
        "getDate",
        M,
        "timestamp_to_day_of_month_1_based",
        "timestamp",
        "int",
    ),
    (
        "getDate",
        M,
        "timestamp_to_day_of_month_1_based_with_tz",
        "timestamp, string",
        "int",
    ),
    (
        "getDayOfWeek",
        M,
        "timestamp_to_day_of_week",
        "timestamp",
        "int",
    ),
    (
        "getDayOfWeek",
        M,
        "timestamp_to_day_of_week_with_tz",
        "timestamp, string",
        "int",
    ),
    ("getHours", M, "timestamp_to_hours", "timestamp", "int"),
    (
        "getHours",
        M,
        "timestamp_to_hours_with_tz",
        "timestamp, string",
        "int",
    ),
    ("getHours", M, "duration_to_hours", "duration", "int"),
    ("getMinutes", M, "timestamp_to_minutes", "timestamp", "int"),
    (
        "getMinutes",
        M,
        "timestamp_to_minutes_with_tz",
        "timestamp, string",
        "int",
    ),
    ("getMinutes", M, "duration_to_minutes", "duration", "int"),
    ("getSeconds", M, "timestamp_to_seconds", "timestamp", "int"),
    (
        "getSeconds",
        M,
        "timestamp_to_seconds_with_tz",
        "timestamp, string",
        "int",
    ),
    ("getSeconds", M, "duration_to_seconds", "duration", "int"),
    (
        "getMilliseconds",
        M,
        "timestamp_to_milliseconds",
        "timestamp",
        "int",
    ),
    (
        "getMilliseconds",
        M,
        "timestamp_to_milliseconds_with_tz",
        "timestamp, string",
        "int",
    ),
    (
        "getMilliseconds",
        M,
        "duration_to_milliseconds",
        "duration",
        "int",
    ),
    // cel-go strings extension, version 2.
    ("charAt", M, "string_char_at_int", "string, int", "string"),
    (
        "indexOf",
        M,
        "string_index_of_string",
        "string, string",
        "int",
    ),
    (
        "indexOf",
        M,
        "string_index_of_string_int",
        "string, string, int",
        "int",
    ),
    (
        "lastIndexOf",
        M,
        "string_last_index_of_string",
        "string, string",
        "int",
    ),
    (
        "lastIndexOf",
        M,
        "string_last_index_of_string_int",
        "string, string, int",
        "int",
    ),
    ("lowerAscii", M, "string_lower_ascii", "string", "string"),
    ("upperAscii", M, "string_upper_ascii", "string", "string"),
    (
        "replace",
        M,
        "string_replace_string_string",
        "string, string, string",
        "string",
    ),
    (
        "replace",
        M,
        "string_replace_string_string_int",
        "string, string, string, int",
        "string",
    ),
    (
        "split",
        M,
        "string_split_string",
        "string, string",
        "list(string)",
    ),
    (
        "split",
        M,
        "string_split_string_int",
        "string, string, int",
        "list(string)",
    ),
    (
        "substring",
        M,
        "string_substring_int",
        "string, int",
        "string",
    ),
    (
        "substring",
        M,
        "string_substring_int_int",
        "string, int, int",
        "string",
    ),
    ("trim", M, "string_trim", "string", "string"),
    ("join", M, "list_join", "list(string)", "string"),
    (
        "join",
        M,
        "list_join_string",
        "list(string), string",
        "string",
    ),
    ("format", M, "string_format", "string, list(dyn)", "string"),
    ("strings.quote", G, "strings_quote", "string", "string"),
    // Kubernetes regex library.
    ("find", M, "string_find_string", "string, string", "string"),
    (
        "findAll",
        M,
        "string_find_all_string",
        "string, string",
        "list(string)",
    ),
    (
        "findAll",
        M,
        "string_find_all_string_int",
        "string, string, int",
        "list(string)",
    ),
    // Kubernetes list library.
    ("isSorted", M, "list_is_sorted", "list(A)", "bool"),
    ("sum", M, "list_sum", "list(A)", "A"),
    ("max", M, "list_max", "list(A)", "A"),
    ("min", M, "list_min", "list(A)", "A"),
    ("indexOf", M, "list_index_of", "list(A), A", "int"),
    ("lastIndexOf", M, "list_last_index_of", "list(A), A", "int"),
    // cel-go lists extension, version 3.
    ("slice", M, "list_slice", "list(A), int, int", "list(A)"),
    ("flatten", M, "list_flatten", "list(list(A))", "list(A)"),
    (
        "flatten",
        M,
        "list_flatten_int",
        "list(A), int",
        "list(dyn)",
    ),
    ("lists.range", G, "lists_range", "int", "list(int)"),
    ("distinct", M, "list_distinct", "list(A)", "list(A)"),
    ("reverse", M, "list_reverse", "list(A)", "list(A)"),
    ("sort", M, "list_sort", "list(A)", "list(A)"),
    ("first", M, "list_first", "list(A)", "optional(A)"),
    ("last", M, "list_last", "list(A)", "optional(A)"),
    // cel-go sets extension.
    (
        "sets.contains",
        G,
        "list_sets_contains_list",
        "list(A), list(A)",
        "bool",
    ),
    (
        "sets.equivalent",
        G,
        "list_sets_equivalent_list",
        "list(A), list(A)",
        "bool",
    ),
    (
        "sets.intersects",
        G,
        "list_sets_intersects_list",
        "list(A), list(A)",
        "bool",
    ),
    // Kubernetes URL library.
    ("url", G, "string_to_url", "string", "URL"),
    ("isURL", G, "is_url_string", "string", "bool"),
    ("getScheme", M, "url_get_scheme", "URL", "string"),
    ("getHost", M, "url_get_host", "URL", "string"),
    ("getHostname", M, "url_get_hostname", "URL", "string"),
    ("getPort", M, "url_get_port", "URL", "string"),
    ("getEscapedPath", M, "url_get_escaped_path", "URL", "string"),
    (
        "getQuery",
        M,
        "url_get_query",
        "URL",
        "map(string, list(string))",
    ),
    // Kubernetes quantity library.
    ("quantity", G, "string_to_quantity", "string", "Quantity"),
    ("isQuantity", G, "is_quantity_string", "string", "bool"),
    ("sign", M, "quantity_sign", "Quantity", "int"),
    ("isInteger", M, "quantity_is_integer", "Quantity", "bool"),
    ("asInteger", M, "quantity_as_integer", "Quantity", "int"),
    (
        "asApproximateFloat",
        M,
        "quantity_as_float",
        "Quantity",
        "double",
    ),
    ("add", M, "quantity_add", "Quantity, Quantity", "Quantity"),
    ("add", M, "quantity_add_int", "Quantity, int", "Quantity"),
    ("sub", M, "quantity_sub", "Quantity, Quantity", "Quantity"),
    ("sub", M, "quantity_sub_int", "Quantity, int", "Quantity"),
    (
        "isGreaterThan",
        M,
        "quantity_is_greater_than",
        "Quantity, Quantity",
        "bool",
    ),
    (
        "isLessThan",
        M,
        "quantity_is_less_than",
        "Quantity, Quantity",
        "bool",
    ),
    (
        "compareTo",
        M,
        "quantity_compare_to",
        "Quantity, Quantity",
        "int",
    ),
    // Kubernetes IP and CIDR libraries.
    ("ip", G, "string_to_ip", "string", "IP"),
    ("isIP", G, "is_ip", "string", "bool"),
    ("ip.isCanonical", G, "ip_is_canonical", "string", "bool"),
    ("family", M, "ip_family", "IP", "int"),
    ("isUnspecified", M, "ip_is_unspecified", "IP", "bool"),
    ("isLoopback", M, "ip_is_loopback", "IP", "bool"),
    (
        "isLinkLocalMulticast",
        M,
        "ip_is_link_local_multicast",
        "IP",
        "bool",
    ),
    (
        "isLinkLocalUnicast",
        M,
        "ip_is_link_local_unicast",
        "IP",
        "bool",
    ),
    ("isGlobalUnicast", M, "ip_is_global_unicast", "IP", "bool"),
    ("cidr", G, "string_to_cidr", "string", "CIDR"),
    ("isCIDR", G, "is_cidr", "string", "bool"),
    ("containsIP", M, "cidr_contains_ip_ip", "CIDR, IP", "bool"),
    (
        "containsIP",
        M,
        "cidr_contains_ip_string",
        "CIDR, string",
        "bool",
    ),
    (
        "containsCIDR",
        M,
        "cidr_contains_cidr",
        "CIDR, CIDR",
        "bool",
    ),
    (
        "containsCIDR",
        M,
        "cidr_contains_cidr_string",
        "CIDR, string",
        "bool",
    ),
    ("ip", M, "cidr_ip", "CIDR", "IP"),
    ("masked", M, "cidr_masked", "CIDR", "CIDR"),
    ("prefixLength", M, "cidr_prefix_length", "CIDR", "int"),
    // Kubernetes format library.
    (
        "format.named",
        G,
        "format_named",
        "string",
        "optional(Format)",
    ),
    (
        "format.dns1123Label",
        G,
        "format_dns1123_label",
        "",
        "Format",
    ),
    (
        "format.dns1123Subdomain",
        G,
        "format_dns1123_subdomain",
        "",
        "Format",
    ),
    (
        "format.dns1035Label",
        G,
        "format_dns1035_label",
        "",
        "Format",
    ),
    (
        "format.qualifiedName",
        G,
        "format_qualified_name",
        "",
        "Format",
    ),
    (
        "format.dns1123LabelPrefix",
        G,
        "format_dns1123_label_prefix",
        "",
        "Format",
    ),
    (
        "format.dns1123SubdomainPrefix",
        G,
        "format_dns1123_subdomain_prefix",
        "",
        "Format",
    ),
    (
        "format.dns1035LabelPrefix",
        G,
        "format_dns1035_label_prefix",
        "",
        "Format",
    ),
    ("format.labelValue", G, "format_label_value", "", "Format"),
    ("format.uri", G, "format_uri", "", "Format"),
    ("format.uuid", G, "format_uuid", "", "Format"),
    ("format.byte", G, "format_byte", "", "Format"),
    ("format.date", G, "format_date", "", "Format"),
    ("format.datetime", G, "format_datetime", "", "Format"),
    (
        "validate",
        M,
        "format_validate",
        "Format, string",
        "optional(list(string))",
    ),
    // Kubernetes semver library.
    ("semver", G, "string_to_semver", "string", "Semver"),
    (
        "semver",
        G,
        "string_bool_to_semver",
        "string, bool",
        "Semver",
    ),
    ("isSemver", G, "is_semver_string", "string", "bool"),
    (
        "isSemver",
        G,
        "is_semver_string_bool",
        "string, bool",
        "bool",
    ),
    ("major", M, "semver_major", "Semver", "int"),
    ("minor", M, "semver_minor", "Semver", "int"),
    ("patch", M, "semver_patch", "Semver", "int"),
    (
        "isGreaterThan",
        M,
        "semver_is_greater_than",
        "Semver, Semver",
        "bool",
    ),
    (
        "isLessThan",
        M,
        "semver_is_less_than",
        "Semver, Semver",
        "bool",
    ),
    ("compareTo", M, "semver_compare_to", "Semver, Semver", "int"),
    // Optional types.
    ("optional.of", G, "optional_of", "A", "optional(A)"),
    (
        "optional.ofNonZeroValue",
        G,
        "optional_ofNonZeroValue",
        "A",
        "optional(A)",
    ),
    ("optional.none", G, "optional_none", "", "optional(dyn)"),
    ("value", M, "optional_value", "optional(A)", "A"),
    ("hasValue", M, "optional_hasValue", "optional(A)", "bool"),
    (
        "or",
        M,
        "optional_or_optional",
        "optional(A), optional(A)",
        "optional(A)",
    ),
    (
        "orValue",
        M,
        "optional_orValue_value",
        "optional(A), A",
        "A",
    ),
];

/// Relational operators: every ordered type, and (since Kubernetes 1.28)
/// across numeric types.
const COMPARISONS: &[(&str, &str)] = &[
    ("_<_", "less"),
    ("_<=_", "less_equals"),
    ("_>_", "greater"),
    ("_>=_", "greater_equals"),
];

const ORDERED: &[(&str, &str, &str)] = &[
    ("bool", "bool", "bool"),
    ("int64", "int", "int"),
    ("uint64", "uint", "uint"),
    ("double", "double", "double"),
    ("string", "string", "string"),
    ("bytes", "bytes", "bytes"),
    ("timestamp", "timestamp", "timestamp"),
    ("duration", "duration", "duration"),
    ("int64_double", "int", "double"),
    ("int64_uint64", "int", "uint"),
    ("uint64_double", "uint", "double"),
    ("uint64_int64", "uint", "int"),
    ("double_int64", "double", "int"),
    ("double_uint64", "double", "uint"),
];

static OVERLOADS: LazyLock<Vec<Overload>> = LazyLock::new(|| {
    let mut all: Vec<Overload> = DECLS
        .iter()
        .map(|(func, member, id, p, r)| Overload {
            func,
            member: *member,
            id,
            params: params(p),
            result: pat(r),
        })
        .collect();
    for (op, prefix) in COMPARISONS {
        for (suffix, lhs, rhs) in ORDERED {
            let id: &'static str = Box::leak(format!("{prefix}_{suffix}").into_boxed_str());
            all.push(Overload {
                func: op,
                member: false,
                id,
                params: vec![pat(lhs), pat(rhs)],
                result: Pat::Ty(Ty::Bool),
            });
        }
    }
    all
});

/// Type-parameter bindings while matching one overload.
type Bindings = HashMap<char, Ty>;

/// The most specific type both `a` and `b` fit, if they are compatible.
fn join(a: &Ty, b: &Ty) -> Option<Ty> {
    match (a, b) {
        (Ty::Dyn, t) | (t, Ty::Dyn) => Some(t.clone()),
        (Ty::List(x), Ty::List(y)) => Some(Ty::List(Box::new(join(x, y)?))),
        (Ty::Map(kx, vx), Ty::Map(ky, vy)) => {
            Some(Ty::Map(Box::new(join(kx, ky)?), Box::new(join(vx, vy)?)))
        }
        (Ty::Optional(x), Ty::Optional(y)) => Some(Ty::Optional(Box::new(join(x, y)?))),
        (Ty::Type(_), Ty::Type(_)) => Some(Ty::Type(Box::new(Ty::Dyn))),
        (Ty::Null, t @ (Ty::Object(_) | Ty::Timestamp | Ty::Duration | Ty::Optional(_)))
        | (t @ (Ty::Object(_) | Ty::Timestamp | Ty::Duration | Ty::Optional(_)), Ty::Null) => {
            Some(t.clone())
        }
        (Ty::Null, t) | (t, Ty::Null) if t.kind() == Kind::Struct => Some(t.clone()),
        (x, y) if x == y => Some(x.clone()),
        _ => None,
    }
}

fn unify(p: &Pat, t: &Ty, bindings: &mut Bindings) -> bool {
    match p {
        Pat::Param(c) => match bindings.get(c) {
            None => {
                bindings.insert(*c, t.clone());
                true
            }
            Some(bound) => match join(bound, t) {
                Some(joined) => {
                    bindings.insert(*c, joined);
                    true
                }
                None => false,
            },
        },
        _ if matches!(t, Ty::Dyn | Ty::Error) => true,
        Pat::Ty(Ty::Dyn) => true,
        Pat::Ty(pt) => pt == t,
        Pat::List(q) => matches!(t, Ty::List(u) if unify(q, u, bindings)),
        Pat::Optional(q) => matches!(t, Ty::Optional(u) if unify(q, u, bindings)),
        Pat::Type(q) => matches!(t, Ty::Type(u) if unify(q, u, bindings)),
        Pat::Map(k, v) => {
            matches!(t, Ty::Map(kt, vt) if unify(k, kt, bindings) && unify(v, vt, bindings))
        }
    }
}

fn substitute(p: &Pat, bindings: &Bindings) -> Ty {
    match p {
        Pat::Ty(t) => t.clone(),
        Pat::Param(c) => bindings.get(c).cloned().unwrap_or(Ty::Dyn),
        Pat::List(q) => Ty::List(Box::new(substitute(q, bindings))),
        Pat::Optional(q) => Ty::Optional(Box::new(substitute(q, bindings))),
        Pat::Type(q) => Ty::Type(Box::new(substitute(q, bindings))),
        Pat::Map(k, v) => Ty::Map(
            Box::new(substitute(k, bindings)),
            Box::new(substitute(v, bindings)),
        ),
    }
}

// ---------------------------------------------------------------------------
// The checker.
// ---------------------------------------------------------------------------

/// The result of checking a rule: each node's type and each call's overloads.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    pub types: HashMap<u64, Ty>,
    pub overloads: HashMap<u64, Vec<&'static str>>,
    pub uses_old_self: bool,
}

impl Checked {
    pub(crate) fn type_of(&self, id: u64) -> Ty {
        self.types.get(&id).cloned().unwrap_or(Ty::Dyn)
    }
}

struct Checker {
    self_type: Ty,
    old_self_type: Ty,
    locals: Vec<(String, Ty)>,
    checked: Checked,
    /// (node id, message)
    errors: Vec<(u64, String)>,
}

/// Type checks a parsed rule with `self` of type `self_type` and `oldSelf` of
/// the same type (an optional of it with `optionalOldSelf`), then runs the
/// literal validators Kubernetes enables (regexes, durations, timestamps,
/// homogeneous list and map literals).
pub(crate) fn check(
    source: &str,
    parsed: &Parsed,
    self_type: &Ty,
    optional_old_self: bool,
) -> Result<(Checked, Ty), CompileErrors> {
    let old_self_type = if optional_old_self {
        Ty::Optional(Box::new(self_type.clone()))
    } else {
        self_type.clone()
    };
    let mut checker = Checker {
        self_type: self_type.clone(),
        old_self_type,
        locals: Vec::new(),
        checked: Checked::default(),
        errors: Vec::new(),
    };
    let ty = checker.check(&parsed.node);
    if checker.errors.is_empty() {
        checker.validate_literals(&parsed.node, false);
    }
    if checker.errors.is_empty() {
        return Ok((checker.checked, ty));
    }
    let mut located: Vec<(usize, usize, &str)> = checker
        .errors
        .iter()
        .map(|(id, message)| {
            let offset = parsed.offsets.get(id).copied().unwrap_or(0);
            let (line, column) = line_and_column(source, offset);
            (line, column, message.as_str())
        })
        .collect();
    located.sort_by_key(|(line, column, _)| (*line, *column));
    let text: Vec<String> = located
        .iter()
        .map(|(line, column, message)| display_error(source, *line, *column, message))
        .collect();
    Err(CompileErrors(text.join("\n")))
}

impl Checker {
    fn error(&mut self, id: u64, message: String) -> Ty {
        self.errors.push((id, message));
        Ty::Error
    }

    fn lookup_local(&self, name: &str) -> Option<Ty> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    }

    fn check(&mut self, node: &Node) -> Ty {
        let ty = self.check_kind(node);
        self.checked.types.insert(node.id, ty.clone());
        ty
    }

    fn check_kind(&mut self, node: &Node) -> Ty {
        match &node.kind {
            NodeKind::Lit(lit) => match lit {
                Lit::Bool(_) => Ty::Bool,
                Lit::Int(_) => Ty::Int,
                Lit::Uint => Ty::Uint,
                Lit::Double => Ty::Double,
                Lit::String(_) => Ty::String,
                Lit::Bytes(_) => Ty::Bytes,
                Lit::Null => Ty::Null,
            },
            NodeKind::Ident(name) => self.ident(node.id, name),
            NodeKind::Select {
                operand,
                field,
                test,
            } => {
                let operand_type = self.check(operand);
                let field_type = self.select(node.id, &operand_type, field);
                if *test && !field_type.is_error() {
                    Ty::Bool
                } else {
                    field_type
                }
            }
            NodeKind::Call { func, target, args } => self.call(node, func, target.as_deref(), args),
            NodeKind::List(elements) => {
                let mut elem = None::<Ty>;
                for e in elements {
                    let t = self.check(e);
                    elem = Some(match elem {
                        None => t,
                        Some(prev) => join(&prev, &t).unwrap_or(Ty::Dyn),
                    });
                }
                Ty::List(Box::new(elem.unwrap_or(Ty::Dyn)))
            }
            NodeKind::Map(entries) => {
                let (mut key, mut value) = (None::<Ty>, None::<Ty>);
                for (k, v) in entries {
                    let kt = self.check(k);
                    let vt = self.check(v);
                    key = Some(key.map_or(kt.clone(), |p| join(&p, &kt).unwrap_or(Ty::Dyn)));
                    value = Some(value.map_or(vt.clone(), |p| join(&p, &vt).unwrap_or(Ty::Dyn)));
                }
                Ty::Map(
                    Box::new(key.unwrap_or(Ty::Dyn)),
                    Box::new(value.unwrap_or(Ty::Dyn)),
                )
            }
            NodeKind::Struct(name) => self.error(
                node.id,
                format!("undeclared reference to '{name}' (in container '')"),
            ),
            NodeKind::Comprehension(c) => self.comprehension(node.id, c),
        }
    }

    fn ident(&mut self, id: u64, name: &str) -> Ty {
        if let Some(t) = self.lookup_local(name) {
            return t;
        }
        match name {
            "self" => self.self_type.clone(),
            "oldSelf" => {
                self.checked.uses_old_self = true;
                self.old_self_type.clone()
            }
            "int" => Ty::Type(Box::new(Ty::Int)),
            "uint" => Ty::Type(Box::new(Ty::Uint)),
            "double" => Ty::Type(Box::new(Ty::Double)),
            "bool" => Ty::Type(Box::new(Ty::Bool)),
            "string" => Ty::Type(Box::new(Ty::String)),
            "bytes" => Ty::Type(Box::new(Ty::Bytes)),
            "list" => Ty::Type(Box::new(Ty::List(Box::new(Ty::Dyn)))),
            "map" => Ty::Type(Box::new(Ty::Map(Box::new(Ty::Dyn), Box::new(Ty::Dyn)))),
            "null_type" => Ty::Type(Box::new(Ty::Null)),
            "type" => Ty::Type(Box::new(Ty::Type(Box::new(Ty::Dyn)))),
            "google.protobuf.Duration" => Ty::Type(Box::new(Ty::Duration)),
            "google.protobuf.Timestamp" => Ty::Type(Box::new(Ty::Timestamp)),
            _ => self.error(
                id,
                format!("undeclared reference to '{name}' (in container '')"),
            ),
        }
    }

    fn select(&mut self, id: u64, operand: &Ty, field: &str) -> Ty {
        match operand {
            Ty::Error => Ty::Error,
            Ty::Dyn => Ty::Dyn,
            Ty::Map(_, v) => (**v).clone(),
            Ty::Object(decl) => match decl.field(field) {
                Some(f) => f.cel_type(),
                None => self.error(id, format!("undefined field '{field}'")),
            },
            Ty::Optional(inner) => match self.select(id, inner, field) {
                Ty::Error => Ty::Error,
                t => Ty::Optional(Box::new(t)),
            },
            other => self.error(
                id,
                format!("type '{other}' does not support field selection"),
            ),
        }
    }

    fn comprehension(&mut self, id: u64, c: &Comprehension) -> Ty {
        let range = self.check(&c.range);
        let iter_type = match &range {
            Ty::List(t) => (**t).clone(),
            Ty::Map(k, _) => (**k).clone(),
            Ty::Dyn | Ty::Error => range.clone(),
            other => self.error(
                id,
                format!(
                    "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                ),
            ),
        };
        let mut accu = self.check(&c.accu_init);
        self.locals.push((c.accu_var.clone(), accu.clone()));
        self.locals.push((c.iter_var.clone(), iter_type));
        self.check(&c.cond);
        let step = self.check(&c.step);
        self.locals.pop();
        self.locals.pop();
        if let Some(refined) = join(&accu, &step) {
            accu = refined;
        }
        self.locals.push((c.accu_var.clone(), accu));
        let result = self.check(&c.result);
        self.locals.pop();
        result
    }

    fn call(&mut self, node: &Node, func: &str, target: Option<&Node>, args: &[Node]) -> Ty {
        if func == "_?._" && args.len() == 2 {
            let operand = self.check(&args[0]);
            self.check(&args[1]);
            let NodeKind::Lit(Lit::String(field)) = &args[1].kind else {
                return Ty::Dyn;
            };
            self.checked
                .overloads
                .insert(node.id, vec!["select_optional_field"]);
            return match self.select(node.id, &operand, field) {
                Ty::Error => Ty::Error,
                t @ Ty::Optional(_) => t,
                t => Ty::Optional(Box::new(t)),
            };
        }
        if func == "_[?_]" && args.len() == 2 {
            let container = self.check(&args[0]);
            self.check(&args[1]);
            self.checked
                .overloads
                .insert(node.id, vec!["optional_index"]);
            let inner = match &container {
                Ty::Optional(t) => (**t).clone(),
                t => t.clone(),
            };
            return match inner {
                Ty::List(e) => Ty::Optional(e),
                Ty::Map(_, v) => Ty::Optional(v),
                Ty::Error => Ty::Error,
                _ => Ty::Optional(Box::new(Ty::Dyn)),
            };
        }
        let target_type = target.map(|t| self.check(t));
        let arg_types: Vec<Ty> = args.iter().map(|a| self.check(a)).collect();
        let named: Vec<&Overload> = OVERLOADS.iter().filter(|o| o.func == func).collect();
        if named.is_empty() {
            return self.error(
                node.id,
                format!("undeclared reference to '{func}' (in container '')"),
            );
        }
        if target_type.as_ref().is_some_and(Ty::is_error) || arg_types.iter().any(Ty::is_error) {
            return Ty::Error;
        }
        let mut all_types: Vec<Ty> = target_type.iter().cloned().collect();
        all_types.extend(arg_types.iter().cloned());
        let member = target.is_some();
        let mut matched: Vec<(&'static str, Ty)> = Vec::new();
        for o in named
            .iter()
            .filter(|o| o.member == member && o.params.len() == all_types.len())
        {
            let mut bindings = Bindings::new();
            if o.params
                .iter()
                .zip(&all_types)
                .all(|(p, t)| unify(p, t, &mut bindings))
            {
                matched.push((o.id, substitute(&o.result, &bindings)));
            }
        }
        if matched.is_empty() {
            let signature = format_signature(&all_types, member);
            return self.error(
                node.id,
                format!("found no matching overload for '{func}' applied to '{signature}'"),
            );
        }
        let first = matched[0].1.clone();
        let result = if matched.iter().all(|(_, t)| *t == first) {
            first
        } else {
            Ty::Dyn
        };
        self.checked
            .overloads
            .insert(node.id, matched.iter().map(|(id, _)| *id).collect());
        result
    }

    /// cel-go's AST validators as Kubernetes configures them: literal
    /// arguments of `matches`, `duration` and `timestamp` must be valid, and
    /// list and map literals homogeneous (except under `format`).
    fn validate_literals(&mut self, node: &Node, in_format: bool) {
        match &node.kind {
            NodeKind::Call { func, target, args } => {
                if let Some(NodeKind::Lit(lit)) = args.first().map(|a| &a.kind) {
                    let valid = match (func.as_str(), lit) {
                        ("matches", Lit::String(re)) => regex::Regex::new(re).is_ok(),
                        ("duration", Lit::String(d)) => parse_go_duration(d),
                        ("timestamp", Lit::String(t)) => {
                            chrono::DateTime::parse_from_rfc3339(t).is_ok()
                        }
                        _ => true,
                    };
                    if !valid {
                        self.error(args[0].id, format!("invalid {func} argument"));
                    }
                }
                let in_format = in_format || func == "format";
                if let Some(t) = target {
                    self.validate_literals(t, in_format);
                }
                for a in args {
                    self.validate_literals(a, in_format);
                }
            }
            NodeKind::List(elements) => {
                if !in_format {
                    self.homogeneous(elements.iter());
                }
                for e in elements {
                    self.validate_literals(e, in_format);
                }
            }
            NodeKind::Map(entries) => {
                if !in_format {
                    self.homogeneous(entries.iter().map(|(k, _)| k));
                    self.homogeneous(entries.iter().map(|(_, v)| v));
                }
                for (k, v) in entries {
                    self.validate_literals(k, in_format);
                    self.validate_literals(v, in_format);
                }
            }
            NodeKind::Select { operand, .. } => self.validate_literals(operand, in_format),
            NodeKind::Comprehension(c) => {
                for n in [&c.range, &c.accu_init, &c.cond, &c.step, &c.result] {
                    self.validate_literals(n, in_format);
                }
            }
            NodeKind::Lit(_) | NodeKind::Ident(_) | NodeKind::Struct(_) => {}
        }
    }

    fn homogeneous<'n>(&mut self, mut nodes: impl Iterator<Item = &'n Node>) {
        let Some(first) = nodes.next() else {
            return;
        };
        let expected = self.checked.type_of(first.id);
        for n in nodes {
            let actual = self.checked.type_of(n.id);
            if actual != expected {
                self.error(
                    n.id,
                    format!("expected type '{expected}' but found '{actual}'"),
                );
                return;
            }
        }
    }
}

/// Whether Go's `time.ParseDuration` accepts `text`.
fn parse_go_duration(text: &str) -> bool {
    let mut rest = text.strip_prefix(['+', '-']).unwrap_or(text);
    if rest == "0" {
        return true;
    }
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return false;
        }
        rest = &rest[number_len..];
        let Some(unit) = ["ns", "us", "\u{b5}s", "\u{3bc}s", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// cel-go's `formatFunctionDeclType`: `(int, string)` or `string.(int)`.
fn format_signature(types: &[Ty], member: bool) -> String {
    let mut out = String::new();
    let mut rest = types;
    if member && let Some((first, tail)) = types.split_first() {
        out.push_str(&format!("{first}."));
        rest = tail;
    }
    let args: Vec<String> = rest.iter().map(ToString::to_string).collect();
    out.push_str(&format!("({})", args.join(", ")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn self_type(schema: Value) -> Ty {
        schema_decl_type(&schema, false, "selfType")
            .unwrap()
            .cel_type()
    }

    fn compile(rule: &str, schema: Value) -> Result<Ty, String> {
        let parsed = parse(rule).map_err(|e| e.0)?;
        check(rule, &parsed, &self_type(schema), false)
            .map(|(_, t)| t)
            .map_err(|e| e.0)
    }

    #[test]
    fn escapes_property_names_as_apiserver() {
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(
            escape("a-b.c/d").as_deref(),
            Some("a__dash__b__dot__c__slash__d")
        );
        assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
        assert_eq!(escape("plain_name").as_deref(), Some("plain_name"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("a b"), None);
    }

    #[test]
    fn types_rules_over_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "cidrs": {"type": "array", "items": {"type": "string"}},
            "replicas": {"type": "integer"},
        }});
        assert!(matches!(
            compile("self.cidrs.all(c, isCIDR(c))", schema.clone()),
            Ok(Ty::Bool)
        ));
        assert!(matches!(
            compile("self.replicas > 1 && size(self.cidrs) < 3", schema.clone()),
            Ok(Ty::Bool)
        ));
        assert!(matches!(
            compile(
                "self.cidrs.map(c, cidr(c).prefixLength()).all(p, p > 8)",
                schema.clone()
            ),
            Ok(Ty::Bool)
        ));
        // Kubernetes does not enable cel-go's bindings extension.
        assert!(
            compile("cel.bind(x, self.replicas, x > 1)", schema.clone())
                .unwrap_err()
                .contains("undeclared reference to 'bind'")
        );
        assert!(matches!(
            compile("sets.contains(self.cidrs, ['a'])", schema.clone()),
            Ok(Ty::Bool)
        ));
        // null compares with optionals (gateway-api's `format...validate(self) == null`).
        assert!(matches!(
            compile(
                "format.dns1123Label().validate(self.cidrs[0]) == null",
                schema.clone()
            ),
            Ok(Ty::Bool)
        ));
        assert!(matches!(
            compile("self.?replicas.orValue(1) > 0", schema.clone()),
            Ok(Ty::Bool)
        ));
    }

    #[test]
    fn reports_errors_as_cel_go() {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        assert_eq!(
            compile("isCIDRX(self.name)", schema.clone()).unwrap_err(),
            "ERROR: <input>:1:8: undeclared reference to 'isCIDRX' (in container '')\n | isCIDRX(self.name)\n | .......^"
        );
        assert_eq!(
            compile("isCIDR(1)", schema.clone()).unwrap_err(),
            "ERROR: <input>:1:7: found no matching overload for 'isCIDR' applied to '(int)'\n | isCIDR(1)\n | ......^"
        );
        assert!(
            compile("self.nope == 'x'", schema.clone())
                .unwrap_err()
                .contains("undefined field 'nope'")
        );
        assert!(
            compile("self.name == 1", schema.clone())
                .unwrap_err()
                .contains("found no matching overload for '_==_' applied to '(string, int)'")
        );
        assert!(
            compile("self.name.contains(1)", schema)
                .unwrap_err()
                .contains("applied to 'string.(int)'")
        );
    }
}
