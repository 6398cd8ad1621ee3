//! End-to-end scenarios: a tenant control plane, a host, the planner and isolation-compiler
//! services and the syncer, asserting on host and tenant objects. Local API servers by default;
//! real clusters with `TENANTPLANE_E2E_HOST_KUBECONFIG` and `TENANTPLANE_E2E_TENANT_KUBECONFIG`.

use serde_json::{Value, json};
use tenantplane_e2e::{
    Env, create, delete, events_regarding, eventually, get, list, merge, merge_status,
    tenant_status,
};

const DECISION_ID: &str = "tenantplane.io/decision-id";

fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits for the host object to exist and satisfy `check`.
async fn host_object(
    env: &Env,
    tenant: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let ns = format!("tenant-{tenant}");
    eventually(&format!("host {kind} {ns}/{name}"), || async {
        get(&env.host.client, api_version, kind, Some(&ns), name)
            .await
            .filter(|v| check(v))
    })
    .await
}

async fn host_object_gone(env: &Env, tenant: &str, api_version: &str, kind: &str, name: &str) {
    let ns = format!("tenant-{tenant}");
    eventually(
        &format!("host {kind} {ns}/{name} to be deleted"),
        || async {
            get(&env.host.client, api_version, kind, Some(&ns), name)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await
}

/// Waits for an event regarding `name` in the tenant namespace with `reason`.
async fn tenant_event(env: &Env, ns: &str, name: &str, reason: &str) -> Value {
    eventually(&format!("an event {reason} on {ns}/{name}"), || async {
        events_regarding(&env.tenant_cp.client, ns, name)
            .await
            .into_iter()
            .find(|e| e["reason"] == reason)
    })
    .await
}

async fn count_at_least(env: &Env, tenant: &str, outcome: &str, n: u64) {
    eventually(
        &format!("Tenant {tenant} status.counts.{outcome} >= {n}"),
        || async {
            let s = tenant_status(env, tenant).await;
            (s["counts"][outcome].as_u64().unwrap_or(0) >= n).then_some(())
        },
    )
    .await
}

fn pod(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_and_secret_create_update_delete() {
    let env = Env::start().await.unwrap();
    let t = env.create_tenant("crud", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    let c = &env.tenant_cp.client;
    create(c, json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns, "labels": {"app": "web"}}, "data": {"k": "1"}}))
        .await
        .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sec", "namespace": ns}, "stringData": {"password": "hunter2"}}),
    )
    .await
    .unwrap();
    let host_cm_name = format!("cfg-x-{ns}");
    let cm = host_object(&env, &t, "v1", "ConfigMap", &host_cm_name, |_| true).await;
    assert_eq!(cm["data"]["k"], "1");
    assert_eq!(cm["metadata"]["labels"]["app"], "web");
    assert_eq!(cm["metadata"]["labels"]["tenantplane.io/tenant"], json!(t));
    assert_eq!(cm["metadata"]["labels"]["tenantplane.io/managed"], "true");
    assert!(annotation(&cm, DECISION_ID).is_some(), "{cm}");
    let first_decision = annotation(&cm, DECISION_ID).unwrap().to_string();
    let sec = host_object(&env, &t, "v1", "Secret", &format!("sec-x-{ns}"), |_| true).await;
    assert_eq!(sec["data"]["password"], "aHVudGVyMg==");

    // A Synced event on the tenant object names the decision written on the host object (on a
    // shared tenant control plane, other runs' Tenants may report on the same object too).
    let ev = eventually(
        "a Synced event naming the host object's decision",
        || async {
            events_regarding(&env.tenant_cp.client, &ns, "cfg")
                .await
                .into_iter()
                .find(|e| {
                    e["reason"] == "WorkloadKind"
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.contains(&first_decision))
                })
        },
    )
    .await;
    assert_eq!(ev["type"], "Normal");

    merge(
        c,
        "v1",
        "ConfigMap",
        Some(&ns),
        "cfg",
        json!({"data": {"k": "2"}}),
    )
    .await
    .unwrap();
    let cm = host_object(&env, &t, "v1", "ConfigMap", &host_cm_name, |v| {
        v["data"]["k"] == "2"
    })
    .await;
    assert_ne!(annotation(&cm, DECISION_ID), Some(first_decision.as_str()));

    delete(c, "v1", "ConfigMap", Some(&ns), "cfg")
        .await
        .unwrap();
    delete(c, "v1", "Secret", Some(&ns), "sec").await.unwrap();
    host_object_gone(&env, &t, "v1", "ConfigMap", &host_cm_name).await;
    host_object_gone(&env, &t, "v1", "Secret", &format!("sec-x-{ns}")).await;
    count_at_least(&env, &t, "deleted", 2).await;
    count_at_least(&env, &t, "synced", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_default_kind_is_created_updated_and_deleted() {
    let env = Env::start().await.unwrap();
    let t = env.create_tenant("kinds", None).await.unwrap();
    let ns = env.tenant_namespace("app").await.unwrap();
    let c = &env.tenant_cp.client;
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "namespace": ns}, "data": {"a": "1"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "o", "namespace": ns}, "data": {"a": "MQ=="}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "o", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "o", "namespace": ns},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "o", "namespace": ns},
               "spec": {"selector": {"app": "o"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "ext", "namespace": ns},
               "subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"port": 5432}]}]}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "o", "namespace": ns},
               "spec": {"rules": [{"host": "o.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "o", "port": {"number": 80}}}}]}}]}}),
        pod(
            &ns,
            "o",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    ];
    for o in &objects {
        create(c, o.clone()).await.unwrap();
    }
    for o in &objects {
        let (av, kind, name) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap(),
        );
        let host = host_object(&env, &t, av, kind, &format!("{name}-x-{ns}"), |_| true).await;
        assert_eq!(
            host["metadata"]["annotations"]["tenantplane.io/source-kind"],
            json!(kind)
        );
    }
    // Update: a label change on each reaches the host.
    for o in &objects {
        let (av, kind, name) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap(),
        );
        merge(
            c,
            av,
            kind,
            Some(&ns),
            name,
            json!({"metadata": {"labels": {"rev": "2"}}}),
        )
        .await
        .unwrap();
        host_object(&env, &t, av, kind, &format!("{name}-x-{ns}"), |v| {
            v["metadata"]["labels"]["rev"] == "2"
        })
        .await;
    }
    for o in &objects {
        let (av, kind, name) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap(),
        );
        delete(c, av, kind, Some(&ns), name).await.unwrap();
        host_object_gone(&env, &t, av, kind, &format!("{name}-x-{ns}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_follow_the_mapping() {
    let env = Env::start().await.unwrap();
    let t = env.create_tenant("refs", None).await.unwrap();
    let ns = env.tenant_namespace("shop").await.unwrap();
    let c = &env.tenant_cp.client;
    // A real API server refuses a pod whose ServiceAccount does not exist.
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": ns}}),
    )
    .await
    .unwrap();
    create(
        c,
        pod(
            &ns,
            "api",
            json!({
        "serviceAccountName": "builder",
        "imagePullSecrets": [{"name": "regcred"}],
        "containers": [{"name": "app", "image": "nginx",
            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "b"}}}],
            "envFrom": [{"configMapRef": {"name": "cfg"}}]}],
        "volumes": [{"name": "c", "configMap": {"name": "cfg"}},
                    {"name": "s", "secret": {"secretName": "sec"}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}),
        ),
    )
    .await
    .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": ns},
        "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}}),
    )
    .await
    .unwrap();
    create(c, json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "api", "namespace": ns},
        "spec": {"tls": [{"hosts": ["api.example"], "secretName": "tls"}],
                 "rules": [{"host": "api.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "api", "port": {"number": 80}}}}]}}]}}))
        .await
        .unwrap();

    let p = host_object(&env, &t, "v1", "Pod", &format!("api-x-{ns}"), |_| true).await;
    let spec = &p["spec"];
    let m = |n: &str| json!(format!("{n}-x-{ns}"));
    assert_eq!(spec["serviceAccountName"], m("builder"));
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["imagePullSecrets"][0]["name"], m("regcred"));
    let container = &spec["containers"][0];
    // The pod's own variables, after those its world puts first (the tenant API, service links).
    let own: Vec<&Value> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("valueFrom").is_some())
        .collect();
    assert_eq!(own[0]["valueFrom"]["configMapKeyRef"]["name"], m("cfg"));
    assert_eq!(own[1]["valueFrom"]["secretKeyRef"]["name"], m("sec"));
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], m("cfg"));
    assert_eq!(spec["volumes"][0]["configMap"]["name"], m("cfg"));
    assert_eq!(spec["volumes"][1]["secret"]["secretName"], m("sec"));
    assert_eq!(
        spec["volumes"][2]["persistentVolumeClaim"]["claimName"],
        m("data")
    );
    // The host pod carries what the Service's rewritten selector selects.
    assert_eq!(
        p["metadata"]["labels"]["tenantplane.io/source-namespace"],
        json!(ns)
    );

    let svc = host_object(&env, &t, "v1", "Service", &format!("api-x-{ns}"), |_| true).await;
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app": "api", "tenantplane.io/source-namespace": ns})
    );
    let ing = host_object(
        &env,
        &t,
        "networking.k8s.io/v1",
        "Ingress",
        &format!("api-x-{ns}"),
        |_| true,
    )
    .await;
    assert_eq!(ing["spec"]["tls"][0]["secretName"], m("tls"));
    assert_eq!(
        ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        m("api")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_flows_up_from_the_host() {
    let env = Env::start().await.unwrap();
    if env.is_real() {
        eprintln!("skipped on real clusters: this test plays the host's kubelet");
        return;
    }
    let t = env.create_tenant("status", None).await.unwrap();
    let ns = env.tenant_namespace("run").await.unwrap();
    let c = &env.tenant_cp.client;
    let h = &env.host.client;
    let host_ns = format!("tenant-{t}");
    create(
        c,
        pod(
            &ns,
            "web",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await
    .unwrap();
    create(c, json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .await
        .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await
    .unwrap();
    let pod_name = format!("web-x-{ns}");
    host_object(&env, &t, "v1", "Pod", &pod_name, |_| true).await;
    host_object(
        &env,
        &t,
        "v1",
        "PersistentVolumeClaim",
        &format!("data-x-{ns}"),
        |_| true,
    )
    .await;
    host_object(&env, &t, "v1", "Service", &pod_name, |_| true).await;

    // The host's kubelet, volume binder and load balancer controller, played by the test.
    merge_status(
        h,
        "v1",
        "Pod",
        Some(&host_ns),
        &pod_name,
        json!({"status": {"phase": "Running", "podIP": "10.244.1.7", "hostIP": "192.168.0.10"}}),
    )
    .await
    .unwrap();
    merge_status(
        h,
        "v1",
        "PersistentVolumeClaim",
        Some(&host_ns),
        &format!("data-x-{ns}"),
        json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}),
    )
    .await
    .unwrap();
    merge_status(
        h,
        "v1",
        "Service",
        Some(&host_ns),
        &pod_name,
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}}),
    )
    .await
    .unwrap();

    eventually(
        "the tenant pod to be Running with the host's pod IP",
        || async {
            let p = get(c, "v1", "Pod", Some(&ns), "web").await?;
            (p["status"]["phase"] == "Running" && p["status"]["podIP"] == "10.244.1.7")
                .then_some(())
        },
    )
    .await;
    eventually("the tenant claim to be Bound", || async {
        let p = get(c, "v1", "PersistentVolumeClaim", Some(&ns), "data").await?;
        (p["status"]["phase"] == "Bound").then_some(())
    })
    .await;
    eventually("the tenant service's load balancer ingress", || async {
        let s = get(c, "v1", "Service", Some(&ns), "web").await?;
        (s["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.5").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_network_pod_is_rejected_and_recorded() {
    let env = Env::start().await.unwrap();
    // Admitted by the tenant control plane (audited), refused on the host side.
    let policy = env.audited_default_policy().await.unwrap();
    let t = env
        .create_tenant_with("reject", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let ns = env.tenant_namespace("ops").await.unwrap();
    let c = &env.tenant_cp.client;
    create(
        c,
        pod(
            &ns,
            "sniffer",
            json!({"hostNetwork": true,
        "containers": [{"name": "app", "image": "tcpdump"}]}),
        ),
    )
    .await
    .unwrap();
    // Also a Secret that would carry a host token: refused by the translation.
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": ns,
        "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token"}),
    )
    .await
    .unwrap();
    // The Endpoints of a selector Service belong to the endpoints controllers on both sides.
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await
    .unwrap();
    create(c, json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": ns},
        "subsets": [{"addresses": [{"ip": "10.1.1.1"}], "ports": [{"port": 80}]}]}))
        .await
        .unwrap();
    let ev = tenant_event(&env, &ns, "sniffer", "HostNetworkForbidden").await;
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["action"], "Rejected");
    let ev = eventually("a Skipped event on the Endpoints", || async {
        events_regarding(&env.tenant_cp.client, &ns, "web")
            .await
            .into_iter()
            .find(|e| e["reason"] == "EndpointsOfSelectorService")
    })
    .await;
    assert_eq!(ev["action"], "Skipped");
    let ev = tenant_event(&env, &ns, "tok", "ServiceAccountTokenSecretForbidden").await;
    assert_eq!(ev["type"], "Warning");
    count_at_least(&env, &t, "rejected", 2).await;
    let host_ns = format!("tenant-{t}");
    assert!(
        get(
            &env.host.client,
            "v1",
            "Pod",
            Some(&host_ns),
            &format!("sniffer-x-{ns}")
        )
        .await
        .is_none()
    );
    assert!(
        get(
            &env.host.client,
            "v1",
            "Secret",
            Some(&host_ns),
            &format!("tok-x-{ns}")
        )
        .await
        .is_none()
    );
    // The Tenant carries an aggregated Warning event too.
    eventually("a Warning event on the Tenant", || async {
        let all = list(&env.host.client, "events.k8s.io/v1", "Event", None)
            .await
            .ok()?;
        all.into_iter().find(|e| {
            e["regarding"]["kind"] == "Tenant"
                && e["regarding"]["name"] == json!(t)
                && e["reason"] == "HostNetworkForbidden"
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_object_is_left_untouched_and_a_conflict_is_recorded() {
    let env = Env::start().await.unwrap();
    let t = env.create_tenant("clash", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    let host_ns = format!("tenant-{t}");
    let target = format!("cfg-x-{ns}");
    let foreign = create(
        &env.host.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": target, "namespace": host_ns, "labels": {"owner": "platform-team"}},
        "data": {"theirs": "yes"}}),
    )
    .await
    .unwrap();
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {"mine": "1"}}),
    )
    .await
    .unwrap();
    let ev = tenant_event(&env, &ns, "cfg", "HostObjectNotManaged").await;
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["action"], "Conflict");
    count_at_least(&env, &t, "conflict", 1).await;
    let now = get(&env.host.client, "v1", "ConfigMap", Some(&host_ns), &target)
        .await
        .unwrap();
    assert_eq!(
        rv(&now),
        rv(&foreign),
        "the foreign object was written to: {now}"
    );
    assert_eq!(now["data"], json!({"theirs": "yes"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_provenance_labels_are_not_passed_through() {
    let env = Env::start().await.unwrap();
    let t = env.create_tenant("spoof", None).await.unwrap();
    let ns = env.tenant_namespace("evil").await.unwrap();
    create(&env.tenant_cp.client, json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns,
            "labels": {"tenantplane.io/tenant": "victim", "tenantplane.io/managed": "false", "app": "x"},
            "annotations": {"tenantplane.io/decision-id": "forged", "tenantplane.io/source-name": "forged"}},
        "data": {}}))
        .await
        .unwrap();
    let host = host_object(&env, &t, "v1", "ConfigMap", &format!("cfg-x-{ns}"), |_| {
        true
    })
    .await;
    let labels = &host["metadata"]["labels"];
    assert_eq!(labels["tenantplane.io/tenant"], json!(t));
    assert_eq!(labels["tenantplane.io/managed"], "true");
    assert_eq!(labels["app"], "x");
    assert_eq!(annotation(&host, "tenantplane.io/source-name"), Some("cfg"));
    assert_ne!(annotation(&host, DECISION_ID), Some("forged"));
    let ev = tenant_event(&env, &ns, "cfg", "WorkloadKind").await;
    assert!(
        ev["note"]
            .as_str()
            .unwrap()
            .contains("reserved keys stripped"),
        "{ev}"
    );
}

fn profile(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolation_profile_change_applies_and_prunes() {
    let env = Env::start().await.unwrap();
    let h = &env.host.client;
    let pname = env.name("fence");
    create(h, profile(&pname, json!({"level": "restricted"})))
        .await
        .unwrap();
    // Its Pod Security labels and policies go in the namespaces the policy syncs: none here.
    let policy = env
        .default_policy_in("iso-policy", &[env.name("iso")], false)
        .await
        .unwrap();
    let t = env
        .create_tenant_with(
            "iso",
            json!({"isolationProfileRef": pname, "syncPolicyRef": policy}),
        )
        .await
        .unwrap();
    let host_ns = format!("tenant-{t}");
    let exists = |av: &'static str, kind: &'static str, ns: Option<String>, name: String| {
        let h = h.clone();
        async move { get(&h, av, kind, ns.as_deref(), &name).await.is_some() }
    };
    let netpol = "networking.k8s.io/v1";
    let vap = "admissionregistration.k8s.io/v1";
    let image_pull = format!("tenantplane-{t}-image-pull-always");
    eventually("IsolationApplied=True", || async {
        let s = tenant_status(&env, &t).await;
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "IsolationApplied" && c["status"] == "True")
            .cloned()
    })
    .await;
    for (av, kind, ns, name) in [
        (
            netpol,
            "NetworkPolicy",
            Some(host_ns.clone()),
            "tenantplane-default-deny".to_string(),
        ),
        (
            netpol,
            "NetworkPolicy",
            Some(host_ns.clone()),
            "tenantplane-allow-dns".to_string(),
        ),
        (
            "v1",
            "LimitRange",
            Some(host_ns.clone()),
            "tenantplane-limits".to_string(),
        ),
        (
            "v1",
            "ResourceQuota",
            Some(host_ns.clone()),
            "tenantplane-quota".to_string(),
        ),
        (vap, "ValidatingAdmissionPolicy", None, image_pull.clone()),
    ] {
        assert!(
            exists(av, kind, ns, name.clone()).await,
            "restricted compiles {kind} {name}"
        );
    }
    let ns_obj = get(h, "v1", "Namespace", None, &host_ns).await.unwrap();
    assert_eq!(
        ns_obj["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );

    // Baseline opens egress and drops the container limits and the pull-policy rule: pruned.
    merge(
        h,
        "tenantplane.io/v1alpha1",
        "IsolationProfile",
        None,
        &pname,
        json!({"spec": {"level": "baseline"}}),
    )
    .await
    .unwrap();
    eventually("the restricted-only objects to be pruned", || async {
        let gone = !exists(
            netpol,
            "NetworkPolicy",
            Some(host_ns.clone()),
            "tenantplane-allow-dns".into(),
        )
        .await
            && !exists(
                "v1",
                "LimitRange",
                Some(host_ns.clone()),
                "tenantplane-limits".into(),
            )
            .await
            && !exists(vap, "ValidatingAdmissionPolicy", None, image_pull.clone()).await;
        gone.then_some(())
    })
    .await;
    assert!(
        exists(
            netpol,
            "NetworkPolicy",
            Some(host_ns.clone()),
            "tenantplane-default-deny".into()
        )
        .await
    );
    let ns_obj = get(h, "v1", "Namespace", None, &host_ns).await.unwrap();
    assert_eq!(
        ns_obj["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "baseline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_syncer_converges_without_duplicate_writes() {
    let mut env = Env::start().await.unwrap();
    let t = env.create_tenant("restart", None).await.unwrap();
    let ns = env.tenant_namespace("api").await.unwrap();
    let c = env.tenant_cp.client.clone();
    for i in 0..20 {
        create(
            &c,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm{i}"), "namespace": ns}, "data": {"i": i.to_string()}}),
        )
        .await
        .unwrap();
    }
    let mut before = Vec::new();
    for i in 0..20 {
        before.push(rv(&host_object(
            &env,
            &t,
            "v1",
            "ConfigMap",
            &format!("cm{i}-x-{ns}"),
            |_| true,
        )
        .await));
    }
    env.stop_syncer().await;
    // While it is down: one object deleted, one created, one changed.
    delete(&c, "v1", "ConfigMap", Some(&ns), "cm0")
        .await
        .unwrap();
    create(
        &c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "late", "namespace": ns}, "data": {}}),
    )
    .await
    .unwrap();
    merge(
        &c,
        "v1",
        "ConfigMap",
        Some(&ns),
        "cm1",
        json!({"data": {"i": "changed"}}),
    )
    .await
    .unwrap();
    env.start_syncer().await.unwrap();

    host_object(&env, &t, "v1", "ConfigMap", &format!("late-x-{ns}"), |_| {
        true
    })
    .await;
    host_object(&env, &t, "v1", "ConfigMap", &format!("cm1-x-{ns}"), |v| {
        v["data"]["i"] == "changed"
    })
    .await;
    host_object_gone(&env, &t, "v1", "ConfigMap", &format!("cm0-x-{ns}")).await;
    // Give the syncer a moment to have gone over everything, then: untouched objects unwritten.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    for (i, before) in before.iter().enumerate().skip(2) {
        let now = get(
            &env.host.client,
            "v1",
            "ConfigMap",
            Some(&format!("tenant-{t}")),
            &format!("cm{i}-x-{ns}"),
        )
        .await
        .unwrap();
        assert_eq!(
            &rv(&now),
            before,
            "cm{i} was written again after the restart"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_outage_defers_and_then_syncs() {
    let mut env = Env::start().await.unwrap();
    let t = env.create_tenant("outage", None).await.unwrap();
    let ns = env.tenant_namespace("db").await.unwrap();
    env.planner.stop().await;
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {}}),
    )
    .await
    .unwrap();
    let ev = tenant_event(&env, &ns, "cfg", "PlannerUnavailable").await;
    assert_eq!(ev["action"], "Deferred");
    count_at_least(&env, &t, "deferred", 1).await;
    assert!(
        get(
            &env.host.client,
            "v1",
            "ConfigMap",
            Some(&format!("tenant-{t}")),
            &format!("cfg-x-{ns}")
        )
        .await
        .is_none(),
        "nothing is guessed while the planner is down"
    );
    env.planner.restart().await.unwrap();
    host_object(&env, &t, "v1", "ConfigMap", &format!("cfg-x-{ns}"), |_| {
        true
    })
    .await;
    eventually("Synced=True after the outage", || async {
        let s = tenant_status(&env, &t).await;
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Synced" && c["status"] == "True")
            .cloned()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_tenant_removes_only_what_tenantplane_owns() {
    let env = Env::start().await.unwrap();
    let h = &env.host.client;
    let t = env.create_tenant("bye", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    let host_ns = format!("tenant-{t}");
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {}}),
    )
    .await
    .unwrap();
    host_object(&env, &t, "v1", "ConfigMap", &format!("cfg-x-{ns}"), |_| {
        true
    })
    .await;
    eventually("the finalizer on the Tenant", || async {
        let tenant = get(h, "tenantplane.io/v1alpha1", "Tenant", None, &t).await?;
        tenant["metadata"]["finalizers"]
            .as_array()?
            .iter()
            .any(|f| f == "tenantplane.io/cleanup")
            .then_some(())
    })
    .await;
    delete(h, "tenantplane.io/v1alpha1", "Tenant", None, &t)
        .await
        .unwrap();
    eventually("the Tenant to be gone", || async {
        get(h, "tenantplane.io/v1alpha1", "Tenant", None, &t)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        "the host namespace tenantplane created to be deleted",
        || async {
            match get(h, "v1", "Namespace", None, &host_ns).await {
                None => Some(()),
                Some(n) if n["metadata"]["deletionTimestamp"].is_string() => Some(()),
                Some(_) => None,
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_reach_the_durable_log_before_the_host() {
    let path = std::env::temp_dir().join(format!(
        "tenantplane-e2e-{}-{}.sqlite",
        std::process::id(),
        uuid_suffix()
    ));
    let url = format!("sqlite:{}", path.display());
    let env = Env::start_with_log(Some(url.clone())).await.unwrap();
    let policy = env.audited_default_policy().await.unwrap();
    let t = env
        .create_tenant_with("audit", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns}, "data": {}}),
    )
    .await
    .unwrap();
    create(
        &env.tenant_cp.client,
        pod(
            &ns,
            "sniffer",
            json!({"hostNetwork": true,
        "containers": [{"name": "app", "image": "tcpdump"}]}),
        ),
    )
    .await
    .unwrap();
    let host = host_object(&env, &t, "v1", "ConfigMap", &format!("cfg-x-{ns}"), |_| {
        true
    })
    .await;
    let id = annotation(&host, DECISION_ID).unwrap().to_string();
    let ev = tenant_event(&env, &ns, "sniffer", "HostNetworkForbidden").await;
    let rejected_id = ev["note"]
        .as_str()
        .unwrap()
        .rsplit("decision ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let entry = store.get(id.clone()).await.unwrap();
    assert!(
        entry.is_some(),
        "the decision {id} written on the host object is in the log"
    );
    let entry = store.get(rejected_id.clone()).await.unwrap();
    assert!(entry.is_some(), "the refusal {rejected_id} is in the log");
    let _ = std::fs::remove_file(&path);
}

fn uuid_suffix() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_named_by_a_policy_rule_is_synced() {
    let env = Env::start().await.unwrap();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    for c in [&env.host.client, &env.tenant_cp.client] {
        match create(c, crd.clone()).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("already exists") => {}
            Err(e) => panic!("{e}"),
        }
    }
    let policy = env.name("widgets");
    create(&env.host.client, json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
        "metadata": {"name": policy},
        "spec": {"rules": [{"name": "widgets", "match": {"groups": ["example.com"], "kinds": ["Widget"]},
                            "action": "Sync", "reason": "WidgetsAllowed"}],
                 "default": {"action": "Skip", "reason": "NotSyncedByPolicy"}}}))
        .await
        .unwrap();
    let t = env.name("crd");
    create(&env.host.client, json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{t}-kubeconfig"), "namespace": tenantplane_e2e::SYSTEM_NAMESPACE},
        "stringData": {"config": env.tenant_cp.kubeconfig}}))
        .await
        .unwrap();
    env.made_tenant(&t);
    create(&env.host.client, json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": t},
        "spec": {"syncPolicyRef": policy, "controlPlane": {"kubeconfigSecret": {
            "namespace": tenantplane_e2e::SYSTEM_NAMESPACE, "name": format!("{t}-kubeconfig"), "key": "config"}}}}))
        .await
        .unwrap();
    let ns = env.tenant_namespace("lab").await.unwrap();
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": ns}, "spec": {"size": 3}}),
    )
    .await
    .unwrap();
    let w = host_object(
        &env,
        &t,
        "example.com/v1",
        "Widget",
        &format!("w1-x-{ns}"),
        |_| true,
    )
    .await;
    assert_eq!(w["spec"]["size"], 3);
    let ev = tenant_event(&env, &ns, "w1", "WidgetsAllowed").await;
    assert_eq!(ev["type"], "Normal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_service_shows_the_host_cluster_ip_and_the_host_endpoints() {
    let env = Env::start().await.unwrap();
    if env.is_real() {
        eprintln!("skipped on real clusters: this test plays the host's endpoints controller");
        return;
    }
    let t = env.create_tenant("svc", None).await.unwrap();
    let ns = env.tenant_namespace("shop").await.unwrap();
    let (c, h) = (&env.tenant_cp.client, &env.host.client);
    let host_ns = format!("tenant-{t}");
    // Another Service on the host first, so the two servers' addresses differ.
    create(
        h,
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "elsewhere", "namespace": "tenantplane-system"},
        "spec": {"ports": [{"port": 1}]}}),
    )
    .await
    .unwrap();
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}}),
    )
    .await
    .unwrap();
    let tenant_svc = create(
        c,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await
    .unwrap();
    let host_name = format!("web-x-{ns}");
    let host_pod = host_object(&env, &t, "v1", "Pod", &host_name, |_| true).await;
    let host_svc = host_object(&env, &t, "v1", "Service", &host_name, |_| true).await;
    let host_ip = host_svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert_ne!(tenant_svc["spec"]["clusterIP"], json!(host_ip));

    // The tenant Service is recreated with the host's address; the host Service stays.
    let recreated = eventually("the tenant Service to carry the host clusterIP", || async {
        get(c, "v1", "Service", Some(&ns), "web")
            .await
            .filter(|s| s["spec"]["clusterIP"] == json!(host_ip))
    })
    .await;
    assert_eq!(recreated["spec"]["clusterIPs"], json!([host_ip]));
    assert_eq!(recreated["spec"]["selector"], json!({"app": "web"}));
    let adopted = host_object(&env, &t, "v1", "Service", &host_name, |s| {
        s["metadata"]["labels"]["tenantplane.io/source-uid"] == recreated["metadata"]["uid"]
    })
    .await;
    assert_eq!(
        adopted["metadata"]["uid"], host_svc["metadata"]["uid"],
        "the host Service is kept, not recreated"
    );
    assert_eq!(adopted["spec"]["clusterIP"], json!(host_ip));

    // The host's kubelet, load balancer and endpoints controllers, played by the test. The host
    // Endpoints also name a host-only pod, which must not reach the tenant.
    merge_status(
        h,
        "v1",
        "Pod",
        Some(&host_ns),
        &host_name,
        json!({"status": {"phase": "Running", "podIP": "10.244.2.8"}}),
    )
    .await
    .unwrap();
    merge_status(
        h,
        "v1",
        "Service",
        Some(&host_ns),
        &host_name,
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}}),
    )
    .await
    .unwrap();
    create(
        h,
        json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": host_name, "namespace": host_ns},
        "subsets": [{"addresses": [
            {"ip": "10.244.2.8", "nodeName": "host-node-3",
             "targetRef": {"kind": "Pod", "namespace": host_ns, "name": host_name,
                           "uid": host_pod["metadata"]["uid"]}},
            {"ip": "10.244.2.99",
             "targetRef": {"kind": "Pod", "namespace": host_ns, "name": "host-only"}}],
          "ports": [{"port": 80, "protocol": "TCP"}]}]}),
    )
    .await
    .unwrap();
    let tenant_pod = get(c, "v1", "Pod", Some(&ns), "web").await.unwrap();
    let endpoints = eventually("the tenant Endpoints to list the host pod IP", || async {
        get(c, "v1", "Endpoints", Some(&ns), "web")
            .await
            .filter(|e| e["subsets"][0]["addresses"][0]["ip"] == "10.244.2.8")
    })
    .await;
    assert_eq!(
        endpoints["subsets"],
        json!([{"addresses": [{"ip": "10.244.2.8", "targetRef": {"kind": "Pod",
            "namespace": ns, "name": "web", "uid": tenant_pod["metadata"]["uid"]}}],
            "ports": [{"port": 80, "protocol": "TCP"}]}])
    );
    eventually("the tenant Service's load balancer ingress", || async {
        let s = get(c, "v1", "Service", Some(&ns), "web").await?;
        (s["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.9"
            && s["spec"]["clusterIP"] == json!(host_ip))
        .then_some(())
    })
    .await;

    // A tenant endpoints controller (k3s runs one) that writes the Endpoints keeps them: the
    // syncer does not write over it, whatever the host says next.
    let tenant_endpoints = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        c.clone(),
        &ns,
        &tenantplane_e2e::resource("v1", "Endpoints"),
    );
    let theirs = json!({"subsets": [{"addresses": [{"ip": "10.244.2.8"}],
        "ports": [{"port": 80, "protocol": "TCP"}]}]});
    tenant_endpoints
        .patch(
            "web",
            &kube::api::PatchParams {
                field_manager: Some("endpoint-controller".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(&theirs),
        )
        .await
        .unwrap();
    merge(
        h,
        "v1",
        "Endpoints",
        Some(&host_ns),
        &host_name,
        json!({"subsets": [{"addresses": [{"ip": "10.244.2.8", "targetRef": {"kind": "Pod",
            "namespace": host_ns, "name": host_name}}], "ports": [{"port": 81}]}]}),
    )
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let kept = get(c, "v1", "Endpoints", Some(&ns), "web").await.unwrap();
    assert_eq!(kept["subsets"], theirs["subsets"]);
}

/// A proxy to a local API server that holds back what watch responses send by `lag`, so that a
/// client's watch stores lag its own writes, as under load. Returns the proxy's URL.
async fn lagging_watch_proxy(upstream: String, lag: std::time::Duration) -> String {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                // A connection that carried a watch request carries nothing else until it ends.
                let watching = Arc::new(AtomicBool::new(false));
                let seen = watching.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                        if buf[..n].windows(10).any(|w| w == b"watch=true") {
                            seen.store(true, Ordering::SeqCst);
                        }
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                        let delay = watching.load(Ordering::SeqCst).then_some(lag);
                        let due = tokio::time::Instant::now() + delay.unwrap_or_default();
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                });
                while let Some((due, bytes)) = rx.recv().await {
                    tokio::time::sleep_until(due).await;
                    if client_write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_host_watch_leads_to_exactly_one_create_and_one_delete_decision() {
    let path = std::env::temp_dir().join(format!(
        "tenantplane-e2e-lag-{}-{}.sqlite",
        std::process::id(),
        uuid_suffix()
    ));
    let url = format!("sqlite:{}", path.display());
    let mut env = Env::start_with_log(Some(url.clone())).await.unwrap();
    let Some(server) = &env.host.server else {
        eprintln!("skipped on real clusters: this test puts a lagging proxy before the host");
        return;
    };
    // The syncer's host watches lag a second behind its own writes.
    let lag = std::time::Duration::from_secs(1);
    let proxy = lagging_watch_proxy(server.url(), lag).await;
    let mut config = env.syncer_config().await.unwrap();
    config.host_kubeconfig = Some(env.host.kubeconfig.replace(&server.url(), &proxy));
    env.stop_syncer().await;
    let syncer = tokio::spawn(tenantplane_syncer::run(config));

    let t = env.create_tenant("lag", None).await.unwrap();
    let ns = env.tenant_namespace("web").await.unwrap();
    // The host refuses a pod whose ServiceAccount it does not have yet (ServiceAccount
    // admission), which would be a Failed create, retried: not what this test is about.
    host_object(
        &env,
        &t,
        "v1",
        "ServiceAccount",
        &format!("default-x-{ns}"),
        |_| true,
    )
    .await;
    let c = &env.tenant_cp.client;
    create(
        c,
        pod(
            &ns,
            "web",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await
    .unwrap();
    let host_name = format!("web-x-{ns}");
    host_object(&env, &t, "v1", "Pod", &host_name, |_| true).await;
    // Changed while the syncer's host store does not show the host pod yet.
    merge(
        c,
        "v1",
        "Pod",
        Some(&ns),
        "web",
        json!({"metadata": {"labels": {"tier": "front"}}}),
    )
    .await
    .unwrap();
    host_object(&env, &t, "v1", "Pod", &host_name, |p| {
        p["metadata"]["labels"]["tier"] == "front"
    })
    .await;
    delete(c, "v1", "Pod", Some(&ns), "web").await.unwrap();
    host_object_gone(&env, &t, "v1", "Pod", &host_name).await;
    // Every lagging echo of the syncer's own writes arrives and is looked at.
    tokio::time::sleep(lag * 3).await;
    syncer.abort();

    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let filter = tenantplane_decision_log::Filter {
        tenant: Some(t.clone()),
        subject: tenantplane_decision_log::ObjectFilter::parse(&format!("Pod/{ns}/web")),
        ..Default::default()
    };
    let page = store
        .query(tenantplane_decision_log::Query::new(filter, 100))
        .await
        .unwrap();
    let decisions: Vec<(String, String, String)> = page
        .entries
        .iter()
        .map(|e| {
            let d = &e.decision;
            (
                d.outcome.as_str().to_string(),
                d.action.as_str().to_string(),
                d.reason.clone(),
            )
        })
        .collect();
    // The host pod's decisions (its token Secret's are decisions of their own).
    let count = |outcome: &str, action: &str| {
        decisions
            .iter()
            .filter(|(o, a, r)| {
                o == outcome && a == action && !r.starts_with("ServiceAccountToken")
            })
            .count()
    };
    assert_eq!(count("Synced", "create"), 1, "{decisions:?}");
    assert_eq!(count("Synced", "update"), 1, "{decisions:?}");
    assert_eq!(count("Deleted", "delete"), 1, "{decisions:?}");
    assert!(
        decisions.iter().all(|(o, _, _)| o != "Failed"),
        "{decisions:?}"
    );
    let _ = std::fs::remove_file(&path);
}

/// An aggregated API of the tenant control plane that does not answer (its APIService names a
/// Service nobody serves, as with a metrics-server that is down) costs its own kinds and nothing
/// else: a Tenant whose policy does not sync its group never looks at it, and one whose policy
/// does records a Deferred decision about the APIService and says so in its condition, while
/// everything else syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_api_group_costs_its_own_kinds_only() {
    let env = Env::start().await.unwrap();
    let group = format!("m{}.example.com", env.run);
    let api_service = format!("v1beta1.{group}");
    env.made_tenant_api_service(&api_service);
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": api_service},
            "spec": {"group": group, "version": "v1beta1", "groupPriorityMinimum": 100,
                "versionPriority": 100, "insecureSkipTLSVerify": true,
                "service": {"namespace": "default", "name": "nobody-serves-this", "port": 443}}}),
    )
    .await
    .unwrap();
    let policy = env.name("everything");
    create(&env.host.client, json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
        "metadata": {"name": policy},
        "spec": {"rules": [{"name": "configs", "match": {"groups": ["", &group], "kinds": ["ConfigMap", "*"]},
                            "action": "Sync", "reason": "Configs"}],
                 "default": {"action": "Skip", "reason": "NotSyncedByPolicy"}}}))
        .await
        .unwrap();
    let usual = env.create_tenant("usual", None).await.unwrap();
    let wide = env
        .create_tenant_with("wide", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let ns = env.tenant_namespace("metrics").await.unwrap();
    create(
        &env.tenant_cp.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": ns}, "data": {"k": "v"}}),
    )
    .await
    .unwrap();
    for t in [&usual, &wide] {
        host_object(&env, t, "v1", "ConfigMap", &format!("cfg-x-{ns}"), |_| true).await;
    }
    let reachable = |status: &Value| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "ControlPlaneReachable")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let condition = eventually("the wide Tenant's condition names the group", || async {
        let c = reachable(&tenant_status(&env, &wide).await);
        (c["reason"] == "APIGroupsUnavailable").then_some(c)
    })
    .await;
    assert_eq!(condition["status"], "True", "{condition}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{group}/v1beta1")),
        "{condition}"
    );
    count_at_least(&env, &wide, "deferred", 1).await;
    assert_eq!(
        reachable(&tenant_status(&env, &usual).await)["reason"],
        "Reached",
        "a policy that does not sync the group never discovers it"
    );
    assert_eq!(tenant_status(&env, &usual).await["counts"]["deferred"], 0);
}

/// The corpus of tenant objects the syncer does not watch (examples/unwatched), made unique to
/// the run: namespaced objects in `ns`, cluster-scoped ones named with the run's suffix.
fn unwatched_corpus(env: &Env, ns: &str) -> Vec<Value> {
    let files = [
        include_str!("../../examples/unwatched/cluster-scoped.yaml"),
        include_str!("../../examples/unwatched/unwatched-kinds.yaml"),
        include_str!("../../examples/unwatched/custom-resources.yaml"),
    ];
    let mut corpus = Vec::new();
    for text in files {
        for document in tenantplane_core::documents::parse("corpus", text) {
            let mut object = document.expect("the corpus parses").value;
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            if kind == "CustomResourceDefinition" {
                corpus.push(object);
                continue;
            }
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if kind == "PersistentVolume" {
                // Its namespace is ignored by the API server (and by the prediction).
                object["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("namespace");
            }
            if object["metadata"]["namespace"].is_string() {
                object["metadata"]["namespace"] = json!(ns);
            } else {
                object["metadata"]["name"] = json!(env.name(&name));
            }
            if let Some(subjects) = object["subjects"].as_array_mut() {
                for s in subjects {
                    s["namespace"] = json!(ns);
                }
            }
            if kind == "Deployment" {
                // No pods: only the Deployment itself is at stake here.
                object["spec"]["replicas"] = json!(0);
            }
            corpus.push(object);
        }
    }
    corpus
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_syncer_does_not_watch_get_nothing_and_why_says_what_explain_sync_predicted() {
    use tenantplane_core::scope::KindScopes;
    use tenantplane_core::watch::{Watches, discovered_scope};
    use tenantplane_core::{CompiledPolicy, Planner, TenantObject};
    use tenantplane_decision_log::{Filter, ObjectFilter, Query};

    let path = std::env::temp_dir().join(format!(
        "tenantplane-e2e-{}-{}.sqlite",
        std::process::id(),
        uuid_suffix()
    ));
    let url = format!("sqlite:{}", path.display());
    let env = Env::start_with_log(Some(url.clone())).await.unwrap();
    let t = env.create_tenant("unwatched", None).await.unwrap();
    let ns = env.tenant_namespace("shop").await.unwrap();
    let host_ns = format!("tenant-{t}");
    let corpus = unwatched_corpus(&env, &ns);

    // explain-sync's prediction, under the policy a Tenant without a syncPolicyRef gets: the
    // corpus's CRDs say their kinds' scopes, and every object but the ConfigMap is unrecorded.
    let default_policy = CompiledPolicy::builtin_default();
    let mut scopes = KindScopes::new();
    for crd in corpus.iter().filter(|o| tenantplane_core::scope::is_crd(o)) {
        scopes.learn_crd(crd).unwrap();
    }
    let predicted = Watches::new(&default_policy, scopes);
    let objects: Vec<TenantObject> = corpus
        .iter()
        .map(|o| TenantObject::from_value(o.clone()).unwrap())
        .collect();

    // Apply what the tenant control plane serves (a local one has no PersistentVolumes; a
    // review and a kind without a CRD are not stored), the ConfigMap last.
    let c = &env.tenant_cp.client;
    let mut applied = Vec::new();
    let mut made_cluster_wide = Vec::new();
    for object in &objects {
        let id = &object.identity;
        let kind = id.kind.as_str();
        if kind == "Namespace" {
            // The Namespace is made as the run's namespaces are (removed with them).
            env.tenant_namespace(id.name.trim_end_matches(&format!("-{}", env.run)))
                .await
                .unwrap();
            applied.push(object);
            continue;
        }
        if kind == "LocalSubjectAccessReview"
            || kind == "Gizmo"
            || kind == "ConfigMap"
            || (kind == "PersistentVolume" && !env.tenant_cp.is_real())
        {
            continue;
        }
        let created = eventually(&format!("{kind} {} created", id.name), || async {
            match create(c, object.object.clone()).await {
                Ok(_) => Some(true),
                Err(e) if e.to_string().contains("already exists") => Some(false),
                // A CRD just created is not served yet.
                Err(_) => None,
            }
        })
        .await;
        if created
            && predicted
                .unrecorded(object)
                .is_some_and(|f| f.subject.namespace.is_empty())
            && kind != "CustomResourceDefinition"
        {
            made_cluster_wide.push(object);
        }
        applied.push(object);
    }
    let config_map = objects
        .iter()
        .find(|o| o.identity.kind == "ConfigMap")
        .unwrap();
    assert!(
        predicted.unrecorded(config_map).is_none(),
        "the ConfigMap is watched"
    );
    create(c, config_map.object.clone()).await.unwrap();
    host_object(
        &env,
        &t,
        "v1",
        "ConfigMap",
        &format!("web-config-x-{ns}"),
        |_| true,
    )
    .await;

    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let decisions_about = |name: String| {
        let store = store.clone();
        let t = t.clone();
        async move {
            let filter = Filter {
                tenant: Some(t),
                subject: ObjectFilter {
                    name: Some(name),
                    ..ObjectFilter::default()
                },
                ..Filter::default()
            };
            store.query(Query::new(filter, 100)).await.unwrap().entries
        }
    };
    assert!(
        !decisions_about("web-config".into()).await.is_empty(),
        "the watched ConfigMap's decision is in the log"
    );

    // What `why --tenant` answers: the Tenant's policy read from the host as the syncer reads it,
    // custom kinds' scopes from the tenant control plane's discovery, the object by its identity.
    let tenant: tenantplane_api::Tenant = kube::Api::all(env.host.client.clone())
        .get(&t)
        .await
        .unwrap();
    let (_, in_force) = tenantplane_syncer::controller::policy_in_force(&env.host.client, &tenant)
        .await
        .unwrap();
    let planner = Planner::new(&tenant, CompiledPolicy::builtin_default());
    for object in applied {
        let id = &object.identity;
        let prediction = predicted
            .unrecorded(object)
            .unwrap_or_else(|| panic!("explain-sync predicts {id} is not watched"));

        // Nothing on the host: not at the name a sync would give it, nor cluster-wide.
        let target = planner.plan(object, &Default::default()).placement;
        assert!(
            get(
                &env.host.client,
                &id.api_version,
                &id.kind,
                Some(&host_ns),
                &target.name
            )
            .await
            .is_none(),
            "{id} reached the host at {host_ns}/{}",
            target.name
        );
        if prediction.subject.namespace.is_empty() && id.kind != "CustomResourceDefinition" {
            assert!(
                get(&env.host.client, &id.api_version, &id.kind, None, &id.name)
                    .await
                    .is_none(),
                "{id} reached the host"
            );
        }
        // No decision.
        assert_eq!(
            decisions_about(id.name.clone()).await.len(),
            0,
            "the syncer recorded a decision about {id}"
        );

        let mut scopes = KindScopes::new();
        if tenantplane_core::scope::BuiltinKind::get(id.group(), &id.kind).is_none() {
            let gvk = kube::core::GroupVersionKind::gvk(
                id.group(),
                id.api_version.rsplit('/').next().unwrap(),
                &id.kind,
            );
            let (_, caps) = kube::discovery::pinned_kind(c, &gvk).await.unwrap();
            scopes.learn(id.group(), &id.kind, discovered_scope(&caps));
        }
        let answer = Watches::new(&in_force, scopes)
            .unrecorded_identity(
                &id.api_version,
                &id.kind,
                &prediction.subject.namespace,
                &id.name,
            )
            .unwrap()
            .unwrap_or_else(|| panic!("why says the syncer watches {id}"));
        assert_eq!(answer.fate, prediction.fate, "{id}");
        assert_eq!(answer.subject, prediction.subject, "{id}");
        assert_eq!(answer.verdict, prediction.verdict, "{id}");
    }
    for object in made_cluster_wide {
        let id = &object.identity;
        delete(c, &id.api_version, &id.kind, None, &id.name)
            .await
            .unwrap();
    }
    let _ = std::fs::remove_file(&path);
}

/// A SyncPolicy of two Reject rules (one denied at admission, one only warned) and a sync rule.
fn admission_policy(name: &str, with_host_network: bool) -> Value {
    let mut rules = vec![
        json!({"name": "no-host-pid", "match": {"groups": [""], "kinds": ["Pod"],
        "conditions": [{"name": "host-pid", "expression": "has(object.spec.hostPID) && object.spec.hostPID == true"}]},
        "action": "Reject", "reason": "HostPIDForbidden", "fieldPath": "spec.hostPID",
        "message": "a tenant pod may not see the node's processes", "admission": "Warn"}),
    ];
    if with_host_network {
        rules.insert(0, json!({"name": "no-host-network", "match": {"groups": [""], "kinds": ["Pod"],
            "conditions": [{"name": "host-network", "expression": "has(object.spec.hostNetwork) && object.spec.hostNetwork == true"}]},
            "action": "Reject", "reason": "HostNetworkForbidden", "fieldPath": "spec.hostNetwork",
            "message": "a tenant pod may not share the node's network namespace"}));
    }
    rules.push(
        json!({"name": "sync-pods", "match": {"groups": [""], "kinds": ["Pod"]},
        "action": "Sync", "reason": "WorkloadKind"}),
    );
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": name},
        "spec": {"rules": rules, "default": {"action": "Skip", "reason": "NotSyncedByPolicy"}}})
}

/// The tenant's own control plane refuses, at apply time, what the host side would refuse: the
/// syncer keeps the SyncPolicy's Reject rules there as ValidatingAdmissionPolicies (recorded
/// decisions, provenance), follows policy changes, and removes them with the Tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_apply_of_a_refused_pod_fails_at_once_with_the_rule() {
    let path = std::env::temp_dir().join(format!(
        "tenantplane-e2e-{}-{}.sqlite",
        std::process::id(),
        uuid_suffix()
    ));
    let url = format!("sqlite:{}", path.display());
    let env = Env::start_with_log(Some(url.clone())).await.unwrap();
    let policy = env.name("admission");
    create(&env.host.client, admission_policy(&policy, true))
        .await
        .unwrap();
    let t = env
        .create_tenant_with("gate", json!({"syncPolicyRef": policy}))
        .await
        .unwrap();
    let ns = env.tenant_namespace("ops").await.unwrap();
    let c = &env.tenant_cp.client;
    let condition = eventually("the TenantAdmission condition", || async {
        let s = tenant_status(&env, &t).await;
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "TenantAdmission" && c["status"] == "True")
            .cloned()
    })
    .await;
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("2 of 2 Reject rules enforced at admission"),
        "{condition}"
    );
    let vap_name = format!("tenantplane-{t}-no-host-network");
    let vap = get(
        c,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        None,
        &vap_name,
    )
    .await
    .expect("the policy in the tenant control plane");
    assert_eq!(
        annotation(&vap, "tenantplane.io/sync-policy"),
        Some(policy.as_str())
    );
    assert_eq!(
        annotation(&vap, "tenantplane.io/sync-policy-rule"),
        Some("no-host-network")
    );
    assert!(
        annotation(&vap, "tenantplane.io/sync-policy-revision")
            .is_some_and(|r| r.starts_with("sha256:"))
    );
    let id = annotation(&vap, DECISION_ID).expect("the decision that applied it");
    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let applied = store
        .get(id.to_string())
        .await
        .unwrap()
        .expect("the decision is in the log");
    assert_eq!(applied.decision.reason, "CompiledFromSyncPolicy");
    assert_eq!(applied.decision.subject.kind, "SyncPolicy");
    let warned = get(
        c,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        None,
        &format!("tenantplane-{t}-no-host-pid"),
    )
    .await
    .expect("the binding of the warned rule");
    assert_eq!(warned["spec"]["validationActions"], json!(["Warn"]));

    // A real API server takes a moment to put a new policy in effect: wait with dry runs.
    let sniffer = pod(
        &ns,
        "sniffer",
        json!({"hostNetwork": true, "containers": [{"name": "app", "image": "tcpdump"}]}),
    );
    let pods = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        c.clone(),
        &ns,
        &tenantplane_e2e::resource("v1", "Pod"),
    );
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let as_dynamic =
        |v: &Value| serde_json::from_value::<kube::api::DynamicObject>(v.clone()).unwrap();
    eventually("the policy in effect", || async {
        pods.create(&dry_run, &as_dynamic(&sniffer))
            .await
            .is_err()
            .then_some(())
    })
    .await;
    let refused = format!("{:#}", create(c, sniffer.clone()).await.unwrap_err());
    assert!(
        refused.contains(&format!(
            "pods \"sniffer\" is forbidden: ValidatingAdmissionPolicy '{vap_name}' with binding \
             '{vap_name}' denied request: HostNetworkForbidden: a tenant pod may not share the \
             node's network namespace (SyncPolicy {policy}, rule no-host-network, field \
             spec.hostNetwork)"
        )),
        "{refused}"
    );
    // Only warned at admission: created, and refused on the host side.
    create(
        c,
        pod(
            &ns,
            "top",
            json!({"hostPID": true, "containers": [{"name": "app", "image": "top"}]}),
        ),
    )
    .await
    .unwrap();
    let ev = tenant_event(&env, &ns, "top", "HostPIDForbidden").await;
    assert_eq!(ev["action"], "Rejected");

    // The policy changes: the rule is gone, and so is its admission policy.
    merge(
        &env.host.client,
        "tenantplane.io/v1alpha1",
        "SyncPolicy",
        None,
        &policy,
        json!({"spec": admission_policy(&policy, false)["spec"]}),
    )
    .await
    .unwrap();
    eventually("the pruned admission policy", || async {
        get(
            c,
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            None,
            &vap_name,
        )
        .await
        .is_none()
        .then_some(())
    })
    .await;

    // The Tenant goes, and its admission policies with it.
    delete(
        &env.host.client,
        "tenantplane.io/v1alpha1",
        "Tenant",
        None,
        &t,
    )
    .await
    .unwrap();
    eventually("no admission policy of the Tenant", || async {
        list(
            c,
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            None,
        )
        .await
        .ok()?
        .iter()
        .all(|p| p["metadata"]["labels"]["tenantplane.io/tenant"] != json!(t))
        .then_some(())
    })
    .await;
    let _ = std::fs::remove_file(&path);
}

/// A pod that meets Pod Security `restricted` and pulls `Always`, in `ns`.
fn restricted_pod(ns: &str, name: &str, pull: &str) -> Value {
    pod(
        ns,
        name,
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
               "containers": [{"name": "app", "image": "nginx:1.27", "imagePullPolicy": pull,
                   "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
    )
}

/// Under a restricted IsolationProfile, what the host's admission would refuse is refused in the
/// plan: one Rejected decision with the profile, the rule, the field and the host's own message,
/// and no write (not a Synced then a Failed); what it admits is synced. The tenant's namespace
/// then carries the profile's Pod Security labels and its admission policies, so that applying
/// such a pod fails at once in the tenant control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_profile_refuses_is_one_rejected_decision_and_refused_at_apply_time() {
    use tenantplane_core::pod_security::{Level, LevelVersion, PodSecurityRefusal, Version};
    use tenantplane_decision_log::{Filter, ObjectFilter, Query};

    let path = std::env::temp_dir().join(format!(
        "tenantplane-e2e-{}-{}.sqlite",
        std::process::id(),
        uuid_suffix()
    ));
    let url = format!("sqlite:{}", path.display());
    let env = Env::start_with_log(Some(url.clone())).await.unwrap();
    let (h, c) = (&env.host.client, &env.tenant_cp.client);
    let pname = env.name("walls");
    create(h, profile(&pname, json!({"level": "restricted"})))
        .await
        .unwrap();
    // The pods are in the tenant control plane before the Tenant (and its labels) exist.
    let ns = env.tenant_namespace("fort").await.unwrap();
    let plain = pod(
        &ns,
        "plain",
        json!({"containers": [{"name": "app", "image": "nginx:1.27"}]}),
    );
    let mut root = restricted_pod(&ns, "root", "Always");
    root["spec"]["containers"][0]["securityContext"]["runAsUser"] = json!(0);
    let pods = [
        restricted_pod(&ns, "fit", "Always"),
        restricted_pod(&ns, "cached", "IfNotPresent"),
        plain.clone(),
        root,
    ];
    for p in &pods {
        eventually("the tenant admits the pod", || async {
            create(c, p.clone()).await.ok()
        })
        .await;
    }
    let policy = env
        .default_policy_in("walls-policy", std::slice::from_ref(&ns), false)
        .await
        .unwrap();
    let t = env
        .create_tenant_with(
            "walls",
            json!({"isolationProfileRef": pname, "syncPolicyRef": policy}),
        )
        .await
        .unwrap();

    host_object(&env, &t, "v1", "Pod", &format!("fit-x-{ns}"), |_| true).await;
    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let decisions = |name: &'static str| {
        let (store, t, ns) = (&store, t.clone(), ns.clone());
        async move {
            let filter = Filter {
                tenant: Some(t),
                subject: ObjectFilter::parse(&format!("Pod/{ns}/{name}")),
                ..Default::default()
            };
            let page = store.query(Query::new(filter, 100)).await.unwrap();
            page.entries
                .into_iter()
                .map(|e| e.decision)
                .collect::<Vec<_>>()
        }
    };
    let restricted = LevelVersion {
        level: Level::Restricted,
        version: Version::V1(34),
    };
    let stored_plain = get(c, "v1", "Pod", Some(&ns), "plain").await.unwrap();
    let host_message = PodSecurityRefusal {
        enforced: restricted,
        findings: restricted.evaluate(&stored_plain),
    }
    .message(&format!("plain-x-{ns}"));
    for (name, reason, rule, field) in [
        (
            "plain",
            "PodSecurityForbidden",
            "PodSecurity/allowPrivilegeEscalation".to_string(),
            "spec.containers[0].securityContext.allowPrivilegeEscalation",
        ),
        (
            "root",
            "PodSecurityForbidden",
            "PodSecurity/runAsUser".to_string(),
            "spec.containers[0].securityContext.runAsUser",
        ),
        (
            "cached",
            "ProfileAdmissionForbidden",
            format!("ValidatingAdmissionPolicy/tenantplane-{t}-image-pull-always"),
            "spec.containers[].imagePullPolicy",
        ),
    ] {
        let recorded = eventually(&format!("the decision about {name}"), || async {
            let d = decisions(name).await;
            (!d.is_empty()).then_some(d)
        })
        .await;
        assert_eq!(
            recorded.len(),
            1,
            "one decision about {name}: {recorded:#?}"
        );
        let d = &recorded[0];
        assert_eq!(
            (d.outcome.as_str(), d.reason.as_str(), d.action.as_str()),
            ("Rejected", reason, "none"),
            "{d:#?}"
        );
        let profile = d.profile.as_ref().expect("the profile that refused");
        assert_eq!(
            (profile.name.as_str(), profile.rule.as_deref()),
            (pname.as_str(), Some(rule.as_str()))
        );
        assert_eq!(d.field_path.as_deref(), Some(field));
        assert!(
            get(
                h,
                "v1",
                "Pod",
                Some(&format!("tenant-{t}")),
                &format!("{name}-x-{ns}")
            )
            .await
            .is_none(),
            "{name} was written to the host"
        );
    }
    let plain_decision = &decisions("plain").await[0];
    assert!(
        plain_decision.message.ends_with(&host_message),
        "the host's own words: {}",
        plain_decision.message
    );

    // The tenant's namespace carries the profile's labels, and its admission policies are in
    // place: a new such pod is refused at apply time, before anything is synced.
    eventually("the tenant namespace's Pod Security labels", || async {
        let n = get(c, "v1", "Namespace", None, &ns).await?;
        (n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
            && n["metadata"]["labels"]["pod-security.kubernetes.io/enforce-version"] == "v1.34")
            .then_some(())
    })
    .await;
    // Dry runs, as a real API server takes a moment to put a new policy in effect.
    let tenant_pods = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        c.clone(),
        &ns,
        &tenantplane_e2e::resource("v1", "Pod"),
    );
    let refusal = |object: Value, by: &'static str| {
        let tenant_pods = tenant_pods.clone();
        async move {
            let dry_run = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let dynamic: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
            match tenant_pods.create(&dry_run, &dynamic).await {
                Err(kube::Error::Api(status)) if status.message.contains(by) => {
                    Some(status.message)
                }
                _ => None,
            }
        }
    };
    let mut late = plain.clone();
    late["metadata"]["name"] = json!("late");
    let refused = eventually("Pod Security in effect in the tenant", || {
        refusal(late.clone(), "violates PodSecurity")
    })
    .await;
    let stored_late = {
        let mut p = late.clone();
        tenantplane_core::boundary::complete_pod(&mut p, true);
        p
    };
    let expected = PodSecurityRefusal {
        enforced: restricted,
        findings: restricted.evaluate(&stored_late),
    }
    .message("late");
    assert_eq!(refused, expected);
    let vap = format!("tenantplane-{t}-profile-image-pull-always");
    let mut cached_late = restricted_pod(&ns, "cached-late", "IfNotPresent");
    cached_late["metadata"]["name"] = json!("cached-late");
    let refused = eventually("the profile's admission policy in effect", || {
        refusal(cached_late.clone(), "ValidatingAdmissionPolicy")
    })
    .await;
    assert!(
        refused.contains(&format!(
            "pods \"cached-late\" is forbidden: ValidatingAdmissionPolicy '{vap}' with binding \
             '{vap}' denied request: every container of a tenant pod must use imagePullPolicy: \
             Always"
        )),
        "{refused}"
    );
}
