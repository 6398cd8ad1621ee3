//! The labels and annotations of a placement: a map from key to value, sorted by key like a
//! `BTreeMap<String, String>` and serialized exactly like one, but held in one string buffer and
//! one index, so that placing an object costs two allocations per map instead of two per entry.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Labels or annotations of a host object, sorted by key.
#[derive(Clone, Default)]
pub struct MetadataMap {
    /// Each inserted key followed by its value.
    text: String,
    /// One entry per key, sorted by key.
    entries: Vec<Entry>,
}

/// Where one key and its value lie in the text: `text[start..key_end]` and `text[key_end..end]`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: usize,
    key_end: usize,
    end: usize,
}

impl MetadataMap {
    /// An empty map with room for `entries` keys and `text` bytes of keys and values.
    pub fn with_capacity(entries: usize, text: usize) -> Self {
        MetadataMap {
            text: String::with_capacity(text),
            entries: Vec::with_capacity(entries),
        }
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key.
    pub fn insert(&mut self, key: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push_str(value);
        let entry = Entry {
            start,
            key_end,
            end: self.text.len(),
        };
        // Keys mostly come in order (from a JSON map, then provenance in key order): append
        // without a search when the key sorts last.
        let last = self.entries.last().map(|e| self.key_of(e));
        if last.is_none_or(|last| last < key) {
            self.entries.push(entry);
            return;
        }
        match self.position(key) {
            // The replaced value's text stays in the buffer, unused: replacing only happens when a
            // map is collected from pairs with repeated keys.
            Ok(i) => self.entries[i] = entry,
            Err(i) => self.entries.insert(i, entry),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key)
            .ok()
            .map(|i| self.value_of(&self.entries[i]))
    }

    /// Every key and value, sorted by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (self.key_of(e), self.value_of(e)))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| self.key_of(e).cmp(key))
    }

    fn key_of(&self, e: &Entry) -> &str {
        &self.text[e.start..e.key_end]
    }

    fn value_of(&self, e: &Entry) -> &str {
        &self.text[e.key_end..e.end]
    }
}

impl PartialEq for MetadataMap {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for MetadataMap {}

impl fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for MetadataMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut map = MetadataMap::default();
        for (k, v) in pairs {
            map.insert(k.as_ref(), v.as_ref());
        }
        map
    }
}

/// Owned keys and values, sorted by key (what a `BTreeMap<String, String>` yields).
impl IntoIterator for MetadataMap {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl Serialize for MetadataMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for MetadataMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_and_serializes_like_a_btree_map() {
        let pairs = [
            ("b", "2"),
            ("tenantplane.io/x", "y"),
            ("a", "1"),
            ("b", "3"),
            ("", "e"),
        ];
        let map: MetadataMap = pairs.into_iter().collect();
        let tree: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(map.len(), tree.len());
        assert_eq!(map.get("b"), Some("3"));
        assert_eq!(map.get("c"), None);
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            serde_json::to_string(&tree).unwrap()
        );
        assert_eq!(format!("{map:?}"), format!("{tree:?}"));
        assert_eq!(map.clone().into_iter().collect::<BTreeMap<_, _>>(), tree);
        let back: MetadataMap =
            serde_json::from_str(&serde_json::to_string(&tree).unwrap()).unwrap();
        assert_eq!(back, map);
        assert_ne!(back, MetadataMap::default());
    }
}
