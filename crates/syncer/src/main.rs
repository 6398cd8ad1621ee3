//! `tenantplane-syncer`: syncs tenant objects into the host cluster, every decision recorded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use tenantplane_syncer::{Config, isolation, planner, tenant};
use tenantplane_telemetry::LogFormat;

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
    /// Tenant status only).
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    decision_log: Option<String>,
    /// Admin server address (/live, /ready).
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_ADMIN_ADDR",
        default_value = "0.0.0.0:9440"
    )]
    admin_addr: SocketAddr,
    /// Log format.
    #[arg(long, env = "TENANTPLANE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter, in tracing's EnvFilter syntax.
    #[arg(long, env = "TENANTPLANE_LOG", default_value = "info,kube=warn")]
    log_filter: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Logs, and traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; flushed on return.
    let _telemetry =
        tenantplane_telemetry::init(env!("CARGO_PKG_NAME"), args.log_format, &args.log_filter)?;
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
    if let Some(url) = &args.decision_log {
        config.decision_log = Some(tenantplane_syncer::record::open_log(url).await?);
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
    config.admin_addr = Some(args.admin_addr);
    tokio::select! {
        r = tenantplane_syncer::run(config) => r,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("shutting down");
            Ok(())
        }
    }
}
