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
//!
//! [`outline`] reads even less: only the identity fields of a block-style object, from its lines.

use std::iter::Peekable;

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

/// The identity fields of a block-style object (`apiVersion`, `kind`, and `metadata` with `name`
/// and `namespace`, as an object of only those), read from its lines without parsing the rest;
/// `None` when the document is not one this reader answers for, and for a List and a document
/// read whole ([`super::read_whole`]), which the caller reads whole.
///
/// It reads lines the way a valid document is laid out: top-level keys at column 0, `metadata`'s
/// keys at one indentation below it, values written plainly on the key's line. It answers only
/// when each field it gives is written as a plain scalar on a line of its own, with no other line
/// for the same key, and no line opens a quoted scalar or a flow collection it does not close
/// (whose next lines could look like keys they are not), so that when the document reads as a
/// value at all (by [`read`] or `serde_norway`), the fields are the value's. (For a document that
/// does not read, the caller reads it again anyway and reports the error.)
pub(super) fn outline(text: &str) -> Option<Value> {
    if outside_common_ground(text) || text.contains('\r') {
        return None;
    }
    let mut lines = text.lines().filter(|l| !is_blank(l)).peekable();
    let mut keys = Vec::new();
    let mut fields = Map::new();
    while let Some(line) = lines.next() {
        if !closes_on_its_line(line) {
            return None;
        }
        let indent = indentation(line);
        if line[indent..].starts_with('#') {
            continue;
        }
        if indent > 0 || is_entry(line) {
            // The value of the key before: an object's first line must be a key of its own.
            if keys.is_empty() {
                return None;
            }
            continue;
        }
        let (key, value) = key_and_value(line)?;
        if keys.contains(&key) {
            return None;
        }
        keys.push(key);
        let field = match key {
            "apiVersion" | "kind" => {
                let value = plain(value)?;
                ends_on_its_line(&mut lines, 0)?;
                value
            }
            "metadata" if value.is_empty() => metadata(&mut lines)?,
            "metadata" => return None,
            // Another key: its value is on this line or the indented lines skipped above.
            _ => continue,
        };
        fields.insert(key.to_string(), field);
    }
    let fields = Value::Object(fields);
    let kind = fields.get("kind").and_then(Value::as_str);
    if kind.is_none_or(|k| k.ends_with("List")) || super::read_whole(&fields) {
        return None;
    }
    Some(fields)
}

/// The `name` and `namespace` of the block of `metadata`, whose first line comes next.
fn metadata<'a>(lines: &mut Peekable<impl Iterator<Item = &'a str>>) -> Option<Value> {
    let mut keys = Vec::new();
    let mut fields = Map::new();
    let mut block_indent = None;
    while let Some(line) = lines.next_if(|l| indentation(l) > 0 || l.starts_with('#')) {
        if !closes_on_its_line(line) {
            return None;
        }
        let indent = indentation(line);
        if line[indent..].starts_with('#') {
            continue;
        }
        let block_indent = *block_indent.get_or_insert(indent);
        if indent > block_indent || (indent == block_indent && is_entry(&line[indent..])) {
            // A key's value on lines of its own, or the entries of a list.
            continue;
        }
        if indent < block_indent {
            return None;
        }
        let (key, value) = key_and_value(&line[indent..])?;
        if keys.contains(&key) {
            return None;
        }
        keys.push(key);
        if matches!(key, "name" | "namespace") {
            fields.insert(key.to_string(), plain(value)?);
            ends_on_its_line(lines, block_indent)?;
        }
    }
    block_indent?;
    Some(Value::Object(fields))
}

/// A line `key:` or `key: value` whose key is a plain word.
fn key_and_value(line: &str) -> Option<(&str, &str)> {
    let end = line.find(|c: char| !c.is_ascii_alphanumeric())?;
    let (key, rest) = line.split_at(end);
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    match rest.strip_prefix(':')? {
        "" => Some((key, "")),
        value => Some((key, value.strip_prefix(' ')?.trim_start_matches(' '))),
    }
}

/// The JSON of a value written as one plain word of the characters names and versions are made
/// of, as `serde_norway` reads it (`v1`, `apps/v1`, `Pod`, `web-1`, but also `true` or `010`).
fn plain(value: &str) -> Option<Value> {
    let word = !value.is_empty()
        && !value.starts_with('-')
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'));
    if word {
        scalar(value, ScalarStyle::Plain)
    } else {
        None
    }
}

/// Makes sure the plain value on the line just read is not continued on the next lines (a plain
/// scalar goes on over more indented lines).
fn ends_on_its_line<'a>(
    lines: &mut Peekable<impl Iterator<Item = &'a str>>,
    indent: usize,
) -> Option<()> {
    match lines.peek() {
        Some(next) if indentation(next) > indent => None,
        _ => Some(()),
    }
}

/// Whether what a line opens, as a value or an entry, closes on it: a quoted scalar its closing
/// quote, a flow collection its brackets. Anchors, tags and complex keys, which this reader does
/// not follow, count as open.
fn closes_on_its_line(line: &str) -> bool {
    // Nearly every line opens nothing: none of the characters that start what can go on.
    if !line
        .bytes()
        .any(|b| matches!(b, b'"' | b'\'' | b'[' | b'{' | b'&' | b'!' | b'?'))
    {
        return true;
    }
    let mut rest = line.trim_start_matches(' ');
    while let Some(entry) = rest.strip_prefix("- ") {
        rest = entry.trim_start_matches(' ');
    }
    let value = match rest.find(": ") {
        Some(at) if !rest.starts_with(['"', '\'', '[', '{']) => {
            rest[at + 2..].trim_start_matches(' ')
        }
        _ => rest,
    };
    closes(rest) && closes(value)
}

fn closes(text: &str) -> bool {
    let count = |c: u8| text.bytes().filter(|b| *b == c).count();
    match text.as_bytes().first() {
        Some(b'"') => {
            let body = &text[1..];
            body.strip_suffix('"').is_some_and(|inner| {
                inner.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 0
            })
        }
        Some(b'\'') => text.len() > 1 && text.ends_with('\'') && count(b'\'') % 2 == 0,
        Some(b'[' | b'{') => {
            text.ends_with([']', '}']) && count(b'[') == count(b']') && count(b'{') == count(b'}')
        }
        Some(b'&' | b'!' | b'?') => false,
        _ => true,
    }
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank(line: &str) -> bool {
    line.trim_start_matches(' ').is_empty()
}

/// Whether a line (from its indentation on) is an entry of a block sequence.
fn is_entry(line: &str) -> bool {
    line == "-" || line.starts_with("- ")
}

/// Where YAML 1.2 and libyaml part ways (tabs as indentation, byte-order marks) or the text
/// has directives (`%YAML`, `%TAG`), `serde_norway` reads the document.
fn outside_common_ground(text: &str) -> bool {
    // One search per character: each is a memchr, where a search for either is not.
    text.contains('\t')
        || text.contains('\u{feff}')
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

    use super::{outline, read};
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

    /// Whatever `outline` answers for a document that reads as an object, is that object's
    /// identity fields.
    #[track_caller]
    fn assert_outline_agrees(text: &str) {
        let Some(outline) = outline(text) else {
            return;
        };
        let Ok(Some(Value::Object(full))) = norway(text) else {
            return;
        };
        for field in ["apiVersion", "kind"] {
            assert_eq!(outline.get(field), full.get(field), "{field} of {text:?}");
        }
        if let Some(Value::Object(metadata)) = full.get("metadata") {
            for field in ["name", "namespace"] {
                assert_eq!(
                    outline["metadata"].get(field),
                    metadata.get(field),
                    "metadata.{field} of {text:?}"
                );
            }
        }
    }

    #[test]
    fn outlines_are_read_from_plain_lines_or_not_at_all() {
        let plain = "apiVersion: v1\nkind: Pod\n# a comment\nmetadata:\n  labels:\n    app: web\n  name: web-1\n  namespace: shop\nspec:\n  containers:\n  - name: web\n    args: ['--x', \"y\"]\n";
        assert_eq!(
            outline(plain),
            Some(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": "shop"}}))
        );
        let declined = [
            // Fields not written plainly, or continued on the next lines.
            "apiVersion: v1\nkind: \"Pod\"\nmetadata:\n  name: a\n",
            "apiVersion: v1\nkind: Pod\n  Extra\nmetadata:\n  name: a\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a # comment\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  <<: *base\n  name: a\n",
            "apiVersion: v1\nkind: Pod\nmetadata: &m\n  name: a\n",
            "kind: Pod\nkind: Secret\nmetadata:\n  name: a\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n",
            // Lines a quoted scalar or a flow collection goes on over.
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  annotations:\n    note: \"first\n  namespace: evil\n  x: end\"\n",
            "apiVersion: v1\nnote: [a,\nkind: Secret]\nkind: Pod\nmetadata:\n  name: a\n",
            "apiVersion: v1\nkind: Pod\nnote: 'it''s\nmetadata:\n  name: a'\n",
            // Not a block mapping, a CRD, a List.
            "{apiVersion: v1, kind: Pod, metadata: {name: a}}\n",
            "  apiVersion: v1\n  kind: Pod\n",
            "- a\n- b\n",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: a\n",
            "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n",
        ];
        for text in declined {
            assert_eq!(outline(text), None, "{text:?}");
        }
        let tricky = [
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: '010'\ndata:\n  x: |\n    kind: Secret\n    metadata:\n      name: evil\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: 010\n  namespace: null\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: true\n  namespace: ~\n",
            "kind: Pod\nspec:\n- a\n- b\nmetadata:\n  finalizers:\n  - x\n  name: a\n",
            "kind: Pod\nmetadata:\n  annotations:\n    a: b\n   name: c\n",
            "kind: Pod\nmetadata:\n    name: deep\n  namespace: shallow\n",
        ];
        for text in declined.iter().chain(&tricky) {
            assert_outline_agrees(text);
        }
    }

    fn identity_scalar() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "v1", "apps/v1", "Pod", "web-1", "a.b", "010", "0x1F", "1e3", "true", "null", "~",
            "-a", "a b", "a: b", "'q'", "\"dq\"", "x#y", "x #y", "[a]", "{a: b}", "&a x", "*a",
            "|", ">", "", "List", "PodList",
        ])
        .prop_map(String::from)
    }

    fn tricky_line() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "kind: Secret",
            "  namespace: evil",
            "  name: evil",
            "metadata:",
            "  x: \"open",
            "  x: end\"",
            "y: [open",
            "z]",
            "- item",
            "  - item",
            "# comment",
            "  # comment",
            "   name: odd",
            "a: |",
            "    kind: Folded",
            "",
        ])
        .prop_map(String::from)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Objects written by serde_norway, then with lines inserted anywhere: the outline is the
        /// object's identity fields, or none.
        #[test]
        fn outlines_agree_with_the_document(
            kind in identity_scalar(),
            name in identity_scalar(),
            namespace in prop::option::of(identity_scalar()),
            labels in prop::collection::btree_map(key(), scalar(), 0..3),
            spec in value(),
            inserted in prop::collection::vec((0usize..40, tricky_line()), 0..3),
        ) {
            let mut metadata = serde_json::Map::new();
            metadata.insert("labels".into(), Value::Object(labels.into_iter().collect()));
            metadata.insert("name".into(), Value::from(name));
            if let Some(namespace) = namespace {
                metadata.insert("namespace".into(), Value::from(namespace));
            }
            let object = json!({"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": spec});
            let text = serde_norway::to_string(&object).unwrap();
            assert_outline_agrees(&text);
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            for (at, line) in inserted {
                lines.insert(at.min(lines.len()), line);
            }
            assert_outline_agrees(&(lines.join("\n") + "\n"));
        }
    }
}
