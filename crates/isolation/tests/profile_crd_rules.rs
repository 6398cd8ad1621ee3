//! The IsolationProfile CRD's CEL rules (`x-kubernetes-validations`), evaluated as the API server
//! would with kube-cel's client-side CRD validation: contradictory overrides are refused at
//! `kubectl apply` time, before the compiler sees them.

mod common;

use kube_cel::Validator;
use serde_json::{Value, json};

fn schema() -> Value {
    let crd = tenantplane_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "IsolationProfile")
        .unwrap();
    serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
}

fn errors(spec: Value) -> Vec<String> {
    let profile = json!({
        "apiVersion": "tenantplane.io/v1alpha1",
        "kind": "IsolationProfile",
        "metadata": { "name": "p" },
        "spec": spec,
    });
    match Validator::new().validate(&schema(), &profile, None) {
        Ok(()) => Vec::new(),
        Err(e) => e.into_vec().into_iter().map(|e| e.to_string()).collect(),
    }
}

fn refused(spec: Value, message: &str) {
    let found = errors(spec.clone());
    assert!(
        found.iter().any(|e| e.contains(message)),
        "{spec}: {found:?}"
    );
}

#[test]
fn the_fixtures_pass_the_crd_rules() {
    for name in ["baseline", "restricted", "strict", "overrides"] {
        let text =
            std::fs::read_to_string(common::fixture(&format!("profile-{name}.yaml"))).unwrap();
        let profile: Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            errors(profile["spec"].clone()),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[test]
fn egress_allow_lists_need_default_deny_egress() {
    let message = "only take effect with defaultDenyEgress";
    refused(
        json!({ "network": { "defaultDenyEgress": false, "allowedEgressCidrs": ["10.0.0.0/8"] } }),
        message,
    );
    refused(
        json!({ "network": { "defaultDenyEgress": false, "allowedEgressNamespaces": ["monitoring"] } }),
        message,
    );
    assert!(errors(json!({ "network": { "defaultDenyEgress": true, "allowedEgressCidrs": ["10.0.0.0/8"] } })).is_empty());
}

#[test]
fn allowed_egress_cidrs_must_be_cidrs() {
    refused(
        json!({ "network": { "allowedEgressCidrs": ["10.0.0.0/8", "10.0.0.0/33"] } }),
        "must be a CIDR",
    );
    refused(
        json!({ "network": { "allowedEgressCidrs": ["example.com"] } }),
        "must be a CIDR",
    );
}

#[test]
fn denying_node_ports_contradicts_a_quota_that_grants_them() {
    let spec = |ports: Value| json!({ "services": { "denyNodePorts": true }, "resourceQuota": { "hard": { "services.nodeports": ports } } });
    refused(
        spec(json!("2")),
        "services.denyNodePorts refuses every node port",
    );
    assert!(errors(spec(json!("0"))).is_empty());
    assert!(errors(json!({ "services": { "denyNodePorts": false }, "resourceQuota": { "hard": { "services.nodeports": "2" } } })).is_empty());
}
