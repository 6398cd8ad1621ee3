//! `tenantplane crds`: the CRDs generated from the Rust types (what deploy/crds/ holds).

use std::process::ExitCode;

/// Arguments of `tenantplane crds`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Prints the CRD YAML to standard output.
pub fn run(_args: &Args) -> anyhow::Result<ExitCode> {
    print!("{}", tenantplane_api::crds_yaml());
    Ok(ExitCode::SUCCESS)
}
