//! `tenantplane up`: the whole system on one machine.
//!
//! Starts the planner, the isolation compiler and the syncer as separate processes (this
//! executable's hidden `service` subcommand) talking gRPC on loopback; uses the clusters of the
//! user's kubeconfigs when given, and otherwise starts a local API server for the host and one
//! for a demo tenant (test and demo infrastructure, persisted in the data directory), each a
//! process of the `tenantplane-local-apiserver` binary ([`local_apiserver`]): this executable
//! does not link the local API server. Applies the CRDs and the examples, then prints every
//! decision as the syncer records it, until Ctrl-C or SIGTERM stops everything. A process that
//! exits is restarted ([`supervise`]); the decisions printed resume after the last one shown
//! when the syncer comes back.
//!
//! ```text
//!  tenantplane up ──spawn──▶ tenantplane-local-apiserver  127.0.0.1:BASE+31 (host)    ┐ unless
//!        │        ──spawn──▶ tenantplane-local-apiserver  127.0.0.1:BASE+32 (tenant)  ┘ kubeconfigs
//!        │        ──spawn──▶ service planner             127.0.0.1:BASE+1  (admin +2)
//!        │        ──spawn──▶ service isolation-compiler  127.0.0.1:BASE+11 (admin +12)
//!        │        ──spawn──▶ service syncer              127.0.0.1:BASE+21 (admin +22)
//!        │                      │ DecisionLog gRPC, decision log DATA/decisions.db
//!        └── Watch(DecisionLog) ──▶ one line per decision on stdout
//! ```
//!
//! The examples directory is read by layout: the resources at its top level (Tenant, SyncPolicy,
//! IsolationProfile) and everything under `host/` go to the host cluster; everything under
//! `workloads/` goes to the tenant control plane, and the Tenants go last. Each Tenant's
//! kubeconfig Secret is written with the tenant cluster's kubeconfig.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use tenantplane_api::tenant::Tenant;
use tenantplane_core::documents::Origin;
use tenantplane_proto::decisions::v1 as pb;
use tenantplane_proto::decisions::v1::decision_log_client::DecisionLogClient;

use super::decisions::{Format, Printer};
use crate::host_cluster;
use supervise::{ProcessSpec, Ready, Supervisor};
use tenantplane_decision_log::grpc::entry_from_proto;

mod local_apiserver;
mod supervise;

/// The field manager of what `up` applies.
const FIELD_MANAGER: &str = "tenantplane-up";
/// How long `up` waits before watching the syncer's decisions again after its stream broke.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// Arguments of `tenantplane up`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Host cluster kubeconfig (default: start a local API server as the host).
    #[arg(long)]
    host_kubeconfig: Option<PathBuf>,
    /// Context of the host kubeconfig (default: its current context).
    #[arg(long, requires = "host_kubeconfig")]
    host_context: Option<String>,
    /// Kubeconfig of the demo tenant's control plane (default: start a local API server).
    #[arg(long)]
    tenant_kubeconfig: Option<PathBuf>,
    /// Context of the tenant kubeconfig (default: its current context).
    #[arg(long, requires = "tenant_kubeconfig")]
    tenant_context: Option<String>,
    /// Where the decision log, kubeconfigs, local cluster state and the processes' logs go.
    #[arg(long, env = "TENANTPLANE_UP_DIR", default_value = ".tenantplane")]
    data_dir: PathBuf,
    /// The examples to apply (see the command's documentation for the layout).
    #[arg(long, default_value = "examples")]
    examples: PathBuf,
    /// Apply nothing but the CRDs: the clusters already hold what should be synced.
    #[arg(long)]
    no_demo: bool,
    /// First of the loopback ports (services at +1/+2, +11/+12, +21/+22; local API servers at
    /// +31 and +32).
    #[arg(long, default_value_t = 7400, value_parser = clap::value_parser!(u16).range(1..=65000))]
    base_port: u16,
    /// The local API server binary (default: tenantplane-local-apiserver beside this
    /// executable, built first when cargo started `up`).
    #[arg(long, env = "TENANTPLANE_LOCAL_APISERVER")]
    local_apiserver: Option<PathBuf>,
}

/// Runs `tenantplane up` until Ctrl-C or SIGTERM.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args))
}

/// The loopback ports, counted from `--base-port`.
struct Ports {
    base: u16,
}

impl Ports {
    fn addr(&self, offset: u16) -> String {
        format!("127.0.0.1:{}", self.base + offset)
    }
}

async fn run_async(args: &Args) -> anyhow::Result<ExitCode> {
    let data = &args.data_dir;
    std::fs::create_dir_all(data.join("logs"))
        .with_context(|| format!("creating the data directory {}", data.display()))?;
    let data = data
        .canonicalize()
        .with_context(|| format!("resolving {}", data.display()))?;
    let ports = Ports {
        base: args.base_port,
    };
    let mut processes = Supervisor::new();
    // A signal while starting stops what started, as one later does.
    let outcome = tokio::select! {
        outcome = start_and_supervise(args, &ports, &data, &mut processes) => outcome,
        () = shutdown_signal() => Ok(ExitCode::SUCCESS),
    };
    processes.stop().await;
    eprintln!("tenantplane up: stopped");
    outcome
}

/// Starts the clusters (unless given) and the services as processes of `processes`, then
/// [`supervise`]s them.
async fn start_and_supervise(
    args: &Args,
    ports: &Ports,
    data: &Path,
    processes: &mut Supervisor,
) -> anyhow::Result<ExitCode> {
    // The clusters: the user's, or local API servers persisted in the data directory.
    let host_kubeconfig = data.join("host.kubeconfig");
    let tenant_kubeconfig = data.join("tenant.kubeconfig");
    let mut local = Vec::new();
    for (given, context, port, path, name) in [
        (
            &args.host_kubeconfig,
            &args.host_context,
            31,
            &host_kubeconfig,
            "host",
        ),
        (
            &args.tenant_kubeconfig,
            &args.tenant_context,
            32,
            &tenant_kubeconfig,
            "tenant",
        ),
    ] {
        match given {
            Some(file) => write_context(file, context.as_deref(), path)?,
            None => local.push((name, ports.base + port, path.clone())),
        }
    }
    if !local.is_empty() {
        let exe = local_apiserver::binary(args.local_apiserver.as_deref()).await?;
        // Written anew by each server once it listens: up waits for them.
        for (_, _, kubeconfig) in &local {
            remove_if_present(kubeconfig)?;
        }
        processes.start(
            local
                .into_iter()
                .map(|(name, port, kubeconfig)| {
                    local_apiserver::spec(&exe, name, port, kubeconfig, data)
                })
                .collect(),
        );
        processes.ready().await?;
    }
    let host = host_cluster::client(Some(&host_kubeconfig), None).await?;
    let tenant = host_cluster::client(Some(&tenant_kubeconfig), None).await?;
    install_crds(&host).await?;
    // The syncer acts with the host kubeconfig's credentials: the compiled admission policies
    // must let that user, and no other, change tenantplane-managed host objects.
    let syncer_username = tenantplane_syncer::authenticated_username(&host)
        .await?
        .unwrap_or_else(|| tenantplane_isolation::DEFAULT_SYNCER_USERNAME.to_string());

    // The syncer signs checkpoints of the log's head with a key of the data directory (made
    // on the first start) and publishes them in its namespace of the host cluster.
    let checkpoint_key = data.join("checkpoint.key");
    if !checkpoint_key.exists() {
        let (private, public) = tenantplane_decision_log::signed::generate_key()?;
        super::audit::write_private(&checkpoint_key, &private)?;
        std::fs::write(data.join("checkpoint.pub"), public).context("writing checkpoint.pub")?;
    }
    ensure_namespace(&host, CHECKPOINT_NAMESPACE).await?;

    // The services, as separate processes of this executable.
    let log_url = format!("sqlite:{}", data.join("decisions.db").display());
    let head = log_head(&log_url).await?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let service = |name: &str, admin, flags: Vec<String>| ProcessSpec {
        name: format!("{name} service"),
        exe: exe.clone(),
        args: ["service".to_string(), name.to_string()]
            .into_iter()
            .chain(flags)
            .collect(),
        ready: Ready {
            addr: ports.addr(admin),
            path: "/ready",
            file: None,
        },
        log: data.join("logs").join(format!("{name}.log")),
    };
    processes.start(vec![
        service(
            "planner",
            2,
            vec![
                format!("--grpc-addr={}", ports.addr(1)),
                format!("--admin-addr={}", ports.addr(2)),
            ],
        ),
        service(
            "isolation-compiler",
            12,
            vec![
                format!("--grpc-addr={}", ports.addr(11)),
                format!("--admin-addr={}", ports.addr(12)),
                format!("--syncer-username={syncer_username}"),
            ],
        ),
        service(
            "syncer",
            22,
            vec![
                format!("--grpc-addr={}", ports.addr(21)),
                format!("--admin-addr={}", ports.addr(22)),
                format!("--host-kubeconfig={}", host_kubeconfig.display()),
                format!("--planner=http://{}", ports.addr(1)),
                format!("--isolation-compiler=http://{}", ports.addr(11)),
                format!("--decision-log={log_url}"),
                format!("--checkpoint-key={}", checkpoint_key.display()),
                format!("--checkpoint-namespace={CHECKPOINT_NAMESPACE}"),
                "--checkpoint-interval-seconds=10".to_string(),
            ],
        ),
    ]);
    supervise(args, ports, data, &host, &tenant, processes, head).await
}

/// Waits for the services, applies the demo, and prints decisions until a process is given up
/// (or `up` is stopped: [`run_async`]).
async fn supervise(
    args: &Args,
    ports: &Ports,
    data: &Path,
    host: &kube::Client,
    tenant: &kube::Client,
    processes: &mut Supervisor,
    head: u64,
) -> anyhow::Result<ExitCode> {
    processes.ready().await?;
    if !args.no_demo {
        apply_examples(&args.examples, host, tenant, data).await?;
    }
    print_banner(ports, data);
    let syncer = format!("http://{}", ports.addr(21));
    tokio::select! {
        followed = follow_decisions(&syncer, head) => followed.map(|never| match never {}),
        e = processes.given_up() => Err(e),
    }
}

/// Prints each decision the syncer records after sequence `after`, resuming after the last one
/// printed whenever the syncer's stream breaks (the syncer restarting); returns only on an
/// error that another attempt would not mend.
async fn follow_decisions(syncer: &str, mut after: u64) -> anyhow::Result<Infallible> {
    let mut printer = Printer::new(Format::Table);
    loop {
        let stream = async {
            let mut log = DecisionLogClient::connect(syncer.to_string()).await.ok()?;
            let request = pb::WatchRequest {
                filter: None,
                start: Some(pb::watch_request::Start::AfterSequence(after)),
            };
            Some(log.watch(request).await.map(tonic::Response::into_inner))
        };
        match stream.await {
            // Not listening (yet): the syncer is restarting.
            None => {}
            Some(Err(status)) if !transient(&status) => {
                return Err(status).context("watching the syncer's decisions");
            }
            Some(Err(_)) => {}
            Some(Ok(mut stream)) => loop {
                match stream.next().await {
                    Some(Ok(entry)) => {
                        printer.print(&entry_from_proto(&entry)?)?;
                        after = entry.sequence;
                    }
                    Some(Err(status)) if !transient(&status) => {
                        return Err(status).context("watching the syncer's decisions");
                    }
                    // The stream broke or ended: the syncer stopped.
                    Some(Err(_)) | None => break,
                }
            },
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// Whether a status is what a syncer that stops or restarts makes a watch end with.
fn transient(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(()) = async { terminate.as_mut()?.recv().await } => {}
    }
}

fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Writes a kubeconfig holding only `context` (or the current context) of `file`.
fn write_context(file: &Path, context: Option<&str>, to: &Path) -> anyhow::Result<()> {
    let mut config = Kubeconfig::read_from(file)
        .with_context(|| format!("reading kubeconfig {}", file.display()))?;
    let name = match context {
        Some(c) => c.to_string(),
        None => config
            .current_context
            .clone()
            .with_context(|| format!("{} has no current context; give one", file.display()))?,
    };
    let named = config
        .contexts
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .with_context(|| format!("{} has no context {name:?}", file.display()))?;
    let (cluster, user) = named
        .context
        .as_ref()
        .map(|c| (c.cluster.clone(), c.user.clone()))
        .unwrap_or_default();
    config.contexts = vec![named];
    config.clusters.retain(|c| c.name == cluster);
    config.auth_infos.retain(|a| Some(&a.name) == user.as_ref());
    config.current_context = Some(name);
    std::fs::write(to, serde_norway::to_string(&config)?)
        .with_context(|| format!("writing {}", to.display()))
}

/// The sequence of the log's last decision (0 for a new log), where the printed stream starts.
async fn log_head(url: &str) -> anyhow::Result<u64> {
    let store = tenantplane_decision_log::open(url)
        .await
        .with_context(|| format!("opening the decision log {url}"))?;
    Ok(store.head().await?.sequence)
}

async fn install_crds(host: &kube::Client) -> anyhow::Result<()> {
    let crds =
        tenantplane_core::documents::parse("tenantplane crds", &tenantplane_api::crds_yaml());
    for crd in crds {
        let crd = crd.map_err(|e| anyhow::anyhow!("{}: {}", e.origin, e.problem))?;
        apply(host, crd.value, Patience::None)
            .await
            .context("installing the tenantplane CRDs on the host")?;
    }
    Ok(())
}

/// Applies the examples: top-level resources and `host/` to the host, `workloads/` to the
/// tenant, and each Tenant's kubeconfig Secret; the Tenants last, so that the syncer finds the
/// tenant's workloads there when it starts serving one (they are decided on the host side, as
/// an existing tenant's are when it is put under tenantplane; what the tenant applies later meets
/// its admission policies and Pod Security labels first). Bad documents are reported and skipped.
async fn apply_examples(
    examples: &Path,
    host: &kube::Client,
    tenant: &kube::Client,
    data: &Path,
) -> anyhow::Result<()> {
    if !examples.is_dir() {
        bail!(
            "no examples directory at {} (run from the repository root, give --examples, or \
             --no-demo)",
            examples.display()
        );
    }
    let mut top: Vec<PathBuf> = std::fs::read_dir(examples)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    top.retain(|p| p.is_file());
    top.sort();
    let kubeconfig = std::fs::read_to_string(data.join("tenant.kubeconfig"))?;
    let mut tenants = Vec::new();
    for (_, value) in documents(&top)? {
        if value["kind"] == "Tenant" {
            let t: Tenant = serde_json::from_value(value.clone()).context("reading a Tenant")?;
            write_kubeconfig_secret(host, &t, &kubeconfig).await?;
            tenants.push(value);
            continue;
        }
        apply(host, value, Patience::UntilServed).await?;
    }
    for (dir, client) in [("host", host), ("workloads", tenant)] {
        let dir = examples.join(dir);
        if !dir.is_dir() {
            continue;
        }
        let mut documents = documents(&[dir])?;
        // What others refer to first, as a real API server requires (a Pod's ServiceAccount
        // must exist before the Pod); the file order otherwise.
        documents.sort_by_key(|(_, value)| apply_order(value["kind"].as_str().unwrap_or("")));
        for (origin, value) in documents {
            if let Some(ns) = value["metadata"]["namespace"].as_str() {
                ensure_namespace(client, ns).await?;
            }
            // An example the cluster cannot take (e.g. a kind it does not serve) is reported;
            // the rest is still applied.
            if let Err(e) = apply(client, value, Patience::None).await {
                eprintln!("tenantplane up: skipping {origin}: {e:#}");
            }
        }
    }
    for tenant in tenants {
        apply(host, tenant, Patience::UntilServed).await?;
    }
    Ok(())
}

/// The documents of `paths` with their origins; bad ones are printed and skipped.
fn documents(paths: &[PathBuf]) -> anyhow::Result<Vec<(Origin, Value)>> {
    let mut out = Vec::new();
    for (origin, doc) in crate::input::read_documents(paths)? {
        match doc {
            Ok(value) => out.push((origin, value)),
            Err(e) => eprintln!(
                "tenantplane up: skipping {origin}: {}: {}",
                e.field, e.problem
            ),
        }
    }
    Ok(out)
}

async fn write_kubeconfig_secret(
    host: &kube::Client,
    tenant: &Tenant,
    kubeconfig: &str,
) -> anyhow::Result<()> {
    let r = &tenant.spec.control_plane.kubeconfig_secret;
    ensure_namespace(host, &r.namespace).await?;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": r.name, "namespace": r.namespace},
        "stringData": {r.key.clone(): kubeconfig},
    });
    apply(host, secret, Patience::None).await
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// Where a kind goes in the order examples are applied: the kinds others refer to (namespaces,
/// service accounts, secrets and config maps, claims) before the workloads that use them, as
/// Helm orders an install.
fn apply_order(kind: &str) -> usize {
    const ORDER: [&str; 8] = [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Service",
        "Endpoints",
    ];
    ORDER.iter().position(|k| *k == kind).unwrap_or(ORDER.len())
}

/// Whether to wait for an object's kind to be served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// Fail at once.
    None,
    /// Wait up to 10 s: a CRD installed a moment ago may not be served by a real cluster yet.
    UntilServed,
}

/// Server-side apply of one object, whatever its kind.
async fn apply(client: &kube::Client, value: Value, patience: Patience) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(value).context("not an object")?;
    let types = object
        .types
        .clone()
        .context("the object has no apiVersion and kind")?;
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    let name = object.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        bail!("{}: metadata.name is required", types.kind);
    }
    let what = format!("{} {name}", types.kind);
    let mut attempts = 0;
    let (resource, capabilities) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(_) if patience == Patience::UntilServed && attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("{what}: the cluster does not serve {}", types.api_version)
                });
            }
        }
    };
    let api: Api<DynamicObject> = match (capabilities.scope, object.metadata.namespace.as_deref()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &resource)
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying {what}"))?;
    Ok(())
}

/// Where the syncer publishes its signed checkpoints.
const CHECKPOINT_NAMESPACE: &str = "tenantplane-system";

fn print_banner(ports: &Ports, data: &Path) {
    let d = data.display();
    eprintln!(
        "tenantplane up: planner {planner}, isolation compiler {isolation}, syncer {syncer} \
         (DecisionLog gRPC; /metrics on {syncer_admin})\n\
         \x20 host cluster:    kubectl --kubeconfig {d}/host.kubeconfig get pods -A\n\
         \x20 tenant cluster:  kubectl --kubeconfig {d}/tenant.kubeconfig get pods -A\n\
         \x20 decisions:       tenantplane decisions --server http://{syncer}\n\
         \x20 why:             tenantplane why --host-kubeconfig {d}/host.kubeconfig --server http://{syncer} KIND/NAMESPACE/NAME\n\
         \x20 audit:           KUBECONFIG={d}/host.kubeconfig tenantplane audit verify --db {d}/decisions.db --checkpoints-from-cluster --public-key {d}/checkpoint.pub\n\
         \x20 logs:            {d}/logs/\n\
         Decisions as the syncer records them (Ctrl-C stops everything):",
        planner = ports.addr(1),
        isolation = ports.addr(11),
        syncer = ports.addr(21),
        syncer_admin = ports.addr(22),
    );
}
