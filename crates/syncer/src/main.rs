//! `tenantplane-syncer`: syncs tenant objects into the host cluster, every decision recorded,
//! and serves the decision log (`tenantplane.decisions.v1.DecisionLog`) with gRPC health,
//! reflection and an admin port.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tenantplane_syncer::service::serve(tenantplane_syncer::service::Args::parse()).await
}
