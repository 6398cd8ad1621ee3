//! The syncer: the controller at the heart of tenantplane. It watches Tenants in the host
//! cluster, connects to each tenant's control plane through the kubeconfig Secret the Tenant
//! names, and keeps the host namespace of the tenant equal to what the tenant's SyncPolicy says
//! its objects should become, recording a decision for every step.
//!
//! ```text
//!  host: Tenant ──controller──▶ finalizer · host namespace · isolation (compile, apply, prune)
//!            │                        └──▶ one tenant runtime per Tenant
//!            ▼
//!  tenant API ──watch──▶ caches ──▶ queue ──▶ gather ──▶ plan (gRPC, batched) ──▶ decide (pure)
//!       ▲                                                                               │
//!       ├── Events ◀────────────────────────────────────────────── record ◀─────────────┘
//!       │                                                            ▼
//!       └── up-sync: status, Endpoints, cluster IPs ◀── settle ◀── act (host write)
//! ```
//!
//! Layers, least powerful first: [`reconcile`] is pure (tenant object, plan, host object → decision
//! and host write), forms every decision the syncer takes and is tested without a cluster;
//! [`writer`] makes every write; [`record`] is the one place a decision is recorded, and
//! [`tenant_status`] writes what it tallied to the Tenant's status; [`discovery`] finds the kinds a
//! Tenant's policy syncs in its control plane, one API group version at a time; [`tenant`] is the
//! runtime of one tenant, a module a step of the path of its objects: `tenant::watches` (the
//! watches and the keys they queue), `tenant::caches` (gather: what decisions read, with the
//! own-write rules), `tenant::plan` (the planner call of a batch, through [`planner`]), decide
//! ([`reconcile`]), record ([`record`]), `tenant::act` (the host write), then settle, with
//! `tenant::upsync` (status, Endpoints and Service cluster IPs up into the tenant control plane);
//! [`settle`] closes the open host actions an earlier life left; [`controller`] runs the Tenant
//! controller (its runtime table, a deleted Tenant's cleanup); [`clients`] builds the clients of
//! the host and of the tenant control planes; [`run`] wires everything from a
//! [`Config`]. [`trace`] opens one span per decision and [`metrics`] counts and times them.
//! [`shard`] splits the Tenants between several replicas through Leases. [`tenant_admission`] keeps
//! the SyncPolicy's Reject rules enforced at admission in each tenant control plane.
//! docs/syncer.md describes the behaviour and its guarantees.

#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod clients;
pub mod compiled_set;
pub mod controller;
pub mod discovery;
pub mod host_watches;
pub mod isolation;
pub mod metrics;
pub mod planner;
pub mod pod_api;
pub mod queue;
pub mod ratelimit;
pub mod reconcile;
pub mod record;
pub mod service;
pub mod settle;
pub mod shard;
pub mod tenant;
pub mod tenant_admission;
pub mod tenant_status;
#[cfg(test)]
mod testing;
pub mod trace;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::Semaphore;

pub use controller::FINALIZER;
pub use record::COMPONENT;
pub use writer::FIELD_MANAGER;

/// Everything the syncer needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Host cluster kubeconfig (YAML); `None`: in-cluster config or `KUBECONFIG`.
    pub host_kubeconfig: Option<String>,
    /// Where plans come from.
    pub planner: Arc<dyn planner::PlanService>,
    /// Where isolation compilations come from.
    pub isolation: Arc<dyn isolation::IsolationService>,
    /// The durable decision log, when configured.
    pub decision_log: Option<Arc<dyn record::DecisionLog>>,
    /// Batches in flight across all tenants.
    pub concurrency: usize,
    /// Host requests per second (all tenants together).
    pub host_qps: f64,
    /// Host request burst.
    pub host_burst: u32,
    /// Per-tenant tuning.
    pub tuning: tenant::Tuning,
    /// How often each Tenant is reconciled without a change.
    pub tenant_resync: Duration,
    /// How often a Tenant's status is written at most.
    pub status_interval: Duration,
    /// Where decisions, their latency, the services' call latency and queue depths are counted.
    pub metrics: metrics::SyncMetrics,
    /// Lease sharding between replicas; `None` (the default): this replica serves every Tenant.
    pub shard: Option<shard::ShardConfig>,
    /// Signed checkpoints of the decision log, published in the host cluster; `None` (the
    /// default): none are signed.
    pub checkpoints: Option<checkpoint::CheckpointConfig>,
}

impl Config {
    /// Defaults around a planner and an isolation compiler.
    pub fn new(
        planner: Arc<dyn planner::PlanService>,
        isolation: Arc<dyn isolation::IsolationService>,
    ) -> Self {
        Config {
            host_kubeconfig: None,
            planner,
            isolation,
            decision_log: None,
            concurrency: 16,
            host_qps: 0.0,
            host_burst: 1000,
            tuning: tenant::Tuning::default(),
            tenant_resync: Duration::from_secs(300),
            status_interval: Duration::from_secs(1),
            metrics: metrics::SyncMetrics::default(),
            shard: None,
            checkpoints: None,
        }
    }
}

/// A client for the host cluster.
pub async fn host_client(kubeconfig: Option<&str>) -> anyhow::Result<kube::Client> {
    match kubeconfig {
        Some(yaml) => {
            let kc =
                kube::config::Kubeconfig::from_yaml(yaml).context("parsing the host kubeconfig")?;
            let config = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .context("loading the host kubeconfig")?;
            clients::client(config, clients::HOST_IDLE)
        }
        None => {
            let config = kube::Config::infer()
                .await
                .context("no host kubeconfig given and none found (in-cluster or KUBECONFIG)")?;
            clients::client(config, clients::HOST_IDLE)
        }
    }
}

/// The username a cluster authenticates `client` as (a SelfSubjectReview), `None` when the
/// server does not answer such reviews (a server without authentication). The isolation
/// compiler's admission policies let only the syncer's username change tenantplane-managed
/// host objects: whoever runs the syncer with their own credentials gives it this name.
pub async fn authenticated_username(client: &kube::Client) -> anyhow::Result<Option<String>> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    match reviews
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
    {
        Ok(review) => Ok(review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(anyhow::Error::from(e).context("asking the cluster who this client is")),
    }
}

/// A syncer connected to its host cluster, ready to run.
#[derive(Debug)]
pub struct Syncer {
    ctx: Arc<controller::Context>,
    checkpoints: Option<checkpoint::Publisher>,
}

impl Syncer {
    /// Connects to the host cluster.
    pub async fn new(config: Config) -> anyhow::Result<Syncer> {
        let host = host_client(config.host_kubeconfig.as_deref()).await?;
        // Open host actions up to here were recorded by an earlier life of the syncer.
        let log_start = match config.decision_log.as_ref().and_then(|l| l.store()) {
            Some(store) => {
                store
                    .head()
                    .await
                    .context("reading the decision log's head")?
                    .sequence
            }
            None => 0,
        };
        let shared = Arc::new(tenant::Shared {
            log_start,
            host_watches: host_watches::HostWatches::new(host.clone()),
            host,
            host_writer: writer::Writer::host(Arc::new(ratelimit::RateLimiter::new(
                config.host_qps,
                config.host_burst,
            ))),
            planner: config.planner.clone(),
            log: config.decision_log.clone(),
            permits: Semaphore::new(config.concurrency.max(1)),
            tuning: config.tuning.clone(),
            metrics: config.metrics.clone(),
        });
        let checkpoints = match (&config.checkpoints, config.decision_log.as_ref()) {
            (Some(c), Some(log)) => {
                let store = log
                    .store()
                    .context("signed checkpoints need a decision log store")?;
                Some(checkpoint::Publisher::new(store, shared.host.clone(), c.clone()).await?)
            }
            (Some(_), None) => anyhow::bail!("signed checkpoints need a decision log"),
            (None, _) => None,
        };
        let shard = config
            .shard
            .map(|c| Arc::new(shard::Shard::new(shared.host.clone(), c)));
        let ctx = controller::Context::new(
            shared,
            config.isolation.clone(),
            config.tenant_resync,
            config.status_interval,
            shard,
        );
        Ok(Syncer { ctx, checkpoints })
    }

    /// Whether every running tenant has listed its watches (what `/ready` reports).
    pub fn readiness(&self) -> tenantplane_service::ReadinessProbe {
        let ctx = self.ctx.clone();
        tenantplane_service::ReadinessProbe::new(move || {
            let ctx = ctx.clone();
            async move { ctx.all_ready().await }
        })
    }

    /// Runs the Tenant controller until it stops, and publishes signed checkpoints of the
    /// decision log at their interval meanwhile.
    pub async fn run(&self) {
        match &self.checkpoints {
            Some(publisher) => {
                tokio::select! {
                    () = controller::run(self.ctx.clone()) => {}
                    () = publisher.run() => {}
                }
            }
            None => controller::run(self.ctx.clone()).await,
        }
    }

    /// Stops every tenant runtime, then, when sharded, deletes this replica's Lease so that the
    /// other replicas take its Tenants over without waiting for it to expire. Call it once
    /// [`Syncer::run`] has been stopped.
    pub async fn release(&self) {
        self.ctx.stop_all().await;
        if let Some(publisher) = &self.checkpoints
            && let Err(e) = publisher.publish().await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "publishing the final checkpoint failed"
            );
        }
        if let Some(shard) = &self.ctx.shard {
            shard.release().await;
        }
    }
}

/// Connects and runs the syncer until the Tenant controller stops.
pub async fn run(config: Config) -> anyhow::Result<()> {
    Syncer::new(config).await?.run().await;
    Ok(())
}
