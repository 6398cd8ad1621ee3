//! The `tenantplane-planner` binary: [`tenantplane_planner::serve`] with its flags.

use clap::Parser;

/// Planning a batch is mostly allocation, on every core: mimalloc instead of glibc's allocator
/// (docs/grpc.md "Benchmark", which serves the planner with this allocator too).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tenantplane_planner::serve(tenantplane_planner::Args::parse()).await
}
