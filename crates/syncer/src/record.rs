//! The one place where a decision is recorded: [`DecisionRecorder::record`].
//!
//! Recording a decision, in order, before its host write:
//! 1. the durable decision log, when one is plugged in ([`DecisionLog`]); a failed append fails
//!    the recording, and the host write does not happen;
//! 2. the Tenant's tally ([`TenantLedger`]): counts per outcome, the last decision, the Synced
//!    condition; flushed to the Tenant's status at most once a second;
//! 3. a Kubernetes Event on the tenant object in the tenant control plane (Normal for successes,
//!    Warning for refusals; reason = the decision's reason, note = message and decision id),
//!    published in the background (a full queue slows recording down; nothing is dropped);
//! 4. an Event on the Tenant in the host cluster, aggregated per (type, reason) over each flush
//!    interval and then into series, as Kubernetes does for repeated events;
//! 5. the span: the current span (the caller runs `record` inside the span the decision was
//!    stamped in, see [`crate::trace`]) becomes `tenantplane.sync.decision` with the decision's
//!    attributes and a link to the span of the previous decision about the same object; and the
//!    decision is counted and timed in [`SyncMetrics`].
//!
//! Which decisions are recorded: every decision that leads to a host write; otherwise a decision
//! is recorded when its outcome or reason, or the tenant object's content (without status and
//! server-maintained metadata), differs from the last one this process recorded for the object.
//! An unchanged resync of an unchanged object is evaluated but produces no record and no write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use opentelemetry::trace::SpanContext;
use serde_json::json;
use tenantplane_api::conditions;
use tenantplane_api::tenant::{DecisionCounts, DecisionSummary, TenantStatus};
use tenantplane_core::decision::{Decision, Outcome};
use tokio::sync::{Notify, mpsc};

use crate::metrics::SyncMetrics;

/// Events published concurrently to one tenant control plane.
const EVENT_PUBLISHERS: usize = 16;

/// The name the syncer acts and reports under.
pub const COMPONENT: &str = "tenantplane-syncer";

/// A durable, append-only decision log (the decision-log crate plugs in here).
pub trait DecisionLog: Send + Sync + std::fmt::Debug + 'static {
    /// Returns once the decision is durably recorded, with its sequence in the log.
    fn append<'a>(&'a self, decision: &'a Decision) -> BoxFuture<'a, Result<u64, String>>;
    /// Confirms that the host action of the decision at `sequence` was carried out: it is no
    /// longer open (see docs/decision-log.md, "Open host actions").
    fn carried_out(&self, _sequence: u64) {}
    /// The store behind the log, when there is one: its open actions and head (for the
    /// settling at start and the signed checkpoints).
    fn store(&self) -> Option<Arc<dyn tenantplane_decision_log::DecisionStore>> {
        None
    }
}

/// The decision-log crate's group-commit appender (SQLite or PostgreSQL) as the syncer's log.
#[derive(Debug, Clone)]
pub struct AppenderLog {
    appender: tenantplane_decision_log::Appender,
    store: Arc<dyn tenantplane_decision_log::DecisionStore>,
}

impl DecisionLog for AppenderLog {
    fn append<'a>(&'a self, decision: &'a Decision) -> BoxFuture<'a, Result<u64, String>> {
        Box::pin(async move {
            self.appender
                .append(decision.clone())
                .await
                .map(|a| a.sequence)
                .map_err(|e| e.to_string())
        })
    }

    fn carried_out(&self, sequence: u64) {
        self.appender.carried_out(sequence);
    }

    fn store(&self) -> Option<Arc<dyn tenantplane_decision_log::DecisionStore>> {
        Some(self.store.clone())
    }
}

/// Opens the decision log at `url` (`sqlite:PATH`, a file path, or `postgres://...`) and starts
/// its appender.
pub async fn open_log(url: &str) -> anyhow::Result<Arc<dyn DecisionLog>> {
    let store = tenantplane_decision_log::open(url)
        .await
        .map_err(|e| anyhow::anyhow!("opening the decision log {url}: {e}"))?;
    Ok(AppenderLog::spawn(store))
}

impl AppenderLog {
    /// Starts a group-commit appender on `store`.
    pub fn spawn(store: Arc<dyn tenantplane_decision_log::DecisionStore>) -> Arc<dyn DecisionLog> {
        let (appender, _task) =
            tenantplane_decision_log::Appender::spawn(store.clone(), Default::default());
        Arc::new(AppenderLog { appender, store })
    }
}

/// Where a recorded decision landed in the durable log (nowhere without one): what
/// [`DecisionRecorder::carried_out`] confirms once its host write is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recorded(Option<u64>);

/// Why a decision could not be recorded.
#[derive(Debug, thiserror::Error)]
#[error("the decision log refused decision {id}: {problem}")]
pub struct RecordError {
    /// Decision id.
    pub id: String,
    /// What went wrong.
    pub problem: String,
}

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
    /// (warning, reason) -> (count, outcome, last message, last id) since the last flush.
    tenant_events: BTreeMap<(bool, String), (u64, Outcome, String, String)>,
    /// Last recorded (outcome, reason, content digest) per object key.
    last_recorded: HashMap<String, (Outcome, String, String)>,
    /// The span of the last recorded decision per object key (traced decisions only).
    journeys: HashMap<String, SpanContext>,
    dirty: bool,
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
            // nothing new: only a content change that led to no write is worth a record.
            return last.is_none_or(|(_, _, c)| c != content);
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
        if s.pending.remove(key) {
            s.dirty = true;
        }
    }

    /// Links a decision's span to the previous decision's about the same object, and remembers
    /// it for the next one.
    fn continue_journey(&self, key: &str, span: &tracing::Span, decision: &Decision) {
        let previous = self.lock().journeys.get(key).cloned();
        if let Some(context) = crate::trace::mark_decision(span, decision, previous) {
            self.lock().journeys.insert(key.to_string(), context);
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> DecisionCounts {
        self.lock().counts.clone()
    }

    fn tally(&self, key: &str, d: &Decision, content: &str) {
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
        s.last_recorded.insert(
            key.to_string(),
            (d.outcome, d.reason.clone(), content.to_string()),
        );
        let entry = s
            .tenant_events
            .entry((d.outcome.is_refusal(), d.reason.clone()))
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

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Records the decisions of one Tenant.
#[derive(Debug, Clone)]
pub struct DecisionRecorder {
    log: Option<Arc<dyn DecisionLog>>,
    ledger: TenantLedger,
    metrics: SyncMetrics,
    /// Where Events about tenant objects go; `None` for decisions about host-side sources
    /// (isolation), which have no tenant object to report on.
    events: Option<mpsc::Sender<(ObjectReference, Event)>>,
}

impl DecisionRecorder {
    /// A recorder publishing tenant object events through `tenant_client` (spawns the
    /// publisher; it stops when every clone of the recorder is dropped).
    pub fn new(
        tenant_client: Client,
        ledger: TenantLedger,
        log: Option<Arc<dyn DecisionLog>>,
        metrics: SyncMetrics,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<(ObjectReference, Event)>(1024);
        tokio::spawn(async move {
            let events = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            events
                .for_each_concurrent(EVENT_PUBLISHERS, |(reference, event)| {
                    let client = tenant_client.clone();
                    async move {
                        if let Err(e) = publish_uncached(client, &event, &reference).await {
                            tracing::debug!(error = %e, "publishing a tenant event failed");
                        }
                    }
                })
                .await;
        });
        DecisionRecorder {
            log,
            ledger,
            metrics,
            events: Some(tx),
        }
    }

    /// A recorder for decisions whose source lives in the host cluster (the Tenant's
    /// IsolationProfile): no tenant object Events, everything else as [`DecisionRecorder::new`].
    pub fn host_side(
        ledger: TenantLedger,
        log: Option<Arc<dyn DecisionLog>>,
        metrics: SyncMetrics,
    ) -> Self {
        DecisionRecorder {
            log,
            ledger,
            metrics,
            events: None,
        }
    }

    /// The Tenant's ledger.
    pub fn ledger(&self) -> &TenantLedger {
        &self.ledger
    }

    /// Confirms that the host action of a decision [`DecisionRecorder::record`] recorded
    /// (`recorded`, what it returned) was carried out.
    pub fn carried_out(&self, recorded: Recorded) {
        if let (Some(log), Some(sequence)) = (&self.log, recorded.0) {
            log.carried_out(sequence);
        }
    }

    /// Records a decision about the tenant object `key` (see the module documentation), inside
    /// the span it was stamped in. `regarding` is the tenant object, when it still exists;
    /// `content` its observed digest; `started` when the object left the queue.
    pub async fn record(
        &self,
        key: &str,
        decision: &Decision,
        content: &str,
        regarding: Option<ObjectReference>,
        started: Instant,
    ) -> Result<Recorded, RecordError> {
        let mut recorded = Recorded::default();
        if let Some(log) = &self.log {
            recorded.0 = Some(log.append(decision).await.map_err(|problem| RecordError {
                id: decision.id.clone(),
                problem,
            })?);
        }
        self.ledger.tally(key, decision, content);
        self.ledger
            .continue_journey(key, &tracing::Span::current(), decision);
        self.metrics
            .decided(&decision.tenant, decision.outcome, started.elapsed());
        tracing::info!(
            decision.id = %decision.id,
            tenant = %decision.tenant,
            outcome = %decision.outcome,
            reason = %decision.reason,
            trace_id = decision.trace_id.as_deref().unwrap_or(""),
            subject = %format!("{}/{}/{}", decision.subject.kind, decision.subject.namespace, decision.subject.name),
            "decision"
        );
        if let (Some(reference), Some(events)) = (regarding, &self.events) {
            let event = Event {
                type_: if decision.outcome.is_refusal() {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: truncate(&decision.reason, 128),
                note: Some(truncate(
                    &format!("{} (decision {})", decision.message, decision.id),
                    1000,
                )),
                action: decision.outcome.to_string(),
                secondary: None,
            };
            // A full channel waits: events are not dropped, they slow the syncer down instead.
            let _ = events.send((reference, event)).await;
        }
        Ok(recorded)
    }

    /// Records a decision about the tenant object `key` when it is news (see the module
    /// documentation; `writes`: whether it leads to a host write), inside the span it was
    /// stamped in. Otherwise only that span describes it, and nothing is recorded: the first
    /// Unchanged decision since start about an object already in place is remembered as if it
    /// had been (the decision on the host object still explains it; re-recording it on every
    /// restart would be noise). `regarding` is the tenant object; `content` its observed digest.
    pub async fn record_if_news(
        &self,
        key: &str,
        decision: &Decision,
        content: &str,
        writes: bool,
        regarding: &serde_json::Value,
        started: Instant,
    ) -> Result<Recorded, RecordError> {
        if decision.outcome == Outcome::Unchanged && !self.ledger.seen(key) {
            crate::trace::describe(&tracing::Span::current(), decision);
            self.ledger.remember(key, decision, content);
        } else if !self.ledger.worth_recording(key, decision, content, writes) {
            crate::trace::describe(&tracing::Span::current(), decision);
        } else {
            return self
                .record(
                    key,
                    decision,
                    content,
                    Some(reference_of(regarding)),
                    started,
                )
                .await;
        }
        Ok(Recorded::default())
    }
}

/// Creates an `events.k8s.io/v1` Event about a tenant object. Unlike kube's recorder, nothing is
/// cached: repeated identical decisions are already not re-recorded (see the module docs), and a
/// cache of one Event per tenant object would cost memory in proportion to the tenant's objects.
async fn publish_uncached(
    client: Client,
    event: &Event,
    reference: &ObjectReference,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    let now = Timestamp::now();
    let namespace = reference
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let reporter = reporter();
    let k8s = K8sEvent {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference.clone()),
        metadata: ObjectMeta {
            namespace: Some(namespace.clone()),
            name: Some(format!(
                "{}.{:x}",
                reference.name.as_deref().unwrap_or(COMPONENT),
                now.as_nanosecond()
            )),
            ..Default::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.unwrap_or(reporter.controller)),
        type_: Some(match event.type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        ..Default::default()
    };
    kube::Api::<K8sEvent>::namespaced(client, &namespace)
        .create(&kube::api::PostParams::default(), &k8s)
        .await
        .map(|_| ())
}

fn reporter() -> Reporter {
    Reporter {
        controller: COMPONENT.into(),
        instance: std::env::var("POD_NAME").ok(),
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

/// A reference to a tenant object, for its Events.
pub fn reference_of(object: &serde_json::Value) -> ObjectReference {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    ObjectReference {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        name: s("/metadata/name"),
        namespace: s("/metadata/namespace"),
        uid: s("/metadata/uid"),
        resource_version: s("/metadata/resourceVersion"),
        field_path: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantplane_core::decision::{HostAction, Stamp, Subject};

    fn decision(outcome: Outcome, reason: &str) -> Decision {
        let stamp = Stamp::now(COMPONENT);
        Decision {
            id: stamp.id,
            time: stamp.time,
            tenant: "acme".into(),
            subject: Subject {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: "web".into(),
                name: "p".into(),
                uid: String::new(),
                resource_version: String::new(),
            },
            target: None,
            outcome,
            action: HostAction::None,
            policy: None,
            profile: None,
            reason: reason.into(),
            message: "m".into(),
            field_path: None,
            stripped_keys: vec![],
            input_digest: String::new(),
            mapping_version: "v1".into(),
            component: COMPONENT.into(),
            component_version: "0".into(),
            trace_id: None,
            span_id: None,
            closes: None,
            tokens: Vec::new(),
        }
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
