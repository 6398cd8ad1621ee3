//! Collision detection: may this placement be written over what is at the target name?
//!
//! A pure function of the placement and the host object currently at (kind, namespace, name).
//! The host object is ours only when its provenance names exactly this source: same tenant, same
//! API group and kind, same source namespace and name, and the same uid when both are known.
//! Anything else is a Conflict, which is refused and recorded; it is never resolved by
//! overwriting or deleting the foreign object.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mapping::{Placement, ProvenanceError, provenance};
use crate::object::{SourceIdentity, group_of};

/// The metadata of a host object that the collision check reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostObjectMeta {
    /// apiVersion of the host object.
    pub api_version: String,
    /// Kind of the host object.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// What the placement may do at its target name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Collision {
    /// Nothing is there: create the host object.
    Create,
    /// Our own host object for this very source is there: update it (or leave it if unchanged).
    UpdateOwn,
    /// Another source's object, or an object tenantplane did not create, is there.
    Conflict {
        /// Who owns the object at the target name, in words (for the decision message).
        owner: String,
        /// Which part of the identity differs (for the decision reason).
        differs: ConflictCause,
    },
}

/// The part of the identity that makes an existing host object foreign.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConflictCause {
    /// The object carries no tenantplane provenance (created by someone else).
    NoProvenance,
    /// The object's provenance is incomplete (altered by hand).
    IncompleteProvenance,
    /// Another tenant's object.
    OtherTenant,
    /// Another kind (or API group) of source object.
    OtherKind,
    /// Another source object of the same kind (its namespace/name map to the same host name).
    OtherSource,
    /// Same namespace and name but another uid: an older incarnation of the source object.
    OtherUid,
}

impl ConflictCause {
    /// Machine reason recorded in the Conflict decision.
    pub fn reason(self) -> &'static str {
        match self {
            ConflictCause::NoProvenance => "HostObjectNotManaged",
            ConflictCause::IncompleteProvenance => "HostObjectProvenanceIncomplete",
            ConflictCause::OtherTenant => "HostObjectOwnedByOtherTenant",
            ConflictCause::OtherKind => "HostObjectOwnedByOtherKind",
            ConflictCause::OtherSource => "HostObjectOwnedByOtherSource",
            ConflictCause::OtherUid => "HostObjectOwnedByOtherUid",
        }
    }
}

/// Decides create, update-own or Conflict for `placement` of `source` in `tenant`.
pub fn check(
    tenant: &str,
    source: &SourceIdentity,
    placement: &Placement,
    existing: Option<&HostObjectMeta>,
) -> Collision {
    let Some(existing) = existing else {
        return Collision::Create;
    };
    let owned = owner_check(
        tenant,
        (source.group(), &source.kind),
        (&source.namespace, &source.name, &source.uid),
        existing,
    );
    let same_target = group_of(&existing.api_version) == group_of(&placement.api_version)
        && existing.kind == placement.kind;
    match owned {
        Collision::UpdateOwn if !same_target => Collision::Conflict {
            owner: format!("a {} of the same source", existing.kind),
            differs: ConflictCause::OtherKind,
        },
        owned => owned,
    }
}

/// Whether the host object `existing` was synced from the tenant object of `tenant` with this
/// (API group, kind) and (namespace, name, uid; an empty uid matches any): `UpdateOwn` when it
/// was, the Conflict that says whose it is otherwise.
pub fn owner_check(
    tenant: &str,
    (group, kind): (&str, &str),
    (namespace, name, uid): (&str, &str, &str),
    existing: &HostObjectMeta,
) -> Collision {
    let conflict = |differs: ConflictCause, owner: String| Collision::Conflict { owner, differs };
    let theirs = match provenance(&existing.labels, &existing.annotations) {
        Ok(p) => p,
        Err(ProvenanceError::NotManaged) => {
            return conflict(
                ConflictCause::NoProvenance,
                "no tenantplane source (created outside tenantplane)".into(),
            );
        }
        Err(e @ ProvenanceError::Incomplete { .. }) => {
            return conflict(ConflictCause::IncompleteProvenance, e.to_string());
        }
    };
    let owner = format!("{} of tenant {}", theirs.source, theirs.tenant);
    if theirs.tenant != tenant {
        return conflict(ConflictCause::OtherTenant, owner);
    }
    if group_of(&theirs.source.api_version) != group || theirs.source.kind != kind {
        return conflict(ConflictCause::OtherKind, owner);
    }
    if theirs.source.namespace != namespace || theirs.source.name != name {
        return conflict(ConflictCause::OtherSource, owner);
    }
    if !theirs.source.uid.is_empty() && !uid.is_empty() && theirs.source.uid != uid {
        return conflict(
            ConflictCause::OtherUid,
            format!("{owner} (uid {})", theirs.source.uid),
        );
    }
    Collision::UpdateOwn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{TenantPlacement, place};
    use crate::object::TenantObject;
    use serde_json::json;

    fn placed(tenant: &str, ns: &str, name: &str, uid: &str) -> (TenantObject, Placement) {
        let o = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "uid": uid}}))
        .unwrap();
        let t = TenantPlacement {
            tenant: tenant.into(),
            host_namespace: "h".into(),
            mapping: crate::mapping::MappingVersion::V1,
        };
        let p = place(&t, &o);
        (o, p)
    }

    fn meta_of(p: &Placement) -> HostObjectMeta {
        HostObjectMeta {
            api_version: p.api_version.clone(),
            kind: p.kind.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            labels: p.labels.clone().into_iter().collect(),
            annotations: p.annotations.clone().into_iter().collect(),
        }
    }

    #[test]
    fn create_update_and_each_kind_of_conflict() {
        let (o, p) = placed("acme", "c", "a-x-b", "u1");
        assert_eq!(check("acme", &o.identity, &p, None), Collision::Create);
        assert_eq!(
            check("acme", &o.identity, &p, Some(&meta_of(&p))),
            Collision::UpdateOwn
        );

        // a in namespace b-x-c maps to the same host name as a-x-b in c
        let (other, other_p) = placed("acme", "b-x-c", "a", "u2");
        assert_eq!(other_p.name, p.name);
        let c = check("acme", &other.identity, &other_p, Some(&meta_of(&p)));
        assert!(
            matches!(
                c,
                Collision::Conflict {
                    differs: ConflictCause::OtherSource,
                    ..
                }
            ),
            "{c:?}"
        );

        let (_, theirs) = placed("globex", "c", "a-x-b", "u1");
        let c = check("acme", &o.identity, &p, Some(&meta_of(&theirs)));
        assert!(matches!(
            c,
            Collision::Conflict {
                differs: ConflictCause::OtherTenant,
                ..
            }
        ));

        let (_, older) = placed("acme", "c", "a-x-b", "u0");
        let c = check("acme", &o.identity, &p, Some(&meta_of(&older)));
        assert!(matches!(
            c,
            Collision::Conflict {
                differs: ConflictCause::OtherUid,
                ..
            }
        ));

        let mut foreign = meta_of(&p);
        foreign.labels.clear();
        foreign.annotations.clear();
        let c = check("acme", &o.identity, &p, Some(&foreign));
        assert!(matches!(
            c,
            Collision::Conflict {
                differs: ConflictCause::NoProvenance,
                ..
            }
        ));

        let mut other_kind = meta_of(&p);
        other_kind.annotations.insert(
            tenantplane_api::provenance::SOURCE_KIND.into(),
            "Secret".into(),
        );
        let c = check("acme", &o.identity, &p, Some(&other_kind));
        assert!(matches!(
            c,
            Collision::Conflict {
                differs: ConflictCause::OtherKind,
                ..
            }
        ));
    }
}
