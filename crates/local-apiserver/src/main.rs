//! `tenantplane-local-apiserver`: the local Kubernetes-API-compatible server (test and demo
//! infrastructure, not a product component) as a process of its own ([`process::main`]).
//! `tenantplane up` runs one as the demo's host cluster and one as its tenant control plane,
//! finding this binary beside its own executable; the `tenantplane` binary does not depend on
//! this package.
//!
//! [`process::main`]: tenantplane_local_apiserver::process::main

fn main() -> anyhow::Result<()> {
    tenantplane_local_apiserver::process::main()
}
