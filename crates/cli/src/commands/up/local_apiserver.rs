//! The demo's clusters: local API servers (test and demo infrastructure,
//! `crates/local-apiserver`), each a process of the `tenantplane-local-apiserver` binary, which
//! `up` supervises as it does the services.
//!
//! That binary belongs to the `tenantplane-local-apiserver` package, which the `tenantplane`
//! binary does not depend on: commands other than `up` neither build nor carry the local API
//! server. `up` looks for it beside its own executable, where cargo puts both (`cargo build`,
//! `cargo install --path` of each package into the same root). `cargo run` builds only the
//! package it runs: when cargo started `up`, `up` first builds the server with the same cargo,
//! profile and target directory (a moment when it is up to date).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::supervise::{ProcessSpec, Ready};

/// The binary's name, as cargo builds it.
const BINARY: &str = "tenantplane-local-apiserver";

/// The local API server binary: `given`, or [`BINARY`] beside this executable (built first when
/// cargo started `up`).
pub(super) async fn binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(given) = given {
        if !given.is_file() {
            bail!(
                "no local API server binary at {} (--local-apiserver, TENANTPLANE_LOCAL_APISERVER)",
                given.display()
            );
        }
        return Ok(given.to_path_buf());
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let beside = exe.with_file_name(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX));
    if let (Some(cargo), Some(manifest_dir)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) {
        build(&cargo, Path::new(&manifest_dir), &exe).await?;
    }
    if !beside.is_file() {
        bail!(
            "no {BINARY} beside {} to run the local clusters: build it with `cargo build -p \
             {BINARY}` (or `cargo install --path crates/local-apiserver`), or give its path with \
             --local-apiserver, or give --host-kubeconfig and --tenant-kubeconfig",
            exe.display()
        );
    }
    Ok(beside)
}

/// What cargo sets in the environment of what it runs (`cargo run`, `cargo test`), the package's
/// own, and what the nested build must not inherit: build scripts that declare some of them
/// (`rerun-if-env-changed`, as ring's does for `CARGO_PKG_NAME`) would otherwise run again, and
/// everything above them be compiled again, at each alternation of an outer and a nested build.
fn set_by_cargo_for_its_package(var: &str) -> bool {
    var.starts_with("CARGO_PKG_")
        || var.starts_with("CARGO_MANIFEST_")
        || matches!(
            var,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// `cargo build -p tenantplane-local-apiserver` into the directory of `exe` (its profile's
/// directory of its target directory).
async fn build(cargo: &std::ffi::OsStr, manifest_dir: &Path, exe: &Path) -> anyhow::Result<()> {
    let out = exe.parent().context("this executable has no directory")?;
    let profile = match out.file_name().and_then(|name| name.to_str()) {
        // The `dev` profile builds into `debug`; every other profile into its own name.
        Some("debug") => "dev",
        Some(name) => name,
        None => bail!("{} is not in a cargo profile directory", exe.display()),
    };
    let target_dir = out
        .parent()
        .context("this executable has no target directory")?;
    eprintln!("tenantplane up: building {BINARY} (cargo started up)");
    let mut command = tokio::process::Command::new(cargo);
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(set_by_cargo_for_its_package) {
            command.env_remove(var);
        }
    }
    let status = command
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .args(["-p", BINARY, "--bin", BINARY, "--profile", profile])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .await
        .with_context(|| format!("running cargo to build {BINARY}"))?;
    if !status.success() {
        bail!("cargo could not build {BINARY} ({status})");
    }
    Ok(())
}

/// One local API server: `name` (`host`, `tenant`) on 127.0.0.1:`port`, persisted in `data`
/// and writing its kubeconfig (context `tenantplane-up-NAME`) to `kubeconfig`, which `up` waits
/// for.
pub(super) fn spec(
    exe: &Path,
    name: &str,
    port: u16,
    kubeconfig: PathBuf,
    data: &Path,
) -> ProcessSpec {
    ProcessSpec {
        name: format!("{name} API server"),
        exe: exe.to_path_buf(),
        args: vec![
            format!("--port={port}"),
            format!(
                "--data={}",
                data.join(format!("{name}-cluster.json")).display()
            ),
            format!("--kubeconfig-out={}", kubeconfig.display()),
            format!("--context=tenantplane-up-{name}"),
        ],
        ready: Ready {
            addr: format!("127.0.0.1:{port}"),
            path: "/readyz",
            file: Some(kubeconfig),
        },
        log: data.join("logs").join(format!("{name}-apiserver.log")),
    }
}
