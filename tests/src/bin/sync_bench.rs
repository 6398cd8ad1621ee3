//! `tenantplane-sync-bench`: N ConfigMaps across M tenants synced end to end, beside the raw
//! write rate of a plain client to the same host API server, measured in the same run.
//!
//! The host and the tenant control planes are local API servers in this process, the planner
//! service runs on loopback in this process, and the syncer is the `tenantplane-syncer` binary
//! as a child process (so that its RSS is its own). Build both first:
//!
//! ```text
//! cargo build --release -p tenantplane-syncer -p tenantplane-e2e
//! target/release/tenantplane-sync-bench --objects 10000 --tenants 10
//! ```
//!
//! `--compare-tracing` measures the cost of tracing in the same run: the sync is run twice, each
//! time on a fresh host and fresh tenants, first with the syncer exporting every span over OTLP
//! to a receiver in this process, then with no exporter, and both rates are printed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::json;
use tenantplane_e2e::{SYSTEM_NAMESPACE, create, ensure_namespace, install_crds};
use tenantplane_local_apiserver::LocalApiServer;

#[derive(Debug, Parser)]
struct Args {
    /// Objects to sync, spread evenly over the tenants.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Tenants (each with its own control plane).
    #[arg(long, default_value_t = 4)]
    tenants: usize,
    /// Concurrent creates of the load generator (raw and synced runs alike).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// The syncer binary (default: next to this one).
    #[arg(long)]
    syncer: Option<PathBuf>,
    /// Run the sync twice, with tracing exported over OTLP and with tracing off, and compare.
    #[arg(long)]
    compare_tracing: bool,
    /// With --compare-tracing: rounds of (tracing off, tracing exported), alternating so that
    /// neither setting always runs first.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// An OTLP receiver counting the spans it is sent.
#[derive(Clone, Default)]
struct SpanCounter(Arc<std::sync::atomic::AtomicU64>);

#[tonic::async_trait]
impl TraceService for SpanCounter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let n: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// What one synced run measured.
struct Figures {
    rate: f64,
    secs: f64,
    create_secs: f64,
    latencies: Vec<Duration>,
    rss_now_kib: u64,
    rss_peak_kib: u64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn cm(ns: &str, name: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "bench"}},
        "data": {"key": "value", "name": name}}))
    .expect("a valid ConfigMap")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let host = LocalApiServer::builder().start().await?;
    let host_client = host.client().await?;

    // 1. Raw write rate of a plain client to the host API server.
    ensure_namespace(&host_client, "raw").await?;
    let raw_api: Api<ConfigMap> = Api::namespaced(host_client.clone(), "raw");
    let start = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let api = raw_api.clone();
            async move {
                api.create(&PostParams::default(), &cm("raw", &format!("raw-{i}")))
                    .await
            }
        })
        .buffer_unordered(args.clients)
        .try_collect::<Vec<_>>()
        .await?;
    let raw_secs = start.elapsed().as_secs_f64();
    let raw_rate = args.objects as f64 / raw_secs;

    // 2. The system: planner on loopback, tenants, the syncer as a child process.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let planner_addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(tenantplane_grpc::PlannerService::new().into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    println!(
        "objects: {}  tenants: {}  clients: {}",
        args.objects, args.tenants, args.clients
    );
    println!("raw host writes:   {raw_rate:8.0} objects/s ({raw_secs:.2} s)");
    if !args.compare_tracing {
        let run = synced_run(&args, planner_addr, None).await?;
        print_run("synced end to end", &run, raw_rate);
        return Ok(());
    }
    let spans = SpanCounter::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let otlp_addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(spans.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let (mut traced_rates, mut plain_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        for traced in [round % 2 == 1, round % 2 == 0] {
            let otlp = traced.then(|| format!("http://{otlp_addr}"));
            let run = synced_run(&args, planner_addr, otlp).await?;
            if traced {
                print_run(&format!("round {round}, tracing exported"), &run, raw_rate);
                traced_rates.push(run.rate);
            } else {
                print_run(&format!("round {round}, tracing off"), &run, raw_rate);
                plain_rates.push(run.rate);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (traced, plain) = (mean(&traced_rates), mean(&plain_rates));
    println!(
        "spans received by the OTLP receiver: {}",
        spans.0.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "mean: tracing off {plain:.0} objects/s, tracing exported {traced:.0} objects/s; \
         tracing overhead {:.1}%",
        (1.0 - traced / plain) * 100.0
    );
    Ok(())
}

fn print_run(label: &str, run: &Figures, raw_rate: f64) {
    println!(
        "{label}: {:8.0} objects/s ({:.2} s; tenant creates took {:.2} s); ratio to raw {:.2}",
        run.rate,
        run.secs,
        run.create_secs,
        run.rate / raw_rate
    );
    println!(
        "  latency tenant create -> host present: p50 {:?}  p99 {:?}  max {:?}",
        percentile(&run.latencies, 0.5),
        percentile(&run.latencies, 0.99),
        run.latencies.last().copied().unwrap_or_default()
    );
    println!(
        "  syncer RSS: {:.1} MiB now, {:.1} MiB peak",
        run.rss_now_kib as f64 / 1024.0,
        run.rss_peak_kib as f64 / 1024.0
    );
}

/// Syncs `args.objects` ConfigMaps over `args.tenants` fresh tenants into a fresh host, the
/// syncer exporting spans to `otlp` when given.
async fn synced_run(
    args: &Args,
    planner_addr: std::net::SocketAddr,
    otlp: Option<String>,
) -> anyhow::Result<Figures> {
    let host = LocalApiServer::builder().start().await?;
    let host_client = host.client().await?;
    install_crds(&host_client).await?;
    ensure_namespace(&host_client, SYSTEM_NAMESPACE).await?;
    let mut tenant_servers = Vec::new();
    let mut tenant_clients = Vec::new();
    for t in 0..args.tenants {
        let server = LocalApiServer::builder().start().await?;
        let client = server.client().await?;
        ensure_namespace(&client, "bench").await?;
        let name = format!("bench{t}");
        create(
            &host_client,
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
            "stringData": {"config": server.kubeconfig("tenant")}}),
        )
        .await?;
        create(&host_client, json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": SYSTEM_NAMESPACE, "name": name, "key": "config"}}}}))
            .await?;
        tenant_servers.push(server);
        tenant_clients.push(client);
    }
    let dir = std::env::temp_dir().join(format!("tenantplane-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let host_kubeconfig = dir.join("host.kubeconfig");
    host.write_kubeconfig(&host_kubeconfig, "host")?;
    let syncer_bin = match &args.syncer {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no parent directory")?
            .join("tenantplane-syncer"),
    };
    let mut command = tokio::process::Command::new(&syncer_bin);
    match &otlp {
        Some(endpoint) => command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        None => command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
    };
    let mut syncer = command
        .arg("--grpc-addr")
        .arg("127.0.0.1:0")
        .arg("--host-kubeconfig")
        .arg(&host_kubeconfig)
        .arg("--planner")
        .arg(format!("http://{planner_addr}"))
        .arg("--admin-addr")
        .arg("127.0.0.1:0")
        .env("TENANTPLANE_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} (build it first)", syncer_bin.display()))?;
    let pid = syncer.id().context("syncer pid")?;

    // Host arrivals, by host name.
    let arrivals: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    {
        let arrivals = arrivals.clone();
        let api: Api<ConfigMap> = Api::all(host_client.clone());
        tokio::spawn(async move {
            let mut stream = watcher(
                api,
                watcher::Config::default().labels("tenantplane.io/managed=true"),
            )
            .touched_objects()
            .boxed();
            while let Some(Ok(o)) = stream.next().await {
                let name = o.metadata.name.unwrap_or_default();
                arrivals
                    .lock()
                    .expect("lock")
                    .entry(name)
                    .or_insert_with(Instant::now);
            }
        });
    }
    // Wait until every tenant's host namespace exists (the tenants are served).
    for t in 0..args.tenants {
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host_client.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        while ns_api.get_opt(&format!("tenant-bench{t}")).await?.is_none() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "tenant bench{t} was never served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let rss_peak = Arc::new(Mutex::new(0u64));
    {
        let rss_peak = rss_peak.clone();
        tokio::spawn(async move {
            loop {
                if let Some(r) = rss_kib(pid) {
                    let mut p = rss_peak.lock().expect("lock");
                    *p = (*p).max(r);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let client = tenant_clients[i % args.tenants].clone();
            let created = created.clone();
            async move {
                let name = format!("o{i}");
                let api: Api<ConfigMap> = Api::namespaced(client, "bench");
                let at = Instant::now();
                api.create(&PostParams::default(), &cm("bench", &name))
                    .await?;
                created
                    .lock()
                    .expect("lock")
                    .insert(format!("{name}-x-bench"), at);
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(args.clients)
        .try_collect::<Vec<_>>()
        .await?;
    let create_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n = arrivals.lock().expect("lock").len();
        if n >= args.objects {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {n} of {} objects arrived",
            args.objects
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let arrivals = arrivals.lock().expect("lock").clone();
    let created = created.lock().expect("lock").clone();
    let last = arrivals.values().max().copied().unwrap_or(start);
    let sync_secs = (last - start).as_secs_f64();
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(name, at)| arrivals.get(name).map(|a| a.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_now = rss_kib(pid).unwrap_or(0);
    let rss_peak = *rss_peak.lock().expect("lock");
    syncer.kill().await.ok();
    let _ = std::fs::remove_dir_all(&dir);
    drop(tenant_servers);
    Ok(Figures {
        rate: args.objects as f64 / sync_secs,
        secs: sync_secs,
        create_secs,
        latencies,
        rss_now_kib: rss_now,
        rss_peak_kib: rss_peak,
    })
}
