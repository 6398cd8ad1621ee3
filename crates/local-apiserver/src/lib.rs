//! # tenantplane-local-apiserver — TEST AND DEMO INFRASTRUCTURE
//!
//! A local, in-memory server that speaks the Kubernetes REST protocol well
//! enough for kube-rs and kubectl to work against it unchanged. It exists so
//! that tenantplane's syncer can be tested through its real client code on
//! machines where no cluster can run, and so a newcomer can run the whole
//! system without one. It is **not** a product component: tenantplane targets
//! real clusters, and this server has no authentication (every request is
//! accepted; it issues service account tokens and reviews them, but does not ask
//! for them), no authorization, no admission webhooks (ValidatingAdmissionPolicies
//! and the ServiceAccount plugin are enforced) and no kubelet.
//!
//! What it serves and how faithfully is listed in the crate README; the
//! semantics test suite in `tests/` runs the same assertions against this
//! server and, with `TENANTPLANE_E2E_KUBECONFIG` set, against a real cluster.
//!
//! Its modules are layers, each using only the layers before it (`tests/layers.rs` checks
//! that no module reaches up, and that no modules import each other in a circle):
//!
//! ```text
//!  this file (LocalApiServer), process (the binary's main)
//!   └─ http       routing, params, watch, discovery, OpenAPI, protobuf, reviews, scale
//!       └─ admission   the write policy: validation, defaults, ServiceAccount, Pod Security,
//!           │          ValidatingAdmissionPolicy; service account tokens
//!           └─ crd     CustomResourceDefinition validation, structural schemas
//!               └─ cel      type checking and cost of CEL rules
//!                   └─ storage  resource table, object store, names, selectors, patches,
//!                               server-side apply, Events' and Secrets' stored forms, errors
//! ```
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use tenantplane_local_apiserver::LocalApiServer;
//! let server = LocalApiServer::builder().port(0).start().await?;
//! server.write_kubeconfig("/tmp/local.kubeconfig", "local")?;
//! let client = server.client().await?;
//! # drop(client);
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

mod admission;
mod cel;
mod crd;
mod http;
pub mod process;
mod storage;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use admission::tokens::ISSUER;
pub use http::authentication::ADMIN;
pub use http::requests::RecordedRequest;
pub use storage::error::ApiError;

use crate::admission::chain::Chain;
use crate::admission::tokens::Issuer;
use crate::http::openapi::OpenApiCache;
use crate::http::requests::RequestLog;
use crate::http::router::{AppState, router};
use crate::storage::store::Store;

/// Default number of changes kept for watch resume; older resourceVersions
/// answer 410 Gone.
pub const DEFAULT_WATCH_HISTORY: usize = 100_000;

/// Debounce between a change and the snapshot write when persisting.
const PERSIST_DEBOUNCE: Duration = Duration::from_millis(100);

/// Configures a [`LocalApiServer`] before starting it.
#[derive(Debug, Clone)]
pub struct LocalApiServerBuilder {
    port: u16,
    persist_to: Option<PathBuf>,
    watch_history: usize,
}

impl LocalApiServerBuilder {
    /// Port on 127.0.0.1; 0 (the default) picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Persist all objects to this JSON file (loaded on start when present,
    /// written shortly after every change and on shutdown).
    pub fn persist_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.persist_to = Some(path.into());
        self
    }

    /// How many changes to keep for watch resume (default
    /// [`DEFAULT_WATCH_HISTORY`]); watching from an older resourceVersion
    /// gets 410 Gone.
    pub fn watch_history(mut self, changes: usize) -> Self {
        self.watch_history = changes;
        self
    }

    /// Binds the port, loads persisted state and starts serving.
    pub async fn start(self) -> anyhow::Result<LocalApiServer> {
        let store = Arc::new(Store::new(self.watch_history, Arc::new(Chain)));
        if let Some(path) = &self.persist_to
            && path.exists()
        {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            store
                .load_snapshot(&bytes)
                .with_context(|| format!("loading {}", path.display()))?;
        }
        store
            .create_default_namespaces()
            .map_err(|e| anyhow::anyhow!("creating default namespaces: {e}"))?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .with_context(|| format!("binding 127.0.0.1:{}", self.port))?;
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let requests = Arc::new(RequestLog::default());
        let tokens = Arc::new(Issuer::new()?);
        let app = router(AppState {
            store: store.clone(),
            shutdown: shutdown_rx.clone(),
            requests: requests.clone(),
            tokens: tokens.clone(),
            openapi: Arc::new(OpenApiCache::default()),
        });
        let mut serve_shutdown = shutdown_rx.clone();
        let serve = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    // An error means the sender is gone: shut down as well.
                    let _ = serve_shutdown.changed().await;
                })
                .await
                .context("serving HTTP")
        });
        let persist = self
            .persist_to
            .clone()
            .map(|path| tokio::spawn(persist_loop(store.clone(), path, shutdown_rx)));
        tracing::info!(%addr, "tenantplane-local-apiserver (test/demo infrastructure) listening");
        Ok(LocalApiServer {
            addr,
            requests,
            tokens,
            shutdown: shutdown_tx,
            serve,
            persist,
        })
    }
}

async fn persist_loop(
    store: Arc<Store>,
    path: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            () = store.changed.notified() => {
                tokio::time::sleep(PERSIST_DEBOUNCE).await;
                // Keep serving; the next change (or shutdown) tries again,
                // and the final write's error is returned from shutdown.
                if let Err(error) = write_snapshot(&store, &path) {
                    tracing::error!(%error, "persisting the local API server state failed");
                }
            }
            _ = shutdown.changed() => {
                return write_snapshot(&store, &path);
            }
        }
    }
}

/// Writes the snapshot atomically (temporary file, then rename).
fn write_snapshot(store: &Store, path: &Path) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, store.snapshot())
        .with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("replacing {}", path.display()))
}

/// A running local API server. Dropping it without [`shutdown`](Self::shutdown)
/// leaves the server running until the runtime stops.
#[derive(Debug)]
pub struct LocalApiServer {
    addr: SocketAddr,
    requests: Arc<RequestLog>,
    tokens: Arc<Issuer>,
    shutdown: watch::Sender<bool>,
    serve: JoinHandle<anyhow::Result<()>>,
    persist: Option<JoinHandle<anyhow::Result<()>>>,
}

impl LocalApiServer {
    /// Starts configuring a server (ephemeral port, in memory only).
    pub fn builder() -> LocalApiServerBuilder {
        LocalApiServerBuilder {
            port: 0,
            persist_to: None,
            watch_history: DEFAULT_WATCH_HISTORY,
        }
    }

    /// The bound address (127.0.0.1 and the actual port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts recording every resource request from now on (see [`recorded_requests`]): a test
    /// compares what a client did with the RBAC rules written for it. Nothing is recorded, and
    /// nothing costs, until this is called.
    ///
    /// [`recorded_requests`]: Self::recorded_requests
    pub fn record_requests(&self) {
        self.requests.start();
    }

    /// The resource requests recorded since [`record_requests`](Self::record_requests), in
    /// arrival order.
    pub fn recorded_requests(&self) -> Vec<RecordedRequest> {
        self.requests.snapshot()
    }

    /// Moves this server's clock for service account tokens forward by `by`: tokens issued
    /// before then are checked as if that time had passed (they expire), and tokens issued
    /// after carry the later times. For tests of expiry, which kube-apiserver's ten-minute
    /// minimum token life would otherwise make wait; nothing else sees this clock.
    pub fn advance_token_clock(&self, by: Duration) {
        self.tokens.advance_clock(by);
    }

    /// A kubeconfig (YAML) whose current context, named `context_name`,
    /// points at this server. The user has no credentials: none are checked.
    pub fn kubeconfig(&self, context_name: &str) -> String {
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: {context_name}\n  cluster:\n    server: {url}\n\
             users:\n\
             - name: {context_name}\n  user: {{}}\n\
             contexts:\n\
             - name: {context_name}\n  context:\n    cluster: {context_name}\n    user: {context_name}\n    namespace: default\n\
             current-context: {context_name}\n\
             preferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`kubeconfig`](Self::kubeconfig) to a file, atomically (a temporary file, then
    /// a rename): whoever waits for the file reads it whole.
    pub fn write_kubeconfig(
        &self,
        path: impl AsRef<Path>,
        context_name: &str,
    ) -> anyhow::Result<()> {
        let path = path.as_ref();
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        std::fs::write(&temporary, self.kubeconfig(context_name))
            .with_context(|| format!("writing kubeconfig {}", path.display()))?;
        std::fs::rename(&temporary, path)
            .with_context(|| format!("writing kubeconfig {}", path.display()))
    }

    /// A kube-rs client for this server, built from its kubeconfig.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig("local"))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Stops serving (open watches end), writes the final snapshot when
    /// persisting, and waits for both.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        // No receivers left only means everything already stopped.
        let _ = self.shutdown.send(true);
        self.serve.await.context("server task panicked")??;
        if let Some(persist) = self.persist {
            persist.await.context("persistence task panicked")??;
        }
        Ok(())
    }
}
