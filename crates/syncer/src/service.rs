//! The syncer as a service: its flags ([`Args`]) and [`serve`], which wires the planner, the
//! isolation compiler, the decision log and the syncer's ports. The `tenantplane-syncer` binary
//! is this; `tenantplane up` runs the same as a child process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::{CheckpointConfig, KeySource};
use crate::metrics::SyncMetrics;
use crate::record::AppenderLog;
use crate::shard::ShardConfig;
use crate::{Config, Syncer, isolation, planner, tenant};
use anyhow::Context as _;
use prometheus_client::registry::Registry;
use tenantplane_client::ClientTlsArgs;
use tenantplane_decision_log::grpc::DecisionLogService;
use tenantplane_service::{GrpcApi, ServiceArgs, shutdown_signal};

/// The syncer. Every flag also reads an environment variable.
#[derive(Debug, clap::Parser)]
#[command(version, about)]
pub struct Args {
    /// Host cluster kubeconfig file; default: in-cluster config or KUBECONFIG.
    #[arg(long, env = "TENANTPLANE_HOST_KUBECONFIG")]
    pub host_kubeconfig: Option<std::path::PathBuf>,
    /// Planner: `in-process` (the same core, no service) or the planner service's URL.
    #[arg(long, env = "TENANTPLANE_PLANNER", default_value = "in-process")]
    pub planner: String,
    /// Isolation compiler: `in-process` or the isolation-compiler service's URL.
    #[arg(
        long,
        env = "TENANTPLANE_ISOLATION_COMPILER",
        default_value = "in-process"
    )]
    pub isolation_compiler: String,
    /// Batches of objects in flight across all tenants.
    #[arg(long, env = "TENANTPLANE_SYNCER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    /// Workers per tenant (bounds what one noisy tenant can take).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_WORKERS_PER_TENANT",
        default_value_t = tenant::Tuning::default().workers_per_tenant
    )]
    pub workers_per_tenant: usize,
    /// Objects per planner call.
    #[arg(long, env = "TENANTPLANE_SYNCER_BATCH", default_value_t = tenant::Tuning::default().batch)]
    pub batch: usize,
    /// Host API requests per second (0: unlimited).
    #[arg(long, env = "TENANTPLANE_SYNCER_HOST_QPS", default_value_t = 0.0)]
    pub host_qps: f64,
    /// Host API burst.
    #[arg(long, env = "TENANTPLANE_SYNCER_HOST_BURST", default_value_t = 1000)]
    pub host_burst: u32,
    /// Requests per second to each tenant control plane (0: unlimited).
    #[arg(long, env = "TENANTPLANE_SYNCER_TENANT_QPS", default_value_t = 200.0)]
    pub tenant_qps: f64,
    /// Re-evaluate every object this often, in seconds (writes nothing when nothing changed).
    #[arg(long, env = "TENANTPLANE_SYNCER_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Durable decision log: `sqlite:PATH`, a file path, or `postgres://...` (none: Events and
    /// Tenant status only, and the DecisionLog service is not served).
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    pub decision_log: Option<String>,
    /// Address of the gRPC port (DecisionLog, health, reflection).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_GRPC_ADDR",
        default_value = "127.0.0.1:7421"
    )]
    pub grpc_addr: SocketAddr,
    /// Address of the admin HTTP port (/live, /ready: every tenant has listed its watches,
    /// /metrics).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_ADMIN_ADDR",
        default_value = "127.0.0.1:7422"
    )]
    pub admin_addr: SocketAddr,
    /// Namespace of the membership Leases through which several syncer replicas split the
    /// Tenants (the syncer's own namespace). Unset: this replica serves every Tenant.
    #[arg(long, env = "TENANTPLANE_SYNCER_SHARD_LEASE_NAMESPACE")]
    pub shard_lease_namespace: Option<String>,
    /// This replica's id in the shard (its Lease's holder); default: `POD_NAME`, else the host
    /// name.
    #[arg(long, env = "TENANTPLANE_SYNCER_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Seconds a replica's Lease stays live without a renewal; a Tenant of a replica that
    /// stops is served again after about twice this.
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_SHARD_LEASE_SECONDS",
        default_value_t = 15
    )]
    pub shard_lease_seconds: u64,
    /// Seconds between renewals of the Lease (and listings of the other replicas').
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_SHARD_RENEW_SECONDS",
        default_value_t = 2
    )]
    pub shard_renew_seconds: u64,
    /// Ed25519 private key (PKCS#8 PEM or 32 raw bytes) that signs checkpoints of the decision
    /// log's head, published in the host cluster (docs/decision-log.md). Unset, and no
    /// --checkpoint-key-secret: no checkpoints are signed.
    #[arg(
        long,
        env = "TENANTPLANE_CHECKPOINT_KEY",
        conflicts_with = "checkpoint_key_secret"
    )]
    pub checkpoint_key: Option<std::path::PathBuf>,
    /// The checkpoint key from a Secret of the host cluster, NAMESPACE/NAME, its `ed25519.pem`
    /// entry.
    #[arg(long, env = "TENANTPLANE_CHECKPOINT_KEY_SECRET")]
    pub checkpoint_key_secret: Option<String>,
    /// Seconds between signed checkpoints (one more is signed at shutdown).
    #[arg(
        long,
        env = "TENANTPLANE_CHECKPOINT_INTERVAL_SECONDS",
        default_value_t = 60
    )]
    pub checkpoint_interval_seconds: u64,
    /// The log's name in its signed checkpoints (an auditor checks it is the log they mean).
    #[arg(
        long,
        env = "TENANTPLANE_CHECKPOINT_ORIGIN",
        default_value = "tenantplane"
    )]
    pub checkpoint_origin: String,
    /// Namespace of the ConfigMap the checkpoints are published in (the syncer's own).
    #[arg(
        long,
        env = "TENANTPLANE_CHECKPOINT_NAMESPACE",
        default_value = "tenantplane-system"
    )]
    pub checkpoint_namespace: String,
    /// TLS to the planner and isolation-compiler services.
    #[command(flatten)]
    pub client_tls: ClientTlsArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// Runs the syncer and serves its ports until SIGTERM or Ctrl-C.
pub async fn serve(args: Args) -> anyhow::Result<()> {
    // Logs, and traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; flushed on return.
    let server = args
        .service
        .start(env!("CARGO_PKG_NAME"), args.grpc_addr, args.admin_addr)
        .await?;
    let mut registry = Registry::default();
    let metrics = SyncMetrics::register(&mut registry);
    let server = server.with_registry(registry);
    let planner: Arc<dyn planner::PlanService> = match args.planner.as_str() {
        "in-process" => Arc::new(planner::InProcessPlanner::default()),
        url => planner::connect_with(&args.client_tls.config(url)?, metrics.clone())
            .context("connecting to the planner")?,
    };
    let isolation: Arc<dyn isolation::IsolationService> = match args.isolation_compiler.as_str() {
        "in-process" => Arc::new(isolation::InProcessIsolation),
        url => isolation::connect_with(&args.client_tls.config(url)?, metrics.clone())
            .context("connecting to the isolation compiler")?,
    };
    let mut config = Config::new(planner, isolation);
    config.metrics = metrics;
    config.host_kubeconfig = match &args.host_kubeconfig {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let mut api = GrpcApi::new();
    if let Some(url) = &args.decision_log {
        let store = tenantplane_decision_log::open(url)
            .await
            .with_context(|| format!("opening the decision log {url}"))?;
        config.decision_log = Some(AppenderLog::spawn(store.clone()));
        api = api.with_service(DecisionLogService::new(store).into_server());
    }
    config.concurrency = args.concurrency;
    config.host_qps = args.host_qps;
    config.host_burst = args.host_burst;
    config.tuning = tenant::Tuning {
        batch: args.batch,
        workers_per_tenant: args.workers_per_tenant,
        resync: Duration::from_secs(args.resync_seconds),
        tenant_qps: args.tenant_qps,
        ..tenant::Tuning::default()
    };
    config.tenant_resync = Duration::from_secs(args.resync_seconds);
    if let Some(namespace) = &args.shard_lease_namespace {
        let replica_id = match &args.replica_id {
            Some(id) => id.clone(),
            None => default_replica_id()?,
        };
        config.shard = Some(ShardConfig::new(
            &replica_id,
            namespace,
            Duration::from_secs(args.shard_lease_seconds),
            Duration::from_secs(args.shard_renew_seconds),
        )?);
    }
    let key = match (&args.checkpoint_key, &args.checkpoint_key_secret) {
        (Some(path), _) => Some(KeySource::File(path.clone())),
        (None, Some(secret)) => {
            let (namespace, name) = secret.split_once('/').with_context(|| {
                format!("--checkpoint-key-secret {secret:?}: expected NAMESPACE/NAME")
            })?;
            Some(KeySource::Secret {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
        }
        (None, None) => None,
    };
    if let Some(key) = key {
        if args.decision_log.is_none() {
            anyhow::bail!("--checkpoint-key needs --decision-log: it signs that log's head");
        }
        let replica = match &args.replica_id {
            Some(id) => id.clone(),
            None => default_replica_id()?,
        };
        config.checkpoints = Some(CheckpointConfig {
            key,
            origin: args.checkpoint_origin.clone(),
            interval: Duration::from_secs(args.checkpoint_interval_seconds.max(1)),
            namespace: args.checkpoint_namespace.clone(),
            replica,
        });
    }
    let syncer = Syncer::new(config).await?;
    let server = server.with_readiness(syncer.readiness());
    let served = tokio::select! {
        served = server.serve(api, shutdown_signal()) => served,
        () = syncer.run() => anyhow::bail!("the Tenant controller stopped"),
    };
    syncer.release().await;
    served
}

/// The replica id when none is given: `POD_NAME` (the downward API), else the host name.
fn default_replica_id() -> anyhow::Result<String> {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return Ok(name);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if host.is_empty() {
        anyhow::bail!("no --replica-id given and neither POD_NAME nor the host name is known");
    }
    Ok(host)
}
