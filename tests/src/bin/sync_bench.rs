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
//! - live (`--live`): once every Tenant is Ready, the load generator creates the tenant
//!   ConfigMaps (`--rate` paces the creates); it reports the latency from a tenant create to its
//!   host object's arrival (p50, p99), and objects/s over the create window, which is bounded by
//!   how fast the load generator can create tenant objects: it is compared with that create
//!   rate, not with the raw rate.
//! - `--tenants-per-plane N`: N Tenants share each local tenant control plane (fewer API servers
//!   and listening sockets in this process at a thousand Tenants). Each of them syncs every object
//!   in it, so the `--objects` host objects come from `--objects / N` tenant objects, and a tenant
//!   create is a change in N Tenants (each host copy's latency counts).
//! - CPU per object: the CPU time of the syncer and of this process over a synced run (and of
//!   this process over the raw run), divided by N: what the rates cost, steadier than the rates
//!   on a shared machine.
//!
//! `--compare-tracing` measures the cost of tracing in the same run: the sync is run twice, each
//! time on a fresh host and fresh tenants, first with the syncer exporting every span over OTLP
//! to a receiver in this process, then with no exporter (`--rounds N` pairs, alternating which
//! goes first), and the mean rates and the syncer's CPU per object of both are printed.
//!
//! # Real clusters (`--host-kubeconfig`)
//!
//! The same two measurements with a real kube-apiserver as the host and real tenant control
//! planes, each API server a process of its own whose CPU is read from `/proc/PID/stat`:
//!
//! ```text
//! bash tests/real-kube/real-kube.sh start --bin /path/to/bin --state /path/to/state-bench
//! S=/path/to/state-bench
//! target/release/tenantplane-sync-bench --objects 8000 \
//!   --host-kubeconfig $S/host.kubeconfig \
//!   --host-pids $(cat $S/host/kube-apiserver.pid),$(cat $S/host/kine.pid) \
//!   --tenant-kubeconfig $S/tenant.kubeconfig \
//!   --tenant-pids $(cat $S/tenant/kube-apiserver.pid),$(cat $S/tenant/kine.pid)
//! ```
//!
//! - `--host-pids`: the host kube-apiserver and its storage (kine or etcd); their summed CPU is
//!   "the host API server's CPU". `--tenant-kubeconfig` is repeatable, one tenant control plane
//!   per Tenant (a Tenant syncs every namespace of its control plane: never two Tenants on one),
//!   and replaces `--tenants`; `--tenant-pids` (optional) are the tenant API servers and their
//!   storage. The host must run no other syncer (it would serve the bench's Tenants too).
//! - Everything the bench makes is named after a run id (`sync-bench-<id>`): the Tenants and
//!   their kubeconfig Secrets, the raw namespace in the host, the namespace holding the bench
//!   objects in each tenant control plane; the bench objects carry the label
//!   `sync-bench-run=<id>`, and the arrival watches select it (other objects in the shared
//!   clusters are not counted). All of it is deleted at the end: the Tenants while the syncer
//!   still runs (it removes their host objects), then the namespaces, waited for until gone.
//! - Raw writes: N ConfigMaps POSTed into the raw host namespace by `--clients` keep-alive
//!   clients; the host CPU window runs from the first POST until the host watch has shown all N
//!   (after an idle second, so the namespace's own start-up is not in it).
//! - Synced backlog: the Tenants, their Secrets and the N tenant ConfigMaps exist before the
//!   syncer starts (that setup's CPU is printed on its own, outside every window); the synced
//!   rate is N over the time from the syncer's start until the host watch has shown all N; the
//!   host CPU window runs from the syncer's start until all N arrived plus `--settle-secs` (the
//!   Tenant status and aggregated Events of the last decisions), so it holds everything the
//!   syncer makes the host do for them: discovery, lists and watches, the host namespace (and
//!   what the host's controllers do in it), the creates, the Tenant status and finalizer.
//! - The figures, all per-process CPU of the same run:
//!   (a) host API server CPU per synced object ÷ its CPU per raw write (goal ≤ 1.1);
//!   (b) syncer CPU per synced object ÷ host API server CPU per raw write (goal ≤ 0.25);
//!   (c) synced rate ÷ raw rate, with a table of what every process used of the cores over each
//!   phase (host, tenants, syncer, this process: planner, load generator and watches; the rest
//!   of the machine from `/proc/stat`). The host's CPU while idle (3 s before the raw writes) is
//!   printed, and (a) and (b) again with that idle rate taken out of both windows.
//!   (c) is also set beside the machine's busy CPU per object (raw over synced): what the
//!   cores allow when the synced side needs more CPU in all (tenant API servers included).
//! - Host requests per synced object: `apiserver_request_total` (by verb and resource) and
//!   `apiserver_watch_events_total` from the host's `/metrics`, read just outside the synced
//!   window and the raw window, differences divided by N (series under 10 in both summed in
//!   one line); the tenant control planes' series of at least 0.01 per object likewise.
//! - `--live` and `--compare-tracing` work the same way (each synced run with Tenants and
//!   namespaces of its own); the local mode's "CPU per object" lines are not printed, the figures
//!   above are.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use serde_json::{Value, json};
use tenantplane_e2e::{
    Cluster, SYSTEM_NAMESPACE, create, ensure_namespace, install_crds, process_cpu_secs,
    start_planner,
};
use tenantplane_local_apiserver::LocalApiServer;

/// `println!` that never panics: a closed stdout (the bench piped into `head`) must not stop it
/// before it has removed what it made in shared clusters.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

#[derive(Debug, Parser)]
struct Args {
    /// Objects to sync, spread evenly over the tenants.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Tenants (each with its own control plane, unless --tenants-per-plane says otherwise).
    #[arg(long, default_value_t = 4)]
    tenants: usize,
    /// Tenants served from one local tenant control plane: each of them syncs every object in
    /// it, so `--objects` host objects come from `--objects / N` tenant objects (local mode).
    #[arg(long, default_value_t = 1)]
    tenants_per_plane: usize,
    /// Tenant creates per second in `--live` mode (default: as fast as `--clients` allow).
    #[arg(long)]
    rate: Option<f64>,
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
    /// Real host cluster (its kubeconfig file) instead of local API servers in this process.
    #[arg(long, requires_all = ["host_pids", "tenant_kubeconfig"])]
    host_kubeconfig: Option<PathBuf>,
    /// With --host-kubeconfig: the pids of the host kube-apiserver and its storage (kine, etcd),
    /// comma-separated; their summed CPU is the host API server's.
    #[arg(long, value_delimiter = ',')]
    host_pids: Vec<u32>,
    /// With --host-kubeconfig: a tenant control plane's kubeconfig file, one per Tenant
    /// (repeatable; replaces --tenants).
    #[arg(long)]
    tenant_kubeconfig: Vec<PathBuf>,
    /// With --host-kubeconfig: the pids of the tenant API servers and their storage (optional).
    #[arg(long, value_delimiter = ',')]
    tenant_pids: Vec<u32>,
    /// Seconds after the last arrival before the syncer's RSS is read; on real clusters also
    /// counted in the synced run's CPU window (Tenant status, aggregated Events).
    #[arg(long, default_value_t = 2.0)]
    settle_secs: f64,
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

/// The label that marks the bench objects of one run on real clusters (their host copies keep
/// it).
const RUN_LABEL: &str = "sync-bench-run";
const TENANT_API: &str = "tenantplane.io/v1alpha1";

/// CPU seconds used so far by the processes the bench reads, and the busy time of the machine.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    /// The host API server: the sum over `--host-pids` (locally it is this process).
    host: f64,
    /// The tenant API servers: the sum over `--tenant-pids`.
    tenant: f64,
    /// The syncer child process.
    syncer: f64,
    /// This process: the planner, the load generator and the watches (locally, the API servers).
    bench: f64,
    /// Every core of the machine (`/proc/stat`).
    machine: f64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;

    fn sub(self, o: Usage) -> Usage {
        Usage {
            host: self.host - o.host,
            tenant: self.tenant - o.tenant,
            syncer: self.syncer - o.syncer,
            bench: self.bench - o.bench,
            machine: self.machine - o.machine,
        }
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;

    fn add(self, o: Usage) -> Usage {
        Usage {
            host: self.host + o.host,
            tenant: self.tenant + o.tenant,
            syncer: self.syncer + o.syncer,
            bench: self.bench + o.bench,
            machine: self.machine + o.machine,
        }
    }
}

/// The processes whose CPU the bench reads.
#[derive(Clone, Debug, Default)]
struct Meter {
    host: Vec<u32>,
    tenant: Vec<u32>,
    syncer: Option<u32>,
}

/// A point in time and the CPU used until then.
#[derive(Clone, Copy, Debug)]
struct Mark {
    at: Instant,
    usage: Usage,
}

/// What ran on the cores over one phase: its wall time and each one's CPU seconds.
#[derive(Clone, Copy, Debug, Default)]
struct Phase {
    secs: f64,
    used: Usage,
}

impl Meter {
    fn mark(&self) -> Mark {
        let sum = |pids: &[u32]| pids.iter().filter_map(|&p| process_cpu_secs(p)).sum();
        Mark {
            at: Instant::now(),
            usage: Usage {
                host: sum(&self.host),
                tenant: sum(&self.tenant),
                syncer: self.syncer.and_then(process_cpu_secs).unwrap_or(0.0),
                bench: process_cpu_secs(std::process::id()).unwrap_or(0.0),
                machine: machine_busy_secs().unwrap_or(0.0),
            },
        }
    }
}

impl Mark {
    /// The phase from `earlier` to this mark.
    fn since(&self, earlier: &Mark) -> Phase {
        Phase {
            secs: (self.at - earlier.at).as_secs_f64(),
            used: self.usage - earlier.usage,
        }
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
    /// Before the syncer starts: the Tenants, their Secrets, the tenant namespaces and (backlog)
    /// the tenant objects are created.
    setup: Phase,
    /// From the syncer's start until the last host object arrived.
    synced: Phase,
    /// From then on for `--settle-secs`.
    settle: Phase,
    /// The host's requests and watch events over `synced` and `settle` (real clusters).
    requests: Option<Counts>,
    /// The same of the tenant control planes.
    tenant_requests: Option<Counts>,
}

/// The raw writes.
struct Raw {
    rate: f64,
    secs: f64,
    /// From the first request until the host watch has shown all N.
    phase: Phase,
    /// The host's requests and watch events over `phase` (real clusters).
    requests: Option<Counts>,
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

/// Busy time of all the machine's cores so far, in seconds: the first line of `/proc/stat`
/// (USER_HZ ticks) without idle and iowait.
fn machine_busy_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Some(busy as f64 / 100.0)
}

/// The labels of the bench objects: `app=bench`, and on real clusters the run's label.
fn bench_labels(run: Option<&str>) -> Value {
    match run {
        Some(run) => json!({"app": "bench", RUN_LABEL: run}),
        None => json!({"app": "bench"}),
    }
}

/// `base`, narrowed to the run's objects on real clusters.
fn run_selector(base: &str, run: Option<&str>) -> String {
    match run {
        Some(run) => format!("{base},{RUN_LABEL}={run}"),
        None => base.to_string(),
    }
}

fn cm(ns: &str, name: &str, labels: &Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"key": "value", "name": name}}))
    .expect("a valid ConfigMap")
}

/// A fresh local API server in this process.
async fn local_cluster(context: &str) -> anyhow::Result<Cluster> {
    let server = LocalApiServer::builder().start().await?;
    Ok(Cluster {
        client: server.client().await?,
        kubeconfig: server.kubeconfig(context),
        server: Some(server),
    })
}

/// A short id naming what one run of the bench makes in shared clusters.
fn run_id() -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    id[id.len() - 6..].to_string()
}

/// The clusters of one synced run.
struct Bed {
    host: Cluster,
    /// The host kubeconfig file the syncer reads (real clusters; locally one is written).
    host_kubeconfig: Option<PathBuf>,
    /// The tenant control planes.
    planes: Vec<Cluster>,
    /// Per Tenant: its name and its control plane (an index into `planes`).
    tenants: Vec<(String, usize)>,
    /// The namespace of the bench objects in every tenant control plane.
    namespace: String,
    /// On real clusters: the id naming the Tenants and namespaces and labelling the objects.
    run: Option<String>,
}

impl Bed {
    /// A fresh local host and fresh local tenant control planes, one for each `per_plane` of
    /// the `tenants`.
    async fn local(tenants: usize, per_plane: usize) -> anyhow::Result<Bed> {
        let host = local_cluster("host").await?;
        let per_plane = per_plane.max(1);
        let mut planes = Vec::new();
        for _ in 0..tenants.div_ceil(per_plane) {
            planes.push(local_cluster("tenant").await?);
        }
        Ok(Bed {
            host,
            host_kubeconfig: None,
            planes,
            tenants: (0..tenants)
                .map(|t| (format!("bench{t}"), t / per_plane))
                .collect(),
            namespace: "bench".into(),
            run: None,
        })
    }

    /// The real clusters of `args`, under the id `run`.
    async fn real(
        args: &Args,
        host_kubeconfig: &std::path::Path,
        run: &str,
    ) -> anyhow::Result<Bed> {
        let mut planes = Vec::new();
        for path in &args.tenant_kubeconfig {
            planes.push(Cluster::of_kubeconfig_file(path).await?);
        }
        Ok(Bed {
            host: Cluster::of_kubeconfig_file(host_kubeconfig).await?,
            host_kubeconfig: Some(host_kubeconfig.to_path_buf()),
            tenants: (0..planes.len())
                .map(|t| (format!("sync-bench-{run}-{t}"), t))
                .collect(),
            planes,
            namespace: format!("sync-bench-{run}"),
            run: Some(run.to_string()),
        })
    }

    /// The CRDs and the system namespace in the host; per tenant, the bench namespace in its
    /// control plane, and its kubeconfig Secret and Tenant in the host.
    async fn register(&self) -> anyhow::Result<()> {
        install_crds(&self.host.client).await?;
        ensure_namespace(&self.host.client, SYSTEM_NAMESPACE).await?;
        for plane in &self.planes {
            ensure_namespace(&plane.client, &self.namespace).await?;
        }
        for (name, plane) in &self.tenants {
            let plane = &self.planes[*plane];
            create(
                &self.host.client,
                json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
                "stringData": {"config": plane.kubeconfig}}),
            )
            .await?;
            create(&self.host.client, json!({"apiVersion": TENANT_API, "kind": "Tenant",
                "metadata": {"name": name},
                "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": SYSTEM_NAMESPACE, "name": name, "key": "config"}}}}))
                .await?;
        }
        Ok(())
    }

    /// Deletes what a run on real clusters made (nothing locally): the Tenants first, waiting
    /// while the syncer, if it still runs, removes their host objects and releases them; then
    /// their Secrets and the namespaces, waiting until these are gone, so that the next run starts
    /// on quiet clusters. Idempotent.
    async fn remove(&self, objects: usize) -> anyhow::Result<()> {
        if self.run.is_none() {
            return Ok(());
        }
        let host = &self.host.client;
        for (name, _) in &self.tenants {
            tenantplane_e2e::delete(host, TENANT_API, "Tenant", None, name).await?;
        }
        let deadline = Instant::now() + Duration::from_secs(60 + objects as u64 / 50);
        for (name, _) in &self.tenants {
            while tenantplane_e2e::get(host, TENANT_API, "Tenant", None, name)
                .await
                .is_some()
            {
                if Instant::now() > deadline {
                    // No syncer cleaning up: release the Tenant (its host namespace goes below).
                    let release = json!({"metadata": {"finalizers": null}});
                    let _ = tenantplane_e2e::merge(host, TENANT_API, "Tenant", None, name, release)
                        .await;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            tenantplane_e2e::delete(host, "v1", "Secret", Some(SYSTEM_NAMESPACE), name).await?;
        }
        let mut gone = Vec::new();
        for (name, _) in &self.tenants {
            gone.push(delete_namespace(host, format!("tenant-{name}")));
        }
        for plane in &self.planes {
            gone.push(delete_namespace(&plane.client, self.namespace.clone()));
        }
        futures::future::try_join_all(gone).await?;
        Ok(())
    }
}

/// Deletes a namespace and waits until it is gone (at most 10 minutes).
async fn delete_namespace(client: &kube::Client, name: String) -> anyhow::Result<()> {
    tenantplane_e2e::delete(client, "v1", "Namespace", None, &name).await?;
    let api: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(600);
    while api.get_opt(&name).await?.is_some() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "namespace {name} still there 10 minutes after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Counters of the host API server's `/metrics`: `apiserver_request_total` by verb, resource
/// and (unless 2xx) code, and `apiserver_watch_events_total` by resource.
type Counts = BTreeMap<String, f64>;

/// The counters of the API servers of `clients`, summed.
async fn api_counts(clients: &[kube::Client]) -> anyhow::Result<Counts> {
    let mut sum = Counts::new();
    for client in clients {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await
            .context("reading an API server's /metrics")?;
        for (key, n) in parse_counts(&text) {
            *sum.entry(key).or_default() += n;
        }
    }
    Ok(sum)
}

fn parse_counts(text: &str) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((metric, labels)) = series.split_once('{') else {
            continue;
        };
        if metric != "apiserver_request_total" && metric != "apiserver_watch_events_total" {
            continue;
        }
        let label = |key: &str| {
            labels
                .trim_end_matches('}')
                .split("\",")
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\""))
                .map_or("", |v| v.trim_end_matches('"'))
        };
        let resource = match (label("group"), label("resource"), label("subresource")) {
            // A non-resource URL; the bench's own reads of /metrics are left out.
            (_, "", "/metrics") => continue,
            (_, "", path) => path.to_string(),
            (group, resource, sub) => {
                let mut r = resource.to_string();
                if !group.is_empty() {
                    r = format!("{r}.{group}");
                }
                if !sub.is_empty() {
                    r = format!("{r}/{sub}");
                }
                r
            }
        };
        let key = match label("code") {
            _ if metric == "apiserver_watch_events_total" => {
                format!("watch events sent: {resource}")
            }
            code if code.starts_with('2') => format!("{} {resource}", label("verb")),
            code => format!("{} {resource} ({code})", label("verb")),
        };
        *counts.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// The counters' growth since `before`.
fn counts_since(after: Counts, before: &Counts) -> Counts {
    after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// The counters of `clients` now, when `counting` (real clusters).
async fn counts_if(clients: &[kube::Client], counting: bool) -> anyhow::Result<Option<Counts>> {
    Ok(if counting {
        Some(api_counts(clients).await?)
    } else {
        None
    })
}

/// The counters' growth since `before`, when counting.
async fn counted_since(
    clients: &[kube::Client],
    before: Option<Counts>,
) -> anyhow::Result<Option<Counts>> {
    Ok(match before {
        Some(b) => Some(counts_since(api_counts(clients).await?, &b)),
        None => None,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The local API servers hold the other end of every connection the syncer opens (a watch
    // per synced kind and Tenant on each side): thousands at a thousand Tenants.
    if let Ok((soft, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let meter = Meter {
        host: args.host_pids.clone(),
        tenant: args.tenant_pids.clone(),
        syncer: None,
    };
    let Some(path) = &args.host_kubeconfig else {
        let host = local_cluster("host").await?;
        ensure_namespace(&host.client, "raw").await?;
        return bench(&args, &meter, &host, "raw", None).await;
    };
    for pid in args.host_pids.iter().chain(&args.tenant_pids) {
        anyhow::ensure!(process_cpu_secs(*pid).is_some(), "no process {pid}");
    }
    let host = Cluster::of_kubeconfig_file(path).await?;
    install_crds(&host.client).await?;
    let others = tenantplane_e2e::list(&host.client, TENANT_API, "Tenant", None).await?;
    if !others.is_empty() {
        out!(
            "warning: the host has {} Tenants already; a syncer serves them all, and their \
             objects are in the figures",
            others.len()
        );
    }
    let run = run_id();
    let namespace = format!("sync-bench-raw-{run}");
    ensure_namespace(&host.client, &namespace).await?;
    let outcome = bench(&args, &meter, &host, &namespace, Some(&run)).await;
    delete_namespace(&host.client, namespace).await?;
    outcome
}

/// The raw writes of `args.objects` ConfigMaps into `namespace` of `host`.
async fn raw_writes(
    args: &Args,
    meter: &Meter,
    host: &kube::Client,
    namespace: &str,
    run: Option<&str>,
) -> anyhow::Result<Raw> {
    let raw_arrivals = watch_arrivals(
        Api::namespaced(host.clone(), namespace),
        &run_selector("app=bench", run),
    )
    .await?;
    let hosts = std::slice::from_ref(host);
    let counts = counts_if(hosts, run.is_some()).await?;
    let start = meter.mark();
    create_configmaps(
        (0..args.objects).map(|i| (host.clone(), namespace.to_string(), format!("raw-{i}"))),
        &bench_labels(run),
        args.clients,
    )
    .await?;
    let raw_arrivals = all_arrived(&raw_arrivals, args.objects).await?;
    let end = meter.mark();
    let last = raw_arrivals.values().max().copied().unwrap_or(start.at);
    let secs = (last - start.at).as_secs_f64();
    Ok(Raw {
        rate: args.objects as f64 / secs,
        secs,
        phase: end.since(&start),
        requests: counted_since(hosts, counts).await?,
    })
}

/// The raw writes, then the synced run(s), printed; `run` is the run id on real clusters.
async fn bench(
    args: &Args,
    meter: &Meter,
    host: &Cluster,
    raw_namespace: &str,
    run: Option<&str>,
) -> anyhow::Result<()> {
    // The host at rest (real clusters), after a second for the raw namespace's start-up.
    let idle = match run {
        Some(_) => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let from = meter.mark();
            tokio::time::sleep(Duration::from_secs(3)).await;
            Some(meter.mark().since(&from))
        }
        None => None,
    };
    // 1. Raw write rate of plain clients to the host API server.
    let raw = raw_writes(args, meter, &host.client, raw_namespace, run).await?;

    // 2. The system: planner on loopback, tenants, the syncer as a child process.
    let planner_addr = start_planner().await?;
    let tenants = match run {
        Some(_) => args.tenant_kubeconfig.len(),
        None => args.tenants,
    };
    out!(
        "objects: {}  tenants: {}  clients: {}",
        args.objects,
        tenants,
        args.clients
    );
    out!(
        "raw host writes:   {:8.0} objects/s ({:.2} s)",
        raw.rate,
        raw.secs
    );
    let raw_cpu_per_object = raw.phase.used.bench / args.objects as f64;
    if let Some(run) = run {
        out!(
            "real clusters, run {run}: host {}, tenant control planes {:?}",
            args.host_kubeconfig
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string()),
            args.tenant_kubeconfig
        );
    } else {
        out!(
            "  CPU per object: {:.0} µs (load generator, host API server and watch, all in this process)",
            raw_cpu_per_object * 1e6
        );
    }
    let report = |label: &str, run: &Figures| {
        print_run(label, args.live, run, raw.rate, raw_cpu_per_object);
        if let Some(idle) = &idle {
            print_real(args, idle, &raw, run);
        }
    };
    if !args.compare_tracing {
        let run = synced_run(args, meter, run.map(str::to_string), planner_addr, None).await?;
        let label = if args.live {
            "synced live"
        } else {
            "synced backlog"
        };
        report(label, &run);
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
            let id = run.map(|r| format!("{r}-{round}{}", u8::from(exported)));
            let run = synced_run(args, meter, id, planner_addr, otlp).await?;
            let setting = if exported {
                "tracing exported"
            } else {
                "tracing off"
            };
            report(&format!("round {round}, {setting}"), &run);
            let figures = (
                run.rate,
                run.synced.used.syncer / run.objects,
                run.synced.used.bench / run.objects,
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
    out!(
        "spans received by the OTLP receiver: {}",
        spans.0.load(Ordering::Relaxed)
    );
    let (traced_rate, plain_rate) = (mean(&traced, |f| f.0), mean(&plain, |f| f.0));
    out!(
        "mean: tracing off {plain_rate:.0} objects/s, tracing exported {traced_rate:.0} objects/s; \
         tracing overhead {:.1}%",
        (1.0 - traced_rate / plain_rate) * 100.0
    );
    let (traced_cpu, plain_cpu) = (mean(&traced, |f| f.1), mean(&plain, |f| f.1));
    out!(
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

/// When each ConfigMap matching `selector` first showed in a watch of `api`, by
/// `namespace/name`; returns once the watch has listed.
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
            let key = format!(
                "{}/{}",
                o.metadata.namespace.unwrap_or_default(),
                o.metadata.name.unwrap_or_default()
            );
            seen.lock()
                .expect("lock")
                .entry(key)
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

/// Whether a Tenant (as JSON) has the condition Ready=True.
fn is_ready(tenant: &Value) -> bool {
    tenant
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Creates the ConfigMaps `(client, namespace, name)` labelled `labels`, `clients` at a time;
/// when each create was sent, by name.
async fn create_configmaps(
    objects: impl Iterator<Item = (kube::Client, String, String)>,
    labels: &Value,
    clients: usize,
) -> anyhow::Result<HashMap<String, Instant>> {
    create_configmaps_at(objects, labels, clients, None).await
}

/// [`create_configmaps`], the `i`th create sent no sooner than `i / rate` seconds after the
/// first when a `rate` is given.
async fn create_configmaps_at(
    objects: impl Iterator<Item = (kube::Client, String, String)>,
    labels: &Value,
    clients: usize,
    rate: Option<f64>,
) -> anyhow::Result<HashMap<String, Instant>> {
    let begin = tokio::time::Instant::now();
    let sent = futures::stream::iter(objects.enumerate())
        .map(|(i, (client, namespace, name))| async move {
            if let Some(rate) = rate {
                tokio::time::sleep_until(begin + Duration::from_secs_f64(i as f64 / rate)).await;
            }
            let at = Instant::now();
            Api::<ConfigMap>::namespaced(client, &namespace)
                .create(&PostParams::default(), &cm(&namespace, &name, labels))
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
        out!(
            "{label}: {:8.0} objects/s arrived on the host over {:.2} s; the tenant creates ran \
             at {create_rate:.0} objects/s ({:.2} s); arrivals / creates {:.2}",
            run.rate,
            run.secs,
            run.lead_secs,
            run.rate / create_rate
        );
        out!(
            "  latency tenant create -> host present: p50 {:?}  p99 {:?}  max {:?}",
            percentile(&run.latencies, 0.5),
            percentile(&run.latencies, 0.99),
            run.latencies.last().copied().unwrap_or_default()
        );
    } else {
        out!(
            "{label}: {:8.0} objects/s ({:.2} s from the syncer's start; first host object after \
             {:.2} s); ratio to raw {:.2}",
            run.rate,
            run.secs,
            run.lead_secs,
            run.rate / raw_rate
        );
    }
    out!(
        "  syncer RSS: {:.1} MiB at the end, {:.1} MiB peak",
        run.rss_now_kib as f64 / 1024.0,
        run.rss_peak_kib as f64 / 1024.0
    );
    if run.requests.is_some() {
        return;
    }
    let (syncer, process) = (
        run.synced.used.syncer / run.objects,
        run.synced.used.bench / run.objects,
    );
    out!(
        "  CPU per object: syncer {:.0} µs, this process {:.0} µs (API servers, planner, watch); \
         raw / synced {:.2}",
        syncer * 1e6,
        process * 1e6,
        raw_cpu_per_object / (syncer + process)
    );
}

/// The figures of a run on real clusters: (a), (b), (c), the absolute numbers, how the cores
/// were shared and the host requests per object.
fn print_real(args: &Args, idle: &Phase, raw: &Raw, run: &Figures) {
    let n = run.objects;
    let ms = |secs: f64| secs * 1e3 / n;
    let window = Phase {
        secs: run.synced.secs + run.settle.secs,
        used: run.settle.used + run.synced.used,
    };
    let host_raw = raw.phase.used.host;
    let host_synced = window.used.host;
    let idle_rate = idle.used.host / idle.secs;
    let (raw_busy, synced_busy) = (
        host_raw - idle_rate * raw.phase.secs,
        host_synced - idle_rate * window.secs,
    );
    out!(
        "  host CPU window of the synced run: the syncer's start -> all {n} arrived ({:.2} s) + \
         {:.2} s settle (Tenant status, aggregated Events) = {:.2} s; of the raw writes: the first \
         POST -> all arrived ({:.2} s); the setup before the syncer starts is in neither",
        run.synced.secs,
        run.settle.secs,
        window.secs,
        raw.phase.secs
    );
    out!(
        "  host API server (pids {:?}) CPU: {:.3} ms per raw write, {:.3} ms per synced object \
         ({:.3} ms until all arrived, {:.3} ms in the settle); at rest it uses {:.1} ms/s",
        args.host_pids,
        ms(host_raw),
        ms(host_synced),
        ms(run.synced.used.host),
        ms(run.settle.used.host),
        idle_rate * 1e3
    );
    out!(
        "  syncer CPU: {:.3} ms per synced object; this process (planner, watches): {:.3} ms",
        ms(window.used.syncer),
        ms(window.used.bench)
    );
    if !args.tenant_pids.is_empty() {
        out!(
            "  tenant API servers (pids {:?}) CPU: {:.3} ms per synced object; {:.3} ms per \
             object in the setup (the tenant creates)",
            args.tenant_pids,
            ms(window.used.tenant),
            ms(run.setup.used.tenant)
        );
    }
    out!(
        "  (a) host CPU per synced object / per raw write: {:.2} (goal <= 1.1); the host's CPU \
         at rest taken out of both windows: {:.2}",
        host_synced / host_raw,
        synced_busy / raw_busy
    );
    out!(
        "  (b) syncer CPU per synced object / host CPU per raw write: {:.2} (goal <= 0.25); at \
         rest taken out: {:.2}",
        window.used.syncer / host_raw,
        window.used.syncer / raw_busy
    );
    out!(
        "  (c) synced rate / raw rate: {:.2} ({:.0} / {:.0} objects/s); the machine's busy CPU \
         per object: raw {:.3} ms, synced {:.3} ms, so its cores allow at most {:.2}",
        run.rate / raw.rate,
        run.rate,
        raw.rate,
        ms(raw.phase.used.machine),
        ms(window.used.machine),
        raw.phase.used.machine / window.used.machine
    );
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    out!(
        "  the {cores} cores over each phase, CPU seconds (rest: every other process of the \
         machine; idle: wall x {cores} - busy):"
    );
    out!(
        "    {:<34} {:>7} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}",
        "phase",
        "wall s",
        "host",
        "tenants",
        "syncer",
        "bench",
        "rest",
        "idle"
    );
    for (name, p) in [
        ("at rest (before the raw writes)", idle),
        ("raw writes", &raw.phase),
        ("setup: Tenants, tenant objects", &run.setup),
        ("synced: syncer start -> arrived", &run.synced),
        ("synced: settle", &run.settle),
    ] {
        let u = &p.used;
        out!(
            "    {name:<34} {:>7.2} {:>8.2} {:>8.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
            p.secs,
            u.host,
            u.tenant,
            u.syncer,
            u.bench,
            u.machine - u.host - u.tenant - u.syncer - u.bench,
            p.secs * cores as f64 - u.machine
        );
    }
    if let Some(tenant) = &run.tenant_requests {
        let mut top: Vec<(&String, &f64)> =
            tenant.iter().filter(|(_, c)| **c >= n / 100.0).collect();
        top.sort_by(|a, b| b.1.total_cmp(a.1));
        let top: Vec<String> = top
            .iter()
            .map(|(k, c)| format!("{k} {:.3}", *c / n))
            .collect();
        out!(
            "  tenant control planes per synced object (>= 0.01), synced window: {}",
            top.join(", ")
        );
    }
    let (Some(synced), Some(raw)) = (&run.requests, &raw.requests) else {
        return;
    };
    out!(
        "  host requests and watch events (host /metrics) per object, synced window vs raw window:"
    );
    let mut keys: Vec<&String> = synced.keys().chain(raw.keys()).collect();
    keys.sort_by(|a, b| {
        let count = |k: &String| synced.get(k).or(raw.get(k)).copied().unwrap_or(0.0);
        count(b).total_cmp(&count(a)).then(a.cmp(b))
    });
    keys.dedup();
    // The rest: one-off requests (start-up lists and watches, the host namespace, status).
    let (mut rest, mut rest_synced, mut rest_raw) = (0, 0.0, 0.0);
    for key in keys {
        let (s, r) = (
            synced.get(key).copied().unwrap_or(0.0),
            raw.get(key).copied().unwrap_or(0.0),
        );
        if s.max(r) < 10.0 {
            (rest, rest_synced, rest_raw) = (rest + 1, rest_synced + s, rest_raw + r);
            continue;
        }
        out!(
            "    {key:<58} {s:>7.0} {:>8.4} /obj   raw {r:>7.0} {:>8.4} /obj",
            s / n,
            r / n
        );
    }
    out!(
        "    {:<58} {rest_synced:>7.0} {:>8.4} /obj   raw {rest_raw:>7.0} {:>8.4} /obj",
        format!("{rest} other series, each < 10"),
        rest_synced / n,
        rest_raw / n
    );
}

/// Syncs `args.objects` ConfigMaps over fresh tenants into a host (a fresh local one, or the real
/// host, naming what it makes after `run`), the syncer exporting spans to `otlp` when given.
async fn synced_run(
    args: &Args,
    meter: &Meter,
    run: Option<String>,
    planner_addr: std::net::SocketAddr,
    otlp: Option<String>,
) -> anyhow::Result<Figures> {
    let bed = match (&args.host_kubeconfig, run) {
        (Some(path), Some(run)) => Bed::real(args, path, &run).await?,
        _ => Bed::local(args.tenants, args.tenants_per_plane).await?,
    };
    let outcome = sync_bed(args, &bed, meter, planner_addr, otlp).await;
    bed.remove(args.objects).await?;
    outcome
}

async fn sync_bed(
    args: &Args,
    bed: &Bed,
    meter: &Meter,
    planner_addr: std::net::SocketAddr,
    otlp: Option<String>,
) -> anyhow::Result<Figures> {
    let setup_start = meter.mark();
    bed.register().await?;
    let host_client = bed.host.client.clone();
    let real = bed.run.is_some();
    let dir = std::env::temp_dir().join(format!("tenantplane-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let host_kubeconfig = match &bed.host_kubeconfig {
        Some(path) => path.clone(),
        None => {
            let path = dir.join("host.kubeconfig");
            std::fs::write(&path, &bed.host.kubeconfig)
                .with_context(|| format!("writing kubeconfig {}", path.display()))?;
            path
        }
    };
    let syncer_bin = tenantplane_e2e::syncer_binary(args.syncer.as_deref())?;
    let labels = bench_labels(bed.run.as_deref());
    // Each tenant object arrives once for every Tenant of its control plane.
    let per_plane = bed.tenants.len().div_ceil(bed.planes.len());
    let tenant_objects = || {
        (0..args.objects / per_plane).map(|i| {
            (
                bed.planes[i % bed.planes.len()].client.clone(),
                bed.namespace.clone(),
                format!("o{i}"),
            )
        })
    };
    if !args.live {
        create_configmaps(tenant_objects(), &labels, args.clients).await?;
    }

    let arrivals = watch_arrivals(
        Api::all(host_client.clone()),
        &run_selector("tenantplane.io/managed=true", bed.run.as_deref()),
    )
    .await?;
    if real {
        // What the setup set off (watch events, the controllers of the shared clusters) is not
        // the syncer's.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let counts = counts_if(std::slice::from_ref(&host_client), real).await?;
    let tenant_clients: Vec<kube::Client> = bed.planes.iter().map(|p| p.client.clone()).collect();
    let tenant_counts = counts_if(&tenant_clients, real).await?;

    let syncer_start = meter.mark();
    let syncer_started = syncer_start.at;
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
    let meter = Meter {
        syncer: Some(pid),
        ..meter.clone()
    };
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
        // Wait until every Tenant is Ready (its control plane reached and discovered, its
        // runtime started), and a little longer for the last runtimes' watches to list.
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let tenants = tenantplane_e2e::list(&host_client, TENANT_API, "Tenant", None).await?;
            let ready = tenants.iter().filter(|t| is_ready(t)).count();
            if ready >= bed.tenants.len() {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {ready} of {} Tenants Ready 300 s after the syncer's start",
                bed.tenants.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        out!(
            "every Tenant Ready {:.2} s after the syncer's start",
            syncer_started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let start = Instant::now();
        (
            start,
            create_configmaps_at(tenant_objects(), &labels, args.clients, args.rate).await?,
        )
    } else {
        (syncer_started, HashMap::new())
    };
    let created_secs = start.elapsed().as_secs_f64();
    let arrivals = all_arrived(&arrivals, args.objects).await?;
    let arrived = meter.mark();
    let last = arrivals.values().max().copied().unwrap_or(start);
    let first = arrivals.values().min().copied().unwrap_or(start);
    let sync_secs = (last - start).as_secs_f64();
    // Every host copy of a tenant object: `tenant-<tenant>/<name>-x-<namespace>`.
    let suffix = format!("-x-{}", bed.namespace);
    let mut latencies: Vec<Duration> = arrivals
        .iter()
        .filter_map(|(key, arrived)| {
            let name = key.split_once('/')?.1.strip_suffix(&suffix)?;
            let created = created.get(name)?;
            Some(arrived.saturating_duration_since(*created))
        })
        .collect();
    latencies.sort();
    // Let the Events and Tenant status of the last decisions go out before reading the RSS.
    tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    let settled = meter.mark();
    let requests = counted_since(std::slice::from_ref(&host_client), counts).await?;
    let tenant_requests = counted_since(&tenant_clients, tenant_counts).await?;
    let rss_now = rss_kib(pid).unwrap_or(0);
    let rss_peak = rss_peak.load(Ordering::Relaxed);
    // On real clusters the Tenants go while the syncer runs: it removes their host objects.
    bed.remove(args.objects).await?;
    syncer.kill().await.ok();
    let _ = std::fs::remove_dir_all(&dir);
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
        setup: syncer_start.since(&setup_start),
        synced: arrived.since(&syncer_start),
        settle: settled.since(&arrived),
        requests,
        tenant_requests,
    })
}
