//! The runtime every tenantplane service shares, so that the service binaries are only args,
//! wiring and `serve`.
//!
//! ```text
//!  flags + env (clap) ──▶ ServiceArgs ──▶ init_logging (text | json)
//!                                    └──▶ Server::bind(gRPC addr, admin addr, TLS / mTLS)
//!  GrpcApi (the service's tonic servers) ──▶ Server::serve ──▶ gRPC: API + grpc.health.v1 +
//!                                                               reflection v1 and v1alpha,
//!                                                               counted and timed per RPC
//!                                                       └──▶ admin HTTP: /live /ready /metrics
//!  shutdown_signal (SIGTERM, Ctrl-C) ──▶ not ready, NOT_SERVING, drain in-flight calls, exit
//! ```

mod admin;
mod args;
mod logging;
mod metrics;
mod server;

pub use args::{LogFormat, ServiceArgs, TlsArgs};
pub use logging::init_logging;
pub use metrics::{GrpcMetrics, GrpcMetricsLayer};
pub use server::{DEFAULT_SHUTDOWN_GRACE, GrpcApi, Server, shutdown_signal};
