//! Syncer lives and replicas against the harness's local API servers: a restarted syncer
//! continues the Tenant's status counts.

use serde_json::{Value, json};
use tenantplane_e2e::{Env, create, eventually, get};

async fn counts(env: &Env, tenant: &str) -> Value {
    get(
        &env.host.client,
        "tenantplane.io/v1alpha1",
        "Tenant",
        None,
        tenant,
    )
    .await
    .map(|t| t["status"]["counts"].clone())
    .unwrap_or(Value::Null)
}

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
        let synced = counts(&env, &t).await["synced"].as_u64().unwrap_or(0);
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
            let synced = counts(&env, &t).await["synced"].as_u64().unwrap_or(0);
            (synced > before).then_some(())
        },
    )
    .await;
}
