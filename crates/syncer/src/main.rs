//! `tenantplane-syncer`: syncs tenant objects into the host cluster, every decision recorded,
//! and serves the decision log (`tenantplane.decisions.v1.DecisionLog`) with gRPC health,
//! reflection and an admin port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use tenantplane_decision_log::grpc::DecisionLogService;
use tenantplane_service::{GrpcApi, ServiceArgs, shutdown_signal};
use tenantplane_syncer::record::AppenderLog;
use tenantplane_syncer::{Config, Syncer, isolation, planner, tenant};

/// The syncer. Every flag also reads an environment variable.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Host cluster kubeconfig file; default: in-cluster config or KUBECONFIG.
    #[arg(long, env = "TENANTPLANE_HOST_KUBECONFIG")]
    host_kubeconfig: Option<std::path::PathBuf>,
    /// Planner: `in-process` (the same core, no service) or the planner service's URL.
    #[arg(long, env = "TENANTPLANE_PLANNER", default_value = "in-process")]
    planner: String,
    /// Isolation compiler: `in-process` or the isolation-compiler service's URL.
    #[arg(
        long,
        env = "TENANTPLANE_ISOLATION_COMPILER",
        default_value = "in-process"
    )]
    isolation_compiler: String,
    /// Batches of objects in flight across all tenants.
    #[arg(long, env = "TENANTPLANE_SYNCER_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Workers per tenant (bounds what one noisy tenant can take).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_WORKERS_PER_TENANT",
        default_value_t = 4
    )]
    workers_per_tenant: usize,
    /// Objects per planner call.
    #[arg(long, env = "TENANTPLANE_SYNCER_BATCH", default_value_t = 64)]
    batch: usize,
    /// Host API requests per second (0: unlimited).
    #[arg(long, env = "TENANTPLANE_SYNCER_HOST_QPS", default_value_t = 0.0)]
    host_qps: f64,
    /// Host API burst.
    #[arg(long, env = "TENANTPLANE_SYNCER_HOST_BURST", default_value_t = 1000)]
    host_burst: u32,
    /// Requests per second to each tenant control plane (0: unlimited).
    #[arg(long, env = "TENANTPLANE_SYNCER_TENANT_QPS", default_value_t = 200.0)]
    tenant_qps: f64,
    /// Re-evaluate every object this often, in seconds (writes nothing when nothing changed).
    #[arg(long, env = "TENANTPLANE_SYNCER_RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// Durable decision log: `sqlite:PATH`, a file path, or `postgres://...` (none: Events and
    /// Tenant status only, and the DecisionLog service is not served).
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    decision_log: Option<String>,
    /// Address of the gRPC port (DecisionLog, health, reflection).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_GRPC_ADDR",
        default_value = "127.0.0.1:7421"
    )]
    grpc_addr: SocketAddr,
    /// Address of the admin HTTP port (/live, /ready: every tenant has listed its watches,
    /// /metrics).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_ADMIN_ADDR",
        default_value = "127.0.0.1:7422"
    )]
    admin_addr: SocketAddr,
    #[command(flatten)]
    service: ServiceArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Logs, and traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; flushed on return.
    let server = args
        .service
        .start(env!("CARGO_PKG_NAME"), args.grpc_addr, args.admin_addr)
        .await?;
    let planner: Arc<dyn planner::PlanService> = match args.planner.as_str() {
        "in-process" => Arc::new(planner::InProcessPlanner::default()),
        url => planner::connect(url).context("connecting to the planner")?,
    };
    let isolation: Arc<dyn isolation::IsolationService> = match args.isolation_compiler.as_str() {
        "in-process" => Arc::new(isolation::InProcessIsolation),
        url => isolation::connect(url).context("connecting to the isolation compiler")?,
    };
    let mut config = Config::new(planner, isolation);
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
    let syncer = Syncer::new(config).await?;
    let server = server.with_readiness(syncer.readiness());
    tokio::select! {
        served = server.serve(api, shutdown_signal()) => served,
        () = syncer.run() => anyhow::bail!("the Tenant controller stopped"),
    }
}
