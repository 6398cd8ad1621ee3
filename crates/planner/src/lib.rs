//! `tenantplane-planner`: serves `tenantplane.planner.v1.Planner` (plan tenant objects, explain
//! host objects, report versions) with gRPC health, reflection and an admin port.
//!
//! The binary is `main.rs`; `tenantplane up` runs the same [`serve`] as a child process.

use std::net::SocketAddr;

use tenantplane_grpc::PlannerService;
use tenantplane_service::{GrpcApi, ServiceArgs, shutdown_signal};

/// The tenantplane planner service.
#[derive(Debug, clap::Parser)]
#[command(version, about)]
pub struct Args {
    /// Address of the gRPC port.
    #[arg(
        long,
        env = "TENANTPLANE_PLANNER_GRPC_ADDR",
        default_value = "127.0.0.1:7401"
    )]
    pub grpc_addr: SocketAddr,

    /// Address of the admin HTTP port (/live, /ready, /metrics).
    #[arg(
        long,
        env = "TENANTPLANE_PLANNER_ADMIN_ADDR",
        default_value = "127.0.0.1:7402"
    )]
    pub admin_addr: SocketAddr,

    #[command(flatten)]
    pub service: ServiceArgs,
}

/// Serves until SIGTERM or Ctrl-C, then drains in-flight calls.
pub async fn serve(args: Args) -> anyhow::Result<()> {
    let server = args
        .service
        .start(env!("CARGO_PKG_NAME"), args.grpc_addr, args.admin_addr)
        .await?;
    let api = GrpcApi::new().with_service(PlannerService::new().into_server());
    server.serve(api, shutdown_signal()).await
}
