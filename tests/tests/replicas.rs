//! Syncer lives and replicas against the harness's local API servers: a restarted syncer
//! continues the Tenant's status counts; replicas split the Tenants through Leases, each
//! Tenant served by exactly one, and the survivors take the Tenants of a replica that stops.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use tenantplane_core::decision::{Decision, HostAction};
use tenantplane_decision_log::{Filter, Query};
use tenantplane_e2e::{Env, SYSTEM_NAMESPACE, create, eventually, get, tenant_status};
use tenantplane_syncer::shard::ShardConfig;

fn config_map(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns}, "data": {"v": "1"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_status_counts_continue_across_a_syncer_restart() {
    let mut env = Env::start().await.unwrap();
    let t = env.create_tenant("counts", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    for i in 0..3 {
        create(&env.tenant_cp.client, config_map(&ns, &format!("c{i}")))
            .await
            .unwrap();
    }
    // Settled: the three ConfigMaps (and the namespace's ServiceAccount) synced, the count
    // unchanged over two status intervals.
    let last = std::sync::Mutex::new(0);
    let before = eventually("the counts to settle", || async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let synced = tenant_status(&env, &t).await["counts"]["synced"]
            .as_u64()
            .unwrap_or(0);
        let previous = std::mem::replace(&mut *last.lock().unwrap(), synced);
        (synced >= 3 && synced == previous).then_some(synced)
    })
    .await;

    env.stop_syncer().await;
    env.start_syncer().await.unwrap();
    create(&env.tenant_cp.client, config_map(&ns, "after-restart"))
        .await
        .unwrap();
    // A count restarted from zero would show one decision (the new ConfigMap's; the objects
    // already in place are not recorded again), never more than `before`.
    eventually(
        &format!("status.counts.synced of {t} to go on from {before}"),
        || async {
            let synced = tenant_status(&env, &t).await["counts"]["synced"]
                .as_u64()
                .unwrap_or(0);
            (synced > before).then_some(())
        },
    )
    .await;
}

/// Every decision in the SQLite log at `url`.
async fn logged(url: &str) -> Vec<Decision> {
    let store = tenantplane_decision_log::open(url).await.unwrap();
    store
        .query(Query::new(Filter::default(), 100_000))
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.decision)
        .collect()
}

/// Create decisions about the host object `name` of each Tenant.
fn creates_of(decisions: &[Decision], name: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in decisions {
        if d.action == HostAction::Create && d.target.as_ref().is_some_and(|t| t.name == name) {
            *out.entry(d.tenant.clone()).or_default() += 1;
        }
    }
    out
}

/// `var` from the environment as a number, else `default`.
fn knob(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Replicas split the Tenants, each Tenant served by exactly one; a stopped replica's Tenants
/// are taken over by the others, whose host objects in place are not created again. Two
/// replicas and four Tenants by default; `TENANTPLANE_E2E_REPLICAS` and
/// `TENANTPLANE_E2E_SHARDED_TENANTS` scale it (docs/conformance.md: 3 and 300).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_tenants_and_the_survivors_take_over_a_stopped_one() {
    let mut env = Env::start().await.unwrap();
    env.stop_syncer().await;
    let replicas: Vec<String> = (0..knob("TENANTPLANE_E2E_REPLICAS", 2))
        .map(|i| format!("replica-{i}"))
        .collect();
    let log_url = |id: &str| {
        format!(
            "sqlite:{}",
            std::env::temp_dir()
                .join(format!("tenantplane-replicas-{}-{id}.sqlite", env.run))
                .display()
        )
    };
    let mut tasks = BTreeMap::new();
    for id in &replicas {
        let mut config = env.syncer_config().await.unwrap();
        config.shard = Some(
            ShardConfig::new(
                id,
                SYSTEM_NAMESPACE,
                Duration::from_secs(3),
                Duration::from_millis(500),
            )
            .unwrap(),
        );
        config.decision_log = Some(
            tenantplane_syncer::record::open_log(&log_url(id))
                .await
                .unwrap(),
        );
        tasks.insert(id.clone(), tokio::spawn(tenantplane_syncer::run(config)));
    }

    let count = knob("TENANTPLANE_E2E_SHARDED_TENANTS", 4);
    let tenants: Vec<String> = futures::stream::iter(0..count)
        .map(|i| {
            let env = &env;
            async move { env.create_tenant(&format!("shard{i}"), None).await.unwrap() }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let ns = env.tenant_namespace("shop").await.unwrap();
    let on_every_host = |name: String| {
        let (env, tenants) = (&env, &tenants);
        async move {
            for t in tenants {
                eventually(&format!("{name} in the host namespace of {t}"), || async {
                    get(
                        &env.host.client,
                        "v1",
                        "ConfigMap",
                        Some(&format!("tenant-{t}")),
                        &name,
                    )
                    .await
                })
                .await;
            }
        }
    };
    create(&env.tenant_cp.client, config_map(&ns, "before"))
        .await
        .unwrap();
    on_every_host(format!("before-x-{ns}")).await;

    // Each Tenant's decisions come from one replica, and its host object was created once.
    let mut served_by: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let mut all = Vec::new();
    for id in &replicas {
        for d in logged(&log_url(id)).await {
            served_by
                .entry(d.tenant.clone())
                .or_default()
                .insert(id.as_str());
            all.push(d);
        }
    }
    for t in &tenants {
        assert_eq!(
            served_by.get(t).map(BTreeSet::len),
            Some(1),
            "{t} is served by exactly one replica: {served_by:?}"
        );
    }
    let before = creates_of(&all, &format!("before-x-{ns}"));
    for t in &tenants {
        assert_eq!(before.get(t), Some(&1), "one Create for {t}: {before:?}");
    }

    // The replica serving the most Tenants stops (as a crash would: its Lease is not released).
    let served = |id: &str| served_by.values().filter(|s| s.contains(id)).count();
    let gone = replicas.iter().max_by_key(|id| served(id)).unwrap().clone();
    let survivors: Vec<&String> = replicas.iter().filter(|id| **id != gone).collect();
    let task = tasks.remove(&gone).unwrap();
    task.abort();
    let _ = task.await;
    let stopped = std::time::Instant::now();
    create(&env.tenant_cp.client, config_map(&ns, "after"))
        .await
        .unwrap();
    on_every_host(format!("after-x-{ns}")).await;
    // A figure, not a limit (lease duration 3 s, renew 0.5 s: about twice the lease duration).
    println!(
        "{gone} stopped serving {} of {count} Tenants; {survivors:?} served them all again {:.1?} \
         later",
        served(&gone),
        stopped.elapsed()
    );

    let mut survived = Vec::new();
    for id in &survivors {
        survived.extend(logged(&log_url(id)).await);
    }
    let after = creates_of(&survived, &format!("after-x-{ns}"));
    let before_again = creates_of(&survived, &format!("before-x-{ns}"));
    for t in &tenants {
        assert_eq!(
            after.get(t),
            Some(&1),
            "the survivors created it once for {t}: {after:?}"
        );
        assert_eq!(
            before_again.get(t),
            before
                .get(t)
                .filter(|_| !served_by[t].contains(gone.as_str())),
            "a taken-over Tenant's objects in place are not created again: {:#?}",
            survived
                .iter()
                .filter(|d| &d.tenant == t)
                .map(|d| (&d.subject.name, d.outcome, &d.reason, &d.message, d.time))
                .collect::<Vec<_>>()
        );
    }
    for id in &replicas {
        let _ = std::fs::remove_file(log_url(id).trim_start_matches("sqlite:"));
    }
}
