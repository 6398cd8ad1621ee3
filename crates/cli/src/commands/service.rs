//! `tenantplane service NAME`: runs one of the services in this process, exactly as its own
//! binary does. Hidden: it is how `tenantplane up` starts the services as separate processes
//! from one executable; deployments use the service binaries.

use std::process::ExitCode;

/// The service to run, with its own flags.
#[derive(Debug, clap::Subcommand)]
pub enum Args {
    /// The planner (`tenantplane-planner`).
    Planner(tenantplane_planner::Args),
    /// The isolation compiler (`tenantplane-isolation-compiler`).
    IsolationCompiler(tenantplane_isolation_compiler::Args),
    /// The syncer (`tenantplane-syncer`).
    Syncer(Box<tenantplane_syncer::service::Args>),
}

/// Runs the service until SIGTERM or Ctrl-C.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match args {
            Args::Planner(a) => tenantplane_planner::serve(a).await,
            Args::IsolationCompiler(a) => tenantplane_isolation_compiler::serve(a).await,
            Args::Syncer(a) => tenantplane_syncer::service::serve(*a).await,
        }
    })?;
    Ok(ExitCode::SUCCESS)
}
