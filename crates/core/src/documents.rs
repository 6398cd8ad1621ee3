//! Reading Kubernetes objects from text: multi-document YAML, JSON (one value, a stream of values,
//! or an array), and `kind: List` wrappers, with errors that say which file, which document and
//! which field. One bad document never hides the others.

use std::fmt;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::parallel;

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
    let trimmed = text.trim_start();
    let raw: Vec<(usize, Result<Value, String>)> =
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            parse_json_stream(text)
        } else {
            parallel::map_in_order(&split_yaml(text), |chunk| read_yaml(chunk))
                .into_iter()
                .enumerate()
                .filter_map(|(i, value)| match value {
                    Ok(None) | Ok(Some(Value::Null)) => None,
                    Ok(Some(v)) => Some((i + 1, Ok(v))),
                    Err(e) => Some((i + 1, Err(e))),
                })
                .collect()
        };
    documents(source, raw)
}

/// The documents of an input from its values by document index, Lists and arrays expanded.
fn documents(
    source: &str,
    raw: Vec<(usize, Result<Value, String>)>,
) -> Vec<Result<Document, DocumentError>> {
    let mut out = Vec::with_capacity(raw.len());
    for (document, value) in raw {
        let origin = Origin {
            source: source.to_string(),
            document,
            item: None,
        };
        match value {
            Err(problem) => out.push(Err(DocumentError {
                origin,
                field: String::new(),
                problem,
            })),
            Ok(Value::Array(items)) => expand(&mut out, origin, items),
            Ok(v) if is_list(&v) => match v {
                Value::Object(mut map) => match map.remove("items") {
                    Some(Value::Array(items)) => expand(&mut out, origin, items),
                    Some(Value::Null) | None => {}
                    Some(_) => out.push(Err(DocumentError {
                        origin,
                        field: "items".into(),
                        problem: "a List's items must be a list".into(),
                    })),
                },
                _ => unreachable!("is_list only accepts objects"),
            },
            Ok(v) => out.push(Ok(Document { origin, value: v })),
        }
    }
    out
}

fn expand(out: &mut Vec<Result<Document, DocumentError>>, origin: Origin, items: Vec<Value>) {
    for (i, value) in items.into_iter().enumerate() {
        out.push(Ok(Document {
            origin: Origin {
                item: Some(i),
                ..origin.clone()
            },
            value,
        }));
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

/// Reads a JSON stream: split into its documents and the items of its arrays and `kind: List`s by
/// a quick scan, then parsed on every core. Anything the split cannot account for exactly (a
/// syntax error, a document that does not parse on its own, a List whose `kind` or `items` are
/// not plain, a value nested near the parser's depth limit) is read in one pass
/// as before, so that errors keep their wording and position.
fn parse_json_stream(text: &str) -> Vec<(usize, Result<Value, String>)> {
    parse_json_split(text).unwrap_or_else(|| parse_json_whole(text))
}

/// A JSON document as split: parsed whole, or an array or List parsed item by item.
enum JsonPart<'a> {
    Whole(&'a str),
    Array(Vec<&'a RawValue>),
    List(&'a str, Vec<&'a RawValue>),
}

/// The fields of a `kind: List` the split looks at.
#[derive(serde::Deserialize)]
struct ListShape<'a> {
    kind: Option<&'a str>,
    #[serde(borrow)]
    items: Option<&'a RawValue>,
}

/// serde_json refuses more than 127 nested arrays and objects. An item parsed on its own has the
/// whole budget, inside its List (an object and an array) two less, so deeper values are left to
/// the one-pass reader and refused there as before.
const MAX_ITEM_NESTING: usize = 125;

fn parse_json_split(text: &str) -> Option<Vec<(usize, Result<Value, String>)>> {
    let documents = serde_json::Deserializer::from_str(text)
        .into_iter::<&RawValue>()
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let parts: Vec<JsonPart> = documents
        .into_iter()
        .map(|raw| split_document(raw.get()))
        .collect();
    let texts: Vec<&str> = parts
        .iter()
        .flat_map(|part| match part {
            JsonPart::Whole(text) => vec![*text],
            JsonPart::Array(items) | JsonPart::List(_, items) => {
                items.iter().map(|i| i.get()).collect()
            }
        })
        .collect();
    // Only items lose depth when parsed on their own, but one rule for every value keeps this
    // simple: a deep document is rare and is read in one pass.
    let mut values = parallel::map_in_order(&texts, |text| {
        serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| shallow(text, v))
    })
    .into_iter();
    let mut out = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let value = match part {
            JsonPart::Whole(_) => values.next()??,
            JsonPart::Array(items) | JsonPart::List(_, items) => {
                let items = values
                    .by_ref()
                    .take(items.len())
                    .collect::<Option<Vec<_>>>()?;
                match part {
                    // What the List expands to: its items (the rest of it is not read).
                    JsonPart::List(kind, _) => Value::Object(serde_json::Map::from_iter([
                        ("kind".to_string(), Value::from(*kind)),
                        ("items".to_string(), Value::Array(items)),
                    ])),
                    _ => Value::Array(items),
                }
            }
        };
        out.push((i + 1, Ok(value)));
    }
    Some(out)
}

/// How a document is split: a non-empty array or a List with an `items` list item by item,
/// anything else whole.
fn split_document(text: &str) -> JsonPart<'_> {
    if text.starts_with('[') {
        if let Ok(items) = serde_json::from_str(text) {
            return JsonPart::Array(items);
        }
    } else if let Ok(ListShape {
        kind: Some(kind),
        items: Some(items),
    }) = serde_json::from_str(text)
        && (kind == "List" || kind.ends_with("List"))
        && items.get().starts_with('[')
        && let Ok(items) = serde_json::from_str(items.get())
    {
        return JsonPart::List(kind, items);
    }
    JsonPart::Whole(text)
}

/// Whether an item is nested no deeper than [`MAX_ITEM_NESTING`]: its count of `[` and `{`
/// bounds its depth and settles nearly every item without walking the value.
fn shallow(text: &str, value: &Value) -> bool {
    let brackets = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    brackets <= MAX_ITEM_NESTING || nesting(value) <= MAX_ITEM_NESTING
}

/// Depth of the deepest array or object in a value (0 for a scalar).
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

fn parse_json_whole(text: &str) -> Vec<(usize, Result<Value, String>)> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut document = 0;
    loop {
        document += 1;
        match stream.next() {
            None => break,
            Some(Ok(v)) => out.push((document, Ok(v))),
            Some(Err(e)) => {
                // A JSON syntax error leaves the stream at an unknown position: report it and stop.
                out.push((document, Err(e.to_string())));
                break;
            }
        }
    }
    out
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
        for text in split.iter().chain(&whole) {
            assert_eq!(
                documents("f", parse_json_stream(text)),
                documents("f", parse_json_whole(text)),
                "{text}"
            );
        }
        assert!(split.iter().all(|text| parse_json_split(text).is_some()));
        assert!(
            whole[4..]
                .iter()
                .all(|text| parse_json_split(text).is_none())
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
