//! The shipped default SyncPolicy: every host-escape classic is rejected with its own rule and
//! offending field, ordinary workloads are synced, and anything else is skipped.

use serde_json::{Value, json};
use tenantplane_api::SyncAction;
use tenantplane_core::{CompiledPolicy, TenantObject};

fn pod(spec: Value) -> TenantObject {
    TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"}, "spec": spec}))
    .unwrap()
}

fn container(security_context: Value) -> Value {
    json!({"name": "app", "image": "nginx", "securityContext": security_context})
}

#[track_caller]
fn rejected_by(object: &TenantObject, rule: &str, field: &str) {
    let v = CompiledPolicy::builtin_default().evaluate(object);
    assert_eq!(v.action, SyncAction::Reject, "{v:?}");
    assert_eq!(v.rule.as_deref(), Some(rule), "{v:?}");
    assert_eq!(v.field_path.as_deref(), Some(field));
    assert_eq!(v.policy, "tenantplane-default");
    assert!(v.policy_revision.starts_with("sha256:"));
}

#[test]
fn host_namespaces_are_rejected() {
    let c = json!([{"name": "app", "image": "nginx"}]);
    rejected_by(
        &pod(json!({"hostNetwork": true, "containers": c})),
        "no-host-network",
        "spec.hostNetwork",
    );
    rejected_by(
        &pod(json!({"hostPID": true, "containers": c})),
        "no-host-pid",
        "spec.hostPID",
    );
    rejected_by(
        &pod(json!({"hostIPC": true, "containers": c})),
        "no-host-ipc",
        "spec.hostIPC",
    );
    rejected_by(
        &pod(json!({"containers": c, "volumes": [{"name": "root", "hostPath": {"path": "/"}}]})),
        "no-host-path-volumes",
        "spec.volumes[].hostPath",
    );
}

#[test]
fn dangerous_security_contexts_are_rejected_in_any_container_list() {
    rejected_by(
        &pod(json!({"containers": [container(json!({"privileged": true}))]})),
        "no-privileged-containers",
        "spec.containers[].securityContext.privileged",
    );
    rejected_by(
        &pod(json!({"containers": [{"name": "a", "image": "x"}],
            "initContainers": [container(json!({"allowPrivilegeEscalation": true}))]})),
        "no-privilege-escalation",
        "spec.containers[].securityContext.allowPrivilegeEscalation",
    );
    rejected_by(
        &pod(json!({"containers": [container(json!({"capabilities": {"add": ["NET_ADMIN"]}}))]})),
        "no-added-capabilities",
        "spec.containers[].securityContext.capabilities.add",
    );
    rejected_by(
        &pod(
            json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
        ),
        "no-host-ports",
        "spec.containers[].ports[].hostPort",
    );
}

#[test]
fn git_repo_volumes_cloud_identities_and_ingress_snippets_are_rejected() {
    let c = json!([{"name": "app", "image": "nginx"}]);
    rejected_by(
        &pod(json!({"containers": c, "volumes": [
            {"name": "src", "gitRepo": {"repository": "https://example.com/x.git"}}]})),
        "no-git-repo-volumes",
        "spec.volumes[].gitRepo",
    );
    let policy = CompiledPolicy::builtin_default();
    assert!(
        policy
            .evaluate(&pod(json!({"containers": c, "volumes": [
                {"name": "src", "gitRepo": {"repository": "x"}}]})))
            .message
            .contains("CVE-2024-10220")
    );
    for annotation in [
        "eks.amazonaws.com/role-arn",
        "iam.gke.io/gcp-service-account",
        "azure.workload.identity/client-id",
    ] {
        let account =
            TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "app", "namespace": "team", "annotations": {annotation: "x"}}}))
            .unwrap();
        rejected_by(&account, "no-cloud-identity", "metadata.annotations");
    }
    let ingress = |annotation: &str| {
        TenantObject::from_value(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "team", "annotations": {annotation: "x"}},
            "spec": {"rules": []}}),
        )
        .unwrap()
    };
    rejected_by(
        &ingress("nginx.ingress.kubernetes.io/configuration-snippet"),
        "no-ingress-snippets",
        "metadata.annotations",
    );
    assert_eq!(
        policy
            .evaluate(&ingress("nginx.ingress.kubernetes.io/rewrite-target"))
            .action,
        SyncAction::Sync
    );
    let plain = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "app", "namespace": "team", "annotations": {"team": "a"}}}))
    .unwrap();
    assert_eq!(policy.evaluate(&plain).action, SyncAction::Sync);
}

#[test]
fn node_port_and_load_balancer_services_are_rejected_cluster_ip_synced() {
    let svc = |t: &str| {
        TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s"}, "spec": {"type": t}}))
        .unwrap()
    };
    rejected_by(&svc("NodePort"), "no-node-port-services", "spec.type");
    rejected_by(&svc("LoadBalancer"), "no-node-port-services", "spec.type");
    let v = CompiledPolicy::builtin_default().evaluate(&svc("ClusterIP"));
    assert_eq!(
        (v.action, v.rule.as_deref()),
        (SyncAction::Sync, Some("sync-workloads"))
    );
}

/// A real tenant control plane keeps `default/kubernetes` (Service, Endpoints, EndpointSlice)
/// about itself. Synced, the Service got a host cluster IP that flowed back up and replaced the
/// tenant's own; no policy, not even one that syncs every kind, may sync them.
#[test]
fn the_tenant_control_planes_own_api_service_is_never_synced() {
    let object = |api_version: &str, kind: &str, namespace: &str, name: &str| {
        TenantObject::from_value(json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 443}]}}))
        .unwrap()
    };
    let everything = CompiledPolicy::from_yaml(
        "apiVersion: tenantplane.io/v1alpha1\nkind: SyncPolicy\nmetadata: {name: everything}\n\
         spec:\n  rules:\n  - {name: all, action: Sync, reason: Everything}\n  \
         default: {action: Skip, reason: Never}\n",
    )
    .unwrap();
    for policy in [CompiledPolicy::builtin_default(), everything] {
        for (api_version, kind) in [
            ("v1", "Service"),
            ("v1", "Endpoints"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
        ] {
            let v = policy.evaluate(&object(api_version, kind, "default", "kubernetes"));
            assert_eq!(
                (v.action, v.rule.as_deref(), v.reason.as_str()),
                (SyncAction::Skip, None, "TenantControlPlaneObject"),
                "{kind} under {}",
                policy.name()
            );
        }
        let v = policy.evaluate(&object("v1", "Service", "shop", "kubernetes"));
        assert_eq!(
            v.action,
            SyncAction::Sync,
            "a tenant's own Service named kubernetes"
        );
    }
}

#[test]
fn hardened_pods_sync_and_other_kinds_skip() {
    let policy = CompiledPolicy::builtin_default();
    let v = policy.evaluate(&pod(json!({"containers": [container(json!({
        "privileged": false, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}))]})));
    assert_eq!(v.action, SyncAction::Sync, "{v:?}");
    let deployment =
        TenantObject::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"}}))
        .unwrap();
    let v = policy.evaluate(&deployment);
    assert_eq!(
        (v.action, v.rule, v.reason.as_str()),
        (SyncAction::Skip, None, "NotSyncedByPolicy")
    );
}

#[test]
fn a_condition_that_cannot_be_evaluated_fails_closed() {
    // A pod has no spec.replicas: the condition errors instead of answering, so the rule refuses.
    let policy = CompiledPolicy::from_yaml(
        r#"
metadata: {name: p}
spec:
  rules:
    - name: typed
      match: {kinds: [Pod], conditions: [{name: c, expression: "object.spec.replicas > 1"}]}
      action: Sync
      reason: Ok
  default: {action: Skip, reason: Default}
"#,
    )
    .unwrap();
    let v = policy.evaluate(&pod(json!({"containers": []})));
    assert_eq!(
        (v.action, v.reason.as_str()),
        (SyncAction::Reject, "PolicyEvaluationError"),
        "{v:?}"
    );
}

#[test]
fn invalid_policies_name_the_field() {
    let err = CompiledPolicy::from_yaml(
        r#"
metadata: {name: p}
spec:
  rules:
    - {name: a, action: Sync, reason: Ok}
    - name: b
      match: {conditions: [{name: c, expression: "object.spec.(("}]}
      action: Sync
      reason: Ok
  default: {action: Skip, reason: Default}
"#,
    )
    .unwrap_err();
    assert_eq!(err.field(), "spec.rules[1].match.conditions[0].expression");
    let err = CompiledPolicy::from_yaml(
        "metadata: {name: p}\nspec:\n  rules:\n  - {name: a, action: Reject, reason: No}\n  default: {action: Skip, reason: D}\n",
    )
    .unwrap_err();
    assert_eq!(err.field(), "spec.rules[0].fieldPath");
}

#[test]
fn the_planner_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<tenantplane_core::Planner>();
}

/// The hardening policy of examples/: the built-in policy's rules, each as they are, plus rules
/// refusing what the built-in policy strips or keeps.
#[test]
fn the_hardening_example_refuses_what_the_built_in_policy_strips_or_keeps() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hardening-syncpolicy.yaml"
    ))
    .unwrap();
    let hardened = CompiledPolicy::from_yaml(&text).unwrap();
    let rules = |yaml: &str| -> Vec<Value> {
        let policy: Value = serde_norway::from_str(yaml).unwrap();
        policy["spec"]["rules"].as_array().unwrap().clone()
    };
    let built_in = rules(tenantplane_core::policy::DEFAULT_POLICY_YAML);
    let hardening = rules(&text);
    for rule in &built_in {
        assert!(
            hardening.contains(rule),
            "{} is kept as it is",
            rule["name"]
        );
    }
    let c = json!([{"name": "app", "image": "nginx"}]);
    let refused = |object: &TenantObject, rule: &str| {
        let v = hardened.evaluate(object);
        assert_eq!(
            (v.action, v.rule.as_deref()),
            (SyncAction::Reject, Some(rule)),
            "{v:?}"
        );
    };
    refused(
        &pod(json!({"nodeName": "cp-1", "containers": c})),
        "no-node-name",
    );
    for toleration in [
        json!({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}),
        json!({"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"operator": "Exists"}),
    ] {
        refused(
            &pod(json!({"tolerations": [toleration], "containers": c})),
            "no-control-plane-tolerations",
        );
    }
    let gpu = pod(json!({"tolerations": [{"key": "gpu", "operator": "Exists"}], "containers": c}));
    assert_eq!(hardened.evaluate(&gpu).action, SyncAction::Sync);
    let finalized = |finalizer: &str| {
        TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team", "finalizers": [finalizer]},
            "spec": {"containers": c}}))
        .unwrap()
    };
    refused(&finalized("example.com/hold"), "no-pod-finalizers");
    assert_eq!(
        hardened
            .evaluate(&finalized("batch.kubernetes.io/job-tracking"))
            .action,
        SyncAction::Sync
    );
    let external = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": "team"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"}}))
    .unwrap();
    refused(&external, "no-external-name-services");
    assert!(
        hardened
            .tenant_admission("acme")
            .rules
            .iter()
            .all(|r| r.admission_policy.is_some()),
        "every Reject rule is enforced at apply time too"
    );
}
