//! `tenantplane compile-admission` as a user runs it, on the examples' SyncPolicy.

use std::path::Path;
use std::process::{Command, Output};

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .arg("compile-admission")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn prints_a_policy_and_binding_per_reject_rule_with_the_rules_admission_action() {
    let yaml = stdout(&tenantplane(&[
        "--policy",
        "examples/syncpolicy.yaml",
        "--tenant",
        "acme",
    ]));
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(
        docs.len(),
        22,
        "11 Reject rules, a policy and a binding each"
    );
    let binding = |name: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == "ValidatingAdmissionPolicyBinding" && d["metadata"]["name"] == name
            })
            .unwrap_or_else(|| panic!("binding {name}"))
    };
    assert_eq!(
        binding("tenantplane-acme-no-host-network")["spec"]["validationActions"],
        serde_json::json!(["Warn"])
    );
    assert_eq!(
        binding("tenantplane-acme-no-host-pid")["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&tenantplane(&[
        "--policy",
        "examples/syncpolicy.yaml",
        "--tenant",
        "acme",
        "-o",
        "json",
    ])))
    .unwrap();
    assert_eq!(json["items"].as_array().unwrap(), &docs);
}

#[test]
fn explains_each_reject_rule_and_defaults_to_the_builtin_policy() {
    let table = stdout(&tenantplane(&["--explain"]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("SyncPolicy tenantplane-default (revision sha256:"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("RULE") && lines[1].contains("AT ADMISSION"),
        "{table}"
    );
    assert_eq!(lines.len(), 15, "the header lines and 13 rules: {table}");
    assert!(
        lines.iter().any(|l| l.starts_with("no-host-network")
            && l.contains("tenantplane-acme-no-host-network")
            && l.ends_with("Deny")),
        "{table}"
    );
}

#[test]
fn a_policy_that_does_not_compile_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "apiVersion: tenantplane.io/v1alpha1\nkind: SyncPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - {name: s, action: Sync, reason: S, admission: Warn}\n  default: {action: Skip, reason: No}\n",
    )
    .unwrap();
    let out = tenantplane(&["--policy", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.rules[0].admission: only a Reject rule is enforced at admission, and rule s is a Sync"),
        "{err}"
    );
}

#[test]
fn with_a_profile_its_admission_policies_join_and_its_pod_security_labels_are_listed() {
    let yaml = stdout(&tenantplane(&[
        "--profile",
        "examples/isolationprofile.yaml",
        "--tenant",
        "acme",
    ]));
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .filter(|n| n.starts_with("tenantplane-acme-profile-"))
        .collect();
    assert_eq!(
        names,
        [
            "tenantplane-acme-profile-image-pull-always",
            "tenantplane-acme-profile-no-node-ports"
        ],
        "protect-managed is about who writes on the host, not the tenant's"
    );
    let table = stdout(&tenantplane(&[
        "--profile",
        "examples/isolationprofile.yaml",
        "--explain",
    ]));
    assert!(
        table.contains(
            "IsolationProfile acme-isolation (generation 0): Pod Security labels on every namespace \
             but kube-system, kube-public, kube-node-lease: pod-security.kubernetes.io/audit=restricted"
        ),
        "{table}"
    );
}
