//! `tenantplane`: the command line of tenantplane.
//!
//! Each subcommand lives in its own module under `commands/` and calls the same core crates the
//! services run, so that what the CLI predicts is what the syncer does.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod decision_source;
mod host_cluster;
mod input;
mod kind_scopes;

/// Planning many objects is mostly allocation: mimalloc instead of glibc's allocator roughly
/// halves explain-sync's time over 100k objects (docs/benchmarks.md, "explain-sync").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// tenantplane: auditable multi-tenancy for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "tenantplane", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of Tenant, SyncPolicy and IsolationProfile.
    Crds(commands::crds::Args),
    /// List, filter and watch the recorded sync decisions.
    Decisions(commands::decisions::Args),
    /// Verify, export and prune the decision log.
    Audit(commands::audit::Args),
    /// Predict, offline, where each tenant object lands and what will be refused.
    ExplainSync(commands::explain_sync::Args),
    /// Why a host object exists, or why a tenant object was refused: the chain to the decision.
    Why(commands::why::Args),
    /// Run the whole system on this machine: services, clusters (local unless given), examples.
    Up(commands::up::Args),
    /// Run one service in this process (how `up` starts them).
    #[command(subcommand, hide = true)]
    Service(commands::service::Args),
    /// Compile an IsolationProfile for a Tenant into the host objects that enforce it, offline.
    CompileIsolation(commands::compile_isolation::Args),
    /// Compile a SyncPolicy's Reject rules into the tenant control plane's admission policies, offline.
    CompileAdmission(commands::compile_admission::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds(args) => commands::crds::run(&args),
        Command::Decisions(args) => commands::decisions::run(&args),
        Command::Audit(args) => commands::audit::run(&args),
        Command::ExplainSync(args) => commands::explain_sync::run(&args),
        Command::CompileIsolation(args) => commands::compile_isolation::run(&args),
        Command::CompileAdmission(args) => commands::compile_admission::run(&args),
        Command::Why(args) => commands::why::run(&args),
        Command::Up(args) => commands::up::run(&args),
        Command::Service(args) => commands::service::run(args),
    };
    match result {
        Ok(code) => code,
        // The reader of stdout has gone (`| head`): nothing more to say, as for any Unix tool.
        Err(e) if closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether `e` comes from writing to a stdout whose reader has gone.
fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
