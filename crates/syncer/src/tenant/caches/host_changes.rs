//! What changed on the host behind this syncer's back, for the drift check of
//! [`crate::reconcile::drift`]: the host object as the host last sent it (managedFields and all)
//! when another hand than this syncer's changed it, a host object of ours deleted by someone
//! else, and how many times in a row an object drifted (a tug of war).
//!
//! The host stores keep trimmed objects ([`super::stored`]); a whole object is kept here only from
//! its event until its key is decided. Status changes (a kubelet's, a controller's) are not kept:
//! each host object's content (body without status, labels, annotations) is remembered as a hash,
//! and an object whose content did not change needs no drift check. This syncer's own writes are
//! recognised by the resourceVersion they returned.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use kube::ResourceExt as _;
use kube::api::DynamicObject;
use serde_json::Value;
use tenantplane_api::provenance;

use super::{Caches, to_value};
use crate::tenant::Key;
use crate::writer::FIELD_MANAGER;

/// Drifts of one object closer together than this are one tug of war.
const STREAK_WINDOW: Duration = Duration::from_secs(600);

/// The drifts in a row of one host object.
#[derive(Debug)]
pub(in crate::tenant) struct Streak {
    /// How many.
    times: u32,
    /// When the last was seen.
    last: Instant,
    /// The resourceVersion of the host object that showed the last (none for a delete).
    resource_version: Option<String>,
    /// Its correction is held back until then.
    due: Option<Instant>,
    /// The Drifted decision that recorded it (or the last one recorded in a tug of war).
    drift_id: String,
}

/// What was seen before of the drift a host object shows.
#[derive(Debug, Default)]
pub(in crate::tenant) struct Seen {
    /// Drifts in a row before this one.
    pub(in crate::tenant) times: u32,
    /// This very drift was seen (and recorded) before: the host object has not changed since.
    pub(in crate::tenant) same: bool,
    /// When its correction is due, when it was held back.
    pub(in crate::tenant) due: Option<Instant>,
    /// The Drifted decision that recorded it.
    pub(in crate::tenant) drift_id: Option<String>,
}

/// What the host shows of one host object since the key's last decision.
#[derive(Debug)]
pub(in crate::tenant) enum Changed {
    /// Nothing but this syncer's own writes and status.
    Nothing,
    /// Written by someone else: the object as the host sent it.
    Written(Value),
    /// Deleted by someone else.
    Deleted,
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

    /// A host object of synced kind `index` left the store: deleted, by someone else unless this
    /// syncer deleted it (or is deleting at its name).
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
            || self
                .own_writes
                .lock()
                .expect("own writes lock")
                .get(&at)
                .is_some_and(|w| w.deletes(obj.uid().as_deref()));
        if !ours {
            self.vanished.lock().expect("vanished lock").insert(at);
        }
    }

    /// Whether the host shows a change of `key`'s host object by someone else, not yet decided
    /// on.
    pub(in crate::tenant) fn host_changed(&self, key: &Key) -> bool {
        let at = (key.kind, self.host_name_of(key));
        self.fresh.lock().expect("fresh lock").contains_key(&at)
            || self.vanished.lock().expect("vanished lock").contains(&at)
    }

    /// Takes what the host shows of `key`'s host object since its last decision. An object kept
    /// whole that the store has since moved past (this syncer wrote after it) is dropped.
    pub(in crate::tenant) fn take_host_change(&self, key: &Key) -> Changed {
        let at = (key.kind, self.host_name_of(key));
        if self.vanished.lock().expect("vanished lock").remove(&at) {
            return Changed::Deleted;
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

    /// Keeps a host change taken for a decision whose correction is held back, for the next.
    pub(in crate::tenant) fn keep_host_change(&self, key: &Key, fresh: Value) {
        let at = (key.kind, self.host_name_of(key));
        self.fresh
            .lock()
            .expect("fresh lock")
            .entry(at)
            .or_insert(fresh);
    }

    /// What this syncer saw before of the drift of `key`'s host object that the host object at
    /// `resource_version` shows (`None`: a delete, never seen before).
    pub(in crate::tenant) fn streak(&self, key: &Key, resource_version: Option<&str>) -> Seen {
        let streaks = self.streaks.lock().expect("streaks lock");
        match streaks.get(key) {
            Some(s)
                if resource_version.is_some()
                    && s.resource_version.as_deref() == resource_version =>
            {
                Seen {
                    times: s.times - 1,
                    same: true,
                    due: s.due,
                    drift_id: Some(s.drift_id.clone()),
                }
            }
            Some(s) if s.last.elapsed() < STREAK_WINDOW => Seen {
                times: s.times,
                same: false,
                due: None,
                drift_id: None,
            },
            _ => Seen::default(),
        }
    }

    /// Remembers a drift of `key`'s host object: the `times`th in a row, shown at
    /// `resource_version`, recorded by the decision `drift_id`, its correction due at `due`.
    pub(in crate::tenant) fn drifted(
        &self,
        key: &Key,
        times: u32,
        resource_version: Option<&str>,
        due: Option<Instant>,
        drift_id: &str,
    ) {
        self.streaks.lock().expect("streaks lock").insert(
            key.clone(),
            Streak {
                times,
                last: Instant::now(),
                resource_version: resource_version.map(str::to_string),
                due,
                drift_id: drift_id.to_string(),
            },
        );
    }

    /// The Drifted decision that last recorded a drift of `key`'s host object.
    pub(in crate::tenant) fn streak_decision(&self, key: &Key) -> Option<String> {
        let streaks = self.streaks.lock().expect("streaks lock");
        streaks.get(key).map(|s| s.drift_id.clone())
    }

    /// Forgets the drift history of a key whose tenant object is gone.
    pub(in crate::tenant) fn forget_drift(&self, key: &Key) {
        self.streaks.lock().expect("streaks lock").remove(key);
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
