//! Binding, serving and shutting down a service's gRPC and admin ports.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic::transport::ServerTlsConfig;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::admin::{self, AdminState};
use crate::metrics::{GrpcMetrics, GrpcMetricsLayer};

/// The gRPC services a binary serves, besides health and reflection which [`Server::serve`] adds.
#[derive(Debug, Default)]
pub struct GrpcApi {
    routes: Routes,
    services: Vec<&'static str>,
}

impl GrpcApi {
    /// No services yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tonic server (e.g. `PlannerServer::new(service)`).
    pub fn with_service<S>(mut self, service: S) -> Self
    where
        S: tower::Service<http::Request<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.services.push(S::NAME);
        self.routes = self.routes.add_service(service);
        self
    }
}

/// A service's own readiness check, asked on every `/ready` request (e.g. the syncer: every
/// tenant has listed its watches).
#[derive(Clone)]
pub struct ReadinessProbe(
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>,
);

impl ReadinessProbe {
    /// A probe that runs `check` on every `/ready` request.
    pub fn new<F, Fut>(check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        ReadinessProbe(Arc::new(move || Box::pin(check())))
    }

    /// Runs the check.
    pub(crate) async fn passes(&self) -> bool {
        (self.0)().await
    }
}

impl std::fmt::Debug for ReadinessProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadinessProbe")
    }
}

/// How long in-flight calls get to finish after a shutdown signal, unless told otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A service's bound ports, ready to serve.
#[derive(Debug)]
pub struct Server {
    grpc: TcpListener,
    admin: TcpListener,
    tls: Option<ServerTlsConfig>,
    shutdown_grace: Duration,
    /// Flushes the process's spans when the server stops.
    telemetry: Option<tenantplane_telemetry::Telemetry>,
    probe: Option<ReadinessProbe>,
    /// The service's own metrics, served on `/metrics` beside the gRPC server's.
    registry: Registry,
}

impl Server {
    /// Binds the gRPC and admin ports (port 0 picks a free port; see [`Server::grpc_addr`]).
    pub async fn bind(
        grpc_addr: SocketAddr,
        admin_addr: SocketAddr,
        tls: Option<ServerTlsConfig>,
    ) -> anyhow::Result<Self> {
        let grpc = TcpListener::bind(grpc_addr)
            .await
            .with_context(|| format!("binding the gRPC port {grpc_addr}"))?;
        let admin = TcpListener::bind(admin_addr)
            .await
            .with_context(|| format!("binding the admin port {admin_addr}"))?;
        Ok(Server {
            grpc,
            admin,
            tls,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            telemetry: None,
            probe: None,
            registry: Registry::default(),
        })
    }

    /// How long in-flight calls (and connections that clients keep open) get after a shutdown
    /// signal before the server stops regardless.
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Keeps the process's telemetry until the server stops, then flushes its spans.
    pub fn with_telemetry(mut self, telemetry: Option<tenantplane_telemetry::Telemetry>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Makes `/ready` also require `probe` (the gRPC port serving is always required).
    pub fn with_readiness(mut self, probe: ReadinessProbe) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Serves the metrics registered in `registry` (a service's own, such as the syncer's
    /// decisions) on `/metrics`, beside the gRPC request metrics the server adds.
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves `api` with grpc.health.v1 and server reflection (v1 and v1alpha) on the gRPC port
    /// and /live, /ready and /metrics on the admin port, until `shutdown` resolves. Then readiness
    /// and health turn to not serving, in-flight calls complete (within the shutdown grace), and
    /// both ports close.
    pub async fn serve(
        self,
        api: GrpcApi,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let grpc_addr = self.grpc_addr();
        let admin_addr = self.admin_addr();
        let (health, health_service) = tonic_health::server::health_reporter();
        for name in &api.services {
            health
                .set_service_status(*name, ServingStatus::Serving)
                .await;
        }
        let mut served: Vec<String> = api.services.iter().map(|s| s.to_string()).collect();
        served.extend(
            [
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection",
            ]
            .map(String::from),
        );
        // Reflection lists and describes exactly the services served (and what they import).
        let api_files = tenantplane_proto::file_descriptor_set_of(&api.services);
        let reflection = || {
            served.iter().fold(
                tonic_reflection::server::Builder::configure()
                    .register_encoded_file_descriptor_set(&api_files)
                    .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                    .register_encoded_file_descriptor_set(
                        tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
                    )
                    .register_encoded_file_descriptor_set(
                        tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
                    ),
                |builder, name| builder.with_service_name(name),
            )
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;

        let mut registry = self.registry;
        let metrics = Arc::new(GrpcMetrics::new(&mut registry, served));
        let ready = Arc::new(AtomicBool::new(false));

        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(begin_shutdown(
            shutdown,
            health,
            api.services.clone(),
            ready.clone(),
            stop_tx,
        ));

        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = self.tls {
            builder = builder.tls_config(tls).context("configuring TLS")?;
        }
        let routes = api
            .routes
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha);
        let grpc = builder
            .layer(GrpcMetricsLayer::new(metrics))
            .layer(tenantplane_telemetry::propagation::grpc_server_trace_layer())
            .add_routes(routes)
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, small responses wait for delayed ACKs (~40 ms a call).
                TcpIncoming::from(self.grpc).with_nodelay(Some(true)),
                stopped(stop_rx.clone()),
            );
        let admin = axum::serve(
            self.admin,
            admin::router(AdminState {
                registry: Arc::new(registry),
                ready: ready.clone(),
                probe: self.probe,
            }),
        )
        .with_graceful_shutdown(stopped(stop_rx.clone()));

        ready.store(true, Ordering::SeqCst);
        tracing::info!(%grpc_addr, %admin_addr, services = ?api.services, "serving");
        let grace = self.shutdown_grace;
        let grace_over = async {
            stopped(stop_rx).await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            (grpc, admin) = async { tokio::join!(grpc, admin) } => {
                grpc.context("gRPC server")?;
                admin.context("admin server")?;
            }
            () = grace_over => tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                "calls or connections still open after the shutdown grace period; stopping anyway"
            ),
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Waits for `shutdown`, then withdraws readiness and health before the ports stop.
async fn begin_shutdown(
    shutdown: impl Future<Output = ()>,
    health: HealthReporter,
    services: Vec<&'static str>,
    ready: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
) {
    shutdown.await;
    tracing::info!("shutting down: finishing in-flight calls");
    ready.store(false, Ordering::SeqCst);
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    for name in services {
        health
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    // Both servers may already have returned (a bind error); nobody is left to tell.
    let _ = stop.send(true);
}

/// Resolves once shutdown has begun.
async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the sender is gone, which happens only after it sent.
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}
