//! Write rate and watch fan-out latency of the local API server over real
//! HTTP with kube-rs: several writer tasks create and update ConfigMaps while
//! several watchers stream every change; prints writes/s and the p50/p99
//! delay between a write's response and each watcher seeing it.
//!
//! `cargo bench -p tenantplane-local-apiserver --bench throughput`
//! (knobs: `BENCH_WRITES`, `BENCH_WRITERS`, `BENCH_WATCHERS`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tenantplane_local_apiserver::LocalApiServer;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let writes = knob("BENCH_WRITES", 20_000);
    let writers = knob("BENCH_WRITERS", 8);
    let watchers = knob("BENCH_WATCHERS", 4);
    let server = LocalApiServer::builder().start().await?;
    let client = server.client().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());

    // Write completion times, keyed by the resourceVersion the write produced.
    let completed: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let start_rv = api
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();

    let mut watcher_tasks = Vec::new();
    for _ in 0..watchers {
        let api = api.clone();
        let completed = completed.clone();
        let start_rv = start_rv.clone();
        watcher_tasks.push(tokio::spawn(async move {
            let mut delays = Vec::with_capacity(writes);
            let mut stream = Box::pin(api.watch(&WatchParams::default(), &start_rv).await?);
            while delays.len() < writes {
                let Some(event) = stream.try_next().await? else {
                    anyhow::bail!("watch ended after {} events", delays.len());
                };
                let seen = Instant::now();
                let object = match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
                    WatchEvent::Deleted(_) | WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => anyhow::bail!("watch error: {e}"),
                };
                let rv: u64 = object.resource_version().unwrap_or_default().parse()?;
                // The write's response can arrive after the watch event; then
                // the delay is zero.
                let done = completed.lock().expect("lock").get(&rv).copied();
                delays.push(done.map_or(Duration::ZERO, |d| seen.saturating_duration_since(d)));
            }
            Ok(delays)
        }));
    }

    let began = Instant::now();
    let mut writer_tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        let completed = completed.clone();
        let count = writes / writers + usize::from(w < writes % writers);
        writer_tasks.push(tokio::spawn(async move {
            for i in 0..count {
                let name = format!("bench-{w}-{}", i / 2);
                let written = if i % 2 == 0 {
                    let cm: ConfigMap = serde_json::from_value(
                        json!({"metadata": {"name": name}, "data": {"i": i.to_string()}}),
                    )?;
                    api.create(&PostParams::default(), &cm).await?
                } else {
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"i": i.to_string()}})),
                    )
                    .await?
                };
                let rv: u64 = written.resource_version().unwrap_or_default().parse()?;
                completed.lock().expect("lock").insert(rv, Instant::now());
            }
            anyhow::Ok(())
        }));
    }
    for task in writer_tasks {
        task.await??;
    }
    let elapsed = began.elapsed();
    let mut delays = Vec::new();
    for task in watcher_tasks {
        delays.extend(tokio::time::timeout(Duration::from_secs(60), task).await???);
    }
    delays.sort();
    println!(
        "writes: {writes} by {writers} concurrent writers in {:.2}s = {:.0} writes/s",
        elapsed.as_secs_f64(),
        writes as f64 / elapsed.as_secs_f64()
    );
    println!(
        "watch latency over {watchers} watchers ({} events): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        delays.len(),
        percentile(&delays, 0.50).as_secs_f64() * 1e3,
        percentile(&delays, 0.99).as_secs_f64() * 1e3,
        delays.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    server.shutdown().await
}
