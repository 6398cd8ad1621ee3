//! The end-to-end harness: a host API server and a tenant control plane (local servers, or real
//! clusters named by kubeconfigs in the environment), the planner and isolation-compiler gRPC
//! services on loopback, and the syncer, all started in this process so that a test can stop
//! and restart any of them.
//!
//! Environment:
//! - `TENANTPLANE_E2E_HOST_KUBECONFIG`: kubeconfig file of a real host cluster (default: a local
//!   server per test). The tenantplane CRDs are installed when missing.
//! - `TENANTPLANE_E2E_TENANT_KUBECONFIG`: kubeconfig file of a real tenant control plane
//!   (default: a local server per test). Tests create uniquely named namespaces and tenants, so
//!   several runs can share clusters.
//! - `TENANTPLANE_E2E_TIMEOUT_SECS`: how long a test waits for convergence (default 30).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tenantplane_local_apiserver::LocalApiServer;
use tenantplane_syncer::{Config, isolation, planner};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Kubeconfig file of a real host cluster.
pub const HOST_KUBECONFIG: &str = "TENANTPLANE_E2E_HOST_KUBECONFIG";
/// Kubeconfig file of a real tenant control plane.
pub const TENANT_KUBECONFIG: &str = "TENANTPLANE_E2E_TENANT_KUBECONFIG";
/// Namespace of the kubeconfig Secrets in the host.
pub const SYSTEM_NAMESPACE: &str = "tenantplane-system";

/// One Kubernetes API: a local server or a real cluster.
pub struct Cluster {
    /// A client for it.
    pub client: Client,
    /// Its kubeconfig (YAML).
    pub kubeconfig: String,
    /// The local server, when local.
    pub server: Option<LocalApiServer>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The real cluster of a kubeconfig file.
    pub async fn of_kubeconfig_file(path: &std::path::Path) -> anyhow::Result<Cluster> {
        let kubeconfig = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        Ok(Cluster {
            client: tenantplane_syncer::host_client(Some(&kubeconfig)).await?,
            kubeconfig,
            server: None,
        })
    }

    /// The cluster of `env_var`'s kubeconfig, or a fresh local server.
    pub async fn start(env_var: &str) -> anyhow::Result<Cluster> {
        if let Ok(path) = std::env::var(env_var) {
            let kubeconfig = std::fs::read_to_string(&path)?;
            let client = tenantplane_syncer::host_client(Some(&kubeconfig)).await?;
            return Ok(Cluster {
                client,
                kubeconfig,
                server: None,
            });
        }
        let server = LocalApiServer::builder().port(0).start().await?;
        Ok(Cluster {
            client: server.client().await?,
            kubeconfig: server.kubeconfig("local"),
            server: Some(server),
        })
    }

    /// Whether this is a real cluster.
    pub fn is_real(&self) -> bool {
        self.server.is_none()
    }
}

/// A gRPC service on loopback that can be stopped and started again on the same port.
#[derive(Debug)]
pub struct Service {
    /// The address it serves on.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    kind: ServiceKind,
}

#[derive(Debug, Clone)]
enum ServiceKind {
    Planner,
    /// The isolation compiler, with the username the syncer acts as.
    Isolation(String),
}

impl Service {
    async fn start(kind: ServiceKind, addr: SocketAddr) -> anyhow::Result<Service> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let router = tonic::transport::Server::builder();
        let task = match &kind {
            ServiceKind::Planner => {
                let mut router = router;
                let svc = tenantplane_grpc::PlannerService::new().into_server();
                tokio::spawn(async move {
                    let _ = router
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, async {
                            let _ = rx.await;
                        })
                        .await;
                })
            }
            ServiceKind::Isolation(syncer_username) => {
                let mut router = router;
                let svc = tenantplane_grpc::IsolationService::new(
                    tenantplane_isolation::CompileOptions {
                        syncer_username: syncer_username.clone(),
                    },
                )
                .into_server();
                tokio::spawn(async move {
                    let _ = router
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, async {
                            let _ = rx.await;
                        })
                        .await;
                })
            }
        };
        Ok(Service {
            addr,
            stop: Some(tx),
            task: Some(task),
            kind,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving (connections close).
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Serves again on the same port.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        let mut last = None;
        for _ in 0..50 {
            match Service::start(self.kind.clone(), self.addr).await {
                Ok(s) => {
                    *self = s;
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }
}

/// The whole system for one test.
#[derive(Debug)]
pub struct Env {
    /// The host cluster.
    pub host: Cluster,
    /// The tenant control plane.
    pub tenant_cp: Cluster,
    /// The planner service.
    pub planner: Service,
    /// The isolation-compiler service.
    pub isolation: Service,
    syncer: Option<JoinHandle<anyhow::Result<()>>>,
    /// The durable decision log's URL, when the test uses one.
    pub decision_log: Option<String>,
    /// The user the syncer acts as in the host cluster (the host kubeconfig's), which the
    /// compiled admission policies let change tenantplane-managed objects.
    pub syncer_username: String,
    /// Suffix making names unique to this run (shared real clusters).
    pub run: String,
    /// What this test made in real clusters, removed when the Env is dropped.
    made: std::sync::Mutex<Made>,
}

/// The Tenants and tenant namespaces a test made. A local server vanishes with its test; in a
/// real cluster they would stay, and every later test's syncer would serve those Tenants and sync
/// those namespaces (a Tenant syncs every namespace of its control plane).
#[derive(Debug, Default, Clone)]
struct Made {
    tenants: Vec<String>,
    tenant_namespaces: Vec<String>,
    /// APIServices in the tenant control plane (one left unavailable would keep its namespace
    /// deletions from finishing).
    tenant_api_services: Vec<String>,
}

impl Drop for Env {
    /// Removes from real clusters what the test made: its Tenants first, while the syncer (on the
    /// test runtime's other worker) still runs to clean up their host objects, then the tenant
    /// namespaces. Runs on a thread of its own, with clients of its own, since the test's runtime
    /// is being torn down around it.
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().expect("made lock"));
        let host = self.host.is_real().then(|| self.host.kubeconfig.clone());
        let tenant_cp = self
            .tenant_cp
            .is_real()
            .then(|| self.tenant_cp.kubeconfig.clone());
        if host.is_none() && tenant_cp.is_none() {
            return;
        }
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleanup");
            runtime.block_on(clean_up(host, tenant_cp, made))
        });
        if let Ok(Err(e)) = cleanup.join() {
            eprintln!("cleaning up the real clusters after the test: {e:#}");
        }
    }
}

/// See [`Env`]'s `Drop`.
async fn clean_up(
    host: Option<String>,
    tenant_cp: Option<String>,
    made: Made,
) -> anyhow::Result<()> {
    if let Some(kubeconfig) = host {
        let client = tenantplane_syncer::host_client(Some(&kubeconfig)).await?;
        let tenants: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("tenantplane.io/v1alpha1", "Tenant"),
        );
        for tenant in &made.tenants {
            delete(&client, "tenantplane.io/v1alpha1", "Tenant", None, tenant).await?;
            // The syncer removes its finalizer once the host objects are gone.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            while tenants.get_opt(tenant).await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    // No syncer left to clean up (the test stopped it): do what it would have.
                    let patch = json!({"metadata": {"finalizers": null}});
                    tenants
                        .patch(
                            tenant,
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(patch),
                        )
                        .await?;
                    delete(
                        &client,
                        "v1",
                        "Namespace",
                        None,
                        &format!("tenant-{tenant}"),
                    )
                    .await?;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            delete(
                &client,
                "v1",
                "Secret",
                Some(SYSTEM_NAMESPACE),
                &format!("{tenant}-kubeconfig"),
            )
            .await?;
        }
    }
    if let Some(kubeconfig) = tenant_cp {
        let client = tenantplane_syncer::host_client(Some(&kubeconfig)).await?;
        for name in &made.tenant_api_services {
            delete(
                &client,
                "apiregistration.k8s.io/v1",
                "APIService",
                None,
                name,
            )
            .await?;
        }
        for namespace in &made.tenant_namespaces {
            delete(&client, "v1", "Namespace", None, namespace).await?;
        }
        // A Tenant whose finalizer had to be removed above (its syncer was stopped) leaves its
        // admission policies behind, and they would refuse other tests' objects.
        for tenant in &made.tenants {
            for kind in [
                "ValidatingAdmissionPolicyBinding",
                "ValidatingAdmissionPolicy",
            ] {
                let api: Api<DynamicObject> = Api::all_with(
                    client.clone(),
                    &resource("admissionregistration.k8s.io/v1", kind),
                );
                let selector = format!("{}={tenant}", tenantplane_api::provenance::TENANT);
                api.delete_collection(
                    &kube::api::DeleteParams::default(),
                    &kube::api::ListParams::default().labels(&selector),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// CPU time (user + system, all threads) the process `pid` has used so far, in seconds; from
/// `/proc/PID/stat`, whose times are in USER_HZ ticks (100 per second on Linux).
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start with the state, field 3;
    // utime and stime are fields 14 and 15.
    let mut fields = stat.rsplit_once(") ")?.1.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The syncer binary a bench starts: `given`, else the one built next to the bench's own.
pub fn syncer_binary(given: Option<&std::path::Path>) -> anyhow::Result<std::path::PathBuf> {
    match given {
        Some(path) => Ok(path.to_path_buf()),
        None => Ok(std::env::current_exe()?
            .parent()
            .ok_or_else(|| anyhow::anyhow!("the bench's executable has no parent directory"))?
            .join("tenantplane-syncer")),
    }
}

/// The planner service on loopback, in this process (for the benches' syncer processes).
pub async fn start_planner() -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let planner_addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(tenantplane_grpc::PlannerService::new().into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    Ok(planner_addr)
}

/// How long to wait for convergence.
pub fn timeout() -> Duration {
    Duration::from_secs(
        std::env::var("TENANTPLANE_E2E_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    )
}

/// Polls `f` until it returns `Some`, or panics after [`timeout`] naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs for a test run (`RUST_LOG`), once.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

impl Env {
    /// Starts host, tenant control plane, services and the syncer.
    pub async fn start() -> anyhow::Result<Env> {
        Self::start_with_log(None).await
    }

    /// Like [`start`](Self::start), the syncer recording into the decision log at `url`.
    pub async fn start_with_log(decision_log: Option<String>) -> anyhow::Result<Env> {
        init_logs();
        let host = Cluster::start(HOST_KUBECONFIG).await?;
        let tenant_cp = Cluster::start(TENANT_KUBECONFIG).await?;
        install_crds(&host.client).await?;
        ensure_namespace(&host.client, SYSTEM_NAMESPACE).await?;
        let loopback: SocketAddr = "127.0.0.1:0".parse()?;
        let planner = Service::start(ServiceKind::Planner, loopback).await?;
        // The syncer runs in this process with the host kubeconfig's credentials: the
        // compiled admission policies must name that user as the syncer.
        let syncer_username = tenantplane_syncer::authenticated_username(&host.client)
            .await?
            .unwrap_or_else(|| tenantplane_isolation::DEFAULT_SYNCER_USERNAME.to_string());
        let isolation =
            Service::start(ServiceKind::Isolation(syncer_username.clone()), loopback).await?;
        let id = uuid::Uuid::now_v7().simple().to_string();
        let run = id[id.len() - 6..].to_string();
        let mut env = Env {
            host,
            tenant_cp,
            planner,
            isolation,
            syncer: None,
            decision_log,
            syncer_username,
            run,
            made: Default::default(),
        };
        env.start_syncer().await?;
        Ok(env)
    }

    /// The syncer's configuration in tests: the services on loopback, quick retries.
    pub async fn syncer_config(&self) -> anyhow::Result<Config> {
        let mut config = Config::new(
            planner::connect(&self.planner.url())?,
            isolation::connect(&self.isolation.url())?,
        );
        config.host_kubeconfig = Some(self.host.kubeconfig.clone());
        config.status_interval = Duration::from_millis(100);
        config.tenant_resync = Duration::from_secs(30);
        config.tuning.resync = Duration::from_secs(30);
        config.tuning.backoff_base = Duration::from_millis(100);
        config.tuning.backoff_max = Duration::from_secs(1);
        if let Some(url) = &self.decision_log {
            config.decision_log = Some(tenantplane_syncer::record::open_log(url).await?);
        }
        Ok(config)
    }

    /// Starts the syncer (in this process).
    pub async fn start_syncer(&mut self) -> anyhow::Result<()> {
        let config = self.syncer_config().await?;
        self.start_syncer_with(config);
        Ok(())
    }

    /// Starts the syncer (in this process) with `config`.
    pub fn start_syncer_with(&mut self, config: Config) {
        self.syncer = Some(tokio::spawn(tenantplane_syncer::run(config)));
    }

    /// Stops the syncer abruptly, as a crash would.
    pub async fn stop_syncer(&mut self) {
        if let Some(s) = self.syncer.take() {
            s.abort();
            let _ = s.await;
        }
    }

    /// A unique name for this run.
    pub fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.run)
    }

    /// Creates a Tenant served by the tenant control plane, with a profile when given; returns
    /// its name. Waits until its host namespace exists.
    pub async fn create_tenant(&self, base: &str, profile: Option<&str>) -> anyhow::Result<String> {
        let spec = match profile {
            Some(p) => json!({"isolationProfileRef": p}),
            None => json!({}),
        };
        self.create_tenant_with(base, spec).await
    }

    /// Like [`create_tenant`](Self::create_tenant), with `spec` (say, a `syncPolicyRef`) added to
    /// the Tenant's spec.
    pub async fn create_tenant_with(&self, base: &str, spec: Value) -> anyhow::Result<String> {
        let name = self.name(base);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": SYSTEM_NAMESPACE},
            "stringData": {"config": self.tenant_cp.kubeconfig},
        }))?;
        Api::<Secret>::namespaced(self.host.client.clone(), SYSTEM_NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await?;
        let mut spec = spec;
        spec["controlPlane"] = json!({"kubeconfigSecret": {
            "namespace": SYSTEM_NAMESPACE, "name": format!("{name}-kubeconfig"), "key": "config"}});
        create(
            &self.host.client,
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                   "metadata": {"name": name}, "spec": spec}),
        )
        .await?;
        self.made_tenant(&name);
        let host = self.host.client.clone();
        let ns = format!("tenant-{name}");
        eventually("the host namespace", || {
            let host = host.clone();
            let ns = ns.clone();
            async move {
                Api::<Namespace>::all(host)
                    .get_opt(&ns)
                    .await
                    .ok()
                    .flatten()
            }
        })
        .await;
        Ok(name)
    }

    /// Creates (once per run) a SyncPolicy that is the built-in default with every Reject rule
    /// only audited at admission, so that the tenant control plane admits what the host side
    /// refuses: for scenarios about the host-side refusal. Returns its name.
    pub async fn audited_default_policy(&self) -> anyhow::Result<String> {
        self.default_policy_variant("audited-default", None, true)
            .await
    }

    /// Creates (once per run) a SyncPolicy that is the built-in default with every rule limited
    /// to the tenant namespaces `namespaces` (Reject rules only audited at admission when
    /// `audited`). A Tenant with an IsolationProfile puts its Pod Security labels and admission
    /// policies in the namespaces its policy syncs: limited so, a test on a shared tenant control
    /// plane leaves the others' namespaces alone. Returns its name.
    pub async fn default_policy_in(
        &self,
        base: &str,
        namespaces: &[String],
        audited: bool,
    ) -> anyhow::Result<String> {
        self.default_policy_variant(base, Some(namespaces), audited)
            .await
    }

    async fn default_policy_variant(
        &self,
        base: &str,
        namespaces: Option<&[String]>,
        audited: bool,
    ) -> anyhow::Result<String> {
        let name = self.name(base);
        let mut policy: Value =
            serde_norway::from_str(tenantplane_core::policy::DEFAULT_POLICY_YAML)?;
        policy["metadata"] = json!({"name": name});
        for rule in policy["spec"]["rules"].as_array_mut().into_iter().flatten() {
            if audited && rule["action"] == "Reject" {
                rule["admission"] = json!("Audit");
            }
            if let Some(namespaces) = namespaces {
                rule["match"]["namespaces"] = json!(namespaces);
            }
        }
        match create(&self.host.client, policy).await {
            Ok(_) => Ok(name),
            Err(e) if e.to_string().contains("already exists") => Ok(name),
            Err(e) => Err(e),
        }
    }

    /// Notes a Tenant the test creates itself, to be removed from a real host cluster with the
    /// others when the Env is dropped.
    pub fn made_tenant(&self, name: &str) {
        self.made
            .lock()
            .expect("made lock")
            .tenants
            .push(name.to_string());
    }

    /// Notes an APIService the test creates in the tenant control plane, to be removed from a
    /// real one when the Env is dropped.
    pub fn made_tenant_api_service(&self, name: &str) {
        self.made
            .lock()
            .expect("made lock")
            .tenant_api_services
            .push(name.to_string());
    }

    /// Creates a namespace in the tenant control plane (unique per run) and returns its name.
    pub async fn tenant_namespace(&self, base: &str) -> anyhow::Result<String> {
        let name = self.name(base);
        ensure_namespace(&self.tenant_cp.client, &name).await?;
        self.made
            .lock()
            .expect("made lock")
            .tenant_namespaces
            .push(name.clone());
        Ok(name)
    }

    /// Whether either side is a real cluster (tests that fake a kubelet skip then).
    pub fn is_real(&self) -> bool {
        self.host.is_real() || self.tenant_cp.is_real()
    }
}

/// Creates the namespace unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Installs the tenantplane CRDs, or brings them up to date.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in tenantplane_api::crds() {
        // Applied, not only created: a shared real cluster may hold an older version of them,
        // whose schema would prune the fields added since.
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &kube::api::PatchParams::apply("tenantplane-e2e").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await?;
    }
    Ok(())
}

/// The ApiResource of an apiVersion and kind (the regular English plural of the kind, as every
/// kind the suite uses has).
pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let lower = kind.to_ascii_lowercase();
    let plural = if kind == "Endpoints" {
        lower
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

fn api_for(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let ar = resource(api_version, kind);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates an object given as JSON.
pub async fn create(client: &Client, object: Value) -> anyhow::Result<Value> {
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let ns = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let obj: DynamicObject = serde_json::from_value(object)?;
    let created = api_for(client, &api_version, &kind, ns.as_deref())
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(serde_json::to_value(created)?)
}

/// Reads an object, `None` when absent.
pub async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    api_for(client, api_version, kind, namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|o| serde_json::to_value(o).expect("serializes"))
}

/// A Tenant's status in the host cluster (null while it has none or the Tenant is absent).
pub async fn tenant_status(env: &Env, tenant: &str) -> Value {
    get(
        &env.host.client,
        "tenantplane.io/v1alpha1",
        "Tenant",
        None,
        tenant,
    )
    .await
    .map(|t| t["status"].clone())
    .unwrap_or(Value::Null)
}

/// Merge-patches an object.
pub async fn merge(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    patch: Value,
) -> anyhow::Result<Value> {
    let o = api_for(client, api_version, kind, namespace)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await?;
    Ok(serde_json::to_value(o)?)
}

/// Merge-patches an object's status.
pub async fn merge_status(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    patch: Value,
) -> anyhow::Result<Value> {
    let o = api_for(client, api_version, kind, namespace)
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await?;
    Ok(serde_json::to_value(o)?)
}

/// Deletes an object (absent is fine).
pub async fn delete(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<()> {
    match api_for(client, api_version, kind, namespace)
        .delete(name, &Default::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Lists objects of a kind in a namespace (or everywhere).
pub async fn list(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<Value>> {
    let l = api_for(client, api_version, kind, namespace)
        .list(&Default::default())
        .await?;
    Ok(l.items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("serializes"))
        .collect())
}

/// events.k8s.io Events in `namespace` regarding the object named `name`.
pub async fn events_regarding(client: &Client, namespace: &str, name: &str) -> Vec<Value> {
    list(client, "events.k8s.io/v1", "Event", Some(namespace))
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.pointer("/regarding/name").and_then(Value::as_str) == Some(name))
        .collect()
}

/// An OTLP trace receiver in this process (the official OpenTelemetry proto definitions),
/// keeping every span it is sent.
#[derive(Clone, Default, Debug)]
pub struct OtlpReceiver {
    spans: std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
}

impl OtlpReceiver {
    /// A receiver on a loopback port, and its endpoint (`http://127.0.0.1:PORT`).
    pub async fn start() -> anyhow::Result<(OtlpReceiver, String)> {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let receiver = OtlpReceiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Ok((receiver, endpoint))
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
        self.spans.lock().expect("spans lock").clone()
    }
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
    for OtlpReceiver
{
    async fn export(
        &self,
        request: tonic::Request<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
        >,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let mut spans = self.spans.lock().expect("spans lock");
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse {
                partial_success: None,
            },
        ))
    }
}

/// Every decision the log holds about `tenant`, oldest first.
pub async fn all_decisions(
    store: &dyn tenantplane_decision_log::DecisionStore,
    tenant: &str,
) -> Vec<tenantplane_core::decision::Decision> {
    let mut query = tenantplane_decision_log::Query::new(
        tenantplane_decision_log::Filter {
            tenant: Some(tenant.to_string()),
            ..tenantplane_decision_log::Filter::default()
        },
        1000,
    );
    let mut out = Vec::new();
    loop {
        let page = store
            .query(query.clone())
            .await
            .expect("querying the decision log");
        out.extend(page.entries.into_iter().map(|e| e.decision));
        match page.next_page_token {
            Some(t) => query.page_token = Some(t),
            None => return out,
        }
    }
}
