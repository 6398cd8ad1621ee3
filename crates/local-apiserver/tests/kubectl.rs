//! Semantics suite through kubectl (`/usr/bin/kubectl` or `KUBECTL`):
//! get, apply --server-side (with conflicts), delete, get -w. Runs against
//! the local server, or the real cluster named by
//! `TENANTPLANE_E2E_KUBECONFIG`. kubectl runs as a blocking child process,
//! so these tests use a multi-threaded runtime: the local server keeps
//! serving on the other worker while one waits for kubectl.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::Target;

fn kubectl_binary() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string())
}

/// A kubectl command against the target, with its own discovery cache.
fn kubectl_command(target: &Target, cache: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(kubectl_binary());
    command
        .arg("--kubeconfig")
        .arg(&target.kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args);
    command
}

fn run(target: &Target, cache: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = kubectl_command(target, cache, args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .expect("running kubectl: install it (/usr/bin/kubectl) or set KUBECTL");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("writing kubectl stdin");
    drop(input);
    child.wait_with_output().expect("kubectl output")
}

fn succeed(target: &Target, cache: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(target, cache, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn config_map_yaml(ns: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n  labels:\n    app: demo\ndata:\n  mode: {value}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_server_side_get_and_delete() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();

    let applied = succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&config_map_yaml(&ns, "fast")),
    );
    assert!(applied.contains("serverside-applied"), "{applied}");

    let json = succeed(
        &target,
        cache,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            &ns,
            "-o",
            "json",
            "--show-managed-fields",
        ],
        None,
    );
    let object: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(object["data"]["mode"], "fast");
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kubectl"]);

    let table = succeed(
        &target,
        cache,
        &["get", "configmaps", "-n", &ns, "-l", "app=demo"],
        None,
    );
    assert!(table.contains("settings"), "{table}");

    let conflict = run(
        &target,
        cache,
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        Some(&config_map_yaml(&ns, "slow")),
    );
    assert!(!conflict.status.success());
    let stderr = String::from_utf8_lossy(&conflict.stderr);
    assert!(stderr.contains("conflict"), "{stderr}");

    succeed(
        &target,
        cache,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&config_map_yaml(&ns, "slow")),
    );
    let mode = succeed(
        &target,
        cache,
        &[
            "get",
            "cm",
            "settings",
            "-n",
            &ns,
            "-o",
            "jsonpath={.data.mode}",
        ],
        None,
    );
    assert_eq!(mode, "slow");

    succeed(
        &target,
        cache,
        &["delete", "configmap", "settings", "-n", &ns],
        None,
    );
    let gone = run(
        &target,
        cache,
        &["get", "configmap", "settings", "-n", &ns],
        None,
    );
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_streams_changes() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&config_map_yaml(&ns, "a")),
    );

    let mut watch = kubectl_command(
        &target,
        cache,
        // The label leaves out the kube-root-ca.crt a real cluster publishes.
        &[
            "get",
            "configmaps",
            "-n",
            &ns,
            "-l",
            "app=demo",
            "-w",
            "-o",
            "name",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("kubectl get -w");
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, "configmap/settings");

    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&config_map_yaml(&ns, "b")),
    );
    let next = lines.next().unwrap().unwrap();
    assert_eq!(next, "configmap/settings", "the update is streamed");
    // The child is ours; it has no other way to stop.
    watch.kill().unwrap();
    watch.wait().unwrap();
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_serves_custom_resources_after_a_crd_is_applied() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    let group = format!("kubectl{}.semantics.tenantplane.io", std::process::id());
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: gadgets\n    singular: gadget\n    kind: Gadget\n    shortNames: [gdg]\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources:\n      status: {{}}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    );
    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&crd),
    );
    succeed(
        &target,
        cache,
        &[
            "wait",
            "--for=condition=Established",
            &format!("crd/gadgets.{group}"),
        ],
        None,
    );
    let gadget = format!(
        "apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\n  namespace: {ns}\nspec:\n  color: blue\n"
    );
    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&gadget),
    );
    let color = succeed(
        &target,
        cache,
        &[
            "get",
            "gdg",
            "g1",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.color}",
        ],
        None,
    );
    assert_eq!(color, "blue");
    succeed(
        &target,
        cache,
        &["delete", "crd", &format!("gadgets.{group}")],
        None,
    );
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_namespace_waits_until_it_is_gone() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&config_map_yaml(&ns, "a")),
    );
    // Bounded: an API server without a namespace controller never finishes
    // the deletion, and kubectl would wait for ever.
    succeed(
        &target,
        cache,
        &["delete", "namespace", &ns, "--timeout=60s"],
        None,
    );
    let gone = run(&target, cache, &["get", "namespace", &ns], None);
    assert!(
        !gone.status.success(),
        "kubectl delete waited for the namespace to go"
    );
    target.cleanup(&ns).await;
}
