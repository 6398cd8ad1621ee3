//! `tenantplane-sync-bench`: N ConfigMaps across M tenants synced end to end, beside the raw
//! write rate of plain clients to the same host API server, measured in the same run.
//!
//! The host and the tenant control planes are local API servers in this process, the planner
//! service runs on loopback in this process, and the syncer is the `tenantplane-syncer` binary
//! as a child process (so that its RSS is its own). Build both first:
//!
//! ```text
//! cargo build --release -p tenantplane-syncer -p tenantplane-e2e --bins
//! target/release/tenantplane-sync-bench --objects 10000 --tenants 10
//! ```
//!
//! What the numbers mean:
//!
//! - raw: N ConfigMaps written straight into the host API server by `--clients` concurrent
//!   clients; objects/s over the time from the first request until a watch of the host has
//!   shown all N (the synced figures are timed by the same kind of watch).
//! - backlog (the default, and what the goal ratio compares): the N tenant ConfigMaps and the
//!   Tenants exist before the syncer starts; objects/s is N over the time from starting the
//!   syncer until the host watch has shown all N host ConfigMaps. Both numbers are N host
//!   writes into the same host API server in the same process; the synced one includes
//!   everything the syncer does per object (start-up, lists, planner calls, host writes, tenant
//!   Events, Tenant status).
//! - live (`--live`): the syncer runs while the load generator creates the tenant ConfigMaps;
//!   it reports the latency from a tenant create to its host object's arrival (p50, p99), and
//!   objects/s over the create window, which is bounded by how fast the load generator can
//!   create tenant objects: it is compared with that create rate, not with the raw rate.
//! - CPU per object: the CPU time of the syncer and of this process over a synced run (and of
//!   this process over the raw run), divided by N: what the rates cost, steadier than the rates
//!   on a shared machine.
//!
//! `--compare-tracing` measures the cost of tracing in the same run: the sync is run twice, each
//! time on a fresh host and fresh tenants, first with the syncer exporting every span over OTLP
//! to a receiver in this process, then with no exporter (`--rounds N` pairs, alternating which
//! goes first), and the mean rates and the syncer's CPU per object of both are printed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
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
    /// Create the tenant objects while the syncer runs and report the latency from tenant create
    /// to host object present (default: a backlog synced from the syncer's start).
    #[arg(long)]
    live: bool,
    /// Run the sync twice, with tracing exported over OTLP and with tracing off, and compare.
    #[arg(long)]
    compare_tracing: bool,
    /// With --compare-tracing: rounds of (tracing off, tracing exported), alternating so that
    /// neither setting always runs first.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// The OTLP receiver of `--compare-tracing`: the trace service of the OpenTelemetry collector
/// protocol, counting the spans each export request carries.
///
/// It stands for a collector that runs on another machine, yet shares this machine's two cores
/// with the syncer; so it reads only what it counts. The request is decoded against
/// [`SpanCount`], a view of `ExportTraceServiceRequest` that keeps the nesting down to the
/// spans and skips their fields (prost walks them on the wire and builds nothing). The tests'
/// receiver (`tests/tests/tracing.rs`) decodes everything and checks the attributes.
#[derive(Clone, Default)]
struct SpanCounter(Arc<AtomicU64>);

/// `ExportTraceServiceRequest` as far as the span count: `resource_spans` (1) →
/// `scope_spans` (2) → `spans` (2), every other field skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct SpanCount {
    #[prost(message, repeated, tag = "1")]
    resource_spans: Vec<ResourceSpanCount>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResourceSpanCount {
    #[prost(message, repeated, tag = "2")]
    scope_spans: Vec<ScopeSpanCount>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ScopeSpanCount {
    #[prost(message, repeated, tag = "2")]
    spans: Vec<SkippedSpan>,
}

/// A span, its fields skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct SkippedSpan {}

impl tonic::server::NamedService for SpanCounter {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl tonic::server::UnaryService<SpanCount> for SpanCounter {
    type Response = ExportTraceServiceResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<SpanCount>) -> Self::Future {
        let n: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(n as u64, Ordering::Relaxed);
        std::future::ready(Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        })))
    }
}

impl<B> tower::Service<http::Request<B>> for SpanCounter
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    /// Every path is answered as `Export`, the service's one method.
    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let counter = self.clone();
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<ExportTraceServiceResponse, SpanCount>::default();
            Ok(tonic::server::Grpc::new(codec)
                .unary(counter, request)
                .await)
        })
    }
}

/// What one synced run measured.
struct Figures {
    /// Synced objects/s: over the time from the syncer's start (backlog) or from the first tenant
    /// create (live) until the last host object arrived.
    rate: f64,
    secs: f64,
    /// Backlog: from the syncer's start to the first host object. Live: how long the tenant
    /// creates took.
    lead_secs: f64,
    /// Live only: tenant create -> host object present, sorted.
    latencies: Vec<Duration>,
    rss_now_kib: u64,
    rss_peak_kib: u64,
    /// N, the objects synced.
    objects: f64,
    /// CPU seconds the syncer used from its start until the last host object arrived.
    syncer_cpu: f64,
    /// CPU seconds this process (API servers, planner, load generator, watch) used in that time.
    process_cpu: f64,
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

/// CPU time (user + system, all threads) the process `pid` has used so far, in seconds; from
/// `/proc/PID/stat`, whose times are in USER_HZ ticks (100 per second on Linux).
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start with the state, field 3;
    // utime and stime are fields 14 and 15.
    let mut fields = stat.rsplit_once(") ")?.1.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
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

    // 1. Raw write rate of plain clients to the host API server.
    ensure_namespace(&host_client, "raw").await?;
    let raw_arrivals =
        watch_arrivals(Api::namespaced(host_client.clone(), "raw"), "app=bench").await?;
    let start = Instant::now();
    let cpu_before = cpu_secs(std::process::id()).unwrap_or(0.0);
    create_configmaps(
        (0..args.objects).map(|i| (host_client.clone(), "raw", format!("raw-{i}"))),
        args.clients,
    )
    .await?;
    let raw_arrivals = all_arrived(&raw_arrivals, args.objects).await?;
    let last = raw_arrivals.values().max().copied().unwrap_or(start);
    let raw_secs = (last - start).as_secs_f64();
    let raw_rate = args.objects as f64 / raw_secs;
    let raw_cpu = cpu_secs(std::process::id()).unwrap_or(0.0) - cpu_before;

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
    let raw_cpu_per_object = raw_cpu / args.objects as f64;
    println!(
        "  CPU per object: {:.0} µs (load generator, host API server and watch, all in this process)",
        raw_cpu_per_object * 1e6
    );
    if !args.compare_tracing {
        let run = synced_run(&args, planner_addr, None).await?;
        let label = if args.live {
            "synced live"
        } else {
            "synced backlog"
        };
        print_run(label, args.live, &run, raw_rate, raw_cpu_per_object);
        return Ok(());
    }
    let spans = SpanCounter::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let otlp_addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(spans.clone())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // Per setting: the rate and the CPU per object of the syncer and of this process.
    let (mut traced, mut plain) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        for exported in [round % 2 == 1, round % 2 == 0] {
            let otlp = exported.then(|| format!("http://{otlp_addr}"));
            let run = synced_run(&args, planner_addr, otlp).await?;
            let setting = if exported {
                "tracing exported"
            } else {
                "tracing off"
            };
            print_run(
                &format!("round {round}, {setting}"),
                args.live,
                &run,
                raw_rate,
                raw_cpu_per_object,
            );
            let figures = (
                run.rate,
                run.syncer_cpu / run.objects,
                run.process_cpu / run.objects,
            );
            if exported {
                traced.push(figures);
            } else {
                plain.push(figures);
            }
        }
    }
    let mean = |v: &[(f64, f64, f64)], pick: fn(&(f64, f64, f64)) -> f64| {
        v.iter().map(pick).sum::<f64>() / v.len() as f64
    };
    println!(
        "spans received by the OTLP receiver: {}",
        spans.0.load(Ordering::Relaxed)
    );
    let (traced_rate, plain_rate) = (mean(&traced, |f| f.0), mean(&plain, |f| f.0));
    println!(
        "mean: tracing off {plain_rate:.0} objects/s, tracing exported {traced_rate:.0} objects/s; \
         tracing overhead {:.1}%",
        (1.0 - traced_rate / plain_rate) * 100.0
    );
    let (traced_cpu, plain_cpu) = (mean(&traced, |f| f.1), mean(&plain, |f| f.1));
    println!(
        "mean syncer CPU per object: tracing off {:.0} µs, tracing exported {:.0} µs (+{:.1}%); \
         this process (receiving the spans too): {:.0} µs and {:.0} µs",
        plain_cpu * 1e6,
        traced_cpu * 1e6,
        (traced_cpu / plain_cpu - 1.0) * 100.0,
        mean(&plain, |f| f.2) * 1e6,
        mean(&traced, |f| f.2) * 1e6
    );
    Ok(())
}

/// When each ConfigMap matching `selector` first showed in a watch of `api`, by name; returns
/// once the watch has listed.
async fn watch_arrivals(
    api: Api<ConfigMap>,
    selector: &str,
) -> anyhow::Result<Arc<Mutex<HashMap<String, Instant>>>> {
    let arrivals: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = arrivals.clone();
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let mut stream = watcher(api, watcher::Config::default().labels(selector)).boxed();
    tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        while let Some(Ok(event)) = stream.next().await {
            let o = match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                watcher::Event::InitDone => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                _ => continue,
            };
            seen.lock()
                .expect("lock")
                .entry(o.metadata.name.unwrap_or_default())
                .or_insert_with(Instant::now);
        }
    });
    listed
        .await
        .context("the host watch ended before listing")?;
    Ok(arrivals)
}

/// Waits until `n` objects have arrived (at most 15 minutes); their arrival times.
async fn all_arrived(
    arrivals: &Mutex<HashMap<String, Instant>>,
    n: usize,
) -> anyhow::Result<HashMap<String, Instant>> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let arrived = arrivals.lock().expect("lock").clone();
        if arrived.len() >= n {
            return Ok(arrived);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {n} objects arrived",
            arrived.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates the ConfigMaps `(client, namespace, name)`, `clients` at a time; when each create
/// was sent, by name.
async fn create_configmaps(
    objects: impl Iterator<Item = (kube::Client, &'static str, String)>,
    clients: usize,
) -> anyhow::Result<HashMap<String, Instant>> {
    let sent = futures::stream::iter(objects)
        .map(|(client, namespace, name)| async move {
            let at = Instant::now();
            Api::<ConfigMap>::namespaced(client, namespace)
                .create(&PostParams::default(), &cm(namespace, &name))
                .await?;
            Ok::<_, kube::Error>((name, at))
        })
        .buffer_unordered(clients)
        .try_collect()
        .await?;
    Ok(sent)
}

fn print_run(label: &str, live: bool, run: &Figures, raw_rate: f64, raw_cpu_per_object: f64) {
    if live {
        let create_rate = run.latencies.len() as f64 / run.lead_secs;
        println!(
            "{label}: {:8.0} objects/s arrived on the host over {:.2} s; the tenant creates ran \
             at {create_rate:.0} objects/s ({:.2} s); arrivals / creates {:.2}",
            run.rate,
            run.secs,
            run.lead_secs,
            run.rate / create_rate
        );
        println!(
            "  latency tenant create -> host present: p50 {:?}  p99 {:?}  max {:?}",
            percentile(&run.latencies, 0.5),
            percentile(&run.latencies, 0.99),
            run.latencies.last().copied().unwrap_or_default()
        );
    } else {
        println!(
            "{label}: {:8.0} objects/s ({:.2} s from the syncer's start; first host object after \
             {:.2} s); ratio to raw {:.2}",
            run.rate,
            run.secs,
            run.lead_secs,
            run.rate / raw_rate
        );
    }
    println!(
        "  syncer RSS: {:.1} MiB at the end, {:.1} MiB peak",
        run.rss_now_kib as f64 / 1024.0,
        run.rss_peak_kib as f64 / 1024.0
    );
    let (syncer, process) = (run.syncer_cpu / run.objects, run.process_cpu / run.objects);
    println!(
        "  CPU per object: syncer {:.0} µs, this process {:.0} µs (API servers, planner, watch); \
         raw / synced {:.2}",
        syncer * 1e6,
        process * 1e6,
        raw_cpu_per_object / (syncer + process)
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
    let tenant_objects = || {
        (0..args.objects).map(|i| {
            (
                tenant_clients[i % args.tenants].clone(),
                "bench",
                format!("o{i}"),
            )
        })
    };
    if !args.live {
        create_configmaps(tenant_objects(), args.clients).await?;
    }

    let arrivals =
        watch_arrivals(Api::all(host_client.clone()), "tenantplane.io/managed=true").await?;

    let syncer_started = Instant::now();
    let process_cpu_before = cpu_secs(std::process::id()).unwrap_or(0.0);
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
    let rss_peak = Arc::new(AtomicU64::new(0));
    {
        let rss_peak = rss_peak.clone();
        tokio::spawn(async move {
            while let Some(r) = rss_kib(pid) {
                rss_peak.fetch_max(r, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    let (start, created) = if args.live {
        // Wait until every tenant's host namespace exists (the tenants are served).
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host_client.clone());
        for t in 0..args.tenants {
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
        let start = Instant::now();
        (
            start,
            create_configmaps(tenant_objects(), args.clients).await?,
        )
    } else {
        (syncer_started, HashMap::new())
    };
    let created_secs = start.elapsed().as_secs_f64();
    let arrivals = all_arrived(&arrivals, args.objects).await?;
    let syncer_cpu = cpu_secs(pid).unwrap_or(0.0);
    let process_cpu = cpu_secs(std::process::id()).unwrap_or(0.0) - process_cpu_before;
    let last = arrivals.values().max().copied().unwrap_or(start);
    let first = arrivals.values().min().copied().unwrap_or(start);
    let sync_secs = (last - start).as_secs_f64();
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(name, at)| {
            arrivals
                .get(&format!("{name}-x-bench"))
                .map(|a| a.saturating_duration_since(*at))
        })
        .collect();
    latencies.sort();
    // Let the Events and Tenant status of the last decisions go out before reading the RSS.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_now = rss_kib(pid).unwrap_or(0);
    let rss_peak = rss_peak.load(Ordering::Relaxed);
    syncer.kill().await.ok();
    let _ = std::fs::remove_dir_all(&dir);
    drop(tenant_servers);
    Ok(Figures {
        rate: args.objects as f64 / sync_secs,
        secs: sync_secs,
        lead_secs: if args.live {
            created_secs
        } else {
            (first - start).as_secs_f64()
        },
        latencies,
        rss_now_kib: rss_now,
        rss_peak_kib: rss_peak,
        objects: args.objects as f64,
        syncer_cpu,
        process_cpu,
    })
}
