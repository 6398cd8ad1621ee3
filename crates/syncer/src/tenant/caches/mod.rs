//! gather: what decisions read about one Tenant, and when it may be read. The watch stores of its
//! synced kinds on both sides and of the host objects its objects may reference, the lookups
//! between tenant objects and their host objects, the index of tenant objects sharing a v1 host
//! name, the objects known to be in place, and the own-write rules ([`own_writes`]: when the
//! stores lag this syncer's own writes).
//!
//! The stores hold what decisions read, not whole objects: managedFields field sets are dropped
//! on both sides, and a host object keeps its metadata, status, a Service's spec and an
//! Endpoints' subsets ([`stored`]; the rest of a host object is compared by the digest it
//! carries).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::Outcome;
use tenantplane_core::mapping::{self, MappingVersion, TenantPlacement};
use tenantplane_core::reference::HostObjects;
use tenantplane_core::translate;
use tenantplane_core::{Planner, SourceIdentity, TenantObject};

mod host_changes;
mod own_writes;
mod stored;

pub(super) use host_changes::{Changed, Vanished};
use own_writes::Recreation;
pub(super) use own_writes::{OWN_WRITE_PATIENCE, OwnWrite};
pub(super) use stored::{to_value, trim_host_object, trim_tenant_object, type_meta};

use super::Key;
use crate::reconcile::{self, Step};
use crate::writer::Write;

/// One synced kind: its stores on both sides and the host API its writes go to.
#[derive(Debug)]
pub(super) struct Kind {
    pub(super) ar: ApiResource,
    pub(super) tenant: Store<DynamicObject>,
    pub(super) host: Store<DynamicObject>,
    pub(super) host_api: Api<DynamicObject>,
    pub(super) has_status: bool,
}

/// A tenant object's (namespace, name).
type SourceName = (String, String);

/// What one tenant's decisions read, and the own-write rules that say when.
pub(super) struct Caches {
    pub(super) placement: TenantPlacement,
    kinds: Vec<Kind>,
    /// Host stores of the referenceable kinds that are not synced, by (group, kind).
    referenced: Vec<(ApiResource, Store<DynamicObject>)>,
    pub(super) service_kind: Option<usize>,
    pub(super) endpoints_kind: Option<usize>,
    pub(super) pod_kind: Option<usize>,
    /// Under mapping v1: the (namespace, name) of tenant objects by (kind, host name), as seen
    /// by the tenant watches; entries are checked against the stores when read.
    sharing: Mutex<HashMap<(usize, String), BTreeSet<SourceName>>>,
    /// Host writes not yet shown by the host watch, by (kind, host name).
    own_writes: Mutex<HashMap<(usize, String), OwnWrite>>,
    /// The uids of the host objects this syncer deleted lately, with when: a delete's watch event
    /// is not drift ([`host_changes`]).
    own_deletes: Mutex<HashMap<String, std::time::Instant>>,
    /// Host writes whose call has not returned, by (kind, host name): another key mapped to the
    /// same host name (a collision) is not decided on the state they are changing.
    writes_in_flight: Mutex<HashSet<(usize, String)>>,
    /// Tenant Services recreated with their host Service's cluster IPs, by key: until the tenant
    /// watch shows the new Service and the host Service's provenance names it.
    recreations: Mutex<HashMap<Key, Recreation>>,
    /// Objects in place: (tenant resourceVersion, desired digest) of the last Synced or Unchanged
    /// decision. While both still hold, an event (typically the echo of our own write, or a host
    /// status change) needs no plan: only the status flows up.
    in_place: Mutex<HashMap<Key, (String, String)>>,
    /// A hash of each host object's content (all but status), by (kind, host name): a change
    /// of anything but status is looked at for drift ([`host_changes`]).
    contents: Mutex<HashMap<(usize, String), u64>>,
    /// Host objects of ours whose content another hand than this syncer's changed, whole as the
    /// host sent them, until their key is decided.
    fresh: Mutex<HashMap<(usize, String), Value>>,
    /// Host objects of ours deleted by someone else, until their key is decided.
    vanished: Mutex<HashMap<(usize, String), host_changes::Vanished>>,
}

/// What the caches show of one key when its batch is gathered.
pub(super) enum Gathered {
    /// The tenant store has not shown this syncer's recreation of the object yet.
    Behind,
    /// The tenant object, in place since its last decision: only what flows up.
    InPlace(TenantObject),
    /// The tenant object, to plan and decide on.
    Present(TenantObject),
    /// No tenant object: its host object, if it is ours, goes.
    Absent,
    /// A tenant object that is not one (logged).
    Unreadable,
}

/// What the caches show live of a tenant object when it is decided on.
pub(super) struct LiveView {
    /// Its host object, as decisions see it ([`Caches::host_of`]).
    pub(super) host: Option<Value>,
    /// Under mapping v1, the other tenant objects at its host name.
    pub(super) sharing: Vec<TenantObject>,
}

impl Caches {
    pub(super) fn new(
        placement: TenantPlacement,
        kinds: Vec<Kind>,
        referenced: Vec<(ApiResource, Store<DynamicObject>)>,
    ) -> Caches {
        let core = |kind: &str| {
            kinds
                .iter()
                .position(|k| k.ar.group.is_empty() && k.ar.kind == kind)
        };
        Caches {
            pod_kind: core("Pod"),
            service_kind: core("Service"),
            endpoints_kind: core("Endpoints"),
            placement,
            kinds,
            referenced,
            sharing: Mutex::new(HashMap::new()),
            own_writes: Mutex::new(HashMap::new()),
            writes_in_flight: Mutex::new(HashSet::new()),
            own_deletes: Mutex::new(HashMap::new()),
            recreations: Mutex::new(HashMap::new()),
            in_place: Mutex::new(HashMap::new()),
            contents: Mutex::new(HashMap::new()),
            fresh: Mutex::new(HashMap::new()),
            vanished: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn kind(&self, index: usize) -> &Kind {
        &self.kinds[index]
    }

    /// Every store, to wait until each has listed: the referenced kinds' first.
    pub(super) fn stores(&self) -> impl Iterator<Item = &Store<DynamicObject>> {
        self.referenced
            .iter()
            .map(|(_, store)| store)
            .chain(self.kinds.iter().flat_map(|k| [&k.tenant, &k.host]))
    }

    /// `push`es every key the stores know of, kind by kind: each tenant object, then the source
    /// of each host object of ours (or the tenant Endpoints a host Endpoints flows up into).
    pub(super) fn each_key(&self, mut push: impl FnMut(Key)) {
        for (index, k) in self.kinds.iter().enumerate() {
            for obj in k.tenant.state() {
                push(Key {
                    kind: index,
                    namespace: obj.namespace().unwrap_or_default(),
                    name: obj.name_any(),
                });
            }
            for obj in k.host.state() {
                if let Some(key) = self.key_of_host_event(index, &obj) {
                    push(key);
                }
            }
        }
    }

    /// The key as the decision log and the ledger name it.
    pub(super) fn key_string(&self, key: &Key) -> String {
        let ar = &self.kinds[key.kind].ar;
        format!("{}/{}/{}/{}", ar.group, ar.kind, key.namespace, key.name)
    }

    /// The source identity of a key whose tenant object is gone (its uid unknown).
    pub(super) fn source_of(&self, key: &Key) -> SourceIdentity {
        let ar = &self.kinds[key.kind].ar;
        SourceIdentity {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            uid: String::new(),
        }
    }

    /// The host name of a key's object.
    pub(super) fn host_name_of(&self, key: &Key) -> String {
        let ar = &self.kinds[key.kind].ar;
        self.placement
            .host_name(&ar.group, &ar.kind, &key.namespace, &key.name)
    }

    /// The tenant object of a key, as its store keeps it.
    pub(super) fn tenant_object(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        let kind = &self.kinds[key.kind];
        kind.tenant
            .get(&ObjectRef::new_with(&key.name, kind.ar.clone()).within(&key.namespace))
    }

    /// The host object of kind `kind` at `name`, as its store keeps it.
    pub(super) fn host_cached(&self, kind: usize, name: &str) -> Option<Value> {
        let k = &self.kinds[kind];
        k.host
            .get(&ObjectRef::new_with(name, k.ar.clone()).within(&self.placement.host_namespace))
            .map(|o| to_value(&o))
    }

    /// The host object of `o` as decisions see it. While a tenant Service this syncer recreated
    /// (with the host's cluster IPs) is being adopted, its host Service still names the deleted
    /// Service's uid: it is seen as naming the new one, so the next decision updates its
    /// provenance instead of deleting it as an earlier incarnation's.
    pub(super) fn host_of(&self, key: &Key, o: &TenantObject) -> Option<Value> {
        let mut host = self.host_cached(key.kind, &self.host_name_of(key))?;
        if let Some(r) = self.recreations.lock().expect("recreations lock").get(key)
            && r.to_uid.as_deref() == Some(o.identity.uid.as_str())
            && source_uid_of(&host) == Some(r.from_uid.as_str())
        {
            host["metadata"]["labels"][provenance::SOURCE_UID] = json!(o.identity.uid);
        }
        Some(host)
    }

    /// The tenant object key a host object of kind `index` was synced from, if it is ours.
    fn key_of_host(&self, index: usize, obj: &DynamicObject) -> Option<Key> {
        let labels = obj.labels();
        let annotations = obj.annotations();
        if labels.get(provenance::TENANT)? != &self.placement.tenant {
            return None;
        }
        if annotations.get(provenance::SOURCE_KIND)? != &self.kinds[index].ar.kind {
            return None;
        }
        Some(Key {
            kind: index,
            namespace: labels.get(provenance::SOURCE_NAMESPACE)?.clone(),
            name: annotations.get(provenance::SOURCE_NAME)?.clone(),
        })
    }

    /// The key of a host object of ours whose tenant label someone removed (its content is kept
    /// for the drift check, [`host_changes`]), from the provenance it still carries.
    fn key_of_unlabelled(&self, index: usize, obj: &DynamicObject) -> Option<Key> {
        if !self
            .fresh
            .lock()
            .expect("fresh lock")
            .contains_key(&(index, obj.name_any()))
        {
            return None;
        }
        let (labels, annotations) = (obj.labels(), obj.annotations());
        if labels.contains_key(provenance::TENANT)
            || annotations.get(provenance::SOURCE_KIND)? != &self.kinds[index].ar.kind
        {
            return None;
        }
        Some(Key {
            kind: index,
            namespace: labels.get(provenance::SOURCE_NAMESPACE)?.clone(),
            name: annotations.get(provenance::SOURCE_NAME)?.clone(),
        })
    }

    /// The tenant object key the host object of kind `index` at `host_name` was synced from, if
    /// it is ours.
    pub(super) fn source_of_host(&self, index: usize, host_name: &str) -> Option<Key> {
        let k = &self.kinds[index];
        let host = k.host.get(
            &ObjectRef::new_with(host_name, k.ar.clone()).within(&self.placement.host_namespace),
        )?;
        self.key_of_host(index, &host)
    }

    /// The key a host object's event concerns: the source of our own host object, or, for the
    /// Endpoints the host's endpoints controller keeps for our host Service, the tenant Endpoints
    /// of that Service (they flow up).
    pub(super) fn key_of_host_event(&self, index: usize, obj: &DynamicObject) -> Option<Key> {
        if let Some(key) = self.key_of_host(index, obj) {
            return Some(key);
        }
        if let Some(key) = self.key_of_unlabelled(index, obj) {
            return Some(key);
        }
        if let Some(key) = self.pod_of_token_secret(&self.kinds[index].ar, obj) {
            return Some(key);
        }
        let service_kind = self.service_kind?;
        if Some(index) != self.endpoints_kind {
            return None;
        }
        let key = self.source_of_host(service_kind, &obj.name_any())?;
        Some(Key { kind: index, ..key })
    }

    /// The key of the tenant pod whose token Secret a host object of kind `ar` is, if it is one
    /// of this tenant's: its events wake the pod, whose tokens are issued again when it is gone
    /// and whose drift is looked at ([`super::tokens`]). Told by the host pod that owns it,
    /// else (the owner gone, or removed on the host) by its provenance.
    pub(super) fn pod_of_token_secret(&self, ar: &ApiResource, obj: &DynamicObject) -> Option<Key> {
        let name = obj.name_any();
        let token_secret = ar.group.is_empty()
            && ar.kind == "Secret"
            && name.ends_with(mapping::TOKEN_SECRET_SUFFIX);
        if !token_secret {
            return None;
        }
        let pod_kind = self.pod_kind?;
        let by_owner = obj
            .owner_references()
            .iter()
            .filter(|o| o.kind == "Pod" && mapping::token_secret_name(&o.name) == name)
            .find_map(|o| self.source_of_host(pod_kind, &o.name));
        if by_owner.is_some() {
            return by_owner;
        }
        let (labels, annotations) = (obj.labels(), obj.annotations());
        if labels.get(provenance::TENANT)? != &self.placement.tenant
            || annotations.get(provenance::SOURCE_KIND)? != "Pod"
        {
            return None;
        }
        Some(Key {
            kind: pod_kind,
            namespace: labels.get(provenance::SOURCE_NAMESPACE)?.clone(),
            name: annotations.get(provenance::SOURCE_NAME)?.clone(),
        })
    }

    /// Whether the key is the tenant Endpoints of a tenant Service that selects pods: its
    /// Endpoints are then the tenant's endpoints controller's, and on the host the host's
    /// endpoints controller keeps the Endpoints of the host Service; syncing them would only
    /// collide.
    pub(super) fn endpoints_of_selector_service(&self, key: &Key) -> bool {
        let ar = &self.kinds[key.kind].ar;
        if !(ar.group.is_empty() && ar.kind == "Endpoints") {
            return false;
        }
        let Some(service) = self
            .kinds
            .iter()
            .find(|k| k.ar.group.is_empty() && k.ar.kind == "Service")
        else {
            return false;
        };
        service
            .tenant
            .get(&ObjectRef::new_with(&key.name, service.ar.clone()).within(&key.namespace))
            .is_some_and(|svc| {
                svc.data
                    .pointer("/spec/selector")
                    .and_then(Value::as_object)
                    .is_some_and(|s| !s.is_empty())
            })
    }

    /// Under mapping v1, notes the tenant object `namespace/name` of kind `index` under its host
    /// name, and `push`es the other objects there: which of them takes the name may have changed.
    pub(super) fn share_host_name(
        &self,
        index: usize,
        namespace: &str,
        name: &str,
        mut push: impl FnMut(Key),
    ) {
        if self.placement.mapping != MappingVersion::V1 {
            return;
        }
        let key = Key {
            kind: index,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let slot = (index, self.host_name_of(&key));
        let mut sharing = self.sharing.lock().expect("sharing lock");
        let at = sharing.entry(slot).or_default();
        at.insert((key.namespace, key.name));
        for (namespace, name) in at
            .iter()
            .filter(|(ns, n)| (ns.as_str(), n.as_str()) != (namespace, name))
        {
            push(Key {
                kind: index,
                namespace: namespace.clone(),
                name: name.clone(),
            });
        }
    }

    /// Under mapping v1, the other tenant objects of the key's kind at its host name.
    fn sharing_host_name(&self, key: &Key) -> Vec<TenantObject> {
        if self.placement.mapping != MappingVersion::V1 {
            return Vec::new();
        }
        let mut objects = self.objects_at_host_name(key.kind, &self.host_name_of(key));
        objects
            .retain(|o| (&o.identity.namespace, &o.identity.name) != (&key.namespace, &key.name));
        objects
    }

    /// Under mapping v1, the tenant objects of kind `index` known at `host_name`.
    fn objects_at_host_name(&self, index: usize, host_name: &str) -> Vec<TenantObject> {
        let kind = &self.kinds[index];
        let sharing = self.sharing.lock().expect("sharing lock");
        let Some(at) = sharing.get(&(index, host_name.to_string())) else {
            return Vec::new();
        };
        at.iter()
            .filter_map(|(ns, n)| {
                let obj = kind
                    .tenant
                    .get(&ObjectRef::new_with(n, kind.ar.clone()).within(ns))?;
                TenantObject::from_value(to_value(&obj)).ok()
            })
            .collect()
    }

    /// What the tenant store shows at `key` (`found`), once the host store has shown this
    /// syncer's writes ([`Caches::host_behind`] is asked first).
    pub(super) fn gathered(&self, key: &Key, found: Option<Arc<DynamicObject>>) -> Gathered {
        match found {
            Some(obj) => match TenantObject::from_value(to_value(&obj)) {
                Ok(o) if self.tenant_behind(key, Some(&o.identity.uid)) => Gathered::Behind,
                Ok(o) if self.in_place(key, &o) && !self.host_changed(key) => Gathered::InPlace(o),
                Ok(o) => Gathered::Present(o),
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable tenant object");
                    Gathered::Unreadable
                }
            },
            None if self.tenant_behind(key, None) => Gathered::Behind,
            None => {
                self.in_place.lock().expect("in place lock").remove(key);
                Gathered::Absent
            }
        }
    }

    /// The live view of `o` for its decision, or `None` when the host store is behind: a write
    /// at this host name may have started or landed since the batch was gathered (another key
    /// that maps to the same name).
    pub(super) fn live(&self, key: &Key, o: &TenantObject) -> Option<LiveView> {
        if self.host_behind(key) {
            return None;
        }
        Some(LiveView {
            host: self.host_of(key, o),
            sharing: self.sharing_host_name(key),
        })
    }

    /// Whether `o` is still as its last Synced or Unchanged decision left it, on both sides.
    fn in_place(&self, key: &Key, o: &TenantObject) -> bool {
        let in_place = self.in_place.lock().expect("in place lock");
        let Some((rv, digest)) = in_place.get(key) else {
            return false;
        };
        Some(rv) == o.resource_version.as_ref()
            && self
                .host_of(key, o)
                .as_ref()
                .and_then(translate::recorded_digest)
                == Some(digest.as_str())
    }

    /// Remembers what `step` left in place for `o` (a Synced write or an Unchanged decision), or
    /// forgets it.
    pub(super) fn remember_in_place(&self, key: &Key, o: &TenantObject, step: &Step) {
        let digest = match &step.write {
            Some(Write::Create(v) | Write::Apply(v) | Write::Replace(v)) => {
                translate::recorded_digest(v).map(str::to_string)
            }
            None if step.decision.outcome == Outcome::Unchanged => self
                .host_of(key, o)
                .as_ref()
                .and_then(translate::recorded_digest)
                .map(str::to_string),
            _ => None,
        };
        let mut in_place = self.in_place.lock().expect("in place lock");
        match (digest, &o.resource_version) {
            (Some(d), Some(rv)) => {
                in_place.insert(key.clone(), (rv.clone(), d));
            }
            _ => {
                in_place.remove(key);
            }
        }
    }
}

impl Caches {
    /// The host object of kind `group/kind` at `name` in the host namespace, from the store of a
    /// synced kind or of a referenceable one.
    pub(super) fn host_object_of(&self, group: &str, kind: &str, name: &str) -> Option<Value> {
        let (ar, store) = self
            .kinds
            .iter()
            .map(|k| (&k.ar, &k.host))
            .chain(self.referenced.iter().map(|(ar, store)| (ar, store)))
            .find(|(ar, _)| ar.group == group && ar.kind == kind)?;
        let obj = store
            .get(&ObjectRef::new_with(name, ar.clone()).within(&self.placement.host_namespace))?;
        Some(to_value(&obj))
    }

    /// The tenant objects of the synced kind `index` in `namespace`, ordered by name.
    pub(super) fn tenant_objects_in(&self, index: usize, namespace: &str) -> Vec<Value> {
        let mut found: Vec<Value> = self.kinds[index]
            .tenant
            .state()
            .iter()
            .filter(|o| o.namespace().as_deref() == Some(namespace))
            .map(|o| to_value(o))
            .collect();
        found.sort_by(|a, b| {
            let name = |v: &Value| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            name(a).cmp(&name(b))
        });
        found
    }
}

impl HostObjects for Caches {
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
        reconcile::host_meta(&self.host_object_of(group, kind, name)?)
    }
}

/// What a reference can resolve to, as a decision sees it: the host object in the stores and,
/// under mapping v1, at a shared host name no host object holds yet, the host object of the tenant
/// object that takes it once written, so that a reference is checked against that whichever of
/// them is decided first.
pub(super) struct ReferenceTargets<'a> {
    pub(super) caches: &'a Caches,
    pub(super) planner: &'a Planner,
}

impl HostObjects for ReferenceTargets<'_> {
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
        let caches = self.caches;
        if let Some(found) = caches.host_object(group, kind, name) {
            return Some(found);
        }
        if caches.placement.mapping != MappingVersion::V1 || !mapping::may_be_shared_under_v1(name)
        {
            return None;
        }
        let index = caches
            .kinds
            .iter()
            .position(|k| k.ar.group == group && k.ar.kind == kind)?;
        let objects = caches.objects_at_host_name(index, name);
        let taker = self.planner.taker(&objects)?;
        Some(mapping::place(&caches.placement, taker).synced_meta())
    }
}

/// The source uid a host object's provenance names.
fn source_uid_of(host: &Value) -> Option<&str> {
    host.pointer("/metadata/labels")
        .and_then(|l| l.get(provenance::SOURCE_UID))
        .and_then(Value::as_str)
}
