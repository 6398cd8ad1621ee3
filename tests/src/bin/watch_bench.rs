//! `tenantplane-watch-bench`: what a real host API server pays for one syncer replica as the
//! Tenants it serves grow: the watch streams it serves the syncer, its CPU at rest, and its CPU
//! per synced object, for each Tenant count given.
//!
//! Many Tenants point at one tenant control plane (a cheap load generator): each syncs the same
//! bench namespace there (a SyncPolicy of the run syncs only it) into a host namespace of its
//! own, so `--objects` tenant ConfigMaps make objects × Tenants host ConfigMaps. The syncer is the
//! `tenantplane-syncer` binary as a child process, the planner a service on loopback in this
//! process; the host must run no other syncer.
//!
//! ```text
//! bash tests/real-kube/real-kube.sh start --bin /path/to/bin --state /path/to/state
//! S=/path/to/state
//! target/release/tenantplane-watch-bench --tenants 1,100,500 --objects 2 \
//!   --host-kubeconfig $S/host.kubeconfig \
//!   --host-pids $(cat $S/host/kube-apiserver.pid),$(cat $S/host/kine.pid) \
//!   --tenant-kubeconfig $S/tenant.kubeconfig
//! ```
//!
//! For each count N, with Tenants, namespaces and a SyncPolicy of its own (`watch-bench-<id>`):
//!
//! - **watch streams**: the host's `apiserver_longrunning_requests{verb="WATCH"}`, summed over
//!   resources, once every object has arrived and settled, less the same before the syncer
//!   started: the watches the syncer holds open on the host;
//! - **synced**: the time from the syncer's start until a host watch has shown all objects × N,
//!   and the host API server's CPU (`--host-pids`: it and its storage) over that window divided by
//!   objects × N;
//! - **at rest**: the host API server's CPU over `--rest-secs` once `--settle-secs` have passed
//!   after the last arrival, in cores, and the host's busiest requests over that window
//!   (`apiserver_request_total` by verb and resource, per second).
//!
//! Then the Tenants are deleted while the syncer runs (it removes their host objects), and the
//! rest of what the run made.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tenantplane_e2e::{
    Cluster, SYSTEM_NAMESPACE, create, ensure_namespace, install_crds, process_cpu_secs,
    start_planner,
};

const RUN_LABEL: &str = "watch-bench-run";
const TENANT_API: &str = "tenantplane.io/v1alpha1";

#[derive(Debug, Parser)]
struct Args {
    /// Tenant counts to measure, one run each, in this order.
    #[arg(long, value_delimiter = ',', default_value = "1,100,500")]
    tenants: Vec<usize>,
    /// ConfigMaps in the bench namespace of the tenant control plane (each Tenant syncs them
    /// all).
    #[arg(long, default_value_t = 2)]
    objects: usize,
    /// The host cluster's kubeconfig file.
    #[arg(long)]
    host_kubeconfig: PathBuf,
    /// The pids of the host kube-apiserver and its storage (kine, etcd), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    host_pids: Vec<u32>,
    /// The kubeconfig file of the tenant control plane every Tenant points at.
    #[arg(long)]
    tenant_kubeconfig: PathBuf,
    /// The syncer binary (default: next to this one).
    #[arg(long)]
    syncer: Option<PathBuf>,
    /// Seconds after the last arrival before the rest window opens (status, Events).
    #[arg(long, default_value_t = 5.0)]
    settle_secs: f64,
    /// Length of the rest window, in seconds.
    #[arg(long, default_value_t = 20.0)]
    rest_secs: f64,
}

/// What one count measured.
struct Figures {
    tenants: usize,
    watches: f64,
    /// The host's requests per second at rest, by verb and resource, the busiest first.
    rest_requests: Vec<(String, f64)>,
    synced_secs: f64,
    cpu_per_object_ms: f64,
    rest_cores: f64,
}

/// The host API server's CPU seconds so far.
fn host_cpu(args: &Args) -> f64 {
    args.host_pids
        .iter()
        .filter_map(|&p| process_cpu_secs(p))
        .sum()
}

/// The host's `/metrics` now: the watch requests it holds open, and its requests served so far
/// by verb and resource.
async fn host_metrics(client: &kube::Client) -> anyhow::Result<(f64, BTreeMap<String, f64>)> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await
        .context("reading the host's /metrics")?;
    let value = |l: &str| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok());
    let watches = text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\"")
        })
        .filter_map(value)
        .sum();
    let mut requests = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |key: &str| {
            line.split_once(&format!("{key}=\""))
                .and_then(|(_, rest)| rest.split_once('"'))
                .map_or("", |(v, _)| v)
        };
        let what = format!("{} {}", label("verb"), label("resource"));
        *requests.entry(what).or_default() += value(line).unwrap_or(0.0);
    }
    Ok((watches, requests))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let host = Cluster::of_kubeconfig_file(&args.host_kubeconfig).await?;
    let tenant = Cluster::of_kubeconfig_file(&args.tenant_kubeconfig).await?;
    let planner = start_planner().await?;
    install_crds(&host.client).await?;
    ensure_namespace(&host.client, SYSTEM_NAMESPACE).await?;
    println!(
        "host API server pids {:?}; {} tenant ConfigMaps per Tenant",
        args.host_pids, args.objects
    );
    let mut all = Vec::new();
    for &count in &args.tenants {
        let run = format!(
            "watch-bench-{}",
            &uuid::Uuid::now_v7().simple().to_string()[24..]
        );
        let figures = measure(&args, &host, &tenant, planner, &run, count).await;
        remove(&host, &tenant, &run, count).await?;
        let f = figures?;
        println!(
            "{:>5} Tenants: {:>5.0} host watches from the syncer, synced {} objects in {:.1} s, \
             host CPU {:.2} ms per synced object, at rest {:.3} cores",
            f.tenants,
            f.watches,
            args.objects * count,
            f.synced_secs,
            f.cpu_per_object_ms,
            f.rest_cores
        );
        let busiest: Vec<String> = f
            .rest_requests
            .iter()
            .map(|(what, rate)| format!("{what} {rate:.2}/s"))
            .collect();
        println!("       host requests at rest: {}", busiest.join(", "));
        all.push(f);
    }
    if let Some(first) = all.first() {
        println!("\nagainst {} Tenant(s):", first.tenants);
        for f in &all {
            println!(
                "{:>5} Tenants: watches ×{:.2}, host CPU per synced object ×{:.2}, at rest ×{:.2}",
                f.tenants,
                f.watches / first.watches.max(1.0),
                f.cpu_per_object_ms / first.cpu_per_object_ms,
                f.rest_cores / first.rest_cores
            );
        }
    }
    Ok(())
}

/// One count: the run's SyncPolicy, namespace, objects and `count` Tenants, the syncer started,
/// the objects waited for, the host measured.
async fn measure(
    args: &Args,
    host: &Cluster,
    tenant: &Cluster,
    planner: std::net::SocketAddr,
    run: &str,
    count: usize,
) -> anyhow::Result<Figures> {
    ensure_namespace(&tenant.client, run).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(tenant.client.clone(), run);
    for i in 0..args.objects {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("o{i}"), "labels": {RUN_LABEL: run}},
            "data": {"key": "value"}}))?;
        configmaps.create(&Default::default(), &cm).await?;
    }
    let mut policy: serde_json::Value =
        serde_norway::from_str(tenantplane_core::policy::DEFAULT_POLICY_YAML)?;
    policy["metadata"] = json!({"name": run});
    for rule in policy["spec"]["rules"].as_array_mut().into_iter().flatten() {
        rule["match"]["namespaces"] = json!([run]);
    }
    create(&host.client, policy).await?;
    create(
        &host.client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": run, "namespace": SYSTEM_NAMESPACE},
        "stringData": {"config": tenant.kubeconfig}}),
    )
    .await?;
    for i in 0..count {
        create(
            &host.client,
            json!({"apiVersion": TENANT_API, "kind": "Tenant",
            "metadata": {"name": format!("{run}-{i}")},
            "spec": {"syncPolicyRef": run, "controlPlane": {"kubeconfigSecret":
                {"namespace": SYSTEM_NAMESPACE, "name": run, "key": "config"}}}}),
        )
        .await?;
    }

    // The host ConfigMaps of the run, as they arrive.
    let expected = args.objects * count;
    let arrivals = watcher(
        Api::<ConfigMap>::all(host.client.clone()),
        watcher::Config::default()
            .labels(&format!("tenantplane.io/managed=true,{RUN_LABEL}={run}")),
    )
    .applied_objects();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (watches_before, _) = host_metrics(&host.client).await?;
    let syncer_bin = tenantplane_e2e::syncer_binary(args.syncer.as_deref())?;
    // The syncer's log, kept for a look when a count goes wrong.
    let log = std::env::temp_dir().join(format!("{run}-syncer.log"));
    let mut syncer = tokio::process::Command::new(&syncer_bin)
        .arg("--grpc-addr")
        .arg("127.0.0.1:0")
        .arg("--admin-addr")
        .arg("127.0.0.1:0")
        .arg("--host-kubeconfig")
        .arg(&args.host_kubeconfig)
        .arg("--planner")
        .arg(format!("http://{planner}"))
        .env("TENANTPLANE_LOG", "warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stderr(std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} (build it first)", syncer_bin.display()))?;
    let started = (Instant::now(), host_cpu(args));
    let mut seen = HashSet::new();
    let mut arrivals = std::pin::pin!(arrivals);
    let deadline = Duration::from_secs(600);
    while seen.len() < expected {
        let next = tokio::time::timeout_at((started.0 + deadline).into(), arrivals.next())
            .await
            .with_context(|| {
                format!(
                    "{} of {expected} host objects after 10 minutes (the syncer's log: {})",
                    seen.len(),
                    log.display()
                )
            })?;
        match next {
            Some(Ok(cm)) => {
                seen.insert((cm.metadata.namespace, cm.metadata.name));
            }
            Some(Err(e)) => eprintln!("watching the host ConfigMaps: {e}"),
            None => anyhow::bail!("the host watch ended"),
        }
    }
    let synced = (Instant::now(), host_cpu(args));
    tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    let (_, requests_before) = host_metrics(&host.client).await?;
    let rest = host_cpu(args);
    tokio::time::sleep(Duration::from_secs_f64(args.rest_secs)).await;
    let rested = host_cpu(args);
    let (watches, requests) = host_metrics(&host.client).await?;
    let watches = watches - watches_before;
    let mut rest_requests: Vec<(String, f64)> = requests
        .into_iter()
        .map(|(what, n)| {
            let before = requests_before.get(&what).copied().unwrap_or(0.0);
            (what, (n - before) / args.rest_secs)
        })
        .filter(|(_, rate)| *rate > 0.0)
        .collect();
    rest_requests.sort_by(|a, b| b.1.total_cmp(&a.1));
    rest_requests.truncate(5);
    // The Tenants go while the syncer runs: it removes their host objects and finalizers.
    remove_tenants(host, run, count).await?;
    syncer.kill().await.ok();
    Ok(Figures {
        tenants: count,
        watches,
        rest_requests,
        synced_secs: (synced.0 - started.0).as_secs_f64(),
        cpu_per_object_ms: (synced.1 - started.1) * 1000.0 / expected as f64,
        rest_cores: (rested - rest) / args.rest_secs,
    })
}

/// Deletes the run's Tenants and waits until they are gone (released by hand after a minute).
async fn remove_tenants(host: &Cluster, run: &str, count: usize) -> anyhow::Result<()> {
    let names: Vec<String> = (0..count).map(|i| format!("{run}-{i}")).collect();
    for name in &names {
        let _ = tenantplane_e2e::delete(&host.client, TENANT_API, "Tenant", None, name).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60 + count as u64 / 5);
    for name in &names {
        while tenantplane_e2e::get(&host.client, TENANT_API, "Tenant", None, name)
            .await
            .is_some()
        {
            if Instant::now() > deadline {
                let release = json!({"metadata": {"finalizers": null}});
                let _ =
                    tenantplane_e2e::merge(&host.client, TENANT_API, "Tenant", None, name, release)
                        .await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Deletes what a count made: its Tenants (if still there), Secret, SyncPolicy, the host
/// namespaces and the bench namespace, waiting until the namespaces are gone.
async fn remove(host: &Cluster, tenant: &Cluster, run: &str, count: usize) -> anyhow::Result<()> {
    remove_tenants(host, run, count).await?;
    let _ =
        tenantplane_e2e::delete(&host.client, "v1", "Secret", Some(SYSTEM_NAMESPACE), run).await;
    let _ = tenantplane_e2e::delete(&host.client, TENANT_API, "SyncPolicy", None, run).await;
    let mut gone = vec![(tenant.client.clone(), run.to_string())];
    gone.extend((0..count).map(|i| (host.client.clone(), format!("tenant-{run}-{i}"))));
    for (client, name) in &gone {
        let _ = tenantplane_e2e::delete(client, "v1", "Namespace", None, name).await;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    for (client, name) in gone {
        let api: Api<Namespace> = Api::all(client);
        while api.get_opt(&name).await?.is_some() {
            anyhow::ensure!(Instant::now() < deadline, "namespace {name} still there");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}
