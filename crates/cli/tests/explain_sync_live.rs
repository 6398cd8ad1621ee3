//! explain-sync reading the current host state from a live cluster (the local API server standing
//! in for the host cluster): a hand-made object at a target name is predicted as a Conflict, a
//! reference to one as a refusal (whatever kinds the inputs are), and an unreachable cluster is a
//! clear error.

use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use tenantplane_local_apiserver::LocalApiServer;

fn explain(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .arg("explain-sync")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

/// A local API server standing in for the host cluster, with the demo tenant's host namespace
/// `tenant-demo`; its kubeconfig written in a temporary directory.
async fn host_with_tenant_namespace() -> (
    LocalApiServer,
    tempfile::TempDir,
    std::path::PathBuf,
    kube::Client,
) {
    let host = LocalApiServer::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("host.kubeconfig");
    host.write_kubeconfig(&kubeconfig, "host").unwrap();
    let client = host.client().await.unwrap();
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "tenant-demo"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    (host, dir, kubeconfig, client)
}

#[tokio::test]
async fn a_foreign_object_on_the_live_host_is_predicted_as_a_conflict() {
    let (host, _dir, kubeconfig, client) = host_with_tenant_namespace().await;
    let foreign: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-config-x-shop", "labels": {"owner": "platform-team"}}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client, "tenant-demo")
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        explain(&[
            "examples/workloads/shop.yaml",
            "--host-kubeconfig",
            &kubeconfig,
            "--fail-on",
            "conflict",
        ])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let row = stdout
        .lines()
        .find(|l| l.starts_with("ConfigMap/shop/web-config"))
        .unwrap_or_else(|| panic!("{stdout}{stderr}"));
    assert!(
        row.contains("Conflict") && row.contains("HostObjectNotManaged"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("Service/shop/web"))
        .unwrap();
    assert!(
        row.contains("create"),
        "nothing is at the Service's target name: {stdout}"
    );
    assert_eq!(out.status.code(), Some(1), "--fail-on conflict");
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_host_cluster_is_a_clear_error() {
    let host = LocalApiServer::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("gone.kubeconfig");
    host.write_kubeconfig(&kubeconfig, "gone").unwrap();
    host.shutdown().await.unwrap();

    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        explain(&[
            "examples/workloads/shop.yaml",
            "--host-kubeconfig",
            &kubeconfig,
        ])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("on the host cluster http://127.0.0.1:"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_reference_to_a_foreign_object_of_a_kind_not_among_the_inputs_is_predicted_refused() {
    let (host, dir, kubeconfig, client) = host_with_tenant_namespace().await;
    let platform_admin: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "platform-admin-x-lab"}}))
            .unwrap();
    Api::<ServiceAccount>::namespaced(client, "tenant-demo")
        .create(&PostParams::default(), &platform_admin)
        .await
        .unwrap();
    // Only a Pod among the inputs: the host's ServiceAccounts are read all the same.
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: borrower, namespace: lab}\n\
         spec: {serviceAccountName: platform-admin, containers: [{name: main, image: app}]}\n",
    )
    .unwrap();

    let (pod, kubeconfig) = (
        pod.to_str().unwrap().to_string(),
        kubeconfig.to_str().unwrap().to_string(),
    );
    let out =
        tokio::task::spawn_blocking(move || explain(&[&pod, "--host-kubeconfig", &kubeconfig]))
            .await
            .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row = stdout
        .lines()
        .find(|l| l.starts_with("Pod/lab/borrower"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        row.contains("Rejected") && row.contains("ReferenceToForeignHostObject"),
        "{stdout}"
    );
    host.shutdown().await.unwrap();
}
