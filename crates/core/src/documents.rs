//! Reading Kubernetes objects from text: multi-document YAML, JSON (one value, a stream of values,
//! or an array), and `kind: List` wrappers, with errors that say which file, which document and
//! which field. One bad document never hides the others.
//!
//! A large input is read on every core without ever holding its parsed documents: a [`Reader`]
//! splits the text into the texts of its documents (a JSON List item by item), parses them on
//! every core a bounded distance ahead of its caller, and hands each document over in input
//! order. [`Reader::outlines`] reads, for a fraction of the cost of parsing, what a caller must
//! know of every document before it uses the first: the identity fields of each.

use std::convert::Infallible;
use std::fmt;

use serde_json::Value;

use crate::{parallel, scope};

mod json;
mod yaml;

/// One object read from an input, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Where it came from.
    pub origin: Origin,
    /// The object.
    pub value: Value,
}

/// The position of a document in the inputs: `file`, 1-based document index, and the item index
/// when it came out of a `kind: List`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// File path, or `-` for standard input.
    pub source: String,
    /// 1-based document index within the file.
    pub document: usize,
    /// 0-based index within a `kind: List`'s items.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} document {}", self.source, self.document)?;
        if let Some(item) = self.item {
            write!(f, " item {item}")?;
        }
        Ok(())
    }
}

/// A document that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {field}{sep}{problem}", sep = if field.is_empty() { "" } else { ": " })]
pub struct DocumentError {
    /// Where.
    pub origin: Origin,
    /// The offending field (`""` when the document itself is malformed).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// Reads every document of one input. Empty documents (comments only) are ignored.
pub fn parse(source: &str, text: &str) -> Vec<Result<Document, DocumentError>> {
    let mut documents = Vec::new();
    Reader::new(source, text)
        .read(
            |document| document,
            |document| {
                documents.push(document);
                Ok::<_, Infallible>(())
            },
        )
        .unwrap_or_else(|never| match never {});
    documents
}

/// One input, split into the texts its documents are read from.
///
/// A YAML stream is split at its `---` markers. A JSON stream is split into its documents and the
/// items of its arrays and `kind: List`s in one quick scan, and each item is parsed on its own.
/// Anything the split cannot reproduce exactly (a syntax error, an item that does not parse on
/// its own or is nested near the parser's depth limit, an unusual List) is read in one pass
/// instead, so that errors keep their wording and position: since documents are handed over as
/// they are read, every item is checked before the first is handed over ([`Reader::outlines`]
/// checks them on the way).
#[derive(Debug)]
pub struct Reader<'t> {
    source: String,
    text: &'t str,
    pieces: Pieces<'t>,
    /// Whether the JSON split is known to reproduce the one-pass reading.
    checked: bool,
}

/// The texts an input's documents are read from.
#[derive(Debug)]
enum Pieces<'t> {
    /// The YAML documents, by document number.
    Yaml(Vec<(usize, &'t str)>),
    /// The JSON documents, the items of arrays and Lists one by one.
    Json(Vec<JsonPiece<'t>>),
    /// JSON the split cannot reproduce: read in one pass.
    JsonInOnePass,
}

/// A JSON document, or one item of an array or List, to parse on its own.
#[derive(Debug)]
struct JsonPiece<'t> {
    /// 1-based document number.
    document: usize,
    /// The item's index, for an item of an array or List.
    item: Option<usize>,
    text: &'t str,
}

/// serde_json refuses more than 127 nested arrays and objects. An item parsed on its own has the
/// whole budget, inside its List (an object and an array) two less, so deeper values are left to
/// the one-pass reader and refused there as before.
const MAX_ITEM_NESTING: usize = 125;

impl<'t> Reader<'t> {
    /// Splits `text`, read from `source`.
    pub fn new(source: &str, text: &'t str) -> Self {
        let trimmed = text.trim_start();
        let pieces = if trimmed.starts_with('{') || trimmed.starts_with('[') {
            split_json(text).map_or(Pieces::JsonInOnePass, Pieces::Json)
        } else {
            Pieces::Yaml(
                split_yaml(text)
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| (i + 1, t))
                    .collect(),
            )
        };
        Reader {
            source: source.to_string(),
            text,
            pieces,
            checked: false,
        }
    }

    /// The outline of every document, in order, each passed through `each` on every core: the
    /// document's identity fields (`apiVersion`, `kind`, and `metadata` with `name` and
    /// `namespace`, as an object of only those), or the whole document when it is read whole
    /// ([`read_whole`]: a CustomResourceDefinition says what its kind is, Services and
    /// ServiceAccounts are what a pod's world is made of); `None` for a document that does not
    /// read. Plain documents are outlined without parsing the rest of them; the others are
    /// parsed. The outlines match the documents [`Reader::read`] hands over, one for one.
    pub fn outlines<S: Send>(&mut self, each: impl Fn(Option<Value>) -> S + Sync) -> Vec<S> {
        let outlines =
            match &self.pieces {
                Pieces::Yaml(chunks) => Some(parallel::map_in_order(
                    chunks,
                    |&(document, chunk)| match yaml::outline(chunk) {
                        Some(fields) => vec![each(Some(fields))],
                        None => {
                            outlines_of(read_yaml_document(&self.source, document, chunk), &each)
                        }
                    },
                )),
                Pieces::Json(pieces) => {
                    parallel::map_in_order(pieces, |piece| piece.outlines(&self.source, &each))
                        .into_iter()
                        .collect::<Option<Vec<_>>>()
                }
                Pieces::JsonInOnePass => None,
            };
        self.checked = true;
        match outlines {
            Some(outlines) => outlines.into_iter().flatten().collect(),
            None => {
                self.pieces = Pieces::JsonInOnePass;
                json_in_one_pass(self.text)
                    .flat_map(|(document, value)| {
                        outlines_of(expand(&self.source, document, value), &each)
                    })
                    .collect()
            }
        }
    }

    /// Reads every document: `work` runs on each (or its error) on every core, and `take` gets
    /// the results in input order as they come, with at most a bounded number of documents
    /// parsed and not yet taken. The first error of `take` stops the reading and is returned.
    pub fn read<R: Send, E>(
        mut self,
        work: impl Fn(Result<Document, DocumentError>) -> R + Sync,
        mut take: impl FnMut(R) -> Result<(), E>,
    ) -> Result<(), E> {
        self.check();
        let source = &self.source;
        let take_each = |results: Vec<R>| results.into_iter().try_for_each(&mut take);
        match &self.pieces {
            Pieces::Yaml(chunks) => parallel::try_for_each_in_order(
                chunks,
                |&(document, chunk)| {
                    read_yaml_document(source, document, chunk)
                        .into_iter()
                        .map(&work)
                        .collect()
                },
                take_each,
            ),
            Pieces::Json(pieces) => parallel::try_for_each_in_order(
                pieces,
                |piece| piece.documents(source).into_iter().map(&work).collect(),
                take_each,
            ),
            Pieces::JsonInOnePass => json_in_one_pass(self.text)
                .flat_map(|(document, value)| expand(source, document, value))
                .try_for_each(|document| take(work(document))),
        }
    }

    /// Makes sure the JSON split reads every item as the one-pass reader would: each parses on its
    /// own and is nested no deeper than [`MAX_ITEM_NESTING`]; otherwise the input is read in one
    /// pass.
    fn check(&mut self) {
        if self.checked {
            return;
        }
        self.checked = true;
        if let Pieces::Json(pieces) = &self.pieces
            && !parallel::map_in_order(pieces, JsonPiece::reads_alone)
                .into_iter()
                .all(|reads| reads)
        {
            self.pieces = Pieces::JsonInOnePass;
        }
    }
}

impl JsonPiece<'_> {
    fn origin(&self, source: &str) -> Origin {
        Origin {
            source: source.to_string(),
            document: self.document,
            item: self.item,
        }
    }

    /// Its outline, when it parses on its own as it would in one pass (an item nested no deeper
    /// than [`MAX_ITEM_NESTING`]).
    fn outline(&self) -> Option<json::Outline> {
        json::outline(self.text)
            .ok()
            .filter(|o| self.item.is_none() || o.depth <= MAX_ITEM_NESTING)
    }

    fn reads_alone(&self) -> bool {
        self.outline().is_some()
    }

    /// Its documents: the item, or the document (a List or array it holds expanded).
    fn documents(&self, source: &str) -> Vec<Result<Document, DocumentError>> {
        let value = serde_json::from_str::<Value>(self.text).map_err(|e| e.to_string());
        match self.item {
            Some(_) => vec![match value {
                Ok(value) => Ok(Document {
                    origin: self.origin(source),
                    value,
                }),
                Err(problem) => Err(DocumentError {
                    origin: self.origin(source),
                    field: String::new(),
                    problem,
                }),
            }],
            None => expand(source, self.document, value),
        }
    }

    /// The outlines of its documents ([`Reader::outlines`]), or `None` when it does not read on
    /// its own as it would in one pass.
    fn outlines<S>(&self, source: &str, each: impl Fn(Option<Value>) -> S) -> Option<Vec<S>> {
        let outline = self.outline()?;
        let kind = outline.fields.get("kind").and_then(Value::as_str);
        if self.item.is_none() && kind.is_some_and(|k| k == "List" || k.ends_with("List")) {
            // A List the split left whole: its items are its documents.
            return Some(outlines_of(self.documents(source), each));
        }
        let fields = whole_if_read_whole(outline.fields, || serde_json::from_str(self.text).ok());
        Some(vec![each(Some(fields))])
    }
}

/// Whether the outline of a document (its identity fields) is the whole document: for a
/// CustomResourceDefinition, which says what its kind is, and a core Service or ServiceAccount,
/// of which a pod's world is made (addresses and ports, whether tokens are mounted:
/// [`crate::pod_world`]).
pub fn read_whole(fields: &Value) -> bool {
    scope::is_crd(fields)
        || (fields.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && matches!(
                fields.get("kind").and_then(Value::as_str),
                Some("Service" | "ServiceAccount")
            ))
}

/// The outline of a document whose identity fields are `fields`: the fields, or the whole
/// document when it is [read whole](read_whole).
fn whole_if_read_whole(fields: Value, whole: impl FnOnce() -> Option<Value>) -> Value {
    if read_whole(&fields) {
        whole().unwrap_or(fields)
    } else {
        fields
    }
}

/// The outlines of documents read whole: the documents themselves.
fn outlines_of<S>(
    documents: Vec<Result<Document, DocumentError>>,
    each: impl Fn(Option<Value>) -> S,
) -> Vec<S> {
    documents
        .into_iter()
        .map(|document| each(document.ok().map(|d| d.value)))
        .collect()
}

/// The documents of one YAML document: none when it is empty or `null`, the items of a List.
fn read_yaml_document(
    source: &str,
    document: usize,
    chunk: &str,
) -> Vec<Result<Document, DocumentError>> {
    match read_yaml(chunk) {
        Ok(None) | Ok(Some(Value::Null)) => Vec::new(),
        Ok(Some(value)) => expand(source, document, Ok(value)),
        Err(problem) => expand(source, document, Err(problem)),
    }
}

/// The documents of one value read by document number: a List's or an array's items, or the
/// value itself, or its error.
fn expand(
    source: &str,
    document: usize,
    value: Result<Value, String>,
) -> Vec<Result<Document, DocumentError>> {
    let origin = Origin {
        source: source.to_string(),
        document,
        item: None,
    };
    let items = |items: Vec<Value>| {
        items
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                Ok(Document {
                    origin: Origin {
                        item: Some(i),
                        ..origin.clone()
                    },
                    value,
                })
            })
            .collect()
    };
    match value {
        Err(problem) => vec![Err(DocumentError {
            origin,
            field: String::new(),
            problem,
        })],
        Ok(Value::Array(values)) => items(values),
        Ok(v) if is_list(&v) => match v {
            Value::Object(mut map) => match map.remove("items") {
                Some(Value::Array(values)) => items(values),
                Some(Value::Null) | None => Vec::new(),
                Some(_) => vec![Err(DocumentError {
                    origin,
                    field: "items".into(),
                    problem: "a List's items must be a list".into(),
                })],
            },
            _ => unreachable!("is_list only accepts objects"),
        },
        Ok(value) => vec![Ok(Document { origin, value })],
    }
}

fn is_list(v: &Value) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "List" || k.ends_with("List"))
        && v.get("items").is_some()
}

/// One YAML document: the fast reader when it can tell, `serde_norway` (and its errors) otherwise.
fn read_yaml(chunk: &str) -> Result<Option<Value>, String> {
    match yaml::read(chunk) {
        Some(value) => Ok(value),
        None => serde_norway::from_str(chunk).map_err(|e| e.to_string()),
    }
}

/// Splits a YAML stream at `---` document markers, so that a syntax error in one document does
/// not stop the others from being read.
fn split_yaml(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare == "...";
        if is_marker {
            if offset > start || !docs.is_empty() {
                docs.push(&text[start..offset]);
            }
            start = offset + line.len();
        }
        offset += line.len();
    }
    if start < text.len() {
        docs.push(&text[start..]);
    }
    docs
}

/// Splits a JSON stream into the texts of its documents and of the items of its arrays and
/// Lists, in one scan; `None` when the stream does not read (a syntax error).
fn split_json(text: &str) -> Option<Vec<JsonPiece<'_>>> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<json::Shape>();
    let mut pieces = Vec::new();
    let mut document = 0;
    loop {
        let start = stream.byte_offset();
        let Some(shape) = stream.next() else {
            return Some(pieces);
        };
        document += 1;
        match shape.ok()? {
            json::Shape::Array(items) | json::Shape::List(items) => {
                pieces.extend(items.into_iter().enumerate().map(|(i, item)| JsonPiece {
                    document,
                    item: Some(i),
                    text: item.get(),
                }));
            }
            json::Shape::Whole => pieces.push(JsonPiece {
                document,
                item: None,
                text: text[start..stream.byte_offset()].trim_start(),
            }),
        }
    }
}

/// Depth of the deepest array or object in a value (0 for a scalar).
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// A JSON stream read in one pass, document by document (numbered from 1). A syntax error leaves
/// the stream at an unknown position: it is the last document.
fn json_in_one_pass(text: &str) -> impl Iterator<Item = (usize, Result<Value, String>)> + '_ {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut document = 0;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        document += 1;
        let value = stream.next()?.map_err(|e| e.to_string());
        failed = value.is_err();
        Some((document, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_with_a_broken_document_in_the_middle() {
        let text = "a: 1\n---\nb: [unclosed\n---\n# only a comment\n---\nkind: List\nitems:\n- c: 3\n- d: 4\n";
        let docs = parse("in.yaml", text);
        assert_eq!(docs.len(), 4, "{docs:?}");
        assert!(docs[0].is_ok());
        let err = docs[1].as_ref().unwrap_err();
        assert_eq!(err.origin.document, 2);
        assert!(err.to_string().starts_with("in.yaml document 2: "), "{err}");
        let item = docs[3].as_ref().unwrap();
        assert_eq!(item.origin.to_string(), "in.yaml document 4 item 1");
        assert_eq!(item.value["d"], 4);
    }

    #[test]
    fn json_streams_and_arrays() {
        let docs = parse("-", "{\"a\":1}\n{\"b\":2}");
        assert_eq!(docs.len(), 2);
        let docs = parse("-", "[{\"a\":1},{\"b\":2}]");
        assert_eq!(docs[1].as_ref().unwrap().origin.item, Some(1));
    }

    #[test]
    fn json_read_on_every_core_is_read_as_in_one_pass() {
        let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let split = [
            r#"{"apiVersion":"v1","kind":"List","items":[{"a":1},{"b":[2,{"c":null}]}]}"#
                .to_string(),
            r#"[{"a":1},[{"b":2}],"s"] {"kind":"PodList","items":[]} 3"#.to_string(),
            format!(r#"{{"kind":"List","items":[{}]}}"#, nested(125)),
        ];
        let whole = [
            r#"{"kind":"ConfigMapList","items":null} {"kind":"List"}"#.to_string(),
            r#"{"kind":"List","items":{"a":1}}"#.to_string(),
            r#"{"kind":"List","items":[1],"items":[{"x":1}]}"#.to_string(),
            r#"{"kind":"L\u0069st","items":[{"a":1}]}"#.to_string(),
            r#"{"a":1} {"b": oops} {"c":3}"#.to_string(),
            format!(r#"{{"kind":"List","items":[{}]}}"#, nested(126)),
            format!(r#"[{}]"#, nested(127)),
        ];
        // Items that the split alone cannot tell from values: a lone surrogate escape, a number out
        // of range; neither parses, in one pass or on its own.
        let unreadable = [
            r#"{"kind":"List","items":[{"a":"\ud800"}]}"#.to_string(),
            r#"[{"a":1e999}]"#.to_string(),
        ];
        for text in split.iter().chain(&whole).chain(&unreadable) {
            assert_eq!(parse("f", text), in_one_pass(text), "{text}");
            assert_outlines_match(text);
        }
        assert!(split.iter().all(|text| !read_in_one_pass(text)));
        assert!(
            whole[4..]
                .iter()
                .chain(&unreadable)
                .all(|text| read_in_one_pass(text))
        );
    }

    /// The documents of a JSON stream read in one pass.
    fn in_one_pass(text: &str) -> Vec<Result<Document, DocumentError>> {
        json_in_one_pass(text)
            .flat_map(|(document, value)| expand("f", document, value))
            .collect()
    }

    /// Whether the reader falls back to reading `text` in one pass.
    fn read_in_one_pass(text: &str) -> bool {
        let mut reader = Reader::new("f", text);
        reader.check();
        matches!(reader.pieces, Pieces::JsonInOnePass)
    }

    /// The outlines of `text` are one per document read, each the document's identity fields (the
    /// whole document for a CRD).
    #[track_caller]
    fn assert_outlines_match(text: &str) {
        let outlines = Reader::new("f", text).outlines(|outline| outline);
        let documents = parse("f", text);
        assert_eq!(outlines.len(), documents.len(), "{text}");
        for (outline, document) in outlines.iter().zip(&documents) {
            let Ok(document) = document else {
                assert_eq!(outline, &None, "{text}");
                continue;
            };
            let outline = outline
                .as_ref()
                .expect("a document that reads has an outline");
            if scope::is_crd(&document.value) {
                assert_eq!(outline, &document.value, "{text}");
                continue;
            }
            for field in ["apiVersion", "kind"] {
                assert_eq!(outline.get(field), document.value.get(field), "{text}");
            }
            let metadata = document.value.get("metadata");
            match metadata {
                Some(Value::Object(m)) => {
                    for field in ["name", "namespace"] {
                        assert_eq!(outline["metadata"].get(field), m.get(field), "{text}");
                    }
                }
                _ => assert!(
                    !matches!(outline.get("metadata"), Some(Value::Object(_))),
                    "{text}"
                ),
            }
        }
    }

    #[test]
    fn outlines_are_the_identity_fields_or_a_whole_crd() {
        let objects = [
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"n","labels":{"x":"y"}},"spec":{"containers":[{"name":"c"}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":"oops"}"#,
            r#"{"apiVersion":3,"kind":"Pod","kind":"Secret","metadata":{"name":"a","name":"b"}}"#,
            r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"gadgets.example.com"},"spec":{"group":"example.com","names":{"kind":"Gadget"},"scope":"Cluster"}}"#,
            r#"{"metadata":{"namespace":"n"}}"#,
        ];
        let list = format!(
            r#"{{"apiVersion":"v1","items":[{}],"kind":"List"}}"#,
            objects.join(",")
        );
        let stream = objects.join("\n");
        let yaml: String = objects
            .iter()
            .map(|o| {
                let value: Value = serde_json::from_str(o).unwrap();
                format!("---\n{}", serde_norway::to_string(&value).unwrap())
            })
            .collect();
        for text in [list, stream, yaml] {
            assert_outlines_match(&text);
        }
        let outlines = Reader::new("f", objects[0]).outlines(|outline| outline);
        assert_eq!(
            outlines,
            vec![Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "namespace": "n"}}))]
        );
    }

    #[test]
    fn a_leading_marker_does_not_count_as_a_document() {
        let docs = parse("f", "---\na: 1\n---\nb: 2\n");
        assert_eq!(
            docs.iter()
                .map(|d| d.as_ref().unwrap().origin.document)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
    }
}
