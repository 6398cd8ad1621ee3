//! The deterministic mapping from a tenant object to its place in the host cluster.
//!
//! The host namespace is the Tenant's `spec.hostNamespace`, default `tenant-<tenant name>`. The
//! host name follows the Tenant's mapping scheme ([`MappingVersion`], recorded on every host
//! object), both computable by hand:
//!
//! * `v1`: `<name>-x-<namespace>` when that is a valid name for the kind; otherwise (too long,
//!   or characters the kind does not allow) the *hashed* form: a readable prefix, `-`, and the
//!   first 10 characters of the lowercase base32 SHA-256 of the full source identity
//!   `<tenant>/<group>/<kind>/<namespace>/<name>`, cut to the kind's limit. Readable names can
//!   collide by construction (`a-x-b` in `c` and `a` in `b-x-c` both map to `a-x-b-x-c`).
//! * `v2` (injective): `<name>-x-<namespace>` only when that is a valid name containing the
//!   separator `-x-` exactly once (counting overlapping matches, so `a-x` + `-x-` + `b` counts
//!   twice), so it splits back into exactly one (namespace, name); otherwise the hashed form,
//!   whose prefix has every `-x-` folded to `-` and no trailing `-x`, so a hashed name never
//!   contains the separator and can never equal a readable one. Two distinct objects of one
//!   kind share a v2 host name only if their 50-bit identity hashes collide, and
//!   [`crate::collision::check`] would still refuse that.
//!
//! Services and Endpoints (whose name must equal its Service's) are DNS-1035 labels of at most
//! 63 characters; every other kind is a DNS-1123 subdomain of at most 253.
//!
//! The host object keeps the tenant's labels and annotations except the reserved
//! `tenantplane.io/` keys, which are stripped (and listed in the decision) so that a tenant cannot
//! forge provenance; tenantplane then writes its own provenance keys.

use std::collections::BTreeMap;

use data_encoding::BASE32_NOPAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
pub use tenantplane_api::MappingVersion;
use tenantplane_api::{Tenant, provenance};

use crate::object::{SourceIdentity, TenantObject, string_entries};

mod metadata;

pub use metadata::MetadataMap;

/// The newest mapping scheme: what a new Tenant gets.
pub const LATEST_MAPPING_VERSION: MappingVersion = MappingVersion::V2;

/// Separator between the name and the namespace in readable host names.
pub const SEPARATOR: &str = "-x-";

/// Length of the hash suffix in hashed names.
const HASH_LEN: usize = 10;

/// Which Kubernetes name syntax a kind's names must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NameSyntax {
    /// DNS-1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
    Dns1035Label,
    /// DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
    Dns1123Subdomain,
}

impl NameSyntax {
    /// The syntax a kind's object names follow.
    pub fn for_kind(group: &str, kind: &str) -> NameSyntax {
        match (group, kind) {
            ("", "Service") | ("", "Endpoints") => NameSyntax::Dns1035Label,
            _ => NameSyntax::Dns1123Subdomain,
        }
    }

    /// The longest valid name.
    pub fn max_len(self) -> usize {
        match self {
            NameSyntax::Dns1035Label => 63,
            NameSyntax::Dns1123Subdomain => 253,
        }
    }

    /// Whether `name` is a valid name under this syntax.
    pub fn is_valid(self, name: &str) -> bool {
        if name.is_empty() || name.len() > self.max_len() {
            return false;
        }
        match self {
            NameSyntax::Dns1035Label => {
                is_dns_label(name) && name.as_bytes()[0].is_ascii_lowercase()
            }
            NameSyntax::Dns1123Subdomain => name.split('.').all(is_dns_label),
        }
    }
}

/// DNS-1123 label without the length limit: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// How the host name was formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HostNameForm {
    /// `<name>-x-<namespace>`.
    Readable,
    /// Readable prefix plus a hash of the full source identity.
    Hashed,
}

/// Whether two tenant objects of one kind can map to the host name `host_name` under mapping
/// v1: only when it holds the separator more than once (`a-x-b-x-c` is `c/a-x-b` and `b-x-c/a`);
/// otherwise it splits back into one namespace and name.
pub fn may_be_shared_under_v1(host_name: &str) -> bool {
    separators_in(host_name) > 1
}

/// How many times the separator occurs in `s`, overlapping matches included (`a-x-x-b`: 2).
fn separators_in(s: &str) -> usize {
    s.as_bytes()
        .windows(SEPARATOR.len())
        .filter(|w| *w == SEPARATOR.as_bytes())
        .count()
}

/// Where a tenant object lands in the host cluster, and the metadata that says where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// apiVersion of the host object (the same as the source's).
    pub api_version: String,
    /// Kind of the host object (the same as the source's).
    pub kind: String,
    /// Host namespace (the tenant's).
    pub namespace: String,
    /// Host name.
    pub name: String,
    /// How the name was formed.
    pub name_form: HostNameForm,
    /// Labels of the host object: the tenant's, minus reserved keys, plus provenance.
    pub labels: MetadataMap,
    /// Annotations of the host object: the tenant's, minus reserved keys, plus provenance
    /// (without the decision id, which the decision that writes the object adds).
    pub annotations: MetadataMap,
    /// The mapping scheme that placed it (the Tenant's).
    pub mapping_version: MappingVersion,
    /// Reserved `tenantplane.io/` keys the tenant object carried, stripped from the host object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripped_keys: Vec<String>,
}

impl Placement {
    /// The metadata of the host object synced from its source at this placement (provenance
    /// included, decision id and source uid not).
    pub fn synced_meta(&self) -> crate::collision::HostObjectMeta {
        crate::collision::HostObjectMeta {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            labels: owned(&self.labels),
            annotations: owned(&self.annotations),
        }
    }
}

fn owned(map: &MetadataMap) -> BTreeMap<String, String> {
    map.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The part of a Tenant the mapping needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPlacement {
    /// Tenant name.
    pub tenant: String,
    /// Host namespace of every object of the tenant.
    pub host_namespace: String,
    /// The tenant's mapping scheme.
    pub mapping: MappingVersion,
}

impl From<&Tenant> for TenantPlacement {
    fn from(tenant: &Tenant) -> Self {
        TenantPlacement {
            tenant: tenant.name().to_string(),
            host_namespace: tenant.host_namespace(),
            mapping: tenant.mapping_version(),
        }
    }
}

impl TenantPlacement {
    /// The host name of an object of this tenant under its mapping scheme.
    pub fn host_name(&self, group: &str, kind: &str, namespace: &str, name: &str) -> String {
        host_name(self.mapping, &self.tenant, group, kind, namespace, name).0
    }
}

/// The host name of a source object in a tenant under a mapping scheme (also used to rewrite
/// references between objects: a Pod's ConfigMap reference maps through the same function).
pub fn host_name(
    version: MappingVersion,
    tenant: &str,
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> (String, HostNameForm) {
    let syntax = NameSyntax::for_kind(group, kind);
    let mut readable = String::with_capacity(name.len() + SEPARATOR.len() + namespace.len());
    readable.push_str(name);
    readable.push_str(SEPARATOR);
    readable.push_str(namespace);
    let splits_back = match version {
        MappingVersion::V1 => true,
        MappingVersion::V2 => separators_in(&readable) == 1,
    };
    if splits_back && syntax.is_valid(&readable) {
        return (readable, HostNameForm::Readable);
    }
    let hash = identity_hash(tenant, group, kind, namespace, name);
    let budget = syntax.max_len() - HASH_LEN - 1;
    let mut prefix = sanitize(&readable, budget);
    if syntax == NameSyntax::Dns1035Label && !prefix.starts_with(|c: char| c.is_ascii_lowercase()) {
        prefix.insert(0, 'x');
        prefix.truncate(budget);
        trim_trailing_dashes(&mut prefix);
    }
    if version == MappingVersion::V2 {
        without_separators(&mut prefix);
    }
    let name = if prefix.is_empty() {
        // Only reachable for Dns1123Subdomain with a name of no usable characters; the hash
        // alphabet (a-z, 2-7) always starts a valid subdomain.
        hash
    } else {
        format!("{prefix}-{hash}")
    };
    (name, HostNameForm::Hashed)
}

/// Suffix of the host Secret that holds a synced pod's service account tokens.
pub const TOKEN_SECRET_SUFFIX: &str = ".sa-token";

/// The host Secret holding the service account tokens of the host pod `host_pod`:
/// `<host pod name>.sa-token`, its prefix cut and followed by a hash of the whole pod name when
/// that would exceed 253 characters. No tenant object's host name ends in `.sa-token` (a readable
/// name ends in `-x-<namespace>`, whose namespace has no dot; a hashed one in `-<hash>`, ten
/// characters after its last dash), so a tenant Secret can never map to it, under either scheme.
pub fn token_secret_name(host_pod: &str) -> String {
    let max = NameSyntax::Dns1123Subdomain.max_len();
    if host_pod.len() + TOKEN_SECRET_SUFFIX.len() <= max {
        return format!("{host_pod}{TOKEN_SECRET_SUFFIX}");
    }
    let hash = identity_hash("", "", "Secret", "", host_pod);
    let mut prefix = host_pod[..max - TOKEN_SECRET_SUFFIX.len() - HASH_LEN - 1].to_string();
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    format!("{prefix}-{hash}{TOKEN_SECRET_SUFFIX}")
}

/// Lowercase, `[a-z0-9-]` only, no leading, trailing or doubled dashes, at most `max` characters.
fn sanitize(readable: &str, max: usize) -> String {
    let mut out = String::with_capacity(max);
    for c in readable.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        if out.len() == max {
            break;
        }
        out.push(c);
    }
    trim_trailing_dashes(&mut out);
    out
}

/// Folds every separator in a hashed name's prefix to `-` and drops a trailing `-x`, so that
/// `<prefix>-<hash>` never contains the separator (the hash has no dashes). Only shortens, and
/// keeps the first character, so the prefix stays valid for its syntax.
fn without_separators(prefix: &mut String) {
    while let Some(at) = prefix.find(SEPARATOR) {
        prefix.replace_range(at..at + SEPARATOR.len(), "-");
    }
    while prefix.ends_with("-x") {
        prefix.truncate(prefix.len() - 2);
        trim_trailing_dashes(prefix);
    }
}

fn trim_trailing_dashes(s: &mut String) {
    while s.ends_with('-') {
        s.pop();
    }
}

/// First [`HASH_LEN`] characters of base32(sha256(tenant/group/kind/namespace/name)), lowercase.
fn identity_hash(tenant: &str, group: &str, kind: &str, namespace: &str, name: &str) -> String {
    let mut hasher = Sha256::new();
    for (i, part) in [tenant, group, kind, namespace, name].iter().enumerate() {
        if i > 0 {
            hasher.update(b"/");
        }
        hasher.update(part.as_bytes());
    }
    let mut encoded = BASE32_NOPAD.encode(&hasher.finalize());
    encoded.truncate(HASH_LEN);
    encoded.make_ascii_lowercase();
    encoded
}

/// Places a tenant object in the host cluster.
pub fn place(tenant: &TenantPlacement, object: &TenantObject) -> Placement {
    let id = &object.identity;
    let (name, name_form) = host_name(
        tenant.mapping,
        &tenant.tenant,
        id.group(),
        &id.kind,
        &id.namespace,
        &id.name,
    );

    // Provenance entries in key order, so that they append to the maps without a search.
    let mut stripped_keys = Vec::new();
    let metadata = object.object.get("metadata");
    let uid = (!id.uid.is_empty()).then_some((provenance::SOURCE_UID, id.uid.as_str()));
    let labels = host_metadata(
        string_entries(metadata, "labels"),
        "label",
        [
            (provenance::MANAGED, "true"),
            (provenance::SOURCE_NAMESPACE, id.namespace.as_str()),
        ]
        .into_iter()
        .chain(uid)
        .chain([(provenance::TENANT, tenant.tenant.as_str())]),
        &mut stripped_keys,
    );
    let annotations = host_metadata(
        string_entries(metadata, "annotations"),
        "annotation",
        [
            (provenance::MAPPING_VERSION, tenant.mapping.as_str()),
            (provenance::SOURCE_API_VERSION, id.api_version.as_str()),
            (provenance::SOURCE_KIND, id.kind.as_str()),
            (provenance::SOURCE_NAME, id.name.as_str()),
        ]
        .into_iter(),
        &mut stripped_keys,
    );

    Placement {
        api_version: id.api_version.clone(),
        kind: id.kind.clone(),
        namespace: tenant.host_namespace.clone(),
        name,
        name_form,
        labels,
        annotations,
        mapping_version: tenant.mapping,
        stripped_keys,
    }
}

/// The tenant's own labels or annotations (`what`), minus the reserved keys, which are listed in
/// `stripped_keys`, plus tenantplane's provenance entries.
fn host_metadata<'a>(
    own: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    what: &str,
    provenance: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    stripped_keys: &mut Vec<String>,
) -> MetadataMap {
    let (entries, text) = own
        .clone()
        .chain(provenance.clone())
        .fold((0, 0), |(n, len), (k, v)| (n + 1, len + k.len() + v.len()));
    let mut map = MetadataMap::with_capacity(entries, text);
    for (k, v) in own {
        if provenance::is_reserved(k) {
            stripped_keys.push(format!("{what} {k}"));
        } else {
            map.insert(k, v);
        }
    }
    for (k, v) in provenance {
        map.insert(k, v);
    }
    map
}

/// Provenance read back from a host object's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// Tenant that owns the host object.
    pub tenant: String,
    /// The tenant object it came from.
    pub source: SourceIdentity,
    /// Mapping scheme version that placed it.
    pub mapping_version: String,
    /// Decision that last wrote it, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
}

/// Why a host object's metadata does not name a tenantplane source.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProvenanceError {
    /// The object carries no tenantplane provenance at all: not ours.
    #[error(
        "the host object carries no tenantplane.io/ provenance: it was not created by tenantplane"
    )]
    NotManaged,
    /// Some provenance keys are present but one is missing: altered by hand.
    #[error("the host object's provenance is incomplete: {key} is missing")]
    Incomplete {
        /// The missing key.
        key: &'static str,
    },
}

/// Reads the source identity back from a host object's labels and annotations.
pub fn provenance(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Provenance, ProvenanceError> {
    let any = labels
        .keys()
        .chain(annotations.keys())
        .any(|k| provenance::is_reserved(k));
    if !any {
        return Err(ProvenanceError::NotManaged);
    }
    let label = |key: &'static str| {
        labels
            .get(key)
            .cloned()
            .ok_or(ProvenanceError::Incomplete { key })
    };
    let annotation = |key: &'static str| {
        annotations
            .get(key)
            .cloned()
            .ok_or(ProvenanceError::Incomplete { key })
    };
    Ok(Provenance {
        tenant: label(provenance::TENANT)?,
        source: SourceIdentity {
            api_version: annotation(provenance::SOURCE_API_VERSION)?,
            kind: annotation(provenance::SOURCE_KIND)?,
            namespace: label(provenance::SOURCE_NAMESPACE)?,
            name: annotation(provenance::SOURCE_NAME)?,
            uid: labels
                .get(provenance::SOURCE_UID)
                .cloned()
                .unwrap_or_default(),
        },
        mapping_version: annotation(provenance::MAPPING_VERSION)?,
        decision_id: annotations.get(provenance::DECISION_ID).cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tenant() -> TenantPlacement {
        TenantPlacement {
            tenant: "acme".into(),
            host_namespace: "tenant-acme".into(),
            mapping: MappingVersion::V2,
        }
    }

    fn obj(v: serde_json::Value) -> TenantObject {
        TenantObject::from_value(v).unwrap()
    }

    #[test]
    fn ordinary_names_are_readable() {
        let p = place(
            &tenant(),
            &obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app.config", "namespace": "web"}})),
        );
        assert_eq!(p.namespace, "tenant-acme");
        assert_eq!(p.name, "app.config-x-web");
        assert_eq!(p.name_form, HostNameForm::Readable);
    }

    #[test]
    fn a_service_name_past_63_is_hashed_but_a_configmap_of_the_same_name_is_not() {
        let name = "a".repeat(60);
        let (svc, form) = host_name(MappingVersion::V2, "acme", "", "Service", "prod", &name);
        assert_eq!(form, HostNameForm::Hashed);
        assert_eq!(svc.len(), 63);
        assert!(svc.starts_with("aaaa"));
        let (cm, form) = host_name(MappingVersion::V2, "acme", "", "ConfigMap", "prod", &name);
        assert_eq!(form, HostNameForm::Readable);
        assert_eq!(cm, format!("{name}-x-prod"));
    }

    #[test]
    fn a_dotted_service_name_is_hashed_because_labels_have_no_dots() {
        let (svc, form) = host_name(MappingVersion::V2, "acme", "", "Endpoints", "prod", "web");
        assert_eq!((svc.as_str(), form), ("web-x-prod", HostNameForm::Readable));
        let (svc, form) = host_name(MappingVersion::V2, "acme", "", "Service", "prod", "web.v2");
        assert_eq!(form, HostNameForm::Hashed);
        assert!(NameSyntax::Dns1035Label.is_valid(&svc), "{svc}");
    }

    #[test]
    fn v1_readable_names_collide_and_v2_hashes_every_name_that_does_not_split_back() {
        let v1 = |ns, name| host_name(MappingVersion::V1, "acme", "", "ConfigMap", ns, name);
        assert_eq!(v1("c", "a-x-b"), v1("b-x-c", "a"));
        assert_eq!(v1("c", "a-x-b").0, "a-x-b-x-c");

        let v2 = |ns, name| host_name(MappingVersion::V2, "acme", "", "ConfigMap", ns, name);
        assert_eq!(
            v2("web", "app"),
            ("app-x-web".into(), HostNameForm::Readable)
        );
        for (ns, name) in [("c", "a-x-b"), ("b-x-c", "a"), ("x-b", "a"), ("b", "a-x")] {
            let (host, form) = v2(ns, name);
            assert_eq!(form, HostNameForm::Hashed, "{ns}/{name}: {host}");
            assert!(!host.contains(SEPARATOR), "{ns}/{name}: {host}");
        }
        assert_ne!(v2("c", "a-x-b"), v2("b-x-c", "a"));
        // the readable prefix survives, with the separators folded
        assert!(
            v2("c", "a-x-b").0.starts_with("a-b-c-"),
            "{:?}",
            v2("c", "a-x-b")
        );
    }

    #[test]
    fn hashes_depend_on_the_tenant() {
        let long = "b".repeat(300);
        assert_ne!(
            host_name(MappingVersion::V2, "acme", "", "Pod", "x", &long).0,
            host_name(MappingVersion::V2, "other", "", "Pod", "x", &long).0
        );
    }

    #[test]
    fn reserved_keys_are_stripped_and_provenance_round_trips() {
        let p = place(
            &tenant(),
            &obj(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1",
              "labels": {"app": "web", "tenantplane.io/tenant": "victim"},
              "annotations": {"tenantplane.io/source-name": "forged", "note": "kept"}}})),
        );
        assert_eq!(p.labels.get("tenantplane.io/tenant"), Some("acme"));
        assert_eq!(p.labels.get("app"), Some("web"));
        assert_eq!(p.annotations.get("note"), Some("kept"));
        assert_eq!(
            p.stripped_keys,
            vec![
                "label tenantplane.io/tenant".to_string(),
                "annotation tenantplane.io/source-name".to_string(),
            ]
        );
        let back = provenance(
            &p.labels.into_iter().collect(),
            &p.annotations.into_iter().collect(),
        )
        .unwrap();
        assert_eq!(back.tenant, "acme");
        assert_eq!(back.source.to_string(), "Pod/prod/web");
        assert_eq!(back.source.uid, "u-1");
    }

    #[test]
    fn foreign_metadata_has_no_provenance() {
        let labels = BTreeMap::from([("app".to_string(), "x".to_string())]);
        assert_eq!(
            provenance(&labels, &BTreeMap::new()),
            Err(ProvenanceError::NotManaged)
        );
        let labels = BTreeMap::from([(provenance::TENANT.to_string(), "acme".to_string())]);
        assert_eq!(
            provenance(&labels, &BTreeMap::new()),
            Err(ProvenanceError::Incomplete {
                key: provenance::SOURCE_API_VERSION
            })
        );
    }
}
