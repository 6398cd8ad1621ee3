//! The `tenantplane-isolation-compiler` binary: [`tenantplane_isolation_compiler::serve`] with its flags.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tenantplane_isolation_compiler::serve(tenantplane_isolation_compiler::Args::parse()).await
}
