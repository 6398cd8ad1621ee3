//! `tenantplane-syncer`: syncs tenant objects into the host cluster, every decision recorded,
//! and serves the decision log (`tenantplane.decisions.v1.DecisionLog`) with gRPC health,
//! reflection and an admin port.

use clap::Parser;

/// The syncer's per-object work is mostly allocation: with glibc's allocator, malloc and free
/// took about 38% of its CPU; mimalloc takes 20-30% off its CPU per synced object (docs/syncer.md,
/// "Benchmark").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // Without transparent huge pages for this process: mimalloc commits its arenas eagerly on
    // Linux, and where THP is `always` they are backed by 2 MiB pages, about 25 MiB more RSS at
    // 10,000 objects for no gain in speed. A kernel or sandbox that refuses costs only memory.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    raise_open_files_limit();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(tenantplane_syncer::service::serve(
            tenantplane_syncer::service::Args::parse(),
        ))
}

/// Raises the soft limit of open files to the hard limit. A replica holds a connection per watch
/// (HTTP/1.1: a watch is a connection), a watch per synced kind in each tenant control plane and
/// in each host namespace it serves: at a thousand Tenants, several thousand descriptors, past the
/// usual soft limit of 1024 (the hard limit is usually far above it). A limit that cannot be
/// raised is left as it is: connections beyond it fail, and are retried, with their errors logged.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}
