//! `tenantplane-planner`: serves `tenantplane.planner.v1.Planner` (plan tenant objects, explain
//! host objects, report versions) with gRPC health, reflection and an admin port.

use std::net::SocketAddr;

use clap::Parser;
use tenantplane_grpc::PlannerService;
use tenantplane_service::{GrpcApi, ServiceArgs, shutdown_signal};

/// The tenantplane planner service.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the gRPC port.
    #[arg(
        long,
        env = "TENANTPLANE_PLANNER_GRPC_ADDR",
        default_value = "127.0.0.1:7401"
    )]
    grpc_addr: SocketAddr,

    /// Address of the admin HTTP port (/live, /ready, /metrics).
    #[arg(
        long,
        env = "TENANTPLANE_PLANNER_ADMIN_ADDR",
        default_value = "127.0.0.1:7402"
    )]
    admin_addr: SocketAddr,

    #[command(flatten)]
    service: ServiceArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = args
        .service
        .start(env!("CARGO_PKG_NAME"), args.grpc_addr, args.admin_addr)
        .await?;
    let api = GrpcApi::new().with_service(PlannerService::new().into_server());
    server.serve(api, shutdown_signal()).await
}
