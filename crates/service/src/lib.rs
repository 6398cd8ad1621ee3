//! The runtime every tenantplane service shares, so that the service binaries are only args,
//! wiring and `serve`.
//!
//! ```text
//!  flags + env (clap) ──▶ ServiceArgs ──▶ tenantplane_telemetry::init (logs text | json, OTLP traces)
//!                                    └──▶ Server::bind(gRPC addr, admin addr, TLS / mTLS)
//!  GrpcApi (the service's tonic servers) ──▶ Server::serve ──▶ gRPC: API + grpc.health.v1 +
//!                                                               reflection v1 and v1alpha,
//!                                                               counted and timed per RPC
//!                                                       └──▶ admin HTTP: /live /ready /metrics
//!  shutdown_signal (SIGTERM, Ctrl-C) ──▶ not ready, NOT_SERVING, drain in-flight calls, exit
//! ```

mod admin;
mod args;
mod metrics;
mod server;

pub use args::{ServiceArgs, TlsArgs};
pub use metrics::{GrpcMetrics, GrpcMetricsLayer};
pub use server::{DEFAULT_SHUTDOWN_GRACE, GrpcApi, ReadinessProbe, Server, shutdown_signal};
pub use tenantplane_telemetry::LogFormat;
