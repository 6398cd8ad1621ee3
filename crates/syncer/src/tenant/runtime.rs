//! A Tenant's runtime: started with the stores of its synced and referenceable kinds on both
//! sides, their watches (on the host, its namespace's share of the replica's watch of each kind:
//! [`crate::host_watches`]), its workers and the resync timer (nothing is decided before every
//! store has listed and the open host actions of an earlier life are settled); stopped when it
//! is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::discovery::ApiCapabilities;
use kube::runtime::reflector;
use tenantplane_api::{Tenant, conditions};
use tenantplane_core::boundary::Boundary;
use tenantplane_core::mapping::TenantPlacement;
use tenantplane_core::reference::REFERENCEABLE_KINDS;
use tenantplane_core::{CompiledPolicy, Planner};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::caches::{Caches, Kind};
use super::upsync::UpSync;
use super::{PodContext, Shared, Worker, tokens, watches};
use crate::metrics::SyncMetrics;
use crate::queue::WorkQueue;
use crate::ratelimit::RateLimiter;
use crate::record::DecisionRecorder;
use crate::tenant_status::TenantLedger;

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

impl TenantRuntime {
    /// Runs `task` as long as this runtime: it is stopped with it.
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }
}

impl Drop for TenantRuntime {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.metrics.forget_tenant(&self.tenant);
    }
}

/// Starts the runtime of one tenant.
pub async fn start(
    shared: Arc<Shared>,
    tenant: Tenant,
    (policy_text, policy): (Option<String>, CompiledPolicy),
    profile: Option<(String, Boundary)>,
    kinds: Vec<(ApiResource, ApiCapabilities)>,
    (tenant_client, pods): (Client, PodContext),
    ledger: TenantLedger,
) -> anyhow::Result<TenantRuntime> {
    let placement = TenantPlacement::from(&tenant);
    let host_ns = placement.host_namespace.clone();
    let mut kind_table = Vec::new();
    let mut kind_watches = Vec::new();
    for (index, (ar, caps)) in kinds.iter().enumerate() {
        let tenant_api = Api::<DynamicObject>::all_with(tenant_client.clone(), ar);
        let host_api = Api::<DynamicObject>::namespaced_with(shared.host.clone(), &host_ns, ar);
        let host_events = shared.host_watches.subscribe(ar, &host_ns);
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
        kind_watches.push(watches::KindWatches {
            index,
            tenant: (tenant_api, tenant_writer),
            host: (host_events, host_writer),
        });
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
        let events = shared.host_watches.subscribe(&ar, &host_ns);
        reference_watches.push((ar, events, writer));
    }
    let tuning = shared.tuning.clone();
    let metrics = shared.metrics.clone();
    let tenant_name = placement.tenant.clone();
    let (profile, planner) = match profile {
        Some((text, boundary)) => (
            Some(text),
            Planner::new(&tenant, policy).with_boundary(boundary),
        ),
        None => (None, Planner::new(&tenant, policy)),
    };
    let queue = WorkQueue::with_depth_gauge(metrics.queue_depth(&tenant_name));
    let tenant_limiter = Arc::new(RateLimiter::new(tuning.tenant_qps, tuning.tenant_burst));
    let (status, reason, message) = pods.world.api.condition();
    ledger.set_condition(conditions::POD_API_ACCESS, status, reason, &message);
    let worker = Arc::new(Worker {
        recorder: DecisionRecorder::new(
            tenant_client.clone(),
            ledger,
            shared.log.clone(),
            shared.metrics.clone(),
        ),
        upsync: UpSync::new(tenant_client.clone(), tenant_limiter.clone()),
        tenant_client: tenant_client.clone(),
        tenant_limiter,
        pods,
        tokens: tokens::Tokens::default(),
        shared,
        policy: policy_text,
        profile,
        planner,
        caches: Caches::new(placement, kind_table, referenced),
        queue,
        attempts: Mutex::new(HashMap::new()),
        tenant,
    });

    let mut tasks = watches::spawn(&worker, kind_watches, reference_watches);
    let (ready_tx, ready) = watch::channel(false);
    let w = worker.clone();
    tasks.push(tokio::spawn(async move {
        // Nothing is decided before both sides are listed: an unlisted store would look like
        // deleted tenant objects and delete their host objects.
        for store in w.caches.stores() {
            let _ = store.wait_until_ready().await;
        }
        if let Some(log) = &w.shared.log {
            let tenant = &w.caches.placement.tenant;
            let settled = crate::settle::settle_tenant(
                log,
                &w.shared.host,
                &tenant_client,
                tenant,
                w.shared.log_start,
            );
            // Boxed, so that the task does not hold its size through the resyncs that follow.
            if let Err(e) = Box::pin(settled).await {
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
