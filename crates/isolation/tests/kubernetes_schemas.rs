//! Every compiled object is a valid Kubernetes 1.34 object: it deserializes into its k8s-openapi
//! type without losing a field, and it validates against the Kubernetes OpenAPI schemas (the
//! `kubernetes-validate` package from PyPI, strict mode). Without that package the schema check
//! is skipped with a message, except under CI, where it must be installed.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Deserializes into `T` and back: a field k8s-openapi does not know would be dropped.
fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Value {
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", object["metadata"]["name"]));
    serde_json::to_value(typed).unwrap()
}

#[test]
fn every_object_deserializes_into_its_k8s_openapi_type_without_loss() {
    for (profile, compilation) in common::all_compilations() {
        for compiled in &compilation.objects {
            let object = &compiled.object;
            let back = match object["kind"].as_str().unwrap() {
                "Namespace" => round_trip::<Namespace>(object),
                "NetworkPolicy" => round_trip::<NetworkPolicy>(object),
                "ResourceQuota" => round_trip::<ResourceQuota>(object),
                "LimitRange" => round_trip::<LimitRange>(object),
                "ValidatingAdmissionPolicy" => round_trip::<ValidatingAdmissionPolicy>(object),
                "ValidatingAdmissionPolicyBinding" => {
                    round_trip::<ValidatingAdmissionPolicyBinding>(object)
                }
                other => panic!("{profile}: unexpected kind {other}"),
            };
            pretty_assertions::assert_eq!(&back, object, "{profile}");
        }
    }
}

#[test]
fn every_object_validates_against_the_kubernetes_schemas() {
    let objects: Vec<Value> = common::all_compilations()
        .into_iter()
        .flat_map(|(_, c)| c.objects.into_iter().map(|o| o.object))
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/validate_schemas.py");
    let mut child = match Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return skip(&format!("python3 could not start ({e})")),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&objects).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => println!("{report}"),
        Some(3) => skip("the Python package kubernetes-validate is not installed"),
        _ => panic!("objects fail the Kubernetes schemas:\n{report}"),
    }
}

fn skip(why: &str) {
    let fix = "install it with `pip install kubernetes-validate`";
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must run the schema check; {fix}"
    );
    eprintln!("SKIPPED the Kubernetes schema check: {why}; {fix}");
}
