//! The `tenantplane-planner` binary: [`tenantplane_planner::serve`] with its flags.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tenantplane_planner::serve(tenantplane_planner::Args::parse()).await
}
