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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    // Each of these sends a protobuf body (Content-Type: application/vnd.kubernetes.protobuf).
    let created_ns = format!("{ns}-created");
    succeed(&target, cache, &["create", "namespace", &created_ns], None);
    let robot = format!("--serviceaccount={ns}:robot");
    let cluster_name = format!("{ns}-reader");
    let cluster_role = format!("--clusterrole={cluster_name}");
    for args in [
        vec![
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ],
        vec![
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=key=s3cret",
        ],
        vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--port=80",
        ],
        vec!["create", "service", "clusterip", "web", "--tcp=80:8080"],
        vec!["create", "serviceaccount", "robot"],
        vec!["create", "job", "once", "--image=busybox"],
        vec![
            "create",
            "cronjob",
            "nightly",
            "--image=busybox",
            "--schedule=0 3 * * *",
        ],
        vec!["create", "role", "reader", "--verb=get", "--resource=pods"],
        vec!["create", "rolebinding", "reader", "--role=reader", &robot],
        vec!["create", "quota", "small", "--hard=pods=2,cpu=1"],
        vec![
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=1",
        ],
        vec![
            "create",
            "clusterrole",
            &cluster_name,
            "--verb=get",
            "--resource=pods",
        ],
        vec![
            "create",
            "clusterrolebinding",
            &cluster_name,
            &cluster_role,
            &robot,
        ],
    ] {
        let mut args = args;
        args.extend(["-n", &ns]);
        succeed(&target, cache, &args, None);
    }

    let json = succeed(
        &target,
        cache,
        &["get", "deployment", "web", "-n", &ns, "-o", "json"],
        None,
    );
    let deployment: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.25"
    );
    assert_eq!(deployment["spec"]["replicas"], 1);
    // The scale subresource (autoscaling/v1 Scale) writes spec.replicas.
    succeed(
        &target,
        cache,
        &["scale", "deployment", "web", "--replicas=3", "-n", &ns],
        None,
    );
    let replicas = succeed(
        &target,
        cache,
        &[
            "get",
            "deployment",
            "web",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    );
    assert_eq!(replicas, "3");
    for (resource, path, expected) in [
        ("configmap/settings", "{.data.mode}", "fast"),
        // base64 of s3cret
        ("secret/token", "{.data.key}", "czNjcmV0"),
        ("service/web", "{.spec.ports[0].targetPort}", "8080"),
        ("resourcequota/small", "{.spec.hard.pods}", "2"),
        ("pdb/web", "{.spec.minAvailable}", "1"),
        ("rolebinding/reader", "{.subjects[0].name}", "robot"),
        ("cronjob/nightly", "{.spec.schedule}", "0 3 * * *"),
    ] {
        let jsonpath = format!("jsonpath={path}");
        let value = succeed(
            &target,
            cache,
            &["get", resource, "-n", &ns, "-o", &jsonpath],
            None,
        );
        assert_eq!(value, expected, "{resource} {path}");
    }
    // Short names and the `all` category, as kube-apiserver lists them.
    let names = succeed(
        &target,
        cache,
        &["get", "deploy,cj,pdb,sa", "-n", &ns, "-o", "name"],
        None,
    );
    for name in [
        "deployment.apps/web",
        "cronjob.batch/nightly",
        "poddisruptionbudget.policy/web",
        "serviceaccount/robot",
    ] {
        assert!(names.contains(name), "{name} in {names}");
    }
    let all = succeed(
        &target,
        cache,
        &["get", "all", "-n", &ns, "-o", "name"],
        None,
    );
    for name in [
        "service/web",
        "deployment.apps/web",
        "job.batch/once",
        "cronjob.batch/nightly",
    ] {
        assert!(all.contains(name), "{name} in {all}");
    }

    succeed(
        &target,
        cache,
        &["delete", "clusterrolebinding,clusterrole", &cluster_name],
        None,
    );
    succeed(
        &target,
        cache,
        &["delete", "namespace", &created_ns, "--wait=false"],
        None,
    );
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_reads_openapi_v3() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    let pod_spec = succeed(&target, cache, &["explain", "pod.spec"], None);
    assert!(pod_spec.contains("KIND:       Pod"), "{pod_spec}");
    assert!(
        pod_spec.contains("containers\t<[]Container> -required-"),
        "{pod_spec}"
    );
    let replicas = succeed(
        &target,
        cache,
        &["explain", "deployment.spec.replicas"],
        None,
    );
    assert!(replicas.contains("GROUP:      apps"), "{replicas}");
    assert!(replicas.contains("FIELD: replicas <integer>"), "{replicas}");
    let config_map = succeed(&target, cache, &["explain", "configmap"], None);
    assert!(
        config_map.contains("data\t<map[string]string>"),
        "{config_map}"
    );

    let group = format!("explain{}.semantics.tenantplane.io", std::process::id());
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gizmos.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: gizmos\n    singular: gizmo\n    kind: Gizmo\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            description: What the gizmo should be.\n            properties:\n              size:\n                type: integer\n                description: How many sprockets the gizmo has.\n"
    );
    succeed(
        &target,
        cache,
        &["apply", "--server-side", "-f", "-"],
        Some(&crd),
    );
    // A real server publishes a new CRD's schema shortly after it is established.
    let mut explained = String::new();
    for _ in 0..100 {
        let out = run(
            &target,
            cache,
            &["explain", &format!("gizmos.{group}.spec")],
            None,
        );
        explained = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && explained.contains("sprockets") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        explained.contains("What the gizmo should be."),
        "{explained}"
    );
    assert!(explained.contains("size\t<integer>"), "{explained}");
    succeed(
        &target,
        cache,
        &["delete", "crd", &format!("gizmos.{group}")],
        None,
    );
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_answers() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    let pods = succeed(&target, cache, &["auth", "can-i", "create", "pods"], None);
    assert_eq!(pods.trim(), "yes");
    let deployments = succeed(
        &target,
        cache,
        &["auth", "can-i", "delete", "deployments.apps", "-n", &ns],
        None,
    );
    assert_eq!(deployments.trim(), "yes");
    let list = succeed(
        &target,
        cache,
        &["auth", "can-i", "--list", "-n", &ns],
        None,
    );
    assert!(list.contains("*.*"), "{list}");
    target.cleanup(&ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_and_auth_whoami() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    succeed(
        &target,
        cache,
        &["create", "serviceaccount", "builder", "-n", &ns],
        None,
    );
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  serviceAccountName: builder\n  containers:\n  - name: app\n    image: app:1\n"
    );
    succeed(&target, cache, &["apply", "-f", "-"], Some(&pod));
    let uid = succeed(
        &target,
        cache,
        &[
            "get",
            "pod",
            "web",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    let token = succeed(
        &target,
        cache,
        &[
            "create",
            "token",
            "builder",
            "-n",
            &ns,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "web",
            "--bound-object-uid",
            &uid,
            "--duration",
            "20m",
        ],
        None,
    );
    let token = token.trim();
    // The token authenticates as the pod's service account (the review kubectl creates;
    // without an OpenAPI v2 document to validate a create-only kind against, kubectl must
    // leave validation to the server).
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n"
    );
    let review = succeed(
        &target,
        cache,
        &["create", "-f", "-", "-o", "json", "--validate=false"],
        Some(&review),
    );
    let review: Value = serde_json::from_str(&review).unwrap();
    let user = &review["status"]["user"];
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        user["username"],
        format!("system:serviceaccount:{ns}:builder")
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-name"][0],
        "web"
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-uid"][0],
        uid
    );
    let own = succeed(
        &target,
        cache,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert!(
        !own.is_empty() && !own.starts_with("system:serviceaccount:"),
        "{own}"
    );
    // kubectl (client-go) sends credentials over TLS only: against the local server's plain
    // HTTP, `--token` is dropped and whoami answers for the kubeconfig's user.
    let whoami = |token: &str| {
        run(
            &target,
            cache,
            &[
                "auth",
                "whoami",
                "--token",
                token,
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        )
    };
    let tls = std::fs::read_to_string(&target.kubeconfig)
        .unwrap()
        .contains("server: https://");
    if tls {
        let out = whoami(token);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("system:serviceaccount:{ns}:builder"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let short = run(
        &target,
        cache,
        &["create", "token", "builder", "-n", &ns, "--duration", "5m"],
        None,
    );
    assert!(!short.status.success());
    let stderr = String::from_utf8_lossy(&short.stderr);
    assert!(
        stderr.contains("spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"),
        "{stderr}"
    );

    succeed(
        &target,
        cache,
        &[
            "delete",
            "pod",
            "web",
            "-n",
            &ns,
            "--grace-period=0",
            "--force",
        ],
        None,
    );
    if tls {
        support::eventually("the deleted pod's token refused", || async {
            let out = whoami(token);
            !out.status.success()
                && String::from_utf8_lossy(&out.stderr)
                    .contains("You must be logged in to the server (Unauthorized)")
        })
        .await;
    }
    target.cleanup(&ns).await;
}
