//! The JSON side of reading on every core: a document split into its items in one scan, and the
//! outline of an item (its identity fields, how deeply it nests, whether it reads as a value at
//! all) without building it.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The scalar methods of a visitor, each accepting its scalar (parsed, so checked as a
/// `Value`'s would be) and answering `$answer`.
macro_rules! scalars {
    ($answer:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($answer)
        }
    };
}

/// A top-level JSON document as the split reads it.
pub(super) enum Shape<'a> {
    /// An array: its items.
    Array(Vec<&'a RawValue>),
    /// A `kind: List` (or any kind ending in `List`) written plainly, with a list of `items`: its
    /// items (the rest of it is not read).
    List(Vec<&'a RawValue>),
    /// Anything else, read whole: an object, a scalar, and a List whose `kind` or `items` is
    /// written in a way the split does not reproduce (an escaped or repeated `kind`, a repeated
    /// or non-list `items`).
    Whole,
}

impl<'de> Deserialize<'de> for Shape<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&RawValue>()? {
            items.push(item);
        }
        Ok(Shape::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut items) = (None, None);
        let mut repeated = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" if kind.is_none() => kind = Some(map.next_value::<PlainString>()?.0),
                "items" if items.is_none() => items = Some(map.next_value::<Items>()?.0),
                other => {
                    repeated |= other == "kind" || other == "items";
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(match (kind.flatten(), items.flatten()) {
            (Some(kind), Some(items))
                if !repeated && (kind == "List" || kind.ends_with("List")) =>
            {
                Shape::List(items)
            }
            _ => Shape::Whole,
        })
    }

    scalars!(Shape::Whole);
}

/// A string written without escapes (borrowed from the text), or `None` for any other value.
struct PlainString<'a>(Option<&'a str>);

impl<'de> Deserialize<'de> for PlainString<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PlainStringVisitor)
    }
}

struct PlainStringVisitor;

impl<'de> Visitor<'de> for PlainStringVisitor {
    type Value = PlainString<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(PlainString(Some(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(PlainString(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(PlainString(None))
    }

    scalars!(PlainString(None));
}

/// The items of a list, or `None` for any other value.
struct Items<'a>(Option<Vec<&'a RawValue>>);

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match deserializer.deserialize_any(ShapeVisitor)? {
            Shape::Array(items) => Ok(Items(Some(items))),
            Shape::List(_) | Shape::Whole => Ok(Items(None)),
        }
    }
}

/// What the outline reads of a JSON value: its identity fields and how deeply it nests.
pub(super) struct Outline {
    /// The top-level `apiVersion` and `kind`, and `metadata` with only its `name` and
    /// `namespace`, as an object; `Value::Null` when the value is not an object.
    pub fields: Value,
    /// Depth of the deepest array or object (0 for a scalar).
    pub depth: usize,
}

/// The outline of a JSON value, or its error. It reads the value as `serde_json` parses it into a
/// [`Value`], so it fails exactly when that parse would (syntax, escapes, numbers out of range,
/// nesting past the recursion limit), but builds nothing beyond the identity fields.
pub(super) fn outline(text: &str) -> Result<Outline, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let outline = deserializer.deserialize_any(OutlineVisitor)?;
    deserializer.end()?;
    Ok(outline)
}

struct OutlineVisitor;

impl<'de> Visitor<'de> for OutlineVisitor {
    type Value = Outline;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Map::new();
        let mut deepest = 0;
        while let Some(key) = map.next_key::<String>()? {
            let depth = match key.as_str() {
                "apiVersion" | "kind" => {
                    let value: Value = map.next_value()?;
                    let depth = super::nesting(&value);
                    fields.insert(key, value);
                    depth
                }
                "metadata" => {
                    let metadata: MetadataOutline = map.next_value()?;
                    fields.insert(key, metadata.fields);
                    metadata.depth
                }
                _ => map.next_value::<Depth>()?.0,
            };
            deepest = deepest.max(depth);
        }
        Ok(Outline {
            fields: Value::Object(fields),
            depth: 1 + deepest,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok(Outline {
            fields: Value::Null,
            depth: DepthVisitor.visit_seq(seq)?,
        })
    }

    scalars!(Outline {
        fields: Value::Null,
        depth: 0
    });
}

/// `metadata` as the outline reads it: `name` and `namespace` only, when it is an object (any
/// other value is no usable metadata, and is read as `null`).
struct MetadataOutline {
    fields: Value,
    depth: usize,
}

impl<'de> Deserialize<'de> for MetadataOutline {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MetadataVisitor)
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = MetadataOutline;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Map::new();
        let mut deepest = 0;
        while let Some(key) = map.next_key::<String>()? {
            let depth = match key.as_str() {
                "name" | "namespace" => {
                    let value: Value = map.next_value()?;
                    let depth = super::nesting(&value);
                    fields.insert(key, value);
                    depth
                }
                _ => map.next_value::<Depth>()?.0,
            };
            deepest = deepest.max(depth);
        }
        Ok(MetadataOutline {
            fields: Value::Object(fields),
            depth: 1 + deepest,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok(MetadataOutline {
            fields: Value::Null,
            depth: DepthVisitor.visit_seq(seq)?,
        })
    }

    scalars!(MetadataOutline {
        fields: Value::Null,
        depth: 0
    });
}

/// How deeply a value nests, read without building it.
struct Depth(usize);

impl<'de> Deserialize<'de> for Depth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DepthVisitor).map(Depth)
    }
}

/// A map key, read (escapes and all) without keeping it.
struct Key;

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DepthVisitor).map(|_| Key)
    }
}

struct DepthVisitor;

impl<'de> Visitor<'de> for DepthVisitor {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut deepest = 0;
        while let Some(Depth(depth)) = seq.next_element()? {
            deepest = deepest.max(depth);
        }
        Ok(1 + deepest)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut deepest = 0;
        while let Some((Key, Depth(depth))) = map.next_entry()? {
            deepest = deepest.max(depth);
        }
        Ok(1 + deepest)
    }

    scalars!(0);
}
