//! Decision log throughput: appends/s (and CPU time per append) through the group-commit
//! appender, then query latency by subject (of a tenant, and across tenants), by host object
//! and by id, on a log of `--records` decisions.
//!
//! ```text
//! cargo bench -p tenantplane-decision-log --bench throughput -- [--records N] [--callers N] [--url URL]
//! ```
//!
//! Defaults: 1,000,000 records, 512 concurrent callers each awaiting its own `append` and then
//! confirming its host action carried out (as syncer workers do), a fresh SQLite file in a temporary directory. `--url postgres://...` measures
//! a PostgreSQL database instead (it should be empty). Prints one line per figure; for SQLite
//! also the CPU per append of the writer, checkpointer and durability threads and the WAL
//! file's size.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tenantplane_decision_log::{
    Appender, AppenderConfig, DecisionStore, Filter, ObjectFilter, Query, open,
};

/// The syncer's allocator (`crates/syncer/src/main.rs`), so that the allocation work measured
/// here is the one the appending process does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    records: u64,
    callers: u64,
    url: Option<String>,
}

fn options() -> Options {
    let mut o = Options {
        records: 1_000_000,
        callers: 512,
        url: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--records" => {
                o.records = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(o.records)
            }
            "--callers" => {
                o.callers = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(o.callers)
            }
            "--url" => o.url = args.next(),
            // `cargo bench` passes --bench; anything else is ignored too.
            _ => {}
        }
    }
    o
}

/// The SQLite log's directory: always the same one, emptied when a run starts and removed when
/// it ends, so that a run that was killed (a million decisions take about 1.5 GiB) leaves
/// nothing behind past the next run. One run at a time.
struct BenchDir(std::path::PathBuf);

impl BenchDir {
    fn create() -> BenchDir {
        let dir = std::env::temp_dir().join("tenantplane-decision-log-bench");
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("removing {}: {e}", dir.display())
            }
            _ => {}
        }
        std::fs::create_dir_all(&dir).expect("creating the bench directory");
        BenchDir(dir)
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::main]
async fn main() {
    let o = options();
    let dir = BenchDir::create();
    let url = o
        .url
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", dir.0.join("bench.db").display()));
    let store = open(&url).await.expect("open the log");
    let backend = if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    println!(
        "backend {backend}, {} records, {} concurrent callers",
        o.records, o.callers
    );

    let (appender, task) = Appender::spawn(store.clone(), AppenderConfig::default());
    let next = Arc::new(AtomicU64::new(0));
    let cpu_before = process_cpu();
    let threads_before = thread_cpu();
    let started = Instant::now();
    let callers: Vec<_> = (0..o.callers)
        .map(|_| {
            let appender = appender.clone();
            let next = next.clone();
            let records = o.records;
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= records {
                        return;
                    }
                    // Every decision here records a host action (an update): confirmed once
                    // "written", as the syncer confirms its writes.
                    let appended = appender
                        .append(common::decision(i, 100))
                        .await
                        .expect("append");
                    appender.carried_out(appended.sequence);
                }
            })
        })
        .collect();
    for c in callers {
        c.await.expect("caller");
    }
    let elapsed = started.elapsed();
    let cpu = process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let threads = thread_cpu();
    drop(appender);
    task.await.expect("appender task");
    println!(
        "append: {} decisions in {:.2}s = {:.0} appends/s (each awaited until durable)",
        o.records,
        elapsed.as_secs_f64(),
        o.records as f64 / elapsed.as_secs_f64()
    );
    if let Some(cpu) = cpu {
        // On a shared machine appends/s depends on the CPU share this process got; the CPU
        // time per append does not (it includes building the decisions, and for PostgreSQL
        // excludes the server's own time).
        println!(
            "append CPU: {:.1} µs per append in this process (user + system, all threads), {:.2} cores busy on average",
            cpu.as_secs_f64() * 1e6 / o.records as f64,
            cpu.as_secs_f64() / elapsed.as_secs_f64()
        );
    }
    // SQLite's writer thread is the one every append waits for; its CPU per append bounds
    // appends/s on a machine with a core to spare for it.
    for (name, what) in [
        (WRITER_THREAD, "writer thread"),
        (CHECKPOINT_THREAD, "checkpointer thread"),
        (DURABILITY_THREAD, "durability thread"),
    ] {
        let before = threads_before.get(name).copied().unwrap_or_default();
        if let Some(after) = threads.get(name) {
            let spent = after.saturating_sub(before).as_secs_f64();
            println!(
                "{what} CPU: {:.1} µs per append, busy {:.0}% of the time",
                spent * 1e6 / o.records as f64,
                spent * 100.0 / elapsed.as_secs_f64()
            );
        }
    }
    if let Some(wal) = wal_size(&url) {
        println!(
            "WAL file after the appends: {:.1} MiB (its largest extent)",
            wal as f64 / (1 << 20) as f64
        );
    }

    let by_subject = |i: u64| Filter {
        tenant: Some(format!("tenant-{}", i % 100)),
        subject: ObjectFilter::parse(&format!("ConfigMap/default/cm-{}", (i * 7919) % 1000)),
        ..Filter::default()
    };
    let by_subject_any_tenant = |i: u64| Filter {
        tenant: None,
        ..by_subject(i)
    };
    let by_host = |i: u64| Filter {
        host: ObjectFilter::parse(&format!(
            "ConfigMap/tp-tenant-{}/cm-{}-x-default",
            i % 100,
            (i * 7919) % 1000
        )),
        ..Filter::default()
    };
    latency("query by subject (newest 50)", &*store, 1000, by_subject).await;
    latency(
        "query by subject across tenants (newest 50)",
        &*store,
        1000,
        by_subject_any_tenant,
    )
    .await;
    latency("query by host object (newest 50)", &*store, 1000, by_host).await;

    let head = store.head().await.expect("head").sequence;
    let ids: Vec<String> = futures::future::join_all((0..200).map(|i| {
        let store = store.clone();
        async move {
            let seq = 1 + (i * 104_729) % head.max(1);
            tenantplane_decision_log::entries_after(&*store, seq - 1, 1)
                .await
                .expect("read")
                .pop()
                .map(|e| e.decision.id)
        }
    }))
    .await
    .into_iter()
    .flatten()
    .collect();
    let mut times = Vec::new();
    for id in ids {
        let t = Instant::now();
        store.get(id).await.expect("get").expect("present");
        times.push(t.elapsed());
    }
    report("get by id", &mut times);
}

async fn latency(what: &str, store: &dyn DecisionStore, n: u64, filter: impl Fn(u64) -> Filter) {
    let mut times = Vec::with_capacity(n as usize);
    let mut found = 0;
    for i in 0..n {
        let mut q = Query::new(filter(i), 50);
        q.newest_first = true;
        let t = Instant::now();
        found += store.query(q).await.expect("query").entries.len();
        times.push(t.elapsed());
    }
    report(
        &format!("{what}, {:.1} results avg", found as f64 / n as f64),
        &mut times,
    );
}

/// User + system CPU time of this process so far (Linux: `/proc/self/stat`, in USER_HZ ticks of
/// 10 ms); `None` elsewhere.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat).map(|(_, cpu)| cpu)
}

/// The command (or thread) name and user + system CPU time of a `/proc` `stat` line.
fn parse_stat(stat: &str) -> Option<(String, Duration)> {
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are fields 14 and 15 of the line, the 12th and 13th after the name.
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_string();
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, Duration::from_millis((utime + stime) * 10)))
}

/// The SQLite store's thread names as `/proc` shows them (cut to 15 bytes).
const WRITER_THREAD: &str = "decision-log-wr";
const CHECKPOINT_THREAD: &str = "decision-log-ch";
const DURABILITY_THREAD: &str = "decision-log-du";

/// User + system CPU time of this process's threads so far, summed by thread name (Linux:
/// `/proc/self/task/*/stat`); empty elsewhere.
fn thread_cpu() -> std::collections::HashMap<String, Duration> {
    let mut by_name = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((name, cpu)) = parse_stat(&stat) {
            *by_name.entry(name).or_default() += cpu;
        }
    }
    by_name
}

/// The size of a SQLite URL's `-wal` file.
fn wal_size(url: &str) -> Option<u64> {
    if url.starts_with("postgres") {
        return None;
    }
    let path = url.strip_prefix("sqlite:").unwrap_or(url);
    let path = path.split('?').next()?;
    std::fs::metadata(format!("{path}-wal"))
        .ok()
        .map(|m| m.len())
}

fn report(what: &str, times: &mut [Duration]) {
    times.sort_unstable();
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    println!(
        "{what}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples)",
        at(0.5),
        at(0.99),
        at(1.0),
        times.len()
    );
}
