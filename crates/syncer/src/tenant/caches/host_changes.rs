//! What changed on the host behind this syncer's back, for the drift check of
//! [`crate::reconcile::drift`]: the host object as the host last sent it (managedFields and all)
//! when another hand than this syncer's changed it, and a host object of ours deleted by someone
//! else. (How many times in a row an object drifted is the ledger's:
//! [`crate::tenant_status::TenantLedger::drift_seen`].)
//!
//! The host stores keep trimmed objects ([`super::stored`]); a whole object is kept here only from
//! its event until its key is decided. Status changes (a kubelet's, a controller's) are not kept:
//! each host object's content (body without status, labels, annotations) is remembered as a hash,
//! and an object whose content did not change needs no drift check. This syncer's own writes are
//! recognised by the resourceVersion they returned.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use kube::ResourceExt as _;
use kube::api::DynamicObject;
use serde_json::Value;
use tenantplane_api::provenance;
use tenantplane_core::translate::DESIRED_DIGEST;

use super::{Caches, to_value};
use crate::tenant::Key;
use crate::writer::FIELD_MANAGER;

/// How long this syncer remembers a delete of its own, for telling it from someone else's when
/// its watch event comes.
const OWN_DELETE_MEMORY: Duration = Duration::from_secs(60);

/// A host object of ours that someone else deleted.
#[derive(Debug, Clone)]
pub(in crate::tenant) struct Vanished {
    /// Its uid.
    pub(in crate::tenant) uid: String,
    /// The desired digest it recorded: what its tenant object produced then.
    pub(in crate::tenant) digest: Option<String>,
    /// The uid of its owner (a token Secret's host pod).
    pub(in crate::tenant) owner: Option<String>,
}

impl Vanished {
    /// What is remembered of `obj`, deleted.
    pub(in crate::tenant) fn of(obj: &DynamicObject) -> Vanished {
        Vanished {
            uid: obj.uid().unwrap_or_default(),
            digest: obj.annotations().get(DESIRED_DIGEST).cloned(),
            owner: obj.owner_references().first().map(|o| o.uid.clone()),
        }
    }
}

/// What the host shows of one host object since the key's last decision.
#[derive(Debug)]
pub(in crate::tenant) enum Changed {
    /// Nothing but this syncer's own writes and status.
    Nothing,
    /// Written by someone else: the object as the host sent it.
    Written(Value),
    /// Deleted by someone else.
    Deleted(Vanished),
}

impl Caches {
    /// Notes a host object of synced kind `index` as its watch event brings it, before the
    /// store trims it: kept whole when it is ours (its tenant label, or written by this syncer)
    /// and its content changed by another hand than this syncer's.
    pub(in crate::tenant) fn note_host_object(&self, index: usize, obj: &DynamicObject) {
        let ours = obj.labels().get(provenance::TENANT) == Some(&self.placement.tenant)
            || obj
                .managed_fields()
                .iter()
                .any(|e| e.manager.as_deref() == Some(FIELD_MANAGER));
        if !ours {
            return;
        }
        let at = (index, obj.name_any());
        let content = content_hash(obj);
        let mut contents = self.contents.lock().expect("contents lock");
        if contents.insert(at.clone(), content) == Some(content) {
            return;
        }
        drop(contents);
        let own_echo = self
            .own_writes
            .lock()
            .expect("own writes lock")
            .get(&at)
            .is_some_and(|w| w.wrote(obj.resource_version().as_deref()));
        if !own_echo {
            self.fresh
                .lock()
                .expect("fresh lock")
                .insert(at, to_value(obj));
        }
    }

    /// A host object of synced kind `index` was deleted (its watch event): by someone else unless
    /// this syncer deleted it (or is deleting at its name).
    pub(in crate::tenant) fn note_host_deleted(&self, index: usize, obj: &DynamicObject) {
        let at = (index, obj.name_any());
        self.contents.lock().expect("contents lock").remove(&at);
        self.fresh.lock().expect("fresh lock").remove(&at);
        if obj.labels().get(provenance::TENANT) != Some(&self.placement.tenant) {
            return;
        }
        let ours = self
            .writes_in_flight
            .lock()
            .expect("writes in flight lock")
            .contains(&at)
            || self.own_delete(obj.uid().as_deref());
        if !ours {
            self.vanished
                .lock()
                .expect("vanished lock")
                .insert(at, Vanished::of(obj));
        }
    }

    /// Whether this syncer deleted the object with `uid` (lately: what it remembers of its
    /// deletes lasts a minute).
    fn own_delete(&self, uid: Option<&str>) -> bool {
        let mut deletes = self.own_deletes.lock().expect("own deletes lock");
        deletes.retain(|_, at| at.elapsed() < OWN_DELETE_MEMORY);
        uid.is_some_and(|uid| deletes.remove(uid).is_some())
    }

    /// Whether the host shows a change of `key`'s host object by someone else, not yet decided
    /// on.
    pub(in crate::tenant) fn host_changed(&self, key: &Key) -> bool {
        let at = (key.kind, self.host_name_of(key));
        self.fresh.lock().expect("fresh lock").contains_key(&at)
            || self
                .vanished
                .lock()
                .expect("vanished lock")
                .contains_key(&at)
    }

    /// Takes what the host shows of `key`'s host object since its last decision. An object kept
    /// whole that the store has since moved past (this syncer wrote after it) is dropped.
    pub(in crate::tenant) fn take_host_change(&self, key: &Key) -> Changed {
        let at = (key.kind, self.host_name_of(key));
        if let Some(vanished) = self.vanished.lock().expect("vanished lock").remove(&at) {
            return Changed::Deleted(vanished);
        }
        let Some(fresh) = self.fresh.lock().expect("fresh lock").remove(&at) else {
            return Changed::Nothing;
        };
        let current = self.host_cached(key.kind, &at.1);
        let version = |v: &Value| v.pointer("/metadata/resourceVersion").cloned();
        match current {
            Some(c) if version(&c) == version(&fresh) => Changed::Written(fresh),
            _ => Changed::Nothing,
        }
    }

    /// Keeps a host change taken for a decision whose correction is held back (or not made),
    /// for the next: unless the host has shown something newer since.
    pub(in crate::tenant) fn keep_host_change(&self, key: &Key, change: Changed) {
        let at = (key.kind, self.host_name_of(key));
        match change {
            Changed::Nothing => {}
            Changed::Written(fresh) => {
                self.fresh
                    .lock()
                    .expect("fresh lock")
                    .entry(at)
                    .or_insert(fresh);
            }
            Changed::Deleted(vanished) => {
                if self.host_cached(key.kind, &at.1).is_none() {
                    self.vanished
                        .lock()
                        .expect("vanished lock")
                        .entry(at)
                        .or_insert(vanished);
                }
            }
        }
    }
}

/// A hash of what in a host object is not status: its body without status, its labels and
/// annotations.
fn content_hash(obj: &DynamicObject) -> u64 {
    let mut hasher = DefaultHasher::new();
    if let Some(body) = obj.data.as_object() {
        for (k, v) in body.iter().filter(|(k, _)| k.as_str() != "status") {
            k.hash(&mut hasher);
            v.to_string().hash(&mut hasher);
        }
    }
    obj.labels().hash(&mut hasher);
    obj.annotations().hash(&mut hasher);
    hasher.finish()
}
