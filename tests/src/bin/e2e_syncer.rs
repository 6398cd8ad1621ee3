//! `tenantplane-e2e-syncer`: the syncer as a process of its own, for the e2e test that kills it
//! with SIGKILL (tests/tests/crash.rs). It runs what `tenantplane-syncer` runs; built with this
//! package so that its tests find it (`CARGO_BIN_EXE_tenantplane-e2e-syncer`).

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(tenantplane_syncer::service::serve(clap::Parser::parse()))
}
