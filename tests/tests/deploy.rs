//! The deploy artefacts, checked without a cluster or a Docker engine:
//!
//! - deploy/: `kubectl kustomize` renders the base and each overlay, and every rendered object
//!   passes schema validation (built-in kinds against the Kubernetes 1.34 schemas, tenantplane's
//!   kinds against our CRDs' schemas); the example tenant's pieces fit together;
//! - the syncer's RBAC is exactly what the syncer requests: the syncer runs the end-to-end
//!   scenarios against a local host API server that records every request, impersonating its
//!   ServiceAccount, and the requests are compared with the rules bound to that ServiceAccount in
//!   the rendered base, both ways;
//! - the Tiltfile is evaluated by a Starlark interpreter with recording stubs of Tilt's builtins:
//!   every path it references exists, every service gets a build, a deployed workload with
//!   port-forwards and a dependency on the CRDs;
//! - the Dockerfile names only packages and binaries the workspace has, one target per service.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tenantplane_e2e::{Env, create, delete, eventually, get, list, merge};
use tenantplane_local_apiserver::RecordedRequest;

/// The services, by the name of their Dockerfile target (images and workloads are
/// `tenantplane-<name>`).
const SERVICES: [&str; 3] = ["planner", "isolation-compiler", "syncer"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate is in the workspace")
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Rendering and validating deploy/

/// The oldest kustomize that understands our kustomizations (`labels`, `patches` with regex
/// targets, generators with a namespace).
const KUSTOMIZE_MIN_MAJOR: u64 = 5;

/// `kubectl kustomize deploy/<dir>`, as objects. Fails with what to do when kubectl is missing
/// or its kustomize is too old (Debian's kubernetes-client 1.20 bundles kustomize v2).
fn render(dir: &str) -> Vec<Value> {
    let version = Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl is needed to render deploy/ ({e}); .ci/run installs it")
        });
    let version: Value = serde_json::from_slice(&version.stdout).unwrap_or(Value::Null);
    let kustomize = version["kustomizeVersion"].as_str().unwrap_or("none");
    let major = kustomize
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        major >= KUSTOMIZE_MIN_MAJOR,
        "deploy/ needs kustomize v{KUSTOMIZE_MIN_MAJOR} or newer, and this kubectl ({}) bundles \
         kustomize {kustomize}: install kubectl 1.27 or newer",
        version["clientVersion"]["gitVersion"]
            .as_str()
            .unwrap_or("version unknown")
    );
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo().join("deploy").join(dir))
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    text.split("\n---\n")
        .map(|doc| serde_norway::from_str::<Value>(doc).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// Runs tests/deploy/validate_manifests.py over `objects`.
fn validate(objects: &[Value]) {
    let mut child = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/deploy/validate_manifests.py"
        ))
        .arg(repo().join("deploy/crds/tenantplane.io.yaml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 validates the manifests; .ci/run installs its packages");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(objects).expect("JSON"))
        .expect("writing to the validator");
    let out = child.wait_with_output().expect("validator output");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => println!("{report}"),
        Some(3) => panic!(
            "{report}: install the packages of .ci/requirements.txt (pip install -r .ci/requirements.txt)"
        ),
        _ => panic!("rendered objects fail schema validation:\n{report}"),
    }
}

#[test]
fn every_overlay_renders_and_every_object_passes_schema_validation() {
    let mut all = Vec::new();
    for dir in ["base", "overlays/dev", "overlays/example-tenant"] {
        let objects = render(dir);
        assert!(!objects.is_empty(), "deploy/{dir} renders nothing");
        all.extend(objects);
    }
    validate(&all);
}

fn containers(workload: &Value) -> Vec<&Value> {
    workload
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

#[test]
fn every_service_runs_restricted_with_probes_limits_and_pinned_images() {
    let base = render("base");
    for service in SERVICES {
        let name = format!("tenantplane-{service}");
        let deployment = find(&base, "Deployment", &name);
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        assert_eq!(pod["serviceAccountName"], name.as_str());
        for c in containers(deployment) {
            let image = str_of(c, "/image");
            assert!(
                image
                    .rsplit_once(':')
                    .is_some_and(|(_, tag)| tag != "latest"),
                "{name}: image {image} is not pinned to a tag"
            );
            for probe in ["livenessProbe", "readinessProbe"] {
                let path = str_of(c, &format!("/{probe}/httpGet/path"));
                assert!(
                    ["/live", "/ready"].contains(&path),
                    "{name}: {probe} {path}"
                );
            }
            for bound in ["requests", "limits"] {
                for resource in ["cpu", "memory"] {
                    assert!(
                        c["resources"][bound][resource].is_string(),
                        "{name}: no {bound}.{resource}"
                    );
                }
            }
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
        }
    }
    // Planner and isolation compiler never talk to the Kubernetes API: no token, no binding.
    for service in ["planner", "isolation-compiler"] {
        let name = format!("tenantplane-{service}");
        assert_eq!(
            find(&base, "ServiceAccount", &name)["automountServiceAccountToken"],
            false
        );
        assert_eq!(
            find(&base, "Deployment", &name)["spec"]["template"]["spec"]["automountServiceAccountToken"],
            false
        );
        assert!(
            bound_rules(&base, &name).is_empty(),
            "{name} is bound to RBAC rules"
        );
    }
    // The compiled admission policies let only the syncer's user change managed objects: that
    // user must be the syncer's ServiceAccount, and the isolation compiler must be told so.
    let syncer_user = tenantplane_isolation::DEFAULT_SYNCER_USERNAME;
    assert_eq!(
        syncer_user,
        format!(
            "system:serviceaccount:{}:{}",
            str_of(
                find(&base, "ServiceAccount", "tenantplane-syncer"),
                "/metadata/namespace"
            ),
            "tenantplane-syncer"
        )
    );
    let config = |service: &str| {
        let deployment = find(&base, "Deployment", &format!("tenantplane-{service}"));
        let map = str_of(containers(deployment)[0], "/envFrom/0/configMapRef/name");
        find(&base, "ConfigMap", map)["data"].clone()
    };
    assert_eq!(
        config("isolation-compiler")["TENANTPLANE_SYNCER_USERNAME"],
        syncer_user
    );
    // The decision log is an SQLite file on the syncer's persistent volume.
    let log = config("syncer")["TENANTPLANE_DECISION_LOG"]
        .as_str()
        .expect("the syncer has a decision log")
        .to_string();
    let path = log.strip_prefix("sqlite:").expect("an SQLite decision log");
    let syncer = find(&base, "Deployment", "tenantplane-syncer");
    let mount = containers(syncer)[0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| path.starts_with(str_of(m, "/mountPath")))
        .unwrap_or_else(|| panic!("{path} is on no volume"));
    let volume = syncer["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    let claim = str_of(volume, "/persistentVolumeClaim/claimName");
    find(&base, "PersistentVolumeClaim", claim);
}

/// The Rust sources of every file under `dirs`, concatenated.
fn sources(dirs: &[&str]) -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).expect("source"));
            }
        }
    }
    let mut out = String::new();
    for dir in dirs {
        walk(&repo().join(dir), &mut out);
    }
    out
}

#[test]
fn every_configured_variable_is_one_the_service_reads() {
    // A misspelt variable would be ignored without a word: each must appear in the sources of
    // the binary (its crate, the shared service runtime, the gRPC clients, telemetry).
    let shared = [
        "crates/service/src",
        "crates/client/src",
        "crates/telemetry/src",
    ];
    for overlay in ["base", "overlays/dev"] {
        let objects = render(overlay);
        for service in SERVICES {
            let deployment = find(&objects, "Deployment", &format!("tenantplane-{service}"));
            let map = str_of(containers(deployment)[0], "/envFrom/0/configMapRef/name");
            let crate_dir = format!("crates/{service}/src");
            let mut dirs = vec![crate_dir.as_str()];
            dirs.extend(shared);
            let code = sources(&dirs);
            for key in find(&objects, "ConfigMap", map)["data"]
                .as_object()
                .expect("configuration")
                .keys()
            {
                assert!(
                    code.contains(&format!("\"{key}\"")),
                    "deploy/{overlay}: tenantplane-{service} is given {key}, which it never reads"
                );
            }
        }
    }
}

#[test]
fn the_dev_overlay_sends_every_service_s_traces_to_jaeger() {
    let dev = render("overlays/dev");
    let jaeger = find(&dev, "Service", "jaeger");
    let port = |name: &str| {
        jaeger["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["port"].as_u64())
            .unwrap_or_else(|| panic!("Jaeger has no {name} port"))
    };
    assert_eq!(port("ui"), 16686);
    let otlp = format!(
        "http://jaeger.{}.svc:{}",
        str_of(jaeger, "/metadata/namespace"),
        port("otlp-grpc")
    );
    for service in SERVICES {
        let deployment = find(&dev, "Deployment", &format!("tenantplane-{service}"));
        let map = str_of(containers(deployment)[0], "/envFrom/0/configMapRef/name");
        assert_eq!(
            find(&dev, "ConfigMap", map)["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"],
            otlp.as_str(),
            "{service}"
        );
    }
}

#[test]
fn the_example_tenant_names_the_kubeconfig_secret_its_k3s_publishes() {
    let example = render("overlays/example-tenant");
    let tenant = example
        .iter()
        .find(|o| o["kind"] == "Tenant")
        .expect("a Tenant");
    let name = str_of(tenant, "/metadata/name");
    let host_ns = tenant["spec"]["hostNamespace"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("tenant-{name}"));
    find(&example, "Namespace", &host_ns);
    let secret_ref = &tenant["spec"]["controlPlane"]["kubeconfigSecret"];
    let secret = find(&example, "Secret", str_of(secret_ref, "/name"));
    assert_eq!(secret["metadata"]["namespace"], secret_ref["namespace"]);
    find(
        &example,
        "SyncPolicy",
        str_of(tenant, "/spec/syncPolicyRef"),
    );
    find(
        &example,
        "IsolationProfile",
        str_of(tenant, "/spec/isolationProfileRef"),
    );

    // k3s runs in the tenant's host namespace; its publisher writes that Secret's key, with the
    // server URL of the k3s Service, and may patch exactly that Secret.
    let k3s = find(&example, "StatefulSet", "k3s");
    assert_eq!(k3s["metadata"]["namespace"], host_ns.as_str());
    let service = find(&example, "Service", "k3s");
    let publisher = containers(k3s)
        .into_iter()
        .find(|c| c["name"] == "kubeconfig-publisher")
        .expect("a kubeconfig publisher");
    let script = str_of(publisher, "/args/0");
    let key = str_of(secret_ref, "/key");
    assert!(
        script.contains(&format!("patch secret {}", str_of(secret_ref, "/name")))
            && script.contains(&format!("\\\"{key}\\\"")),
        "the publisher does not write key {key} of the Tenant's Secret:\n{script}"
    );
    let server = format!(
        "https://k3s.{host_ns}.svc:{}",
        service["spec"]["ports"][0]["port"]
    );
    assert!(
        script.contains(&server),
        "the kubeconfig does not point at {server}"
    );
    let sa = str_of(k3s, "/spec/template/spec/serviceAccountName");
    let rules = bound_rules(&example, sa);
    assert_eq!(
        rules,
        vec![Rule {
            namespace: Some(host_ns.clone()),
            api_groups: vec![String::new()],
            resources: vec!["secrets".into()],
            resource_names: vec![str_of(secret_ref, "/name").to_string()],
            verbs: vec!["get".into(), "patch".into()],
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// The syncer's RBAC against what it really requests

/// One RBAC rule of a role bound to a ServiceAccount; `namespace` is `None` for a ClusterRole
/// bound cluster-wide.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    namespace: Option<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    verbs: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The rules bound to the ServiceAccount `name` by the (Cluster)RoleBindings in `objects`.
fn bound_rules(objects: &[Value], name: &str) -> Vec<Rule> {
    let mut rules = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let binds = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == name);
        if !binds {
            continue;
        }
        let namespace = binding["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        let role = find(
            objects,
            str_of(binding, "/roleRef/kind"),
            str_of(binding, "/roleRef/name"),
        );
        for rule in role["rules"].as_array().into_iter().flatten() {
            rules.push(Rule {
                namespace: namespace.clone(),
                api_groups: strings(&rule["apiGroups"]),
                resources: strings(&rule["resources"]),
                resource_names: strings(&rule["resourceNames"]),
                verbs: strings(&rule["verbs"]),
            });
        }
    }
    rules
}

/// One expanded grant: a verb on a resource (`plural` or `plural/subresource`) of a group,
/// anywhere or in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    namespace: Option<String>,
    api_group: String,
    resource: String,
    verb: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " (cluster-wide)"),
        }
    }
}

fn expand(rules: &[Rule]) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for rule in rules {
        for field in [&rule.api_groups, &rule.resources, &rule.verbs] {
            assert!(
                !field.iter().any(|v| v == "*"),
                "a wildcard is not least privilege: {rule:?}"
            );
        }
        for api_group in &rule.api_groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    grants.insert(Grant {
                        namespace: rule.namespace.clone(),
                        api_group: api_group.clone(),
                        resource: resource.clone(),
                        verb: verb.clone(),
                    });
                }
            }
        }
    }
    grants
}

/// A request as a grant would name it.
fn needed(request: &RecordedRequest) -> Grant {
    Grant {
        namespace: request.namespace.clone(),
        api_group: request.api_group.clone(),
        resource: match &request.subresource {
            Some(sub) => format!("{}/{sub}", request.resource),
            None => request.resource.clone(),
        },
        verb: request.verb.clone(),
    }
}

fn permits(grant: &Grant, need: &Grant) -> bool {
    grant.verb == need.verb
        && grant.api_group == need.api_group
        && grant.resource == need.resource
        && (grant.namespace.is_none() || grant.namespace == need.namespace)
}

/// The label selector of the Tenant cleanup's sweep: it lists every kind the host serves and
/// skips those it may not list, so a sweep list of a kind the syncer never otherwise touches in
/// that namespace (its shard Leases are elsewhere) needs no grant.
const CLEANUP_SWEEP_SELECTOR: &str = "tenantplane.io/managed=true,tenantplane.io/tenant=";

/// What the rules fail to grant, and what they grant that was never requested.
fn compare(rules: &[Rule], requests: &[RecordedRequest]) -> (BTreeSet<Grant>, BTreeSet<Grant>) {
    let grants = expand(rules);
    let touched: BTreeSet<(&str, &str, Option<&str>)> = requests
        .iter()
        .filter(|r| r.verb != "list")
        .map(|r| {
            (
                r.api_group.as_str(),
                r.resource.as_str(),
                r.namespace.as_deref(),
            )
        })
        .collect();
    let tolerated = |r: &RecordedRequest| {
        r.verb == "list"
            && r.label_selector
                .as_deref()
                .is_some_and(|s| s.starts_with(CLEANUP_SWEEP_SELECTOR))
            && !touched.contains(&(
                r.api_group.as_str(),
                r.resource.as_str(),
                r.namespace.as_deref(),
            ))
    };
    let needs: Vec<Grant> = requests
        .iter()
        .filter(|r| !tolerated(r))
        .map(needed)
        .collect();
    let missing = needs
        .iter()
        .filter(|n| !grants.iter().any(|g| permits(g, n)))
        .cloned()
        .collect();
    let unused = grants
        .iter()
        .filter(|g| !needs.iter().any(|n| permits(g, n)))
        .cloned()
        .collect();
    (missing, unused)
}

const SYNCER_SERVICE_ACCOUNT: &str = "tenantplane-syncer";

/// The kubeconfig with its user impersonating `user` (kubeconfig's `as:`), so the local server
/// records the syncer's requests under the syncer's name.
fn impersonating(kubeconfig: &str, user: &str) -> String {
    let mut config: Value = serde_norway::from_str(kubeconfig).expect("kubeconfig YAML");
    for entry in config["users"].as_array_mut().expect("users") {
        entry["user"] = json!({ "as": user });
    }
    serde_norway::to_string(&config).expect("kubeconfig YAML")
}

/// The syncer's life on a host, through the end-to-end helpers: a tenant with workloads of
/// every default kind (created, updated, one deleted), under a SyncPolicy and an
/// IsolationProfile that then changes level (applied objects pruned), and finally the Tenant
/// deleted (finalizer cleanup of everything tenantplane owns, its namespace included).
/// `round` keeps the names of successive lives apart.
async fn syncer_life(env: &Env, round: usize) {
    let h = &env.host.client;
    let api = "tenantplane.io/v1alpha1";
    let profile = env.name(&format!("rbac{round}-fence"));
    create(
        h,
        json!({"apiVersion": api, "kind": "IsolationProfile", "metadata": {"name": profile},
               "spec": {"level": "restricted"}}),
    )
    .await
    .expect("IsolationProfile");
    let policy = env.name(&format!("rbac{round}-sync"));
    create(
        h,
        json!({"apiVersion": api, "kind": "SyncPolicy", "metadata": {"name": policy},
               "spec": {"rules": [
                   {"name": "core", "match": {"groups": [""], "kinds": ["Pod", "Service",
                        "Endpoints", "ConfigMap", "Secret", "PersistentVolumeClaim", "ServiceAccount"]},
                    "action": "Sync", "reason": "Workload", "message": "synced"},
                   {"name": "ingresses", "match": {"groups": ["networking.k8s.io"], "kinds": ["Ingress"]},
                    "action": "Sync", "reason": "Workload", "message": "synced"}],
               "default": {"action": "Skip", "reason": "NotSynced", "message": "stays"}}}),
    )
    .await
    .expect("SyncPolicy");
    let tenant = env
        .create_tenant(&format!("rbac{round}"), Some(&profile))
        .await
        .expect("Tenant");
    merge(
        h,
        api,
        "Tenant",
        None,
        &tenant,
        json!({"spec": {"syncPolicyRef": policy}}),
    )
    .await
    .expect("policy reference");
    let host_ns = format!("tenant-{tenant}");
    let ns = env
        .tenant_namespace(&format!("shop{round}"))
        .await
        .expect("tenant namespace");
    let meta = |name: &str| json!({"name": name, "namespace": ns, "labels": {"rev": "1"}});
    let workloads = [
        // The restricted profile: Pod Security restricted, and every image pulled again.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("web"),
               "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{"name": "web", "image": "nginx:1.27", "imagePullPolicy": "Always",
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}),
        // No selector: its Endpoints are the tenant's and are synced too.
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("db"),
               "spec": {"ports": [{"port": 5432}]}}),
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta("db"),
               "subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"port": 5432}]}]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cfg"), "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("creds"),
               "stringData": {"password": "x"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("data"),
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("runner")}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta("web"),
               "spec": {"defaultBackend": {"service": {"name": "db", "port": {"number": 5432}}}}}),
    ];
    let tc = &env.tenant_cp.client;
    for w in &workloads {
        create(tc, w.clone()).await.expect("tenant object");
    }
    let host_rev = |w: &Value, rev: &'static str| {
        let av = str_of(w, "/apiVersion").to_string();
        let kind = str_of(w, "/kind").to_string();
        let host_name = format!("{}-x-{ns}", str_of(w, "/metadata/name"));
        let host_ns = host_ns.clone();
        async move {
            eventually(&format!("host {kind} {host_name} at rev {rev}"), || async {
                let o = get(h, &av, &kind, Some(&host_ns), &host_name).await?;
                (o["metadata"]["labels"]["rev"] == rev).then_some(())
            })
            .await
        }
    };
    for w in &workloads {
        host_rev(w, "1").await;
    }
    for w in &workloads {
        merge(
            tc,
            str_of(w, "/apiVersion"),
            str_of(w, "/kind"),
            Some(&ns),
            str_of(w, "/metadata/name"),
            json!({"metadata": {"labels": {"rev": "2"}}}),
        )
        .await
        .expect("tenant update");
    }
    for w in &workloads {
        host_rev(w, "2").await;
    }
    // Drift: a host object edited by hand is put back by a replace.
    for w in &workloads {
        let host_name = format!("{}-x-{ns}", str_of(w, "/metadata/name"));
        let (av, kind) = (str_of(w, "/apiVersion"), str_of(w, "/kind"));
        merge(
            h,
            av,
            kind,
            Some(&host_ns),
            &host_name,
            json!({"metadata": {"labels": {"rev": "by-hand"}}}),
        )
        .await
        .expect("a hand edit on the host");
    }
    for w in &workloads {
        host_rev(w, "2").await;
    }
    let compiled = [
        ("v1", "Namespace", None),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            Some(host_ns.as_str()),
        ),
        ("v1", "ResourceQuota", Some(host_ns.as_str())),
        ("v1", "LimitRange", Some(host_ns.as_str())),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            None,
        ),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
            None,
        ),
    ];
    let level = "tenantplane.io/isolation-level";
    for (av, kind, namespace) in compiled {
        let of_tenant = list(h, av, kind, namespace)
            .await
            .expect("compiled objects")
            .into_iter()
            .filter(|o| o["metadata"]["annotations"][level].is_string())
            .filter(|o| o["metadata"]["labels"]["tenantplane.io/tenant"] == json!(tenant));
        for o in of_tenant {
            let name = str_of(&o, "/metadata/name").to_string();
            merge(
                h,
                av,
                kind,
                namespace,
                &name,
                json!({"metadata": {"annotations": {level: "by-hand"}}}),
            )
            .await
            .expect("a hand edit of a compiled object");
            eventually(&format!("{kind} {name} as compiled again"), || async {
                let o = get(h, av, kind, namespace, &name).await?;
                (o["metadata"]["annotations"][level] != "by-hand").then_some(())
            })
            .await;
        }
    }
    delete(tc, "v1", "ConfigMap", Some(&ns), "cfg")
        .await
        .expect("tenant delete");
    eventually("the host ConfigMap to go with its source", || async {
        get(h, "v1", "ConfigMap", Some(&host_ns), &format!("cfg-x-{ns}"))
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // restricted → baseline prunes the LimitRange, the DNS policy and admission policies.
    merge(
        h,
        api,
        "IsolationProfile",
        None,
        &profile,
        json!({"spec": {"level": "baseline"}}),
    )
    .await
    .expect("profile change");
    eventually("the restricted-only LimitRange to be pruned", || async {
        get(h, "v1", "LimitRange", Some(&host_ns), "tenantplane-limits")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    delete(h, api, "Tenant", None, &tenant)
        .await
        .expect("Tenant delete");
    eventually("the Tenant's finalizer cleanup", || async {
        let tenant_gone = get(h, api, "Tenant", None, &tenant).await.is_none();
        let ns_gone = get(h, "v1", "Namespace", None, &host_ns)
            .await
            .is_none_or(|n| n["metadata"]["deletionTimestamp"].is_string());
        (tenant_gone && ns_gone).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_syncer_rbac_grants_exactly_what_the_syncer_requests() {
    let base = render("base");
    let rules = bound_rules(&base, SYNCER_SERVICE_ACCOUNT);
    let account = find(&base, "ServiceAccount", SYNCER_SERVICE_ACCOUNT);
    let user = format!(
        "system:serviceaccount:{}:{SYNCER_SERVICE_ACCOUNT}",
        str_of(account, "/metadata/namespace")
    );

    let mut env = Env::start().await.expect("environment");
    // The syncer again, from its first request, as its ServiceAccount.
    env.stop_syncer().await;
    let Some(server) = env.host.server.as_ref() else {
        eprintln!(
            "the host is a real cluster ({}): its requests cannot be recorded; this test needs \
             the local host API server",
            tenantplane_e2e::HOST_KUBECONFIG
        );
        return;
    };
    server.record_requests();
    let mut config = env.syncer_config().await.expect("syncer config");
    config.host_kubeconfig = Some(impersonating(&env.host.kubeconfig, &user));
    // As deployed: a replica of a shard (Leases in the syncer's namespace), which releases its
    // Lease when it stops.
    config.shard = Some(
        tenantplane_syncer::shard::ShardConfig::new(
            "rbac",
            tenantplane_e2e::SYSTEM_NAMESPACE,
            std::time::Duration::from_secs(3),
            std::time::Duration::from_millis(500),
        )
        .expect("shard settings"),
    );
    let life = |round: usize| {
        let (config, env) = (config.clone(), &env);
        async move {
            let syncer = std::sync::Arc::new(
                tenantplane_syncer::Syncer::new(config)
                    .await
                    .expect("syncer"),
            );
            let running = tokio::spawn({
                let syncer = syncer.clone();
                async move { syncer.run().await }
            });
            syncer_life(env, round).await;
            running.abort();
            let _ = running.await;
            syncer.release().await;
        }
    };
    // Timing picks some paths: an update decided on a host cache that has not yet seen the
    // object's creation is retried, and under load the object can reach its new state without
    // the apply (patch) the scenario means to exercise. A second life, whose requests count
    // too, makes a verb granted-but-unused a real finding rather than bad luck.
    let recorded = || -> Vec<RecordedRequest> {
        server
            .recorded_requests()
            .into_iter()
            .filter(|r| r.user.as_deref() == Some(user.as_str()))
            .collect()
    };
    life(1).await;
    if !compare(&rules, &recorded()).1.is_empty() {
        life(2).await;
    }
    let requests = recorded();
    let requested: BTreeSet<String> = requests.iter().map(|r| needed(r).to_string()).collect();
    println!(
        "the syncer requested:\n  {}",
        requested.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    let (missing, unused) = compare(&rules, &requests);
    let list = |grants: &BTreeSet<Grant>| {
        grants
            .iter()
            .map(|g| format!("  {g}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        missing.is_empty() && unused.is_empty(),
        "deploy/base/syncer-rbac.yaml differs from what the syncer requests.\n\
         requested but not granted:\n{}\ngranted but never requested:\n{}",
        list(&missing),
        list(&unused)
    );

    // The comparison sees both kinds of drift: a verb taken away, a verb too many.
    let mut drifted = rules.clone();
    let pods = drifted
        .iter_mut()
        .find(|r| r.resources.iter().any(|x| x == "pods"))
        .expect("a rule for pods");
    pods.verbs.retain(|v| v != "watch");
    pods.verbs.push("deletecollection".into());
    let (missing, unused) = compare(&drifted, &requests);
    assert!(
        missing
            .iter()
            .any(|g| g.verb == "watch" && g.resource == "pods"),
        "{missing:?}"
    );
    assert!(
        unused
            .iter()
            .any(|g| g.verb == "deletecollection" && g.resource == "pods"),
        "{unused:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The Tiltfile, evaluated

/// Tilt builtins the Tiltfile may call; each stub records its call and returns it.
const TILT_BUILTINS: &[&str] = &[
    "allow_k8s_contexts",
    "default_registry",
    "docker_build",
    "custom_build",
    "local_resource",
    "k8s_yaml",
    "kustomize",
    "k8s_resource",
    "port_forward",
    "link",
    "sync",
    "run",
    "watch_file",
    "update_settings",
];

/// Tilt extensions the Tiltfile may load, and the functions each provides.
const TILT_EXTENSIONS: &[(&str, &[&str])] =
    &[("ext://restart_process", &["docker_build_with_restart"])];

/// Evaluates the Tiltfile with `settings` as tilt-settings.json (`None`: no such file) in the
/// Starlark interpreter, Tilt's builtins and extensions stubbed; returns the recorded calls.
fn evaluate_tiltfile(settings: Option<Value>) -> Vec<Value> {
    let request = json!({
        "tiltfile": repo().join("Tiltfile"),
        "builtins": TILT_BUILTINS,
        "extensions": TILT_EXTENSIONS
            .iter()
            .map(|(path, functions)| (path.to_string(), json!(functions)))
            .collect::<serde_json::Map<_, _>>(),
        "settings": settings,
    });
    let script = repo().join("tests/tests/deploy/evaluate_tiltfile.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (.ci/run installs starlark-pyo3 from .ci/requirements.txt)");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(request.to_string().as_bytes())
        .expect("the request is written");
    let out = child.wait_with_output().expect("the evaluation ends");
    assert!(
        out.status.success(),
        "the Tiltfile fails to evaluate (python3 -m pip install -r .ci/requirements.txt \
         provides the interpreter):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the evaluator prints the calls as JSON")
}

fn calls_of<'a>(calls: &'a [Value], builtin: &str) -> Vec<&'a Value> {
    calls.iter().filter(|c| c["builtin"] == builtin).collect()
}

/// Positional argument `index`, or keyword `name`.
fn argument<'a>(call: &'a Value, index: usize, name: &str) -> Option<&'a Value> {
    call["args"]
        .get(index)
        .or_else(|| call["kwargs"].get(name))
        .filter(|v| !v.is_null())
}

fn as_list(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(Value::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
        None => Vec::new(),
    }
}

/// Every path the Tiltfile hands to Tilt, with what uses it.
fn referenced_paths(calls: &[Value]) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    let mut add = |what: &str, v: Option<&Value>| {
        for p in as_list(v) {
            if let Some(p) = p.as_str() {
                paths.push((what.to_string(), p.to_string()));
            }
        }
    };
    for call in calls {
        match call["builtin"].as_str().unwrap_or_default() {
            "kustomize" => add("kustomize", argument(call, 0, "paths")),
            "docker_build" | "docker_build_with_restart" => {
                add("docker_build context", argument(call, 1, "context"));
                add("docker_build dockerfile", call["kwargs"].get("dockerfile"));
            }
            "local_resource" => add("local_resource deps", call["kwargs"].get("deps")),
            "watch_file" => add("watch_file", argument(call, 0, "path")),
            _ => {}
        }
    }
    for call in calls_of(calls, "docker_build_with_restart") {
        for step in as_list(call["kwargs"].get("live_update")) {
            if step["builtin"] == "sync" {
                add("live_update sync", argument(&step, 0, "local_path"));
            }
        }
    }
    paths
}

/// Directories a local_resource's command creates (`mkdir -p DIR`): build outputs.
fn build_output_dirs(calls: &[Value]) -> Vec<String> {
    calls_of(calls, "local_resource")
        .into_iter()
        .filter_map(|c| argument(c, 1, "cmd").and_then(Value::as_str))
        .flat_map(|cmd| {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            words
                .windows(3)
                .filter(|w| w[0] == "mkdir" && w[1] == "-p")
                .map(|w| w[2].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn check_tiltfile(calls: &[Value]) {
    // Every path exists, or lies in a directory that a local_resource builds.
    let outputs = build_output_dirs(calls);
    for (what, path) in referenced_paths(calls) {
        let built = outputs.iter().any(|dir| Path::new(&path).starts_with(dir));
        assert!(
            repo().join(&path).exists() || built,
            "the Tiltfile's {what} {path} does not exist"
        );
    }

    // The manifests Tilt deploys, as Tilt renders them.
    let mut deployed = Vec::new();
    for call in calls_of(calls, "k8s_yaml") {
        for yaml in as_list(argument(call, 0, "yaml")) {
            assert_eq!(yaml["builtin"], "kustomize", "k8s_yaml of {yaml}");
            let dir = str_of(&yaml, "/args/0");
            deployed.extend(render(
                dir.strip_prefix("deploy/")
                    .expect("the Tiltfile deploys deploy/ overlays"),
            ));
        }
    }
    let resources: BTreeMap<String, &Value> = calls_of(calls, "k8s_resource")
        .into_iter()
        .map(|c| {
            let name = argument(c, 0, "workload")
                .or_else(|| c["kwargs"].get("new_name"))
                .and_then(Value::as_str)
                .expect("a k8s_resource names its workload or new_name");
            (name.to_string(), c)
        })
        .collect();

    // The CRDs are a resource of their own, and every other resource depends on it.
    let crds = resources.get("crds").expect("a k8s_resource named crds");
    let crd_objects = strings(&crds["kwargs"]["objects"]);
    for crd in deployed
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let object = format!("{}:customresourcedefinition", str_of(crd, "/metadata/name"));
        assert!(crd_objects.contains(&object), "crds lacks {object}");
    }
    for (name, call) in &resources {
        if name != "crds" {
            let deps = strings(&call["kwargs"]["resource_deps"]);
            assert!(
                deps.iter()
                    .any(|d| d == "crds" || resources.contains_key(d)),
                "{name} does not depend on the CRDs: {deps:?}"
            );
        }
    }
    let workload_of = |name: &str| {
        deployed.iter().find(|o| {
            ["Deployment", "StatefulSet"].contains(&o["kind"].as_str().unwrap_or_default())
                && o["metadata"]["name"] == name
        })
    };
    for name in resources.keys().filter(|n| n.as_str() != "crds") {
        let call = resources[name];
        if call["kwargs"].get("new_name").is_none() {
            assert!(
                workload_of(name).is_some(),
                "k8s_resource {name}: no such workload"
            );
        }
        for object in strings(&call["kwargs"]["objects"]) {
            let mut parts = object.split(':');
            let (n, kind) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            assert!(
                deployed.iter().any(|o| o["metadata"]["name"] == n
                    && o["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .eq_ignore_ascii_case(kind)),
                "k8s_resource {name}: object {object} is not deployed"
            );
        }
    }

    // Every service: a build of the image its workload runs, with live update, and a resource
    // with labels and port-forwards to ports its containers open, depending on the CRDs.
    let builds: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            ["docker_build", "docker_build_with_restart", "custom_build"]
                .contains(&c["builtin"].as_str().unwrap_or_default())
        })
        .collect();
    for service in SERVICES {
        let workload_name = format!("tenantplane-{service}");
        let workload = workload_of(&workload_name)
            .unwrap_or_else(|| panic!("{workload_name} is not deployed"));
        let image = str_of(containers(workload)[0], "/image");
        let repository = image.rsplit_once(':').map_or(image, |(r, _)| r);
        let build = builds
            .iter()
            .find(|b| argument(b, 0, "ref").and_then(Value::as_str) == Some(repository))
            .unwrap_or_else(|| panic!("no build of {repository}, the image of {workload_name}"));
        assert!(
            !as_list(build["kwargs"].get("live_update")).is_empty(),
            "{workload_name}: no live update"
        );
        if let Some(target) = build["kwargs"].get("target").and_then(Value::as_str) {
            let dockerfile = build["kwargs"]["dockerfile"]
                .as_str()
                .unwrap_or("Dockerfile");
            assert!(
                read(dockerfile)
                    .lines()
                    .any(|l| l.starts_with("FROM ") && l.ends_with(&format!(" AS {target}"))),
                "{workload_name}: {dockerfile} has no target {target}"
            );
        }
        let resource = resources
            .get(&workload_name)
            .unwrap_or_else(|| panic!("no k8s_resource for {workload_name}"));
        assert!(
            !strings(&resource["kwargs"]["labels"]).is_empty(),
            "{workload_name}: no labels"
        );
        assert!(
            strings(&resource["kwargs"]["resource_deps"]).contains(&"crds".to_string()),
            "{workload_name} does not depend on the CRDs"
        );
        let ports: BTreeSet<u64> = containers(workload)
            .iter()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["containerPort"].as_u64())
            .collect();
        let forwards = as_list(resource["kwargs"].get("port_forwards"));
        assert!(!forwards.is_empty(), "{workload_name}: no port-forwards");
        for forward in forwards {
            let port = argument(&forward, 1, "container_port")
                .or_else(|| argument(&forward, 0, "local_port"))
                .and_then(Value::as_u64)
                .expect("a port");
            assert!(
                ports.contains(&port),
                "{workload_name}: forwards {port}, opens {ports:?}"
            );
        }
    }
    let jaeger = resources.get("jaeger").expect("a k8s_resource for Jaeger");
    assert!(
        as_list(jaeger["kwargs"].get("port_forwards"))
            .iter()
            .any(|f| argument(f, 0, "local_port") == Some(&json!(16686))),
        "the Jaeger UI is not forwarded"
    );
}

#[test]
fn the_tiltfile_builds_and_deploys_every_service_and_references_only_existing_paths() {
    let defaults = evaluate_tiltfile(None);
    assert_eq!(
        argument(calls_of(&defaults, "read_json")[0], 0, "path"),
        Some(&json!("tilt-settings.json"))
    );
    check_tiltfile(&defaults);
    // The example settings are what a developer copies: they must work as they are.
    let example: Value =
        serde_json::from_str(&read("tilt-settings.example.json")).expect("the example settings");
    check_tiltfile(&evaluate_tiltfile(Some(example)));
}

#[test]
fn the_per_developer_tilt_settings_file_is_git_ignored() {
    let ignored = read(".gitignore");
    assert!(
        ignored.lines().any(|l| l.trim() == "/tilt-settings.json"),
        ".gitignore does not list /tilt-settings.json"
    );
}

// ---------------------------------------------------------------------------------------------
// The Dockerfile

#[test]
fn the_dockerfile_builds_each_service_from_workspace_packages() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages: BTreeMap<String, Vec<String>> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let bins = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| strings(&t["kind"]).contains(&"bin".to_string()))
                .map(|t| str_of(t, "/name").to_string())
                .collect();
            (str_of(p, "/name").to_string(), bins)
        })
        .collect();

    let dockerfile = read("Dockerfile");
    let words: Vec<&str> = dockerfile.split_whitespace().collect();
    let build_command = dockerfile
        .split("cargo build")
        .nth(1)
        .and_then(|rest| rest.split("&&").next())
        .expect("the Dockerfile runs cargo build");
    let built: Vec<&str> = build_command
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-p")
        .map(|w| w[1])
        .collect();
    assert!(!built.is_empty(), "cargo build names no package");
    for package in &built {
        assert!(
            packages.contains_key(*package),
            "the Dockerfile builds unknown package {package}"
        );
    }
    let binaries: BTreeSet<&String> = built.iter().flat_map(|p| &packages[*p]).collect();
    for word in &words {
        if let Some(binary) = word
            .strip_prefix("target/release/")
            .or_else(|| word.strip_prefix("/out/"))
            .filter(|b| !b.is_empty())
        {
            assert!(
                binaries.contains(&binary.to_string()),
                "the Dockerfile copies {binary}, which no built package produces"
            );
        }
    }
    // One target per service, named as the base's images are, running the service's binary as
    // a non-root user.
    let kustomization: Value =
        serde_norway::from_str(&read("deploy/base/kustomization.yaml")).expect("kustomization");
    for service in SERVICES {
        let image = format!("tenantplane-{service}");
        assert!(
            kustomization["images"]
                .as_array()
                .expect("images")
                .iter()
                .any(|i| i["name"] == image.as_str()),
            "deploy/base names no image {image}"
        );
        let stage = dockerfile
            .split("\nFROM ")
            .find(|s| {
                s.lines()
                    .next()
                    .is_some_and(|l| l.ends_with(&format!(" AS {service}")))
            })
            .unwrap_or_else(|| panic!("no Dockerfile target {service}"));
        assert!(
            stage.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{image}\"]")),
            "target {service} does not run {image}"
        );
    }
    assert!(dockerfile.contains("cc-debian12:nonroot") && dockerfile.contains("USER 65532:65532"));
    for line in dockerfile.lines().filter(|l| l.starts_with("FROM ")) {
        let base = line.split_whitespace().nth(1).expect("an image");
        assert!(
            base.contains(':') || SERVICES.contains(&base) || base == "runtime",
            "{line}: the base image is not pinned"
        );
    }
    assert!(
        read(".dockerignore").lines().any(|l| l.trim() == "/target"),
        ".dockerignore does not keep target/ out of the build context"
    );
}
