//! The CRDs' own CEL `x-kubernetes-validations`, evaluated as the API server would (kube-cel's
//! client-side implementation of CRD validation rules): the cross-field rules refuse what they
//! promise to refuse and accept the rest.

use kube::CustomResourceExt;
use kube_cel::Validator;
use serde_json::{Value, json};
use tenantplane_api::{SyncPolicy, Tenant};

fn schema<K: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn messages(result: Result<(), kube_cel::ValidationErrors>) -> Vec<String> {
    match result {
        Ok(()) => vec![],
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| e.to_string())
            .collect(),
    }
}

fn tenant(name: &str, host_namespace: Option<&str>) -> Value {
    let mut spec = json!({"controlPlane": {"kubeconfigSecret": {"namespace": "ns", "name": "kc"}}});
    if let Some(ns) = host_namespace {
        spec["hostNamespace"] = ns.into();
    }
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant", "metadata": {"name": name}, "spec": spec})
}

#[test]
fn a_long_tenant_name_needs_an_explicit_host_namespace() {
    let v = Validator::new();
    let s = schema::<Tenant>();
    let long = "a".repeat(60);
    let errors = messages(v.validate(&s, &tenant(&long, None), None));
    assert!(
        errors
            .iter()
            .any(|e| e.contains("needs an explicit spec.hostNamespace")),
        "{errors:?}"
    );
    assert_eq!(
        messages(v.validate(&s, &tenant(&long, Some("acme")), None)),
        Vec::<String>::new()
    );
    assert_eq!(
        messages(v.validate(&s, &tenant("acme", None), None)),
        Vec::<String>::new()
    );
}

#[test]
fn a_tenant_name_must_be_a_dns_label() {
    let errors =
        messages(Validator::new().validate(&schema::<Tenant>(), &tenant("Acme.Corp", None), None));
    assert!(
        errors.iter().any(|e| e.contains("DNS-1123 label")),
        "{errors:?}"
    );
}

#[test]
fn the_host_namespace_cannot_change() {
    let v = Validator::new();
    let s = schema::<Tenant>();
    let old = tenant("acme", Some("tenant-acme"));
    let errors = messages(v.validate(&s, &tenant("acme", Some("elsewhere")), Some(&old)));
    assert!(errors.iter().any(|e| e.contains("immutable")), "{errors:?}");
    assert_eq!(
        messages(v.validate(&s, &old, Some(&old))),
        Vec::<String>::new()
    );
}

#[test]
fn sync_policy_rules_are_unique_and_rejections_name_a_field() {
    let v = Validator::new();
    let s = schema::<SyncPolicy>();
    let policy = |rules: Value| {
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "p"},
            "spec": {"rules": rules, "default": {"action": "Skip", "reason": "Default"}}})
    };
    let dup = policy(json!([
        {"name": "a", "action": "Sync", "reason": "A"},
        {"name": "a", "action": "Skip", "reason": "B"}
    ]));
    assert!(
        messages(v.validate(&s, &dup, None))
            .iter()
            .any(|e| e.contains("unique"))
    );
    let unnamed_field = policy(json!([{"name": "a", "action": "Reject", "reason": "No"}]));
    assert!(
        messages(v.validate(&s, &unnamed_field, None))
            .iter()
            .any(|e| e.contains("fieldPath"))
    );
    let fine =
        policy(json!([{"name": "a", "action": "Reject", "reason": "No", "fieldPath": "spec.x"}]));
    assert_eq!(messages(v.validate(&s, &fine, None)), Vec::<String>::new());
}
