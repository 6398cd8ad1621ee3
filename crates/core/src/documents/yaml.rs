//! A fast reader for the plain YAML documents that make up nearly every manifest.
//!
//! `serde_norway` (a libyaml port) reads a small Kubernetes object in tens of microseconds. This
//! reader builds the same JSON from the events of `granit-parser`, a YAML 1.2 parser that passes
//! the YAML test suite, and resolves plain scalars with `serde_norway`'s rules (copied below), so
//! `null`, `true`, `0x1F`, `010` or `.5` mean what they meant before.
//!
//! It only answers for documents whose meaning it reproduces exactly: no tags, anchors, aliases,
//! directives, tabs or byte-order marks, scalar keys that are unique and written out, integers
//! that fit 64 bits, finite floats, and nesting well below `serde_norway`'s limit. For anything else,
//! and for every syntax error, it answers "not mine" and the caller reads the document with
//! `serde_norway`, whose error messages (with line and column) are the ones reported.

use granit_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

/// Deeper than this is left to `serde_norway` (which refuses more than 128 levels).
const MAX_DEPTH: usize = 100;

/// The document in `text` (`Some(None)` when it holds no node), or `None` when it is not
/// one this reader answers for.
pub(super) fn read(text: &str) -> Option<Option<Value>> {
    if outside_common_ground(text) {
        return None;
    }
    let options = granit_parser::options! {
        emit_comments: false,
        block_scalar_eof_without_line_feed: true,
    };
    let mut events = Parser::new_from_str_with_options(text, options).map(Result::ok);
    if !matches!(events.next()??.0, Event::StreamStart) {
        return None;
    }
    let value = match events.next()??.0 {
        Event::StreamEnd => return Some(None),
        Event::DocumentStart(_, None) => {
            let first = events.next()??.0;
            let value = node(first, &mut events, 0)?;
            if !matches!(events.next()??.0, Event::DocumentEnd) {
                return None;
            }
            value
        }
        _ => return None,
    };
    // One document per text: a second one is `serde_norway`'s error to report.
    if !matches!(events.next()??.0, Event::StreamEnd) {
        return None;
    }
    // A document that is only `null` holds nothing, as for `serde_norway`.
    Some(Some(value).filter(|v| !v.is_null()))
}

/// Where YAML 1.2 and libyaml part ways (tabs as indentation, byte-order marks) or the text
/// has directives (`%YAML`, `%TAG`), `serde_norway` reads the document.
fn outside_common_ground(text: &str) -> bool {
    text.contains(['\t', '\u{feff}'])
        || (text.contains('%') && text.lines().any(|line| line.starts_with('%')))
}

fn node<'a>(
    event: Event<'a>,
    events: &mut impl Iterator<Item = Option<(Event<'a>, Span)>>,
    depth: usize,
) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    match event {
        Event::Scalar(text, style, 0, None) => scalar(&text, style),
        Event::SequenceStart(_, 0, None) => {
            let mut items = Vec::new();
            loop {
                match events.next()??.0 {
                    Event::SequenceEnd => return Some(Value::Array(items)),
                    item => items.push(node(item, events, depth + 1)?),
                }
            }
        }
        Event::MappingStart(_, 0, None) => {
            let mut map = Map::new();
            loop {
                let key = match events.next()?? {
                    (Event::MappingEnd, _) => return Some(Value::Object(map)),
                    // serde_json reads any scalar key as its text, whatever it would resolve to.
                    // A key left out (`: value`) is an error for libyaml: left to serde_norway.
                    (Event::Scalar(key, _, 0, None), span)
                        if !key.is_empty() && !span.is_empty() =>
                    {
                        key.into_owned()
                    }
                    _ => return None,
                };
                let value = node(events.next()??.0, events, depth + 1)?;
                if map.insert(key, value).is_some() {
                    return None;
                }
            }
        }
        _ => None,
    }
}

/// The JSON of an untagged scalar, as `serde_norway` deserializes it into a `serde_json::Value`.
fn scalar(text: &str, style: ScalarStyle) -> Option<Value> {
    if style != ScalarStyle::Plain {
        return Some(Value::String(text.to_string()));
    }
    if text.is_empty() || parse_null(text) {
        return Some(Value::Null);
    }
    if let Some(b) = parse_bool(text) {
        return Some(Value::Bool(b));
    }
    if let Some(u) = parse_unsigned_int(text, u64::from_str_radix) {
        return Some(Value::Number(u.into()));
    }
    if let Some(i) = parse_negative_int(text, i64::from_str_radix) {
        return Some(Value::Number(i.into()));
    }
    if parse_unsigned_int(text, u128::from_str_radix).is_some()
        || parse_negative_int(text, i128::from_str_radix).is_some()
    {
        return None;
    }
    if !digits_but_not_number(text)
        && let Some(f) = parse_f64(text)
    {
        return Number::from_f64(f).map(Value::Number);
    }
    Some(Value::String(text.to_string()))
}

// The scalar rules of serde_norway 0.9 (`de.rs`), unchanged.

fn parse_null(scalar: &str) -> bool {
    matches!(scalar, "null" | "Null" | "NULL" | "~")
}

fn parse_bool(scalar: &str) -> Option<bool> {
    match scalar {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

type FromStrRadix<T> = fn(&str, u32) -> Result<T, std::num::ParseIntError>;

fn parse_unsigned_int<T>(scalar: &str, from_str_radix: FromStrRadix<T>) -> Option<T> {
    let unpositive = scalar.strip_prefix('+').unwrap_or(scalar);
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unpositive.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(int) = from_str_radix(rest, radix) {
                return Some(int);
            }
        }
    }
    if unpositive.starts_with(['+', '-']) {
        return None;
    }
    if digits_but_not_number(scalar) {
        return None;
    }
    from_str_radix(unpositive, 10).ok()
}

fn parse_negative_int<T>(scalar: &str, from_str_radix: FromStrRadix<T>) -> Option<T> {
    for (prefix, radix) in [("-0x", 16), ("-0o", 8), ("-0b", 2)] {
        if let Some(rest) = scalar.strip_prefix(prefix)
            && let Ok(int) = from_str_radix(&format!("-{rest}"), radix)
        {
            return Some(int);
        }
    }
    if digits_but_not_number(scalar) {
        return None;
    }
    from_str_radix(scalar, 10).ok()
}

fn parse_f64(scalar: &str) -> Option<f64> {
    let unpositive = if let Some(unpositive) = scalar.strip_prefix('+') {
        if unpositive.starts_with(['+', '-']) {
            return None;
        }
        unpositive
    } else {
        scalar
    };
    if let ".inf" | ".Inf" | ".INF" = unpositive {
        return Some(f64::INFINITY);
    }
    if let "-.inf" | "-.Inf" | "-.INF" = scalar {
        return Some(f64::NEG_INFINITY);
    }
    if let ".nan" | ".NaN" | ".NAN" = scalar {
        return Some(f64::NAN.copysign(1.0));
    }
    unpositive.parse::<f64>().ok().filter(|f| f.is_finite())
}

fn digits_but_not_number(scalar: &str) -> bool {
    // Leading zero(s) followed by digits is a string in YAML 1.2.
    let scalar = scalar.strip_prefix(['-', '+']).unwrap_or(scalar);
    scalar.len() > 1 && scalar.starts_with('0') && scalar[1..].bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::read;
    use serde_json::Value;

    /// What `serde_norway` makes of a document (`Err` for its errors).
    fn norway(text: &str) -> Result<Option<Value>, String> {
        serde_norway::from_str::<Option<Value>>(text).map_err(|e| e.to_string())
    }

    /// The reader either declines or agrees with `serde_norway`, on every kind of document
    /// a manifest file holds.
    #[test]
    fn answers_are_serde_norways() {
        let documents = [
            "",
            "# only a comment\n",
            "a: 1\n",
            "null\n",
            "~\n",
            "just text\n",
            "- 1\n- two\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web # a comment\n  labels: {app: web, tier: \"front\"}\nspec:\n  containers:\n  - name: web\n    image: nginx:1.27\n    args: ['--port', \"8080\"]\n    ports:\n    - containerPort: 80\n      hostPort: 0\n",
            "ints: [0, 1, -1, +1, 010, 0x1F, 0o17, 0b101, -0x1F, 1_000, 18446744073709551615, 18446744073709551616, -9223372036854775809]\n",
            "floats: [.5, 1., 1e3, -1.5e-3, .inf, -.inf, .nan, inf, nan, 1e999, 00.5, +.5]\n",
            "words: [yes, no, on, off, y, n, True, TRUE, true, False, Null, NULL, null, ~, '', \"\"]\n",
            "dates: [2024-01-01, 2024-01-01T00:00:00Z, 12:30:00]\n",
            "keys:\n  1: one\n  true: yes\n  null: nothing\n  ~: tilde\n  '2': quoted\n",
            "block: |\n  line one\n  line two\nfolded: >\n  folded\n  text\n\n  para\nkeep: |+\n  kept\n\nstrip: |-\n  stripped\n",
            "last: |\n  no newline at the end",
            "plain: a\n  multi-line\n  plain scalar\nquoted: \"esc\\taped \\u00e9 \\\"x\\\"\"\nsingle: 'it''s'\n",
            "flow: {a: [1, {b: c}], d: []}\nempty: {}\n",
            "anchors: &a {x: 1}\nalias: *a\n",
            "tagged: !!str 123\n",
            "custom: !Thing {x: 1}\n",
            "merge:\n  <<: {a: 1}\n  b: 2\n",
            "dup: 1\ndup: 2\n",
            "? complex\n: key\n",
            ": no key\n",
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n---\nb: 2\n",
            "a: [unclosed\n",
            "a: b: c\n",
            "\tbad: tab\n",
            "key: 'unterminated\n",
            "- a\nb: c\n",
            "nested: [[[[[[1]]]]]]\n",
            "unicode: \"日本語\"\nemoji: 🦀\n",
            "colon: a:b\nurl: http://x/y#z\nhash: a #comment\nnohash: a#b\n",
            "\u{feff}a: 1\n",
            "a: \"tab\there\"\n",
            "a: b\n  c: d\n",
            "key: value\n- item\n",
            "[a: b, c]\n",
            "{a: [b, c], ? d : e}\n",
            "- - a\n  - b\n- c\n",
            "a: 'multi\n  line'\nb: \"x\n\n  y\"\n",
            "a: |2\n   indented\n",
            "a: >-\n\n  leading blank\n",
            "foo:bar: baz\n",
            "a: @b\n",
            "a: `b\n",
            "a: *unknown\n",
            "\"key\": 1\n'k': 2\n",
            "a:\n- b\n- c\n",
            "a:\n  - b\n c: 1\n",
            "a:\nb:\n",
            "- \n- x\n",
            "a: b #c\n#d\n",
            "a: b#c\n",
            "a: -\nb: - x\n",
            "a: [b, ]\n",
            "a: {b: 1, }\n",
            "a: [b,, c]\n",
            "a: 'x' trailing\n",
            "a: \"\\q\"\n",
            "a: \"\\x41\\u263A\\U0001F600\"\n",
            "---x: 1\n",
            "a: ---\nb: ...\n",
            "a: \r\nb: c\r\n",
            "? a\n? b\n",
            "a: |\n  x\n b: y\n",
            "- a: 1\n  b: 2\n- c\n",
            "a:\n  b:\n    c:\n      d: [1, {e: f}]\n",
        ];
        for text in documents {
            if let Some(fast) = read(text) {
                assert_eq!(Ok(fast), norway(text), "document {text:?}");
            }
        }
        // The ordinary manifest shapes are actually taken by the fast reader.
        for i in [2, 7, 10, 11, 12, 13, 14, 15, 16] {
            let text = documents[i];
            assert!(read(text).is_some(), "{text:?} is read by the fast reader");
        }
        assert_eq!(read(documents[1]), Some(None), "a comment is no document");
        assert_eq!(
            read("a: [unclosed\n"),
            None,
            "syntax errors are serde_norway's to word"
        );
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z][a-zA-Z0-9.-]{0,8}",
            prop::sample::select(vec!["1", "true", "null", "~", "on", "-", "a b", "#x", "x:"])
                .prop_map(String::from),
        ]
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            prop::sample::select(vec![
                "010",
                "0x1F",
                "1e3",
                ".5",
                "yes",
                "null",
                "~",
                "",
                " lead",
                "trail ",
                "a\nb",
                "a: b",
                "- x",
                "# c",
                "'q'",
                "\"dq\"",
                "\t",
                "2024-01-01",
                "1_000",
                "+1",
                "-.inf",
                "@at",
            ])
            .prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever serde_norway writes (block style, quoting, multi-line strings), the fast
        /// reader reads back exactly as serde_norway does, or declines.
        #[test]
        fn written_documents_read_back_alike(value in value()) {
            let text = serde_norway::to_string(&value).unwrap();
            if let Some(fast) = read(&text) {
                prop_assert_eq!(Ok(fast), norway(&text), "{}", text);
            }
        }

        /// The same in flow style (JSON is a flow YAML document).
        #[test]
        fn json_documents_read_back_alike(value in value()) {
            let text = serde_json::to_string_pretty(&value).unwrap();
            if let Some(fast) = read(&text) {
                prop_assert_eq!(Ok(fast), norway(&text), "{}", text);
            }
        }
    }

    #[test]
    fn an_ordinary_object_reads_as_json() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  port: \"8080\"\n  debug: 'false'\n";
        assert_eq!(
            read(text),
            Some(Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg"}, "data": {"port": "8080", "debug": "false"}})))
        );
    }
}
