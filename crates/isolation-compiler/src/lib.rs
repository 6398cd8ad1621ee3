//! `tenantplane-isolation-compiler`: serves `tenantplane.isolation.v1.IsolationCompiler`
//! (IsolationProfile → host objects with provenance and a prune list) with gRPC health,
//! reflection and an admin port.
//!
//! The binary is `main.rs`; `tenantplane up` runs the same [`serve`] as a child process.

use std::net::SocketAddr;

use tenantplane_grpc::IsolationService;
use tenantplane_isolation::{CompileOptions, DEFAULT_SYNCER_USERNAME};
use tenantplane_service::{GrpcApi, ServiceArgs, shutdown_signal};

/// The tenantplane isolation compiler service.
#[derive(Debug, clap::Parser)]
#[command(version, about)]
pub struct Args {
    /// Address of the gRPC port.
    #[arg(
        long,
        env = "TENANTPLANE_ISOLATION_GRPC_ADDR",
        default_value = "127.0.0.1:7411"
    )]
    pub grpc_addr: SocketAddr,

    /// Address of the admin HTTP port (/live, /ready, /metrics).
    #[arg(
        long,
        env = "TENANTPLANE_ISOLATION_ADMIN_ADDR",
        default_value = "127.0.0.1:7412"
    )]
    pub admin_addr: SocketAddr,

    /// The Kubernetes user the syncer acts as: the only user the compiled admission policies let
    /// change tenantplane-managed objects in a host namespace.
    #[arg(long, env = "TENANTPLANE_SYNCER_USERNAME", default_value = DEFAULT_SYNCER_USERNAME)]
    pub syncer_username: String,

    #[command(flatten)]
    pub service: ServiceArgs,
}

/// Serves until SIGTERM or Ctrl-C, then drains in-flight calls.
pub async fn serve(args: Args) -> anyhow::Result<()> {
    let server = args
        .service
        .start(env!("CARGO_PKG_NAME"), args.grpc_addr, args.admin_addr)
        .await?;
    let options = CompileOptions {
        syncer_username: args.syncer_username,
    };
    let api = GrpcApi::new().with_service(IsolationService::new(options).into_server());
    server.serve(api, shutdown_signal()).await
}
