//! The CEL of every compiled ValidatingAdmissionPolicy parses, and decides as documented when
//! evaluated the way the API server does (kube-cel's VAP evaluator with the Kubernetes libraries).

mod common;

use kube_cel::cel::Program;
use kube_cel::{AdmissionRequest, VapEvaluator, VapExpression};
use serde_json::{Value, json};

/// Every `spec.validations[].expression` of the compiled admission policies, with the policy name.
fn expressions(c: &tenantplane_isolation::Compilation) -> Vec<(String, String)> {
    c.objects
        .iter()
        .filter(|o| o.object["kind"] == "ValidatingAdmissionPolicy")
        .flat_map(|o| {
            let name = o.object["metadata"]["name"].as_str().unwrap().to_string();
            o.object["spec"]["validations"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |v| (name.clone(), v["expression"].as_str().unwrap().to_string()))
        })
        .collect()
}

#[test]
fn every_admission_expression_parses() {
    for (profile, compilation) in common::all_compilations() {
        let found = expressions(&compilation);
        assert!(!found.is_empty());
        for (policy, expression) in found {
            Program::compile(&expression)
                .unwrap_or_else(|e| panic!("{profile}: {policy}: {expression}: {e}"));
        }
    }
}

/// Evaluates the one validation of policy `tenantplane-acme-<purpose>` of the strict level.
fn admits(purpose: &str, object: Value, username: &str) -> bool {
    let policy = format!("tenantplane-acme-{purpose}");
    let (_, expression) = expressions(&common::compiled("strict"))
        .into_iter()
        .find(|(name, _)| *name == policy)
        .unwrap_or_else(|| panic!("{policy} compiled at strict"));
    let request: AdmissionRequest = serde_json::from_value(json!({
        "kind": { "group": "", "version": "v1", "kind": object["kind"] },
        "resource": { "group": "", "version": "v1", "resource": "pods" },
        "name": "x", "namespace": "tenant-acme", "operation": "CREATE", "dryRun": false,
        "username": username, "uid": "", "groups": ["system:authenticated"],
    }))
    .expect("an admission request");
    let results = VapEvaluator::builder()
        .object(object)
        .request(request)
        .build()
        .evaluate(&[VapExpression {
            expression,
            message: None,
            message_expression: None,
        }]);
    assert_eq!(results.len(), 1);
    results[0].passed
}

fn pod(runtime_class: Option<&str>, pull: &str, init_pull: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "web" },
        "spec": { "containers": [{ "name": "web", "image": "nginx", "imagePullPolicy": pull }] },
    });
    if let Some(class) = runtime_class {
        pod["spec"]["runtimeClassName"] = json!(class);
    }
    if let Some(pull) = init_pull {
        pod["spec"]["initContainers"] =
            json!([{ "name": "init", "image": "busybox", "imagePullPolicy": pull }]);
    }
    pod
}

const TENANT_USER: &str = "system:serviceaccount:tenant-acme:default";

#[test]
fn runtime_class_policy_requires_the_class() {
    assert!(admits(
        "runtime-class",
        pod(Some("gvisor"), "Always", None),
        TENANT_USER
    ));
    assert!(!admits(
        "runtime-class",
        pod(Some("runc"), "Always", None),
        TENANT_USER
    ));
    assert!(!admits(
        "runtime-class",
        pod(None, "Always", None),
        TENANT_USER
    ));
}

#[test]
fn image_pull_policy_requires_always_for_every_container() {
    assert!(admits(
        "image-pull-always",
        pod(None, "Always", None),
        TENANT_USER
    ));
    assert!(admits(
        "image-pull-always",
        pod(None, "Always", Some("Always")),
        TENANT_USER
    ));
    assert!(!admits(
        "image-pull-always",
        pod(None, "IfNotPresent", None),
        TENANT_USER
    ));
    assert!(!admits(
        "image-pull-always",
        pod(None, "Always", Some("Never")),
        TENANT_USER
    ));
}

#[test]
fn node_port_policy_refuses_node_ports_and_load_balancers() {
    let service = |t: Option<&str>| {
        let mut s = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" }, "spec": { "ports": [{ "port": 80 }] } });
        if let Some(t) = t {
            s["spec"]["type"] = json!(t);
        }
        s
    };
    assert!(admits("no-node-ports", service(None), TENANT_USER));
    assert!(admits(
        "no-node-ports",
        service(Some("ClusterIP")),
        TENANT_USER
    ));
    assert!(!admits(
        "no-node-ports",
        service(Some("NodePort")),
        TENANT_USER
    ));
    assert!(!admits(
        "no-node-ports",
        service(Some("LoadBalancer")),
        TENANT_USER
    ));
}

#[test]
fn managed_objects_change_only_through_the_syncer_and_the_cluster() {
    let quota = json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": { "name": "tenantplane-quota" } });
    for user in [
        tenantplane_isolation::DEFAULT_SYNCER_USERNAME,
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:kube-controller-manager",
        "system:node:worker-1",
    ] {
        assert!(admits("protect-managed", quota.clone(), user), "{user}");
    }
    for user in [
        TENANT_USER,
        "alice",
        "system:serviceaccount:tenantplane-system:other",
    ] {
        assert!(!admits("protect-managed", quota.clone(), user), "{user}");
    }
}
