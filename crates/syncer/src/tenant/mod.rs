//! The runtime of one Tenant: watches of its synced kinds in the tenant control plane and in its
//! host namespace, a deduplicating work queue keyed by (kind, namespace, name), and workers that
//! plan in batches, reconcile, record and write.
//!
//! ```text
//!  tenant API ──watch kind k──▶ store ─┐                         ┌─▶ planner (batch)
//!  host ns    ──watch kind k──▶ store ─┼─▶ queue (k, ns, name) ──▶ workers ──▶ reconcile ──▶ record ──▶ write
//!             (provenance → key)       │   dedupe, backoff        (global permits:
//!  resync timer ──every key────────────┘                           fair across tenants)
//! ```
//!
//! Besides the synced kinds, the host namespace's objects of every kind a tenant object may name
//! ([`REFERENCEABLE_KINDS`]) are watched, so that the reference check sees what each reference
//! resolves to. Under mapping v1 an index of tenant objects by host name finds the objects that
//! share one (`sharing`), so which of them takes it does not depend on event order.
//!
//! The host store lags the syncer's own writes: a key whose last host write the store does not
//! show yet is not decided on until it does (`OwnWrite`), so a create never looks missing and a
//! delete never looks undone. Up from the host: status, a Service's cluster IPs (the tenant
//! Service is recreated with them) and the Endpoints of a selector Service.
//!
//! The stores hold what decisions read, not whole objects: managedFields field sets are dropped
//! on both sides, and a host object keeps its metadata, status, a Service's spec and an
//! Endpoints' subsets (`trim_tenant_object`, `trim_host_object`; the rest of a host object is
//! compared by the digest it carries).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{ApiResource, TypeMeta};
use kube::discovery::ApiCapabilities;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Value, json};
use std::time::Instant;
use tenantplane_api::{Tenant, provenance};
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_core::mapping::{MappingVersion, TenantPlacement};
use tenantplane_core::reference::{HostObjects, REFERENCEABLE_KINDS};
use tenantplane_core::translate;
use tenantplane_core::{CompiledPolicy, Planner, SourceIdentity, TenantObject};
use tenantplane_telemetry::propagation;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::SyncMetrics;
use crate::planner::{PlanRequest, PlanService};
use crate::ratelimit::RateLimiter;
use crate::reconcile::{self, HostWrite, Step};
use crate::record::{
    COMPONENT, DecisionLog, DecisionRecorder, Recorded, TenantLedger, reference_of,
};
use crate::trace;

/// Field manager of every host write.
pub const FIELD_MANAGER: &str = "tenantplane-syncer";

/// How long a write of this syncer may take to show in its own watch before the watch's store is
/// believed again anyway (a watch down for longer: the write preconditions still protect).
const OWN_WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// A host write of this syncer that its host watch has not shown yet. Until it has, the host store
/// holds an older state of that name than the one this syncer made, and nothing is decided on it.
#[derive(Debug)]
struct OwnWrite {
    /// uid of the object created, applied or deleted.
    uid: String,
    /// The resourceVersion the create or apply returned; `None` for a delete.
    resource_version: Option<String>,
    at: Instant,
}

impl OwnWrite {
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
struct Recreation {
    /// uid of the tenant Service deleted (the host Service's provenance still names it).
    from_uid: String,
    /// uid of the tenant Service created in its place, once created.
    to_uid: Option<String>,
    at: Instant,
}

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
    /// Rate limit of host requests (all tenants together).
    pub host_limiter: RateLimiter,
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

/// A work item: one tenant object by kind index, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: usize,
    namespace: String,
    name: String,
}

#[derive(Debug)]
struct Kind {
    ar: ApiResource,
    tenant: Store<DynamicObject>,
    host: Store<DynamicObject>,
    host_api: Api<DynamicObject>,
    has_status: bool,
}

/// A running tenant; its tasks stop when it is dropped.
#[derive(Debug)]
pub struct TenantRuntime {
    tasks: Vec<JoinHandle<()>>,
    tenant: String,
    metrics: SyncMetrics,
    /// True once every watch has listed once and the first pass is queued.
    pub ready: watch::Receiver<bool>,
    /// The kinds watched, as `group/Kind`.
    pub kinds: Vec<String>,
}

impl Drop for TenantRuntime {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.metrics.forget_tenant(&self.tenant);
    }
}

/// A tenant object's (namespace, name).
type SourceName = (String, String);

/// Per-tenant state the workers share.
struct Worker {
    shared: Arc<Shared>,
    tenant: Tenant,
    placement: TenantPlacement,
    policy: Option<String>,
    /// The planner core under the same policy, for the checks made again on the live view.
    planner: Planner,
    kinds: Vec<Kind>,
    /// Host stores of the referenceable kinds that are not synced, by (group, kind).
    referenced: Vec<(ApiResource, Store<DynamicObject>)>,
    /// Under mapping v1: the (namespace, name) of tenant objects by (kind, host name), as seen
    /// by the tenant watches; entries are checked against the stores when read.
    sharing: Mutex<HashMap<(usize, String), BTreeSet<SourceName>>>,
    queue: Arc<crate::queue::WorkQueue<Key>>,
    recorder: DecisionRecorder,
    tenant_client: Client,
    tenant_limiter: RateLimiter,
    attempts: Mutex<HashMap<Key, u32>>,
    service_kind: Option<usize>,
    endpoints_kind: Option<usize>,
    pod_kind: Option<usize>,
    /// Host writes not yet shown by the host watch, by (kind, host name).
    own_writes: Mutex<HashMap<(usize, String), OwnWrite>>,
    /// Host writes whose call has not returned, by (kind, host name): another key mapped to the
    /// same host name (a collision) is not decided on the state they are changing.
    writes_in_flight: Mutex<std::collections::HashSet<(usize, String)>>,
    /// Tenant Services recreated with their host Service's cluster IPs, by key: until the tenant
    /// watch shows the new Service and the host Service's provenance names it.
    recreations: Mutex<HashMap<Key, Recreation>>,
    /// Tenant Services whose control plane refused the host's cluster IPs: not tried again.
    cluster_ips_refused: Mutex<std::collections::HashSet<Key>>,
    /// Objects in place: (tenant resourceVersion, desired digest) of the last Synced or Unchanged
    /// decision. While both still hold, an event (typically the echo of our own write, or a host
    /// status change) needs no plan: only the status flows up.
    settled: Mutex<HashMap<Key, (String, String)>>,
}

/// Starts the runtime of one tenant.
pub async fn start(
    shared: Arc<Shared>,
    tenant: Tenant,
    (policy_text, policy): (Option<String>, CompiledPolicy),
    kinds: Vec<(ApiResource, ApiCapabilities)>,
    tenant_client: Client,
    ledger: TenantLedger,
) -> anyhow::Result<TenantRuntime> {
    let placement = TenantPlacement::from(&tenant);
    let host_ns = placement.host_namespace.clone();
    let mut tasks = Vec::new();
    let mut kind_table = Vec::new();
    let mut watch_streams = Vec::new();
    for (index, (ar, caps)) in kinds.iter().enumerate() {
        let tenant_api = Api::<DynamicObject>::all_with(tenant_client.clone(), ar);
        let host_api = Api::<DynamicObject>::namespaced_with(shared.host.clone(), &host_ns, ar);
        let tenant_writer = reflector::store::Writer::new(ar.clone());
        let host_writer = reflector::store::Writer::new(ar.clone());
        kind_table.push(Kind {
            ar: ar.clone(),
            tenant: tenant_writer.as_reader(),
            host: host_writer.as_reader(),
            host_api: host_api.clone(),
            has_status: caps.subresources.iter().any(|(s, _)| s.plural == "status")
                || tenantplane_core::translate::status_flows_up(&ar.group, &ar.kind),
        });
        watch_streams.push((index, tenant_api, tenant_writer, host_api, host_writer));
    }
    let mut referenced = Vec::new();
    let mut reference_watches = Vec::new();
    for (group, kind) in REFERENCEABLE_KINDS {
        if kinds
            .iter()
            .any(|(ar, _)| ar.group == group && ar.kind == kind)
        {
            continue;
        }
        let ar = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, "v1", kind));
        let writer = reflector::store::Writer::new(ar.clone());
        referenced.push((ar.clone(), writer.as_reader()));
        let api = Api::<DynamicObject>::namespaced_with(shared.host.clone(), &host_ns, &ar);
        reference_watches.push((type_meta(&ar), api, writer));
    }
    let tuning = shared.tuning.clone();
    let metrics = shared.metrics.clone();
    let tenant_name = placement.tenant.clone();
    let queue = crate::queue::WorkQueue::with_depth_gauge(metrics.queue_depth(&tenant_name));
    let worker = Arc::new(Worker {
        recorder: DecisionRecorder::new(
            tenant_client.clone(),
            ledger,
            shared.log.clone(),
            shared.metrics.clone(),
        ),
        tenant_client: tenant_client.clone(),
        shared,
        placement,
        policy: policy_text,
        planner: Planner::new(&tenant, policy),
        kinds: kind_table,
        referenced,
        sharing: Mutex::new(HashMap::new()),
        queue,
        tenant_limiter: RateLimiter::new(tuning.tenant_qps, tuning.tenant_burst),
        attempts: Mutex::new(HashMap::new()),
        settled: Mutex::new(HashMap::new()),
        own_writes: Mutex::new(HashMap::new()),
        writes_in_flight: Mutex::new(std::collections::HashSet::new()),
        recreations: Mutex::new(HashMap::new()),
        cluster_ips_refused: Mutex::new(std::collections::HashSet::new()),
        pod_kind: kinds
            .iter()
            .position(|(ar, _)| ar.group.is_empty() && ar.kind == "Pod"),
        service_kind: kinds
            .iter()
            .position(|(ar, _)| ar.group.is_empty() && ar.kind == "Service"),
        endpoints_kind: kinds
            .iter()
            .position(|(ar, _)| ar.group.is_empty() && ar.kind == "Endpoints"),
        tenant,
    });

    for (index, tenant_api, tenant_writer, host_api, host_writer) in watch_streams {
        let w = worker.clone();
        let types = type_meta(&w.kinds[index].ar);
        tasks.push(tokio::spawn(async move {
            let mut events = watcher(tenant_api, watcher::Config::default())
                .default_backoff()
                .modify(move |obj| trim_tenant_object(&types, obj))
                .reflect(tenant_writer)
                .touched_objects()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(obj) => {
                        let namespace = obj.namespace().unwrap_or_default();
                        let name = obj.name_any();
                        w.share_host_name(index, &namespace, &name);
                        // A Service decides whether its Endpoints are synced: look at them again.
                        if let Some(endpoints) =
                            w.endpoints_kind.filter(|_| Some(index) == w.service_kind)
                        {
                            w.queue.push(Key {
                                kind: endpoints,
                                namespace: namespace.clone(),
                                name: name.clone(),
                            });
                        }
                        w.queue.push(Key {
                            kind: index,
                            namespace,
                            name,
                        });
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %w.placement.tenant, error = %e, "tenant watch")
                    }
                }
            }
        }));
        let w = worker.clone();
        let service = Some(index) == w.service_kind;
        let types = type_meta(&w.kinds[index].ar);
        tasks.push(tokio::spawn(async move {
            let mut events = watcher(host_api, watcher::Config::default())
                .default_backoff()
                .modify(move |obj| trim_host_object(&types, service, obj))
                .reflect(host_writer)
                .touched_objects()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(obj) => {
                        if let Some(key) = w.key_of_host_event(index, &obj) {
                            w.queue.push(key);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %w.placement.tenant, error = %e, "host watch")
                    }
                }
            }
        }));
    }

    for (types, api, writer) in reference_watches {
        let tenant = worker.placement.tenant.clone();
        tasks.push(tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(move |obj| trim_host_object(&types, false, obj))
                .reflect(writer)
                .touched_objects()
                .boxed();
            while let Some(event) = events.next().await {
                if let Err(e) = event {
                    tracing::warn!(tenant = %tenant, error = %e, "host watch of a referenced kind");
                }
            }
        }));
    }

    let (ready_tx, ready) = watch::channel(false);
    let w = worker.clone();
    tasks.push(tokio::spawn(async move {
        for (_, store) in &w.referenced {
            let _ = store.wait_until_ready().await;
        }
        for k in &w.kinds {
            // Nothing is decided before both sides are listed: an unlisted store would look like
            // deleted tenant objects and delete their host objects.
            let _ = k.tenant.wait_until_ready().await;
            let _ = k.host.wait_until_ready().await;
        }
        if let Some(log) = &w.shared.log {
            let tenant = &w.placement.tenant;
            let settled = crate::settle::settle_tenant(
                log,
                &w.shared.host,
                &w.tenant_client,
                tenant,
                w.shared.log_start,
            );
            if let Err(e) = settled.await {
                tracing::warn!(tenant = %tenant, error = %e, "settling open host actions failed");
            }
        }
        w.enqueue_all();
        let _ = ready_tx.send(true);
        loop {
            tokio::time::sleep(w.shared.tuning.resync).await;
            w.enqueue_all();
        }
    }));
    for _ in 0..tuning.workers_per_tenant.max(1) {
        let w = worker.clone();
        let mut listed = ready.clone();
        tasks.push(tokio::spawn(async move {
            // Watch events queue keys before the other side has listed: decide none until both
            // have (a host object not yet in the store would be created again).
            let _ = listed.wait_for(|listed| *listed).await;
            w.work().await
        }));
    }
    Ok(TenantRuntime {
        tasks,
        tenant: tenant_name,
        metrics,
        ready,
        kinds: kinds
            .iter()
            .map(|(ar, _)| format!("{}/{}", ar.group, ar.kind))
            .collect(),
    })
}

/// The span of a Kubernetes API call made for a decision (a child of the current span).
fn kube_call_span(
    name: &str,
    verb: &str,
    kind: &str,
    namespace: &str,
    object: &str,
) -> tracing::Span {
    tracing::info_span!(
        "tenantplane.kube.call",
        otel.name = name,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = verb,
        http.response.status_code = tracing::field::Empty,
        k8s.object.kind = kind,
        k8s.namespace.name = namespace,
        k8s.object.name = object,
    )
}

fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).expect("a DynamicObject always serializes")
}

/// The apiVersion and kind of the objects of `ar`.
fn type_meta(ar: &ApiResource) -> TypeMeta {
    TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    }
}

/// A tenant object as its store keeps it: everything but the field sets of its managedFields
/// (only who wrote it is read, by the Endpoints up-sync; the field sets are most of the
/// metadata of a small object), with its apiVersion and kind: a real API server sends them on
/// the objects of a watch event but not on the items of a list.
fn trim_tenant_object(types: &TypeMeta, obj: &mut DynamicObject) {
    obj.types.get_or_insert_with(|| types.clone());
    for entry in obj.metadata.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

/// A host object as its store keeps it: what decisions read of it and nothing else. Its metadata
/// (provenance, the recorded digest, uid and resourceVersion) without managedFields, its status
/// (flowing up), a Service's spec (its cluster IPs flow up) and an Endpoints' subsets; the rest
/// (a Pod's spec, a ConfigMap's or Secret's data) is what the syncer wrote from the tenant object
/// and is compared by digest only. Like a tenant object, it gets the apiVersion and kind that a
/// list's items lack.
fn trim_host_object(types: &TypeMeta, service: bool, obj: &mut DynamicObject) {
    obj.types.get_or_insert_with(|| types.clone());
    obj.metadata.managed_fields = None;
    if let Some(body) = obj.data.as_object_mut() {
        body.retain(|field, _| match field.as_str() {
            "status" | "subsets" => true,
            "spec" => service,
            _ => false,
        });
    }
}

impl HostObjects for Worker {
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
        let store = self
            .kinds
            .iter()
            .map(|k| (&k.ar, &k.host))
            .chain(self.referenced.iter().map(|(ar, store)| (ar, store)))
            .find(|(ar, _)| ar.group == group && ar.kind == kind)
            .map(|(ar, store)| (ar.clone(), store))?;
        let (ar, store) = store;
        let obj =
            store.get(&ObjectRef::new_with(name, ar).within(&self.placement.host_namespace))?;
        reconcile::host_meta(&to_value(&obj))
    }
}

impl Worker {
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

    /// The key a host object's event concerns: the source of our own host object, or, for the
    /// Endpoints the host's endpoints controller keeps for our host Service, the tenant Endpoints
    /// of that Service (they flow up).
    fn key_of_host_event(&self, index: usize, obj: &DynamicObject) -> Option<Key> {
        if let Some(key) = self.key_of_host(index, obj) {
            return Some(key);
        }
        let service_kind = self.service_kind?;
        if Some(index) != self.endpoints_kind {
            return None;
        }
        let services = &self.kinds[service_kind];
        let service = services.host.get(
            &ObjectRef::new_with(&obj.name_any(), services.ar.clone())
                .within(&self.placement.host_namespace),
        )?;
        let key = self.key_of_host(service_kind, &service)?;
        Some(Key { kind: index, ..key })
    }

    fn enqueue_all(&self) {
        for (index, k) in self.kinds.iter().enumerate() {
            for obj in k.tenant.state() {
                self.queue.push(Key {
                    kind: index,
                    namespace: obj.namespace().unwrap_or_default(),
                    name: obj.name_any(),
                });
            }
            for obj in k.host.state() {
                if let Some(key) = self.key_of_host_event(index, &obj) {
                    self.queue.push(key);
                }
            }
        }
    }

    async fn work(self: Arc<Self>) {
        loop {
            let batch = self.queue.pop_batch(self.shared.tuning.batch).await;
            let permit = self.shared.permits.acquire().await;
            self.process(&batch).await;
            drop(permit);
            for key in &batch {
                self.queue.done(key);
            }
        }
    }

    fn key_string(&self, key: &Key) -> String {
        let ar = &self.kinds[key.kind].ar;
        format!("{}/{}/{}/{}", ar.group, ar.kind, key.namespace, key.name)
    }

    fn host_cached(&self, kind: usize, name: &str) -> Option<Value> {
        let k = &self.kinds[kind];
        k.host
            .get(&ObjectRef::new_with(name, k.ar.clone()).within(&self.placement.host_namespace))
            .map(|o| to_value(&o))
    }

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

    /// The host object of `o` as decisions see it. While a tenant Service this syncer recreated
    /// (with the host's cluster IPs) is being adopted, its host Service still names the deleted
    /// Service's uid: it is seen as naming the new one, so the next decision updates its
    /// provenance instead of deleting it as an earlier incarnation's.
    fn host_of(&self, key: &Key, o: &TenantObject) -> Option<Value> {
        let mut host = self.host_cached(key.kind, &self.host_name_of(key))?;
        if let Some(r) = self.recreations.lock().expect("recreations lock").get(key)
            && r.to_uid.as_deref() == Some(o.identity.uid.as_str())
            && source_uid_of(&host) == Some(r.from_uid.as_str())
        {
            host["metadata"]["labels"][provenance::SOURCE_UID] = json!(o.identity.uid);
        }
        Some(host)
    }

    /// The host name of a key's object.
    fn host_name_of(&self, key: &Key) -> String {
        let ar = &self.kinds[key.kind].ar;
        self.placement
            .host_name(&ar.group, &ar.kind, &key.namespace, &key.name)
    }

    /// Under mapping v1, notes the tenant object `namespace/name` of kind `index` under its host
    /// name, and queues the other objects there: which of them takes the name may have changed.
    fn share_host_name(&self, index: usize, namespace: &str, name: &str) {
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
            self.queue.push(Key {
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
        let kind = &self.kinds[key.kind];
        let sharing = self.sharing.lock().expect("sharing lock");
        let Some(at) = sharing.get(&(key.kind, self.host_name_of(key))) else {
            return Vec::new();
        };
        at.iter()
            .filter(|(ns, n)| (ns, n) != (&key.namespace, &key.name))
            .filter_map(|(ns, n)| {
                let obj = kind
                    .tenant
                    .get(&ObjectRef::new_with(n, kind.ar.clone()).within(ns))?;
                TenantObject::from_value(to_value(&obj)).ok()
            })
            .collect()
    }

    /// Whether the host store has not yet shown this syncer's last write at the key's host name:
    /// a decision now would take an older state for the current one (a create that looks
    /// missing, a delete that looks undone), or a write at that name is still in flight. Forgets
    /// writes the store shows.
    fn host_cache_behind(&self, key: &Key) -> bool {
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
        if w.at.elapsed() < OWN_WRITE_PATIENCE
            && !w.shown_by(self.host_cached(key.kind, &name).as_ref())
        {
            return true;
        }
        writes.remove(&(key.kind, name));
        false
    }

    /// Whether the tenant store has not yet shown the tenant Service this syncer recreated at
    /// `key` (`tenant_uid`: the uid the store shows, if any). Forgets recreations that are
    /// complete: the new Service shown and its host Service's provenance naming it.
    fn tenant_cache_behind(&self, key: &Key, tenant_uid: Option<&str>) -> bool {
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

    fn still_settled(&self, key: &Key, o: &TenantObject) -> bool {
        let settled = self.settled.lock().expect("settled lock");
        let Some((rv, digest)) = settled.get(key) else {
            return false;
        };
        Some(rv) == o.resource_version.as_ref()
            && self
                .host_of(key, o)
                .as_ref()
                .and_then(tenantplane_core::translate::recorded_digest)
                == Some(digest.as_str())
    }

    fn settle(&self, key: &Key, o: &TenantObject, step: &Step) {
        let digest = match &step.write {
            Some(HostWrite::Create(v) | HostWrite::Apply(v)) => {
                tenantplane_core::translate::recorded_digest(v).map(str::to_string)
            }
            None if step.decision.outcome == Outcome::Unchanged => self
                .host_of(key, o)
                .as_ref()
                .and_then(tenantplane_core::translate::recorded_digest)
                .map(str::to_string),
            _ => None,
        };
        let mut settled = self.settled.lock().expect("settled lock");
        match (digest, &o.resource_version) {
            (Some(d), Some(rv)) => {
                settled.insert(key.clone(), (rv.clone(), d));
            }
            _ => {
                settled.remove(key);
            }
        }
    }

    async fn status_up_only(&self, key: &Key, o: &TenantObject) {
        let kind = &self.kinds[key.kind];
        let Some(host) = self.host_of(key, o) else {
            return;
        };
        if let Some(status) = tenantplane_core::translate::status_to_tenant(&o.object, &host)
            && kind.has_status
        {
            self.patch_status(key, o, status).await;
        }
        self.cluster_ips_up(key, o, &host).await;
    }

    async fn patch_status(&self, key: &Key, o: &TenantObject, status: Value) {
        let kind = &self.kinds[key.kind];
        // A child of the decision span it belongs to; a status-only pass has none.
        let span = if tracing::Span::current().is_none() {
            tracing::Span::none()
        } else {
            kube_call_span(
                "tenantplane.tenant.status_up",
                "PATCH",
                &kind.ar.kind,
                &o.identity.namespace,
                &o.identity.name,
            )
        };
        async {
            self.tenant_limiter.acquire().await;
            let api = Api::<DynamicObject>::namespaced_with(
                self.tenant_client.clone(),
                &o.identity.namespace,
                &kind.ar,
            );
            if let Err(e) = api
                .patch_status(
                    &o.identity.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
            {
                tracing::Span::current().record("otel.status_code", "ERROR");
                tracing::debug!(error = %e, "status up-sync failed; the next host event retries");
            }
        }
        .instrument(span)
        .await
    }

    fn succeeded(&self, key: &Key) {
        self.attempts.lock().expect("attempts lock").remove(key);
    }

    async fn process(&self, batch: &[Key]) {
        // The keys and objects to plan, in the same order.
        let (mut keys, mut objects): (Vec<Key>, Vec<TenantObject>) = (Vec::new(), Vec::new());
        for key in batch {
            if self.host_cache_behind(key) {
                // Decided again when the host watch shows our write (its event queues the key),
                // at the latest once the patience is over.
                self.queue.push_after(key.clone(), OWN_WRITE_PATIENCE);
                continue;
            }
            let kind = &self.kinds[key.kind];
            let found = kind
                .tenant
                .get(&ObjectRef::new_with(&key.name, kind.ar.clone()).within(&key.namespace));
            if self.endpoints_of_selector_service(key) {
                self.endpoints_up(key, found.as_deref()).await;
            }
            match found {
                Some(obj) => match TenantObject::from_value(to_value(&obj)) {
                    Ok(o) if self.tenant_cache_behind(key, Some(&o.identity.uid)) => {
                        self.queue.push_after(key.clone(), OWN_WRITE_PATIENCE)
                    }
                    Ok(o) if self.still_settled(key, &o) => self.status_up_only(key, &o).await,
                    Ok(o) => {
                        keys.push(key.clone());
                        objects.push(o);
                    }
                    Err(e) => tracing::warn!(error = %e, "unreadable tenant object"),
                },
                None if self.tenant_cache_behind(key, None) => {
                    self.queue.push_after(key.clone(), OWN_WRITE_PATIENCE)
                }
                None => {
                    self.settled.lock().expect("settled lock").remove(key);
                    self.reconcile_absent(key).await
                }
            }
        }
        if objects.is_empty() {
            return;
        }
        // One span per object, opened before planning so that the planner's span of each object
        // is its child; the batch's Plan call has a span of its own, linked to them.
        let started = Instant::now();
        let spans: Vec<tracing::Span> = objects
            .iter()
            .map(|o| {
                let id = &o.identity;
                trace::evaluation_span(
                    &self.placement.tenant,
                    &id.api_version,
                    &id.kind,
                    &id.namespace,
                    &id.name,
                )
            })
            .collect();
        let trace_contexts: Vec<String> = spans
            .iter()
            .map(|span| propagation::traceparent(span).unwrap_or_default())
            .collect();
        let trace_contexts = if trace_contexts.iter().all(String::is_empty) {
            Vec::new()
        } else {
            trace_contexts
        };
        let batch_span = tracing::info_span!(
            parent: None,
            "tenantplane.sync.plan_batch",
            otel.kind = "client",
            tenantplane.tenant = %self.placement.tenant,
            tenantplane.batch.size = objects.len(),
        );
        for span in &spans {
            batch_span.add_link(span.context().span().span_context().clone());
        }
        let host: Vec<HostObjectMeta> = keys
            .iter()
            .zip(&objects)
            .filter_map(|(key, o)| self.host_of(key, o).and_then(|v| reconcile::host_meta(&v)))
            .collect();
        let plans = self
            .shared
            .planner
            .plan(PlanRequest {
                tenant: &self.tenant,
                policy: self.policy.as_deref(),
                objects: &objects,
                host: &host,
                trace_contexts: &trace_contexts,
            })
            .instrument(batch_span)
            .await;
        let plans = match plans {
            Ok(p) if p.len() == objects.len() => p,
            Ok(p) => {
                tracing::error!(
                    asked = objects.len(),
                    got = p.len(),
                    "planner answered a different number of plans"
                );
                for key in &keys {
                    self.backoff(key);
                }
                return;
            }
            Err(e) => {
                for ((key, o), span) in keys.iter().zip(&objects).zip(spans) {
                    let d = reconcile::deferred(
                        &self.placement,
                        o,
                        e.reason(),
                        &format!("{e}; retried with backoff, nothing guessed"),
                        trace::stamp_in(&span, COMPONENT),
                    );
                    let k = self.key_string(key);
                    let content = reconcile::observed_digest(&o.object);
                    if self
                        .recorder
                        .ledger()
                        .worth_recording(&k, &d, &content, false)
                    {
                        let _ = self
                            .recorder
                            .record(&k, &d, &content, Some(reference_of(&o.object)), started)
                            .instrument(span)
                            .await;
                    } else {
                        trace::describe(&span, &d);
                    }
                    self.backoff(key);
                }
                return;
            }
        };
        let batch_concurrency = self.shared.tuning.batch.max(1);
        futures::stream::iter(keys.into_iter().zip(objects).zip(plans).zip(spans))
            .for_each_concurrent(
                batch_concurrency,
                |(((key, object), plan), span)| async move {
                    self.reconcile_present(&key, &object, &plan, started)
                        .instrument(span)
                        .await;
                },
            )
            .await;
    }

    /// Whether the tenant Service of this name selects pods: its Endpoints are then the tenant's
    /// endpoints controller's, and on the host the host's endpoints controller keeps the
    /// Endpoints of the host Service; syncing them would only collide.
    fn endpoints_of_selector_service(&self, key: &Key) -> bool {
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

    async fn reconcile_present(
        &self,
        key: &Key,
        object: &TenantObject,
        plan: &tenantplane_core::Plan,
        started: Instant,
    ) {
        let kind = &self.kinds[key.kind];
        let mut plan = plan.clone();
        if plan.verdict.action == tenantplane_api::SyncAction::Sync
            && self.endpoints_of_selector_service(key)
        {
            plan.verdict.action = tenantplane_api::SyncAction::Skip;
            plan.verdict.reason = "EndpointsOfSelectorService".into();
            plan.verdict.message = "the Service selects pods: the host's endpoints controller \
                                    keeps the host Service's Endpoints"
                .into();
            plan.outcome = Outcome::Skipped;
            plan.action = HostAction::None;
            plan.reason = plan.verdict.reason.clone();
            plan.message = plan.verdict.message.clone();
            plan.collision = None;
        }
        let plan = &plan;
        // Checked again now that the plan is in: a write at this host name may have started or
        // landed since the batch began (another key that maps to the same name).
        if self.host_cache_behind(key) {
            self.queue.push_after(key.clone(), OWN_WRITE_PATIENCE);
            return;
        }
        let cached = self.host_of(key, object);
        let span = tracing::Span::current();
        let sharing = self.sharing_host_name(key);
        let mut step = reconcile::reconcile_present(
            &self.planner,
            object,
            plan,
            reconcile::Live {
                host: cached.as_ref(),
                references: self,
                sharing: sharing.iter().collect(),
            },
            trace::stamp_in(&span, COMPONENT),
        );
        if let Some(r) = self.recreations.lock().expect("recreations lock").get(key)
            && step.decision.action == HostAction::Update
        {
            step.decision.message = format!(
                "{}; the tenant Service was recreated with the host Service's cluster IPs (uid \
                 {} replaced by {}): the host Service now names the new one",
                step.decision.message, r.from_uid, object.identity.uid
            );
        }
        // No read before the write: every write carries a precondition on the host object the
        // decision saw (create: nothing at the name; apply: its resourceVersion; delete: its
        // uid), so a decision on a stale cache fails with 409 and is taken again on fresh state.
        let k = self.key_string(key);
        let content = if self.endpoints_of_selector_service(key) {
            // Their addresses flow up from the host: a change of them is no news for the log.
            let mut without_addresses = object.object.clone();
            if let Some(map) = without_addresses.as_object_mut() {
                map.remove("subsets");
            }
            reconcile::observed_digest(&without_addresses)
        } else {
            reconcile::observed_digest(&object.object)
        };
        // The span describes what the evaluation concluded; a recorded decision is described
        // by the recorder, once (an OpenTelemetry span keeps every value set, repeats included).
        let ledger = self.recorder.ledger();
        let mut recorded = Recorded::default();
        if step.decision.outcome == Outcome::Unchanged && !ledger.seen(&k) {
            // First sight since start of an object already in place: the decision on the host
            // object still explains it; re-recording it on every restart would be noise.
            trace::describe(&span, &step.decision);
            ledger.remember(&k, &step.decision, &content);
        } else if !ledger.worth_recording(&k, &step.decision, &content, step.writes()) {
            trace::describe(&span, &step.decision);
        } else {
            match self
                .recorder
                .record(
                    &k,
                    &step.decision,
                    &content,
                    Some(reference_of(&object.object)),
                    started,
                )
                .await
            {
                Ok(r) => recorded = r,
                Err(e) => {
                    tracing::warn!(error = %e, "decision not recorded; nothing written, retrying");
                    self.backoff(key);
                    return;
                }
            }
        }
        if !self
            .write(
                key,
                &k,
                &step,
                recorded,
                &content,
                Some(&object.object),
                started,
            )
            .await
        {
            return;
        }
        if step.decision.outcome == Outcome::Deleted {
            // An older incarnation's host object went; the current object is placed next.
            self.queue
                .push_after(key.clone(), self.shared.tuning.backoff_base);
        }
        self.settle(key, object, &step);
        if let Some(status) = step.status_up.clone()
            && kind.has_status
        {
            self.patch_status(key, object, status).await;
        }
        let host_is_ours = matches!(
            (step.decision.outcome, step.decision.action),
            (Outcome::Unchanged, _) | (Outcome::Synced, HostAction::Update)
        );
        if host_is_ours && let Some(host) = &cached {
            self.cluster_ips_up(key, object, host).await;
        }
        self.succeeded(key);
    }

    /// Performs the step's host write; confirms its recorded action carried out, or records
    /// why it was not. Returns false when the key was requeued.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        key: &Key,
        k: &str,
        step: &Step,
        recorded: Recorded,
        content: &str,
        tenant_object: Option<&Value>,
        started: Instant,
    ) -> bool {
        let Some(write) = &step.write else {
            return true;
        };
        let kind = &self.kinds[key.kind];
        let (verb, name) = match write {
            HostWrite::Create(o) => ("POST", o["metadata"]["name"].as_str().unwrap_or_default()),
            HostWrite::Apply(o) => ("PATCH", o["metadata"]["name"].as_str().unwrap_or_default()),
            HostWrite::Delete { name, .. } => ("DELETE", name.as_str()),
        };
        let span = kube_call_span(
            "tenantplane.host.write",
            verb,
            &kind.ar.kind,
            &self.placement.host_namespace,
            name,
        );
        let at = (key.kind, name.to_string());
        let in_flight = || self.writes_in_flight.lock().expect("writes in flight lock");
        in_flight().insert(at.clone());
        // The span lasts from here until it is dropped after the call. It is never entered:
        // nothing in the write opens a span or logs, and entering it on every poll of the HTTP
        // call would cost each decision CPU for nothing (docs/tracing.md, "Overhead").
        let result = self.host_write(kind, write).await;
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            if let kube::Error::Api(s) = e {
                span.record("http.response.status_code", s.code);
            }
        }
        drop(span);
        match result {
            Ok(written) => {
                if let Some(w) = written {
                    self.own_writes
                        .lock()
                        .expect("own writes lock")
                        .insert(at.clone(), w);
                }
                in_flight().remove(&at);
                self.recorder.carried_out(recorded);
                true
            }
            Err(e) => {
                in_flight().remove(&at);
                // A decision of its own (Failed), in a span of its own under the one it failed:
                // the log says the decision was not applied. A 409 means the host object changed
                // since the decision (someone wrote at the name): decided again on fresh state.
                let span = trace::follow_up_span(&step.decision);
                let stamp = trace::stamp_in(&span, COMPONENT);
                let refused = reconcile::refused_for_content(&e);
                let failed = match &e {
                    kube::Error::Api(s) if s.code == 409 => {
                        reconcile::superseded(&step.decision, &e.to_string(), stamp)
                    }
                    _ if refused => {
                        reconcile::refused_by_host(&step.decision, &e.to_string(), stamp)
                    }
                    _ => reconcile::failed(&step.decision, &e.to_string(), stamp),
                };
                let _ = self
                    .recorder
                    .record(
                        k,
                        &failed,
                        content,
                        tenant_object.map(reference_of),
                        started,
                    )
                    .instrument(span)
                    .await;
                if refused {
                    // The same content is refused again: looked at again when it changes
                    // (its watch event) and at the resync, not in a backoff loop.
                    self.succeeded(key);
                } else {
                    self.backoff(key);
                }
                false
            }
        }
    }

    /// The host API call of a write; what it wrote, for [`OwnWrite`].
    async fn host_write(
        &self,
        kind: &Kind,
        write: &HostWrite,
    ) -> Result<Option<OwnWrite>, kube::Error> {
        let written = |o: DynamicObject| {
            Some(OwnWrite {
                uid: o.uid()?,
                resource_version: Some(o.resource_version()?),
                at: Instant::now(),
            })
        };
        self.shared.host_limiter.acquire().await;
        match write {
            HostWrite::Create(object) => {
                let obj: DynamicObject =
                    serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
                kind.host_api
                    .create(
                        &PostParams {
                            dry_run: false,
                            field_manager: Some(FIELD_MANAGER.into()),
                        },
                        &obj,
                    )
                    .await
                    .map(written)
            }
            HostWrite::Apply(object) => {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                kind.host_api
                    .patch(
                        name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(object),
                    )
                    .await
                    .map(written)
            }
            HostWrite::Delete { name, uid } => {
                let params = DeleteParams {
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let deleted = uid.clone().map(|uid| OwnWrite {
                    uid,
                    resource_version: None,
                    at: Instant::now(),
                });
                match kind.host_api.delete(name, &params).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(deleted),
                    other => other.map(|_| deleted),
                }
            }
        }
    }

    async fn reconcile_absent(&self, key: &Key) {
        let kind = &self.kinds[key.kind];
        let started = Instant::now();
        let k = self.key_string(key);
        let name = self.host_name_of(key);
        let source = SourceIdentity {
            api_version: kind.ar.api_version.clone(),
            kind: kind.ar.kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            uid: String::new(),
        };
        let Some(cached) = self.host_cached(key.kind, &name) else {
            self.recorder.ledger().forget(&k);
            self.succeeded(key);
            return;
        };
        let span = trace::evaluation_span(
            &self.placement.tenant,
            &source.api_version,
            &source.kind,
            &source.namespace,
            &source.name,
        );
        let Some(step) = reconcile::reconcile_absent(
            &self.placement,
            &source,
            Some(&cached),
            trace::stamp_in(&span, COMPONENT),
        ) else {
            self.recorder.ledger().forget(&k);
            self.succeeded(key);
            return;
        };
        async {
            let recorded = match self
                .recorder
                .record(&k, &step.decision, "", None, started)
                .await
            {
                Ok(recorded) => recorded,
                Err(e) => {
                    tracing::warn!(error = %e, "decision not recorded; nothing deleted, retrying");
                    self.backoff(key);
                    return;
                }
            };
            if self
                .write(key, &k, &step, recorded, "", None, started)
                .await
            {
                self.recorder.ledger().forget(&k);
                self.succeeded(key);
            }
        }
        .instrument(span)
        .await
    }

    /// Brings the Endpoints the host's endpoints controller keeps for the host Service of a
    /// tenant Service with a selector up into the tenant Endpoints of that Service (`current`),
    /// addresses pointing at the tenant pods. Written by server-side apply only when the addresses
    /// differ, and never once another field manager (the tenant's own endpoints controller) has
    /// written the tenant Endpoints: that controller then keeps them, from the pod IPs that flow
    /// up, and the two never take turns.
    async fn endpoints_up(&self, key: &Key, current: Option<&DynamicObject>) {
        let Some(service_kind) = self.service_kind else {
            return;
        };
        let service_key = Key {
            kind: service_kind,
            ..key.clone()
        };
        let host_name = self.host_name_of(&service_key);
        let services = &self.kinds[service_kind];
        let ours = services
            .host
            .get(
                &ObjectRef::new_with(&host_name, services.ar.clone())
                    .within(&self.placement.host_namespace),
            )
            .and_then(|svc| self.key_of_host(service_kind, &svc))
            == Some(service_key);
        let Some(host_endpoints) = self.host_cached(key.kind, &host_name).filter(|_| ours) else {
            return;
        };
        let subsets =
            translate::endpoints_to_tenant(&host_endpoints, |pod| self.tenant_pod_ref(key, pod));
        if let Some(current) = current.map(to_value) {
            let unchanged = current.get("subsets").unwrap_or(&json!([])) == &subsets;
            if unchanged || reconcile::written_by_another_manager(&current, FIELD_MANAGER) {
                return;
            }
        }
        let kind = &self.kinds[key.kind];
        self.tenant_limiter.acquire().await;
        let api = Api::<DynamicObject>::namespaced_with(
            self.tenant_client.clone(),
            &key.namespace,
            &kind.ar,
        );
        let endpoints = json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": key.name, "namespace": key.namespace},
            "subsets": subsets,
        });
        if let Err(e) = api
            .patch(
                &key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&endpoints),
            )
            .await
        {
            tracing::debug!(error = %e, "endpoints up-sync failed; the next host event retries");
        }
    }

    /// The tenant `targetRef` of a host Pod of this tenant whose source is in the namespace of
    /// `key` (an Endpoints key), or `None`.
    fn tenant_pod_ref(&self, key: &Key, host_pod: &str) -> Option<Value> {
        let pod_kind = self.pod_kind?;
        let pods = &self.kinds[pod_kind];
        let host = pods.host.get(
            &ObjectRef::new_with(host_pod, pods.ar.clone()).within(&self.placement.host_namespace),
        )?;
        let source = self.key_of_host(pod_kind, &host)?;
        if source.namespace != key.namespace {
            return None;
        }
        let pod = pods
            .tenant
            .get(&ObjectRef::new_with(&source.name, pods.ar.clone()).within(&source.namespace))?;
        Some(json!({
            "kind": "Pod",
            "namespace": source.namespace,
            "name": source.name,
            "uid": pod.uid(),
        }))
    }

    /// Recreates the tenant Service `o` with the cluster IPs of its host Service `host` when they
    /// differ (`translate::service_with_host_cluster_ips`): deleted with its uid and
    /// resourceVersion as preconditions (a change made meanwhile wins, and is looked at again),
    /// then created with the host's addresses. A tenant control plane that refuses them (an
    /// address outside its service range) gets the Service back with an address of its own, and
    /// it is not tried again for this Service.
    async fn cluster_ips_up(&self, key: &Key, o: &TenantObject, host: &Value) {
        if Some(key.kind) != self.service_kind
            || self
                .cluster_ips_refused
                .lock()
                .expect("refused lock")
                .contains(key)
        {
            return;
        }
        let Some(recreated) = translate::service_with_host_cluster_ips(&o.object, host) else {
            return;
        };
        let kind = &self.kinds[key.kind];
        let api = Api::<DynamicObject>::namespaced_with(
            self.tenant_client.clone(),
            &o.identity.namespace,
            &kind.ar,
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(o.identity.uid.clone()),
                resource_version: o.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        self.recreations.lock().expect("recreations lock").insert(
            key.clone(),
            Recreation {
                from_uid: o.identity.uid.clone(),
                to_uid: None,
                at: Instant::now(),
            },
        );
        self.tenant_limiter.acquire().await;
        if let Err(e) = api.delete(&o.identity.name, &params).await {
            self.recreations
                .lock()
                .expect("recreations lock")
                .remove(key);
            tracing::debug!(error = %e, "tenant Service not recreated; the next event retries");
            return;
        }
        let post = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        let host_ip = host.pointer("/spec/clusterIP").cloned();
        let create = |object: Value| async {
            let object: DynamicObject =
                serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
            self.tenant_limiter.acquire().await;
            api.create(&post, &object).await
        };
        let created = match create(recreated.clone()).await {
            Ok(c) if c.data.pointer("/spec/clusterIP") == host_ip.as_ref() => Ok(c),
            Ok(c) => Err((
                c,
                "the tenant control plane gave it another address".to_string(),
            )),
            Err(e) => {
                let mut own = recreated;
                for field in ["clusterIP", "clusterIPs", "ipFamilies"] {
                    match o.object.pointer(&format!("/spec/{field}")) {
                        Some(v) if field == "ipFamilies" => own["spec"][field] = v.clone(),
                        _ => {
                            if let Some(spec) = own["spec"].as_object_mut() {
                                spec.remove(field);
                            }
                        }
                    }
                }
                match create(own).await {
                    Ok(c) => Err((c, e.to_string())),
                    Err(again) => {
                        tracing::error!(
                            error = %again, refused = %e, tenant = %self.placement.tenant,
                            namespace = %o.identity.namespace, service = %o.identity.name,
                            "the tenant Service could not be created again after it was deleted \
                             to carry the host's cluster IPs"
                        );
                        return;
                    }
                }
            }
        };
        let new_uid = match created {
            Ok(c) => c.uid(),
            Err((c, why)) => {
                tracing::warn!(
                    tenant = %self.placement.tenant, namespace = %o.identity.namespace,
                    service = %o.identity.name, reason = %why,
                    "the tenant control plane refused the host Service's cluster IPs; the \
                     tenant Service keeps an address of its own"
                );
                self.cluster_ips_refused
                    .lock()
                    .expect("refused lock")
                    .insert(key.clone());
                c.uid()
            }
        };
        if let Some(r) = self
            .recreations
            .lock()
            .expect("recreations lock")
            .get_mut(key)
        {
            r.to_uid = new_uid;
            r.at = Instant::now();
        }
    }
}

/// The source uid a host object's provenance names.
fn source_uid_of(host: &Value) -> Option<&str> {
    host.pointer("/metadata/labels")
        .and_then(|l| l.get(provenance::SOURCE_UID))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("a valid object")
    }

    fn types(kind: &str) -> TypeMeta {
        TypeMeta {
            api_version: "v1".into(),
            kind: kind.into(),
        }
    }

    /// A real API server's list items have no apiVersion and kind (the List has them); the
    /// stores give them back, so that a tenant object that existed before the syncer started is
    /// readable like one that arrived in a watch event.
    #[test]
    fn a_listed_item_gets_the_apiversion_and_kind_of_its_list() {
        let item = || {
            dynamic(
                json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                "resourceVersion": "3"}, "data": {"k": "v"}}),
            )
        };
        assert!(
            TenantObject::from_value(to_value(&item())).is_err(),
            "as listed, the item is not a tenant object"
        );
        let mut listed = item();
        trim_tenant_object(&types("ConfigMap"), &mut listed);
        let object = TenantObject::from_value(to_value(&listed)).expect("a tenant object");
        assert_eq!(object.identity.api_version, "v1");
        assert_eq!(object.identity.kind, "ConfigMap");

        let mut host = item();
        trim_host_object(&types("ConfigMap"), false, &mut host);
        assert_eq!(to_value(&host)["kind"], "ConfigMap");

        let mut event = dynamic(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web"}}));
        trim_tenant_object(&types("Secret"), &mut event);
        assert_eq!(
            to_value(&event)["kind"],
            "ConfigMap",
            "what the server sent is kept"
        );
    }

    fn managed_fields(manager: &str) -> Value {
        json!([{"manager": manager, "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}])
    }

    #[test]
    fn the_host_store_keeps_what_decisions_read_and_drops_the_rest() {
        let meta = json!({"name": "cfg-x-web", "namespace": "tenant-acme", "uid": "h1",
            "resourceVersion": "7", "labels": {"tenantplane.io/tenant": "acme"},
            "annotations": {"tenantplane.io/digest": "d"},
            "managedFields": managed_fields("tenantplane-syncer")});
        let mut cm = dynamic(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"k": "a large value"}}),
        );
        trim_host_object(&types("ConfigMap"), false, &mut cm);
        let kept = to_value(&cm);
        assert_eq!(kept["metadata"]["labels"], meta["labels"]);
        assert_eq!(kept["metadata"]["annotations"], meta["annotations"]);
        assert_eq!(kept["metadata"]["resourceVersion"], "7");
        assert_eq!(kept.pointer("/metadata/managedFields"), None);
        assert_eq!(kept.get("data"), None);

        let mut svc = dynamic(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "10.0.0.7"}, "status": {"loadBalancer": {}}}),
        );
        trim_host_object(&types("Service"), true, &mut svc);
        let kept = to_value(&svc);
        assert_eq!(kept["spec"]["clusterIP"], "10.0.0.7", "cluster IPs flow up");
        assert_eq!(
            kept["status"],
            json!({"loadBalancer": {}}),
            "status flows up"
        );

        let mut pod = dynamic(json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "a", "image": "x"}]},
            "status": {"phase": "Running"}}));
        trim_host_object(&types("Pod"), false, &mut pod);
        let kept = to_value(&pod);
        assert_eq!(kept.get("spec"), None);
        assert_eq!(kept["status"]["phase"], "Running");
    }

    #[test]
    fn the_tenant_store_still_tells_who_wrote_an_object() {
        let endpoints = |manager: &str| {
            let mut e = dynamic(json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "web", "namespace": "shop",
                    "managedFields": managed_fields(manager)},
                "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}]}));
            trim_tenant_object(&types("Endpoints"), &mut e);
            to_value(&e)
        };
        let theirs = endpoints("endpoint-controller");
        assert!(reconcile::written_by_another_manager(
            &theirs,
            FIELD_MANAGER
        ));
        assert!(!reconcile::written_by_another_manager(
            &endpoints(FIELD_MANAGER),
            FIELD_MANAGER
        ));
        assert_eq!(theirs.pointer("/metadata/managedFields/0/fieldsV1"), None);
        assert_eq!(theirs["subsets"][0]["addresses"][0]["ip"], "10.0.0.9");
    }

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
