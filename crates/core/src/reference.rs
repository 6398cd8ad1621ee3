//! References between tenant objects, and the rule that keeps them inside the tenant.
//!
//! A tenant object names others: a Pod its ConfigMaps, Secrets, claims and service account, an
//! Ingress its Services and TLS Secrets, an Endpoints its Pods. The translation rewrites each
//! name to the host name of the object it names ([`crate::translate::to_host`] lists them as
//! [`Reference`]s), and on the host that name resolves to whatever is there. So a reference may
//! only resolve to a host object synced from the very tenant object it names, or to nothing yet
//! (the object it names is not synced yet, or not at all): [`check`] refuses anything else,
//! naming the field and the owner found, and the planner and the syncer run the same check (the
//! planner against the host state it is given, the syncer against its live caches).
//!
//! A reference names one of [`REFERENCEABLE_KINDS`], whose host objects the syncer always
//! watches in the tenant's host namespace; a typed reference to any other kind is refused by the
//! translation, since what it resolves to could not be checked.

use serde::{Deserialize, Serialize};

use crate::collision::{self, Collision, HostObjectMeta};
use crate::mapping::TenantPlacement;
use crate::translate::Untranslatable;

/// The kinds a tenant object may name, as (API group, kind).
pub const REFERENCEABLE_KINDS: [(&str, &str); 6] = [
    ("", "ConfigMap"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
];

/// Machine reason of a refused reference.
pub const FOREIGN_REFERENCE: &str = "ReferenceToForeignHostObject";

/// One reference of a tenant object to another tenant object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// The field of the referencing object that holds the name
    /// (`spec.volumes[0].secret.secretName`).
    pub field_path: String,
    /// API group of the named object (empty for the core group).
    pub group: String,
    /// Kind of the named object.
    pub kind: String,
    /// Namespace of the named object in the tenant.
    pub namespace: String,
    /// Name of the named object in the tenant.
    pub name: String,
    /// The host name it maps to, which the host object's reference now holds.
    pub host_name: String,
}

/// Host objects of the tenant's host namespace, by (API group, kind, name).
pub trait HostObjects {
    /// The host object of this group, kind and name in the tenant's host namespace, if any.
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta>;
}

/// Checks that every reference resolves to nothing or to the host object synced from the tenant
/// object it names; the first that does not is the refusal.
pub fn check(
    tenant: &TenantPlacement,
    references: &[Reference],
    host: &(impl HostObjects + ?Sized),
) -> Result<(), Untranslatable> {
    for r in references {
        let Some(found) = host.host_object(&r.group, &r.kind, &r.host_name) else {
            continue;
        };
        let owner = collision::owner_check(
            &tenant.tenant,
            (&r.group, &r.kind),
            (&r.namespace, &r.name, ""),
            &found,
        );
        if let Collision::Conflict { owner, .. } = owner {
            return Err(Untranslatable {
                reason: FOREIGN_REFERENCE,
                field_path: r.field_path.clone(),
                message: format!(
                    "{} names {} {}/{}, but its host name resolves to {} {}/{}, which belongs to \
                     {owner}: a reference may only resolve to the host object synced from the \
                     object it names",
                    r.field_path, r.kind, r.namespace, r.name, r.kind, found.namespace, found.name
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{MappingVersion, place};
    use crate::object::TenantObject;
    use crate::translate::to_host;
    use serde_json::json;
    use std::collections::BTreeMap;

    struct Host(Vec<HostObjectMeta>);

    impl HostObjects for Host {
        fn host_object(&self, _group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
            self.0
                .iter()
                .find(|m| m.kind == kind && m.name == name)
                .cloned()
        }
    }

    fn tenant() -> TenantPlacement {
        TenantPlacement {
            tenant: "lab".into(),
            host_namespace: "tenant-lab".into(),
            mapping: MappingVersion::V2,
        }
    }

    fn object(v: serde_json::Value) -> TenantObject {
        TenantObject::from_value(v).unwrap()
    }

    fn references(o: &TenantObject) -> Vec<Reference> {
        to_host(&tenant(), o, &place(&tenant(), o))
            .unwrap()
            .references
    }

    fn host_meta_of(o: &TenantObject) -> HostObjectMeta {
        let p = place(&tenant(), o);
        HostObjectMeta {
            api_version: p.api_version,
            kind: p.kind,
            namespace: p.namespace,
            name: p.name,
            labels: p.labels.into_iter().collect(),
            annotations: p.annotations.into_iter().collect(),
        }
    }

    fn borrower() -> TenantObject {
        object(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "borrower", "namespace": "lab"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "vault-token", "key": "t"}}}]}],
                "volumes": [{"name": "v", "secret": {"secretName": "vault-token"}}]}}))
    }

    #[test]
    fn a_reference_to_a_platform_object_at_the_mapped_name_is_refused_with_its_field() {
        let platform = HostObjectMeta {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: "tenant-lab".into(),
            name: "vault-token-x-lab".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        let refs = references(&borrower());
        let e = check(&tenant(), &refs, &Host(vec![platform])).unwrap_err();
        assert_eq!(e.reason, FOREIGN_REFERENCE);
        assert_eq!(
            e.field_path,
            "spec.containers[0].env[0].valueFrom.secretKeyRef.name"
        );
        assert!(e.message.contains("created outside tenantplane"), "{e}");
    }

    #[test]
    fn a_reference_resolves_to_nothing_or_to_the_object_synced_from_the_name() {
        let refs = references(&borrower());
        assert!(check(&tenant(), &refs, &Host(vec![])).is_ok());
        let secret = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "vault-token", "namespace": "lab", "uid": "s-1"}}));
        assert!(check(&tenant(), &refs, &Host(vec![host_meta_of(&secret)])).is_ok());
        // a Secret of another namespace of the same tenant is another source
        let other = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "vault-token", "namespace": "ops"}}));
        let mut moved = host_meta_of(&other);
        moved.name = "vault-token-x-lab".into();
        let e = check(&tenant(), &refs, &Host(vec![moved])).unwrap_err();
        assert!(
            e.message.contains("Secret/ops/vault-token of tenant lab"),
            "{e}"
        );
    }
}
