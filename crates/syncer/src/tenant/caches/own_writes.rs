//! The own-write rules: the stores lag the syncer's own writes. A key whose last host write the
//! host store does not show yet, or whose host name has a write in flight, is not decided on
//! ([`OwnWrite`], [`Caches::host_behind`]), so a create never looks missing and a delete never
//! looks undone; likewise a tenant Service this syncer recreated with its host Service's cluster
//! IPs until the tenant store shows the new Service ([`Caches::tenant_behind`]). Either waits
//! [`OWN_WRITE_PATIENCE`] at most.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Caches, source_uid_of};
use crate::tenant::Key;
use crate::writer::Written;

/// How long a write of this syncer may take to show in its own watch before the watch's store is
/// believed again anyway (a watch down for longer: the write preconditions still protect).
pub(in crate::tenant) const OWN_WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// A host write of this syncer that its host watch has not shown yet. Until it has, the host store
/// holds an older state of that name than the one this syncer made, and nothing is decided on it.
#[derive(Debug)]
pub(in crate::tenant) struct OwnWrite {
    /// uid of the object created, applied or deleted.
    uid: String,
    /// The resourceVersion the create or apply returned; `None` for a delete.
    resource_version: Option<String>,
    at: Instant,
}

impl OwnWrite {
    /// What a create or an apply wrote.
    pub(in crate::tenant) fn written(w: Written) -> OwnWrite {
        OwnWrite {
            uid: w.uid,
            resource_version: Some(w.resource_version),
            at: Instant::now(),
        }
    }

    /// The delete of the object with this uid.
    pub(in crate::tenant) fn deleted(uid: String) -> OwnWrite {
        OwnWrite {
            uid,
            resource_version: None,
            at: Instant::now(),
        }
    }

    /// Whether this is the create or apply that returned `resource_version`.
    pub(in crate::tenant) fn wrote(&self, resource_version: Option<&str>) -> bool {
        self.resource_version.is_some() && self.resource_version.as_deref() == resource_version
    }

    /// The uid of the object this write deleted, if it is a delete.
    fn deleted_uid(&self) -> Option<&str> {
        self.resource_version.is_none().then_some(self.uid.as_str())
    }

    /// Whether the host store, whose object at the name is `cached`, is still to show this
    /// write: it does not yet, and the patience is not over.
    pub(in crate::tenant) fn waits_for(&self, cached: Option<&Value>) -> bool {
        self.at.elapsed() < OWN_WRITE_PATIENCE && !self.shown_by(cached)
    }

    /// Whether `cached` (the host store's object at the name) shows this write or a later state.
    fn shown_by(&self, cached: Option<&Value>) -> bool {
        let uid = cached
            .and_then(|c| c.pointer("/metadata/uid"))
            .and_then(Value::as_str);
        match (&self.resource_version, cached) {
            (None, _) => uid != Some(self.uid.as_str()),
            (Some(_), None) => false,
            (Some(written), Some(c)) => {
                let cached = c
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                // resourceVersions are opaque; integers (etcd, the local server) also order.
                let later = match (cached.parse::<u64>(), written.parse::<u64>()) {
                    (Ok(c), Ok(w)) => c >= w,
                    _ => cached == written,
                };
                uid == Some(self.uid.as_str()) && later
            }
        }
    }
}

/// A tenant Service this syncer recreated to carry its host Service's cluster IPs.
#[derive(Debug)]
pub(super) struct Recreation {
    /// uid of the tenant Service deleted (the host Service's provenance still names it).
    pub(super) from_uid: String,
    /// uid of the tenant Service created in its place, once created.
    pub(super) to_uid: Option<String>,
    pub(super) at: Instant,
}

impl Caches {
    /// Whether the host store has not yet shown this syncer's last write at the key's host name:
    /// a decision now would take an older state for the current one (a create that looks
    /// missing, a delete that looks undone), or a write at that name is still in flight. Forgets
    /// writes the store shows.
    pub(in crate::tenant) fn host_behind(&self, key: &Key) -> bool {
        let name = self.host_name_of(key);
        if self
            .writes_in_flight
            .lock()
            .expect("writes in flight lock")
            .contains(&(key.kind, name.clone()))
        {
            return true;
        }
        let mut writes = self.own_writes.lock().expect("own writes lock");
        let Some(w) = writes.get(&(key.kind, name.clone())) else {
            return false;
        };
        if w.waits_for(self.host_cached(key.kind, &name).as_ref()) {
            return true;
        }
        writes.remove(&(key.kind, name));
        false
    }

    /// Whether the tenant store has not yet shown the tenant Service this syncer recreated at
    /// `key` (`tenant_uid`: the uid the store shows, if any). Forgets recreations that are
    /// complete: the new Service shown and its host Service's provenance naming it.
    pub(super) fn tenant_behind(&self, key: &Key, tenant_uid: Option<&str>) -> bool {
        let mut recreations = self.recreations.lock().expect("recreations lock");
        let Some(r) = recreations.get(key) else {
            return false;
        };
        let waiting = r.at.elapsed() < OWN_WRITE_PATIENCE;
        let (behind, done) = match tenant_uid {
            Some(uid) if Some(uid) == r.to_uid.as_deref() => {
                let host = self.host_cached(key.kind, &self.host_name_of(key));
                (false, host.as_ref().and_then(source_uid_of) == Some(uid))
            }
            Some(uid) if uid == r.from_uid || r.to_uid.is_none() => (waiting, !waiting),
            Some(_) => (false, true),
            None => (waiting, !waiting),
        };
        if done {
            recreations.remove(key);
        }
        behind
    }

    /// A host write of kind `kind` at `name` starts: until [`Caches::write_done`], a key mapped
    /// to that name is behind.
    pub(in crate::tenant) fn write_started(&self, kind: usize, name: &str) -> (usize, String) {
        let at = (kind, name.to_string());
        self.writes_in_flight
            .lock()
            .expect("writes in flight lock")
            .insert(at.clone());
        at
    }

    /// The host write at `at` returned; `written`: what it wrote, until the host store shows it.
    pub(in crate::tenant) fn write_done(&self, at: (usize, String), written: Option<OwnWrite>) {
        if let Some(uid) = written.as_ref().and_then(OwnWrite::deleted_uid) {
            // Kept apart: the own-write rules forget a delete once the store shows it, which
            // may be before the watch event of the delete reaches the drift check.
            self.own_deletes
                .lock()
                .expect("own deletes lock")
                .insert(uid.to_string(), Instant::now());
        }
        if let Some(w) = written {
            // The watch event of this very write may have come first, while it was in flight:
            // it is no change by another hand.
            let mut fresh = self.fresh.lock().expect("fresh lock");
            if fresh.get(&at).is_some_and(|f| {
                w.wrote(
                    f.pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str),
                )
            }) {
                fresh.remove(&at);
            }
            drop(fresh);
            self.own_writes
                .lock()
                .expect("own writes lock")
                .insert(at.clone(), w);
        }
        self.writes_in_flight
            .lock()
            .expect("writes in flight lock")
            .remove(&at);
    }

    /// The tenant Service at `key` (uid `from_uid`) is being deleted, to be created again with
    /// its host Service's cluster IPs.
    pub(in crate::tenant) fn recreation_started(&self, key: &Key, from_uid: &str) {
        self.recreations.lock().expect("recreations lock").insert(
            key.clone(),
            Recreation {
                from_uid: from_uid.to_string(),
                to_uid: None,
                at: Instant::now(),
            },
        );
    }

    /// The tenant Service at `key` was not deleted: nothing to wait for.
    pub(in crate::tenant) fn recreation_abandoned(&self, key: &Key) {
        self.recreations
            .lock()
            .expect("recreations lock")
            .remove(key);
    }

    /// The tenant Service at `key` was created again, with uid `to_uid`.
    pub(in crate::tenant) fn recreated(&self, key: &Key, to_uid: Option<String>) {
        if let Some(r) = self
            .recreations
            .lock()
            .expect("recreations lock")
            .get_mut(key)
        {
            r.to_uid = to_uid;
            r.at = Instant::now();
        }
    }

    /// The uid of the tenant Service this syncer deleted at `key` to recreate it, while its
    /// recreation is not complete.
    pub(in crate::tenant) fn recreated_from(&self, key: &Key) -> Option<String> {
        self.recreations
            .lock()
            .expect("recreations lock")
            .get(key)
            .map(|r| r.from_uid.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": "p-x-web", "uid": uid, "resourceVersion": rv}})
    }

    #[test]
    fn a_host_store_that_lags_this_syncers_writes_is_behind() {
        let created = OwnWrite {
            uid: "h1".into(),
            resource_version: Some("12".into()),
            at: Instant::now(),
        };
        // The create is not in the store yet: it would look like there is nothing to update.
        assert!(!created.shown_by(None));
        assert!(
            !created.shown_by(Some(&host("h0", "15"))),
            "an older object"
        );
        assert!(!created.shown_by(Some(&host("h1", "11"))));
        assert!(created.shown_by(Some(&host("h1", "12"))));
        assert!(created.shown_by(Some(&host("h1", "40"))), "a later change");

        let deleted = OwnWrite {
            uid: "h1".into(),
            resource_version: None,
            at: Instant::now(),
        };
        // The deleted object still in the store would be deleted (and recorded) twice.
        assert!(!deleted.shown_by(Some(&host("h1", "12"))));
        assert!(deleted.shown_by(None));
        assert!(deleted.shown_by(Some(&host("h2", "13"))), "a new object");
    }
}
