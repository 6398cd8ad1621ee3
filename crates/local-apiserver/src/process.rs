//! The `tenantplane-local-apiserver` binary's `main`: runs the local Kubernetes-API-compatible
//! server (test and demo infrastructure, not a product component) as a process of its own until
//! SIGTERM or Ctrl-C, optionally writing a kubeconfig and persisting to a file.
//!
//! `tenantplane up` runs the binary (`src/main.rs`), found beside its own executable, as the
//! demo's clusters; the `tenantplane` binary does not depend on this crate.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

use crate::{DEFAULT_WATCH_HISTORY, LocalApiServer};

/// Local Kubernetes-API-compatible server for tests and demos. No
/// authentication: bind only to 127.0.0.1 and never expose it.
#[derive(Debug, Parser)]
#[command(name = "tenantplane-local-apiserver", version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write a kubeconfig pointing at the server to this path (once the server listens).
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Name of the cluster, user and context in the written kubeconfig.
    #[arg(long, default_value = "tenantplane-local")]
    context: String,
    /// Persist objects to this JSON file (loaded on start if present).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Changes kept for watch resume; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = DEFAULT_WATCH_HISTORY)]
    watch_history: usize,
}

/// Parses the command line, serves until SIGTERM or Ctrl-C, then shuts down (writing the final
/// snapshot when persisting). Logs go to stderr (`RUST_LOG`).
pub fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let mut builder = LocalApiServer::builder()
        .port(args.port)
        .watch_history(args.watch_history);
    if let Some(data) = &args.data {
        builder = builder.persist_to(data);
    }
    let server = builder.start().await?;
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path, &args.context)?;
    }
    println!("{}", server.url());
    wait_for_termination().await?;
    server.shutdown().await
}

async fn wait_for_termination() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}
