//! The runtime of one Tenant, and the path of each of its objects through it, one module a step.
//!
//! ```text
//!  tenant API ──watch kind k──▶ store ─┐
//!  host ns    ──watch kind k──▶ store ─┼─▶ queue (k, ns, name) ──▶ workers: process(batch)
//!             (provenance → key)       │   dedupe, backoff         (global permits: fair across tenants)
//!  resync timer ──every key────────────┘
//!
//!  process(batch)
//!    gather  caches     each key's tenant object, once the caches show this syncer's own writes;
//!                       an object gone is decided at once, one in place only flows up
//!    plan    plan       one planner call for the rest, each object in an evaluation span of its own
//!    then each object, in its span:
//!    decide  reconcile  the pure decision on the live view (host write, status to bring up)
//!    record  record     the decision, when it is news, before its write
//!    act     act        the host write, with its precondition; a failed write is a decision too
//!    settle  (here)     what is in place remembered; status and cluster IPs up (upsync); retries
//! ```
//!
//! `runtime` starts and stops it; `watches` fills the caches and queues keys; `caches` holds what
//! decisions read, with the own-write rules (nothing is decided on a cache that does not show this
//! syncer's last write yet); `upsync` brings up what flows from the host (status, a Service's
//! cluster IPs, the Endpoints of a selector Service). Besides the synced kinds, the host
//! namespace's objects of every kind a tenant object may name
//! ([`REFERENCEABLE_KINDS`](tenantplane_core::reference::REFERENCEABLE_KINDS)) are watched, so that
//! the reference check sees what each reference resolves to. Under mapping v1 an index of tenant
//! objects by host name finds the objects that share one, so which of them takes it does not depend
//! on event order.

mod act;
mod caches;
mod drift;
mod plan;
mod runtime;
mod tokens;
mod upsync;
mod watches;
mod world;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use serde_json::Value;
use tenantplane_api::Tenant;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_core::pod_world::{PodWorld, TenantWorld};
use tenantplane_core::{Plan, Planner, TenantObject};
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use crate::metrics::SyncMetrics;
use crate::planner::PlanService;
use crate::queue::WorkQueue;
use crate::ratelimit::RateLimiter;
use crate::reconcile::{self, Step};
use crate::record::{COMPONENT, DecisionLog, DecisionRecorder, RecordError, Recorded};
use crate::trace;
use crate::writer::Writer;
pub use runtime::{TenantRuntime, start};

use caches::{Caches, Changed, Gathered, LiveView, OWN_WRITE_PATIENCE};
use plan::Planned;
use upsync::{Up, UpSync};

/// Tuning shared by every tenant.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Objects planned per planner call and reconciled together.
    pub batch: usize,
    /// Workers per tenant (each holds at most one global permit at a time).
    pub workers_per_tenant: usize,
    /// Every key is re-evaluated this often (no write when nothing changed).
    pub resync: Duration,
    /// First retry delay of a Deferred or Failed object; doubles up to `backoff_max`.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Requests per second to each tenant control plane.
    pub tenant_qps: f64,
    /// Burst of requests to each tenant control plane.
    pub tenant_burst: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            // 16, not 64: the objects in flight (batch × concurrency) are most of the syncer's
            // memory at 10k objects, and smaller batches did not lower the synced rate
            // (docs/syncer.md "Benchmark").
            batch: 16,
            workers_per_tenant: 4,
            resync: Duration::from_secs(300),
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(60),
            tenant_qps: 200.0,
            tenant_burst: 400,
        }
    }
}

/// What every tenant runtime shares.
pub struct Shared {
    /// Host cluster client.
    pub host: Client,
    /// The host watches every tenant runtime shares: one per kind.
    pub host_watches: crate::host_watches::HostWatches,
    /// Every write to the host goes through it (under the host rate limit, all tenants
    /// together).
    pub host_writer: Writer,
    /// Where plans come from.
    pub planner: Arc<dyn PlanService>,
    /// The durable decision log, when configured.
    pub log: Option<Arc<dyn DecisionLog>>,
    /// The log's head sequence when this process started: open host actions up to it were
    /// left by an earlier life of the syncer ([`crate::settle`]).
    pub log_start: u64,
    /// Batches in flight across all tenants (the global concurrency bound).
    pub permits: Semaphore,
    /// Tuning.
    pub tuning: Tuning,
    /// Decision, call and queue metrics.
    pub metrics: SyncMetrics,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("planner", &self.planner)
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}

/// What the Tenant's pods get of its control plane: the world they share (API endpoint, DNS)
/// and the CA bundle that verifies its API server (each token Secret's `ca.crt`).
#[derive(Debug, Clone)]
pub struct PodContext {
    /// The world every synced pod of the Tenant shares.
    pub world: TenantWorld,
    /// PEM certificates (empty when the kubeconfig carries none).
    pub ca_bundle: String,
}

/// A work item: one tenant object by kind index, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: usize,
    namespace: String,
    name: String,
}

/// Per-tenant state the workers share.
struct Worker {
    shared: Arc<Shared>,
    tenant: Tenant,
    policy: Option<String>,
    /// The IsolationProfile sent to the planner, when the Tenant names one.
    profile: Option<String>,
    /// The planner core under the same policy and profile, for the checks made again on the
    /// live view.
    planner: Planner,
    caches: Caches,
    queue: Arc<WorkQueue<Key>>,
    /// Retries so far of the keys whose last decision failed or was deferred.
    attempts: Mutex<HashMap<Key, u32>>,
    recorder: DecisionRecorder,
    upsync: UpSync,
    /// The tenant control plane, and the rate limit of requests to it.
    tenant_client: Client,
    tenant_limiter: Arc<RateLimiter>,
    /// What the Tenant's pods get of its control plane.
    pods: PodContext,
    tokens: tokens::Tokens,
}

impl Worker {
    async fn work(self: Arc<Self>) {
        loop {
            let batch = self.queue.pop_batch(self.shared.tuning.batch).await;
            let permit = self.shared.permits.acquire().await;
            // Boxed: a batch's future holds the state of every step (the planner call, the
            // writes), and a worker spends most of its life waiting for keys; unboxed, every
            // worker of every Tenant would hold that much memory at rest.
            Box::pin(self.process(&batch)).await;
            drop(permit);
            for key in &batch {
                self.queue.done(key);
            }
        }
    }

    /// A batch of keys, each through gather → plan → decide → record → act → settle.
    async fn process(&self, batch: &[Key]) {
        let (keys, objects) = self.gather(batch).await;
        if objects.is_empty() {
            return;
        }
        let started = Instant::now();
        let planned = self.plan(keys, objects, started).await;
        let batch_concurrency = self.shared.tuning.batch.max(1);
        futures::stream::iter(planned)
            .for_each_concurrent(batch_concurrency, |planned| async move {
                let Planned {
                    key,
                    object,
                    plan,
                    span,
                } = planned;
                self.sync_present(&key, &object, plan, started)
                    .instrument(span)
                    .await;
            })
            .await;
    }

    /// gather: the tenant objects of the batch to plan (their keys, and the objects in the same
    /// order). The rest are done with here: keys the caches are behind on wait for them, a
    /// tenant object gone is decided at once ([`Worker::sync_absent`]), one in place only flows
    /// up, and so do the Endpoints of a Service with a selector.
    async fn gather(&self, batch: &[Key]) -> (Vec<Key>, Vec<TenantObject>) {
        let (mut keys, mut objects) = (Vec::new(), Vec::new());
        for key in batch {
            if self.caches.host_behind(key) {
                self.wait_for_own_write(key);
                continue;
            }
            let found = self.caches.tenant_object(key);
            if self.caches.endpoints_of_selector_service(key) {
                let up = Up::Endpoints(found.as_deref());
                self.upsync.up(&self.caches, key, up).await;
            }
            match self.caches.gathered(key, found) {
                Gathered::Behind => self.wait_for_own_write(key),
                Gathered::InPlace(o) => {
                    self.upsync.up(&self.caches, key, Up::InPlace(&o)).await;
                    self.keep_tokens_of_pod(key, &o).await;
                }
                Gathered::Present(o) => {
                    keys.push(key.clone());
                    objects.push(o);
                }
                Gathered::Absent => self.sync_absent(key).await,
                Gathered::Unreadable => {}
            }
        }
        (keys, objects)
    }

    /// A planned tenant object through decide → record → act → settle, in its evaluation span.
    async fn sync_present(&self, key: &Key, object: &TenantObject, plan: Plan, started: Instant) {
        let selector_endpoints = self.caches.endpoints_of_selector_service(key);
        let Some(live) = self.caches.live(key, object) else {
            self.wait_for_own_write(key);
            return;
        };
        let world = (Some(key.kind) == self.caches.pod_kind).then(|| self.pod_world(object));
        let change = self.caches.take_host_change(key);
        let seen = self.recorder.ledger().drift_seen(
            &self.caches.key_string(key),
            drift::version_of(&change).as_deref(),
        );
        let host_change = match &change {
            Changed::Nothing => reconcile::HostChange::Unseen,
            Changed::Written(v) => reconcile::HostChange::Changed(v),
            Changed::Deleted(vanished) => {
                reconcile::HostChange::Deleted(vanished.digest.as_deref())
            }
        };
        let step = self.decide(
            key,
            object,
            plan,
            &live,
            (selector_endpoints, world.as_ref()),
            (host_change, seen.times),
        );
        if step.decision.outcome == Outcome::Drifted {
            let mut step = step;
            let k = self.caches.key_string(key);
            let policy = self.tenant.spec.drift;
            let seen = self
                .recorder
                .count_on(&k, &mut step.decision, seen, policy)
                .await;
            self.drift(key, object, step, change, seen, &live, started)
                .await;
            return;
        }
        // record. No read before the write: every write carries a precondition on the host
        // object the decision saw, so a decision on a stale cache fails with 409 and is taken
        // again on fresh state.
        let k = self.caches.key_string(key);
        let content = observed_content(object, selector_endpoints);
        let recorded = self
            .recorder
            .record_if_news(
                &k,
                &step.decision,
                &content,
                step.writes(),
                &object.object,
                started,
            )
            .await;
        let Some(recorded) = self.recorded_or_retried(key, recorded, "written") else {
            return;
        };
        let acted = self
            .act(
                key,
                &k,
                &step,
                recorded,
                &content,
                Some(&object.object),
                started,
            )
            .await;
        if step.decision.outcome == Outcome::Deferred {
            // Waiting for what the object needs (a pod, for its tenant DNS Service's address).
            self.backoff(key);
        } else if acted {
            self.settle(key, object, step, live.host.as_ref()).await;
            self.keep_tokens_of_pod(key, object).await;
        }
    }

    /// The tokens of a synced pod ([`tokens`]), for a key of the Pod kind.
    async fn keep_tokens_of_pod(&self, key: &Key, object: &TenantObject) {
        if Some(key.kind) == self.caches.pod_kind {
            self.keep_tokens(key, object).await;
        }
    }

    /// decide: the pure reconcile of `object` on its live view, stamped in the current span:
    /// whether it is the Endpoints of a selector Service, a pod's world, what the host shows of
    /// its host object since the last decision and the drifts in a row before.
    fn decide(
        &self,
        key: &Key,
        object: &TenantObject,
        mut plan: Plan,
        live: &LiveView,
        (selector_endpoints, world): (bool, Option<&PodWorld>),
        (change, streak): (reconcile::HostChange<'_>, u32),
    ) -> Step {
        if selector_endpoints {
            reconcile::skip_endpoints_of_selector_service(&mut plan);
        }
        let mut step = reconcile::reconcile_present(
            &self.planner,
            object,
            &plan,
            reconcile::Live {
                host: live.host.as_ref(),
                references: &caches::ReferenceTargets {
                    caches: &self.caches,
                    planner: &self.planner,
                },
                sharing: live.sharing.iter().collect(),
                world,
                change,
                streak,
                drift: self.tenant.spec.drift,
            },
            trace::stamp_in(&tracing::Span::current(), COMPONENT),
        );
        if let Some(from_uid) = self.caches.recreated_from(key) {
            reconcile::note_recreation(&mut step.decision, &from_uid, &object.identity.uid);
        }
        step
    }

    /// settle: after a decision about a present object was carried out. An older incarnation's
    /// host object deleted: the current object is placed next. What the decision left in place
    /// is remembered; its status flows up, and a host Service's cluster IPs when the host object
    /// is ours; the key's retries are over.
    async fn settle(&self, key: &Key, object: &TenantObject, step: Step, host: Option<&Value>) {
        if step.decision.outcome == Outcome::Deleted {
            self.queue
                .push_after(key.clone(), self.shared.tuning.backoff_base);
        }
        self.caches.remember_in_place(key, object, &step);
        let host_is_ours = matches!(
            (step.decision.outcome, step.decision.action),
            (Outcome::Unchanged, _) | (Outcome::Synced, HostAction::Update)
        );
        let up = Up::Decided {
            object,
            status: step.status_up,
            host: host.filter(|_| host_is_ours),
        };
        self.upsync.up(&self.caches, key, up).await;
        self.succeeded(key);
    }

    /// A key whose tenant object is gone, through decide → record → act → settle: its host
    /// object is deleted when it is ours.
    async fn sync_absent(&self, key: &Key) {
        let started = Instant::now();
        let k = self.caches.key_string(key);
        let name = self.caches.host_name_of(key);
        let source = self.caches.source_of(key);
        let decided = self.caches.host_cached(key.kind, &name).and_then(|cached| {
            let span = trace::evaluation_span(
                &self.caches.placement.tenant,
                &source.api_version,
                &source.kind,
                &source.namespace,
                &source.name,
            );
            let step = reconcile::reconcile_absent(
                &self.caches.placement,
                &source,
                Some(&cached),
                trace::stamp_in(&span, COMPONENT),
            )?;
            Some((step, span))
        });
        let Some((step, span)) = decided else {
            self.recorder.ledger().forget(&k);
            self.forget_tokens(key);
            self.succeeded(key);
            return;
        };
        async {
            // Recorded whatever was recorded before: it writes.
            let recorded = self
                .recorder
                .record(&k, &step.decision, "", None, started)
                .await;
            let Some(recorded) = self.recorded_or_retried(key, recorded, "deleted") else {
                return;
            };
            if self.act(key, &k, &step, recorded, "", None, started).await {
                self.recorder.ledger().forget(&k);
                self.succeeded(key);
            }
        }
        .instrument(span)
        .await
    }

    /// What recording a decision returned; when the log refused it, nothing is `not_done` and
    /// the key is retried with backoff (`None`).
    fn recorded_or_retried(
        &self,
        key: &Key,
        recorded: Result<Recorded, RecordError>,
        not_done: &str,
    ) -> Option<Recorded> {
        match recorded {
            Ok(recorded) => Some(recorded),
            Err(e) => {
                tracing::warn!(error = %e, "decision not recorded; nothing {not_done}, retrying");
                self.backoff(key);
                None
            }
        }
    }

    /// Decided again when the caches show this syncer's own write (the watch event queues the
    /// key), at the latest once the patience is over.
    fn wait_for_own_write(&self, key: &Key) {
        self.queue.push_after(key.clone(), OWN_WRITE_PATIENCE);
    }

    /// Retries the key after a delay that doubles with each attempt, up to `backoff_max`.
    fn backoff(&self, key: &Key) {
        let attempt = {
            let mut a = self.attempts.lock().expect("attempts lock");
            let n = a.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let t = &self.shared.tuning;
        let delay = t
            .backoff_base
            .saturating_mul(1u32 << attempt.min(16).saturating_sub(1))
            .min(t.backoff_max);
        self.queue.push_after(key.clone(), delay);
    }

    fn succeeded(&self, key: &Key) {
        self.attempts.lock().expect("attempts lock").remove(key);
    }
}

/// What the ledger compares of a tenant object to tell whether its decision is news: its
/// observed digest, without the addresses of the Endpoints of a Service with a selector (they
/// flow up from the host: a change of them is no news for the log).
fn observed_content(object: &TenantObject, selector_endpoints: bool) -> String {
    if !selector_endpoints {
        return reconcile::observed_digest(&object.object);
    }
    let mut without_addresses = object.object.clone();
    if let Some(map) = without_addresses.as_object_mut() {
        map.remove("subsets");
    }
    reconcile::observed_digest(&without_addresses)
}
