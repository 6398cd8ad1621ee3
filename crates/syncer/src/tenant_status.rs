//! A Tenant's status and conditions: the ledger ([`TenantLedger`]) of one Tenant's decisions
//! (counts per outcome, the last decision, the objects Deferred or Failed), its conditions
//! (ControlPlaneReachable and IsolationApplied as set by the controller, Synced and Ready
//! derived), and the Tenant events aggregated per (type, reason); written to the Tenant's status
//! and published by [`flush_loop`] at most once per status interval.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder};
use opentelemetry::trace::SpanContext;
use serde_json::json;
use tenantplane_api::conditions;
use tenantplane_api::tenant::{DecisionCounts, DecisionSummary, TenantStatus};
use tenantplane_core::decision::{Decision, HostAction, Outcome};
use tokio::sync::Notify;

use crate::record::{reporter, truncate};

/// What the syncer knows about one Tenant's decisions and conditions, written to its status.
#[derive(Debug, Default)]
struct LedgerState {
    counts: DecisionCounts,
    last: Option<DecisionSummary>,
    conditions: Vec<Condition>,
    observed_generation: Option<i64>,
    host_namespace: Option<String>,
    /// Objects whose last decision is Deferred or Failed.
    pending: HashSet<String>,
    /// Objects whose last decision is Drifted: their host object left as edited (`Record`).
    drifted: HashSet<String>,
    /// (warning, reason) -> (count, outcome, last message, last id) since the last flush.
    tenant_events: BTreeMap<(bool, String), (u64, Outcome, String, String)>,
    /// Last recorded (outcome, reason, content digest) per object key.
    last_recorded: HashMap<String, (Outcome, String, String)>,
    /// The span of the last recorded decision per object key (traced decisions only).
    journeys: HashMap<String, SpanContext>,
    /// The drifts in a row of each object key's host object.
    streaks: HashMap<String, Streak>,
    dirty: bool,
}

/// Drifts of one host object closer together than this are one tug of war.
pub const STREAK_WINDOW: Duration = Duration::from_secs(600);

/// The drifts in a row of one host object.
#[derive(Debug)]
struct Streak {
    /// How many.
    times: u32,
    /// When the last was seen.
    last: Instant,
    /// The resourceVersion of the host object that showed the last (for a delete, what names
    /// the deleted object).
    resource_version: Option<String>,
    /// Its correction is held back until then.
    due: Option<Instant>,
    /// The Drifted decision that recorded it (or the last one recorded in a tug of war).
    drift_id: String,
}

/// What was seen before of the drift a host object shows.
#[derive(Debug, Default)]
pub struct Seen {
    /// Drifts in a row before this one.
    pub times: u32,
    /// This very drift was seen (and recorded) before: the host object has not changed since.
    pub same: bool,
    /// When its correction is due, when it was held back.
    pub due: Option<Instant>,
    /// The Drifted decision that recorded this drift, or the last one in the streak.
    pub drift_id: Option<String>,
}

/// The shared tally of one Tenant; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TenantLedger {
    state: Arc<Mutex<LedgerState>>,
    changed: Arc<Notify>,
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl TenantLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().expect("ledger lock")
    }

    /// A ledger that continues from the counts and last decision the Tenant's status already
    /// shows (written by an earlier life of the syncer), so that `status.counts` are totals over
    /// the Tenant's life rather than since this process started.
    pub fn continuing(status: Option<&TenantStatus>) -> Self {
        let ledger = TenantLedger::default();
        if let Some(status) = status {
            let mut s = ledger.lock();
            s.counts = status.counts.clone();
            s.last = status.last_decision.clone();
        }
        ledger
    }

    /// Sets a condition of the Tenant (written at the next flush when it changed).
    pub fn set_condition(&self, type_: &str, status: bool, reason: &str, message: &str) {
        let mut s = self.lock();
        let before = s.conditions.clone();
        let generation = s.observed_generation;
        conditions::set_condition(
            &mut s.conditions,
            type_,
            status,
            reason,
            message,
            generation,
            now(),
        );
        if s.conditions != before {
            s.dirty = true;
            self.changed.notify_one();
        }
    }

    /// The host object of `key`, left as edited by a Drifted decision (`Record`), holds what
    /// tenantplane sets again (a compiled object: no decision records that it is in place).
    pub fn undrifted(&self, key: &str) {
        let mut s = self.lock();
        if s.drifted.remove(key) {
            s.dirty = true;
            self.changed.notify_one();
        }
    }

    /// A condition of the Tenant as it will be written.
    pub fn condition(&self, type_: &str) -> Option<Condition> {
        self.lock()
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .cloned()
    }

    /// Whether a condition is currently True.
    pub fn condition_is_true(&self, type_: &str) -> bool {
        self.lock()
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }

    /// The Tenant's generation and host namespace the status describes.
    pub fn observe(&self, generation: Option<i64>, host_namespace: &str) {
        let mut s = self.lock();
        if s.observed_generation != generation
            || s.host_namespace.as_deref() != Some(host_namespace)
        {
            s.observed_generation = generation;
            s.host_namespace = Some(host_namespace.to_string());
            s.dirty = true;
        }
    }

    /// Whether a decision about `key` carries information worth a record.
    pub fn worth_recording(&self, key: &str, d: &Decision, content: &str, writes: bool) -> bool {
        let s = self.lock();
        if writes {
            return true;
        }
        let last = s.last_recorded.get(key);
        if d.outcome == Outcome::Unchanged {
            // Unchanged after our own write (or an earlier Unchanged) of the same content says
            // nothing new: only a content change that led to no write is worth a record, or a
            // drifted host object that holds what tenantplane sets again.
            return last.is_none_or(|(o, _, c)| c != content || *o == Outcome::Drifted);
        }
        last != Some(&(d.outcome, d.reason.clone(), content.to_string()))
    }

    /// Remembers what was last recorded for `key` without recording (the first sight of an
    /// object already in place after a restart: its host object names the decision that put it
    /// there).
    pub fn remember(&self, key: &str, d: &Decision, content: &str) {
        self.lock().last_recorded.insert(
            key.to_string(),
            (d.outcome, d.reason.clone(), content.to_string()),
        );
    }

    /// The outcome of the last decision this process recorded about `key`.
    pub fn last_outcome(&self, key: &str) -> Option<Outcome> {
        self.lock()
            .last_recorded
            .get(key)
            .map(|(outcome, _, _)| *outcome)
    }

    /// Whether this process has decided about `key` before.
    pub fn seen(&self, key: &str) -> bool {
        self.lock().last_recorded.contains_key(key)
    }

    /// The keys under `prefix` whose last decision is Deferred or Failed.
    pub fn pending_keys(&self, prefix: &str) -> Vec<String> {
        self.lock()
            .pending
            .iter()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Forgets an object that is gone.
    pub fn forget(&self, key: &str) {
        let mut s = self.lock();
        s.last_recorded.remove(key);
        s.journeys.remove(key);
        s.streaks.remove(key);
        if s.pending.remove(key) | s.drifted.remove(key) {
            s.dirty = true;
        }
    }

    /// What was seen before of the drift of the host object of `key` that the host object at
    /// `resource_version` shows (for a delete, what names the deleted object; `None`: nothing
    /// identifies it, never seen before).
    pub fn drift_seen(&self, key: &str, resource_version: Option<&str>) -> Seen {
        let s = self.lock();
        match s.streaks.get(key) {
            Some(st)
                if resource_version.is_some()
                    && st.resource_version.as_deref() == resource_version =>
            {
                Seen {
                    times: st.times - 1,
                    same: true,
                    due: st.due,
                    drift_id: Some(st.drift_id.clone()),
                }
            }
            Some(st) if st.last.elapsed() < STREAK_WINDOW => Seen {
                times: st.times,
                drift_id: Some(st.drift_id.clone()),
                ..Seen::default()
            },
            _ => Seen::default(),
        }
    }

    /// Remembers a drift of the host object of `key`: the `times`th in a row, shown at
    /// `resource_version`, recorded by the Drifted decision `drift_id`, its correction due at
    /// `due` (not held back when `None`).
    pub fn drifted(
        &self,
        key: &str,
        times: u32,
        resource_version: Option<&str>,
        due: Option<Instant>,
        drift_id: &str,
    ) {
        self.lock().streaks.insert(
            key.to_string(),
            Streak {
                times,
                last: Instant::now(),
                resource_version: resource_version.map(str::to_string),
                due,
                drift_id: drift_id.to_string(),
            },
        );
    }

    /// Links a decision's span to the previous decision's about the same object, and remembers
    /// it for the next one.
    pub(crate) fn continue_journey(&self, key: &str, span: &tracing::Span, decision: &Decision) {
        let previous = self.lock().journeys.get(key).cloned();
        if let Some(context) = crate::trace::mark_decision(span, decision, previous) {
            self.lock().journeys.insert(key.to_string(), context);
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> DecisionCounts {
        self.lock().counts.clone()
    }

    pub(crate) fn tally(&self, key: &str, d: &Decision, content: &str) {
        let mut s = self.lock();
        let c = &mut s.counts;
        *match d.outcome {
            Outcome::Synced => &mut c.synced,
            Outcome::Unchanged => &mut c.unchanged,
            Outcome::Skipped => &mut c.skipped,
            Outcome::Rejected => &mut c.rejected,
            Outcome::Conflict => &mut c.conflict,
            Outcome::Deleted => &mut c.deleted,
            Outcome::Failed => &mut c.failed,
            Outcome::Deferred => &mut c.deferred,
            Outcome::Drifted => &mut c.drifted,
        } += 1;
        s.last = Some(DecisionSummary {
            id: d.id.clone(),
            outcome: d.outcome.to_string(),
            subject: format!(
                "{}/{}/{}",
                d.subject.kind, d.subject.namespace, d.subject.name
            ),
            time: Time(d.time),
        });
        if matches!(d.outcome, Outcome::Deferred | Outcome::Failed) {
            s.pending.insert(key.to_string());
        } else {
            s.pending.remove(key);
        }
        if d.outcome == Outcome::Drifted && d.action == HostAction::None {
            s.drifted.insert(key.to_string());
        } else {
            s.drifted.remove(key);
        }
        s.last_recorded.insert(
            key.to_string(),
            (d.outcome, d.reason.clone(), content.to_string()),
        );
        let entry = s
            .tenant_events
            .entry((d.outcome.warns(), d.reason.clone()))
            .or_insert((0, d.outcome, String::new(), String::new()));
        entry.0 += 1;
        entry.1 = d.outcome;
        entry.2 = d.message.clone();
        entry.3 = d.id.clone();
        s.dirty = true;
        drop(s);
        self.changed.notify_one();
    }

    /// Takes the status patch and the aggregated Tenant events when something changed.
    fn take_flush(&self) -> Option<(serde_json::Value, Vec<Event>)> {
        let mut s = self.lock();
        if !s.dirty {
            return None;
        }
        s.dirty = false;
        let synced = s.pending.is_empty();
        let pending = s.pending.len();
        let generation = s.observed_generation;
        conditions::set_condition(
            &mut s.conditions,
            conditions::SYNCED,
            synced,
            if synced {
                "AllDecided"
            } else {
                "DecisionsPending"
            },
            &if synced {
                "every tenant object has a current decision".to_string()
            } else {
                format!("{pending} tenant objects are Deferred or Failed and being retried")
            },
            generation,
            now(),
        );
        let drifted = s.drifted.len();
        conditions::set_condition(
            &mut s.conditions,
            conditions::DRIFTED,
            drifted > 0,
            if drifted > 0 {
                "HostObjectsDrifted"
            } else {
                "NoDrift"
            },
            &if drifted > 0 {
                format!(
                    "{drifted} host objects were edited or deleted on the host and are left as \
                     they are (spec.drift: Record); their Drifted decisions say by whom"
                )
            } else {
                "every host object holds what tenantplane sets (drift, if any, was corrected)"
                    .to_string()
            },
            generation,
            now(),
        );
        let ready = ["ControlPlaneReachable", "IsolationApplied", "Synced"]
            .iter()
            .all(|t| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == *t && c.status == "True")
            });
        conditions::set_condition(
            &mut s.conditions,
            conditions::READY,
            ready,
            if ready { "Serving" } else { "NotReady" },
            if ready {
                "control plane reachable, isolation applied, every object decided"
            } else {
                "see the ControlPlaneReachable, IsolationApplied and Synced conditions"
            },
            generation,
            now(),
        );
        let status = json!({"status": {
            "observedGeneration": s.observed_generation,
            "hostNamespace": s.host_namespace,
            "conditions": s.conditions,
            "counts": s.counts,
            "lastDecision": s.last,
        }});
        let events = std::mem::take(&mut s.tenant_events)
            .into_iter()
            .map(|((warning, reason), (count, outcome, message, id))| Event {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason,
                note: Some(truncate(
                    &format!("{count} decision(s) {outcome}; last: {message} (decision {id})"),
                    1000,
                )),
                action: outcome.to_string(),
                secondary: None,
            })
            .collect();
        Some((status, events))
    }
}

/// Writes the ledger to the Tenant's status and publishes the aggregated Tenant events, at most
/// once per `interval`; runs until its task is aborted.
pub async fn flush_loop(
    host: Client,
    tenant_name: String,
    tenant_uid: Option<String>,
    ledger: TenantLedger,
    interval: Duration,
) {
    let api: kube::Api<tenantplane_api::Tenant> = kube::Api::all(host.clone());
    let recorder = Recorder::new(host, reporter());
    let reference = ObjectReference {
        api_version: Some(format!(
            "{}/{}",
            tenantplane_api::GROUP,
            tenantplane_api::VERSION
        )),
        kind: Some("Tenant".into()),
        name: Some(tenant_name.clone()),
        uid: tenant_uid,
        ..Default::default()
    };
    loop {
        ledger.changed.notified().await;
        if let Some((status, events)) = ledger.take_flush() {
            if let Err(e) = api
                .patch_status(
                    &tenant_name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&status),
                )
                .await
            {
                tracing::warn!(tenant = %tenant_name, error = %e, "writing Tenant status failed");
                ledger.lock().dirty = true;
            }
            for event in events {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    tracing::debug!(error = %e, "publishing a Tenant event failed");
                }
            }
        }
        tokio::time::sleep(interval).await;
        // A change during the sleep left a permit in `changed`; loop around to take it.
        if ledger.lock().dirty {
            ledger.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::COMPONENT;
    use tenantplane_core::decision::Stamp;

    fn decision(outcome: Outcome, reason: &str) -> Decision {
        crate::testing::decision(&Stamp::now(COMPONENT).id, outcome, reason)
    }

    #[test]
    fn repeated_identical_decisions_are_not_worth_a_record_but_writes_always_are() {
        let ledger = TenantLedger::default();
        let d = decision(Outcome::Rejected, "HostNetworkForbidden");
        assert!(ledger.worth_recording("k", &d, "c1", false));
        ledger.tally("k", &d, "c1");
        assert!(!ledger.worth_recording("k", &d, "c1", false));
        assert!(ledger.worth_recording("k", &d, "c2", false));
        assert!(ledger.worth_recording("k", &d, "c1", true));
        let synced = decision(Outcome::Synced, "WorkloadKind");
        ledger.tally("k", &synced, "c3");
        let unchanged = decision(Outcome::Unchanged, "HostObjectUpToDate");
        assert!(!ledger.worth_recording("k", &unchanged, "c3", false));
        assert!(ledger.worth_recording("k", &unchanged, "c4", false));
    }

    #[test]
    fn counts_conditions_and_aggregated_tenant_events() {
        let ledger = TenantLedger::default();
        ledger.set_condition("ControlPlaneReachable", true, "Reached", "ok");
        ledger.set_condition("IsolationApplied", true, "Applied", "ok");
        ledger.tally("a", &decision(Outcome::Synced, "WorkloadKind"), "x");
        ledger.tally("b", &decision(Outcome::Synced, "WorkloadKind"), "x");
        ledger.tally("c", &decision(Outcome::Deferred, "PlannerUnavailable"), "x");
        let (status, events) = ledger.take_flush().unwrap();
        assert_eq!(status["status"]["counts"]["synced"], 2);
        assert_eq!(status["status"]["counts"]["deferred"], 1);
        assert_eq!(events.len(), 2);
        let ready = |s: &serde_json::Value, t: &str| {
            s["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(ready(&status, "Synced"), "False");
        assert_eq!(ready(&status, "Ready"), "False");
        ledger.tally("c", &decision(Outcome::Synced, "WorkloadKind"), "x");
        let (status, events) = ledger.take_flush().unwrap();
        assert_eq!(ready(&status, "Synced"), "True");
        assert_eq!(ready(&status, "Ready"), "True");
        assert_eq!(events.len(), 1);
        assert!(ledger.take_flush().is_none());
    }

    #[test]
    fn a_restarted_syncer_continues_the_counts_of_the_tenant_status() {
        let before = TenantLedger::default();
        before.tally("a", &decision(Outcome::Synced, "WorkloadKind"), "x");
        before.tally(
            "b",
            &decision(Outcome::Rejected, "HostNetworkForbidden"),
            "x",
        );
        let (written, _) = before.take_flush().unwrap();
        let status: TenantStatus = serde_json::from_value(written["status"].clone()).unwrap();

        let after = TenantLedger::continuing(Some(&status));
        after.tally("c", &decision(Outcome::Synced, "WorkloadKind"), "x");
        let counts = after.counts();
        assert_eq!((counts.synced, counts.rejected), (2, 1));
        assert_eq!(
            TenantLedger::continuing(None).counts(),
            DecisionCounts::default()
        );
    }
}
