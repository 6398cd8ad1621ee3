//! `tenantplane-local-apiserver`: the local Kubernetes-API-compatible server
//! (`crates/local-apiserver`, test and demo infrastructure, not a product component) as a process
//! of its own. `tenantplane up` runs one as the demo's host cluster and one as its tenant control
//! plane. A binary of this package so that cargo builds it with `tenantplane`, which finds it
//! beside itself; `tenantplane` does not link the local API server.

fn main() -> anyhow::Result<()> {
    tenantplane_local_apiserver::process::main()
}
