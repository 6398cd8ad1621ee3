//! The one place where a decision is recorded: [`DecisionRecorder::record`].
//!
//! Recording a decision, in order, before its host write:
//! 1. the durable decision log, when one is plugged in ([`DecisionLog`]); a failed append fails
//!    the recording, and the host write does not happen;
//! 2. the Tenant's tally ([`TenantLedger`], [`crate::tenant_status`]): counts per outcome, the last decision, the Synced
//!    condition; flushed to the Tenant's status at most once a second;
//! 3. a Kubernetes Event on the tenant object in the tenant control plane (Normal for successes,
//!    Warning for refusals; reason = the decision's reason, note = message and decision id),
//!    published in the background, a few at a time per tenant control plane (when 1,024 wait,
//!    recording waits too; nothing is dropped);
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

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::events::{Event, EventType, Reporter};
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_core::decision::{Decision, HostTarget, Outcome};
use tenantplane_decision_log::{Filter, ObjectFilter, Query};
use tokio::sync::Semaphore;

use crate::metrics::SyncMetrics;
use crate::reconcile::drift::drifted_decision;
use crate::tenant_status::{STREAK_WINDOW, Seen, TenantLedger};

/// Events published concurrently to one tenant control plane. Each one in flight holds a
/// connection to it (HTTP/1.1), a file descriptor at both ends: a few are enough, since the
/// events of a batch go out while the next batch is decided.
const EVENT_PUBLISHERS: usize = 4;
/// Events of one tenant published or waiting to be; recording a decision waits while this many
/// are.
const EVENTS_QUEUED: usize = 1024;

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

/// `s` cut to at most `max` bytes, with "..." when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
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
    events: Option<TenantEvents>,
}

/// The Events of one tenant control plane: a task each while queued or published, none at rest.
#[derive(Clone)]
struct TenantEvents {
    client: Client,
    /// Events queued or being published ([`EVENTS_QUEUED`] permits).
    queued: Arc<Semaphore>,
    /// Events being published ([`EVENT_PUBLISHERS`] permits).
    publishing: Arc<Semaphore>,
}

impl std::fmt::Debug for TenantEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantEvents")
            .field("queued", &self.queued)
            .field("publishing", &self.publishing)
            .finish_non_exhaustive()
    }
}

impl TenantEvents {
    /// Publishes `event` about `reference` in the background; waits while [`EVENTS_QUEUED`]
    /// are queued.
    async fn publish(&self, reference: ObjectReference, event: Event) {
        let Ok(queued) = self.queued.clone().acquire_owned().await else {
            return;
        };
        let (client, publishing) = (self.client.clone(), self.publishing.clone());
        tokio::spawn(async move {
            let Ok(_publishing) = publishing.acquire().await else {
                return;
            };
            if let Err(e) = publish_uncached(client, &event, &reference).await {
                tracing::debug!(error = %e, "publishing a tenant event failed");
            }
            drop(queued);
        });
    }
}

impl DecisionRecorder {
    /// A recorder publishing tenant object events through `tenant_client`.
    pub fn new(
        tenant_client: Client,
        ledger: TenantLedger,
        log: Option<Arc<dyn DecisionLog>>,
        metrics: SyncMetrics,
    ) -> Self {
        DecisionRecorder {
            log,
            ledger,
            metrics,
            events: Some(TenantEvents {
                client: tenant_client,
                queued: Arc::new(Semaphore::new(EVENTS_QUEUED)),
                publishing: Arc::new(Semaphore::new(EVENT_PUBLISHERS)),
            }),
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

    /// `seen`, what the ledger remembers of the drifts in a row of the host object the Drifted
    /// decision `drifted` is about (ledger key `key`), continued from the decision log when this
    /// process remembers none: from the last Drifted decision about that host object within the
    /// streak window, `drifted` made the next of them (under `policy`), so that a restarted
    /// syncer counts a tug of war on. It reads the log: only for a drift found.
    pub async fn count_on(
        &self,
        key: &str,
        drifted: &mut Decision,
        seen: Seen,
        policy: DriftPolicy,
    ) -> Seen {
        let (Some(store), Some(target)) = (
            self.log.as_ref().and_then(|log| log.store()),
            drifted.target.as_ref(),
        ) else {
            return seen;
        };
        if seen.drift_id.is_some() {
            return seen;
        }
        let filter = Filter {
            tenant: Some(drifted.tenant.clone()),
            host: ObjectFilter {
                kind: Some(target.kind.clone()),
                namespace: Some(target.namespace.clone()),
                name: Some(target.name.clone()),
            },
            outcomes: vec![Outcome::Drifted],
            since: Some(Timestamp::now() - STREAK_WINDOW),
            ..Filter::default()
        };
        let query = Query {
            newest_first: true,
            ..Query::new(filter, 1)
        };
        let last = match store.query(query).await {
            Ok(page) => page.entries.into_iter().next(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the last drift of a host object from the decision log");
                None
            }
        };
        let Some((times, id)) = last.and_then(|e| Some((e.decision.drift?.times, e.decision.id)))
        else {
            return seen;
        };
        if let Some(drift) = drifted.drift.take() {
            *drifted = drifted_decision(drifted.clone(), drift, times, policy);
        }
        self.ledger.drifted(key, times, None, None, &id);
        Seen {
            times,
            drift_id: Some(id),
            ..seen
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
            // A full queue waits: events are not dropped, they slow the syncer down instead.
            events.publish(reference, event_of(decision)).await;
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

/// The Event that reports `decision`.
fn event_of(decision: &Decision) -> Event {
    Event {
        type_: if decision.outcome.warns() {
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
    }
}

/// Reports `decision` (a drift) with an Event on the object it is about in the cluster of
/// `client`, `target` (whose uid, when known, is `uid`): whoever looks at the object with
/// `kubectl describe` sees that it was changed behind tenantplane's back and what was done.
/// Published in a task of its own; a failure is logged.
pub fn report_on_object(
    client: Client,
    target: &HostTarget,
    uid: Option<String>,
    decision: &Decision,
) {
    let reference = ObjectReference {
        api_version: Some(target.api_version.clone()),
        kind: Some(target.kind.clone()),
        namespace: Some(target.namespace.clone()).filter(|ns| !ns.is_empty()),
        name: Some(target.name.clone()),
        uid,
        ..Default::default()
    };
    let event = event_of(decision);
    tokio::spawn(async move {
        if let Err(e) = publish_uncached(client, &event, &reference).await {
            tracing::debug!(error = %e, "publishing an event on a drifted object failed");
        }
    });
}

/// Creates an `events.k8s.io/v1` Event about an object (a tenant object, a drifted one). Unlike kube's recorder, nothing is
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

pub(crate) fn reporter() -> Reporter {
    Reporter {
        controller: COMPONENT.into(),
        instance: std::env::var("POD_NAME").ok(),
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
    use crate::testing::decision;
    use tenantplane_core::drift::Drift;

    /// The Drifted decision `id`, the `times`th drift in a row of the host ConfigMap.
    fn drifted(id: &str, times: u32) -> Decision {
        let edited = Drift {
            times,
            ..Drift::deleted()
        };
        drifted_decision(
            decision(id, Outcome::Drifted, ""),
            edited,
            times - 1,
            DriftPolicy::Revert,
        )
    }

    #[tokio::test]
    async fn a_restarted_syncer_counts_a_tug_of_war_on_from_the_decision_log() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("decisions.db").display());
        let before = DecisionRecorder::host_side(
            TenantLedger::default(),
            Some(open_log(&url).await.unwrap()),
            SyncMetrics::default(),
        );
        let started = Instant::now();
        before
            .record("k", &drifted("d-4", 4), "", None, started)
            .await
            .unwrap();

        // The next process: its ledger remembers nothing, its log everything.
        let after = DecisionRecorder::host_side(
            TenantLedger::default(),
            Some(open_log(&url).await.unwrap()),
            SyncMetrics::default(),
        );
        let mut next = drifted("d-next", 1);
        let seen = after
            .count_on("k", &mut next, Seen::default(), DriftPolicy::Revert)
            .await;
        assert_eq!((seen.times, seen.drift_id.as_deref()), (4, Some("d-4")));
        assert_eq!(next.drift.as_ref().unwrap().times, 5);
        assert!(
            next.message.contains("drifted 5 times in a row"),
            "{}",
            next.message
        );
        assert_eq!(after.ledger().drift_seen("k", None).times, 4);

        // Without a log, or with a streak in memory, nothing is read.
        let memoryless =
            DecisionRecorder::host_side(TenantLedger::default(), None, SyncMetrics::default());
        let mut alone = drifted("d-alone", 1);
        let seen = memoryless
            .count_on("k", &mut alone, Seen::default(), DriftPolicy::Revert)
            .await;
        assert_eq!((seen.times, alone.drift.unwrap().times), (0, 1));
    }
}
