//! A trace collector that accepts connections and never answers does not slow syncing down: the
//! syncer's decision spans go to a bounded queue that drops what the collector does not take,
//! and every tenant object still reaches the host.

use serde_json::json;
use tenantplane_e2e::{Env, create, eventually, list};
use tenantplane_telemetry::{LogFormat, OtlpSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncing_goes_on_while_the_collector_never_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let telemetry = tenantplane_telemetry::init_with(
        "tenantplane-e2e",
        LogFormat::Text,
        "warn",
        &OtlpSettings {
            endpoint: Some(format!("http://{collector}")),
            protocol: "grpc".into(),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(telemetry.exporting());

    let env = Env::start().await.unwrap();
    let t = env.create_tenant("hung", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    let objects = 40;
    for i in 0..objects {
        create(&env.tenant_cp.client, json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cfg{i}"), "namespace": ns}, "data": {"i": i.to_string()}}))
        .await
        .unwrap();
    }
    let host_ns = format!("tenant-{t}");
    eventually("every ConfigMap on the host", || async {
        let synced = list(&env.host.client, "v1", "ConfigMap", Some(&host_ns))
            .await
            .unwrap_or_default()
            .iter()
            .filter(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("cfg") && n.ends_with(&format!("-x-{ns}")))
            })
            .count();
        (synced == objects).then_some(())
    })
    .await;
    // Exit without waiting for the hung collector (the export timeout would hold shutdown).
    std::mem::forget(telemetry);
}
