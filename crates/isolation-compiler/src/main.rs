//! The `tenantplane-isolation-compiler` binary: [`tenantplane_isolation_compiler::serve`] with its flags.

use clap::Parser;

/// The allocator of the planner and the tenantplane CLI, so that the service binaries allocate
/// alike (not benchmarked on its own: a compilation is one small request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tenantplane_isolation_compiler::serve(tenantplane_isolation_compiler::Args::parse()).await
}
