//! `tenantplane-local-apiserver`: the local Kubernetes-API-compatible server (test and demo
//! infrastructure, not a product component) as a process of its own ([`process::main`]).
//! `tenantplane up` runs one as the demo's host cluster and one as its tenant control plane,
//! finding this binary beside its own executable; the `tenantplane` binary does not depend on
//! this package.
//!
//! [`process::main`]: tenantplane_local_apiserver::process::main

use std::process::ExitCode;

fn main() -> ExitCode {
    match tenantplane_local_apiserver::process::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error and its causes on one line, last in the log (`up` shows the log's tail),
            // never buried under a backtrace when RUST_BACKTRACE is set.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
