//! `tenantplane compile-isolation` as a user runs it, on the isolation crate's fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../isolation/tests/fixtures")
}

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .arg("compile-isolation")
        .args(args)
        .current_dir(fixtures())
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

const STRICT: &[&str] = &[
    "--tenant",
    "tenant.yaml",
    "--profile",
    "profile-strict.yaml",
];

#[test]
fn prints_the_objects_as_yaml_or_a_json_list() {
    let yaml = stdout(&tenantplane(STRICT));
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 14);
    assert_eq!(docs[0]["kind"], "Namespace");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&tenantplane(&[STRICT, &["-o", "json"]].concat()))).unwrap();
    assert_eq!(json["kind"], "List");
    assert_eq!(json["items"].as_array().unwrap(), &docs);
}

#[test]
fn explains_each_object_with_its_fields() {
    let table = stdout(&tenantplane(&[
        "--tenant",
        "tenant.yaml",
        "--profile",
        "profile-overrides.yaml",
        "--explain",
    ]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("OBJECT") && lines[0].contains("FIELDS") && lines[0].contains("WHY")
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("NetworkPolicy/tenant-acme/tenantplane-allow-egress-cidrs "))
        .expect("a row for the egress policy");
    assert!(row.contains("spec.network.allowedEgressCidrs"), "{row}");
    assert!(
        row.contains("allows egress to 203.0.113.0/24, 2001:db8::/32"),
        "{row}"
    );
}

#[test]
fn previous_objects_no_longer_compiled_are_listed_for_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let previous = dir.path().join("applied.yaml");
    std::fs::write(&previous, &tenantplane(STRICT).stdout).unwrap();
    let previous = previous.to_str().unwrap();
    let baseline = [
        "--tenant",
        "tenant.yaml",
        "--profile",
        "profile-baseline.yaml",
        "--previous",
        previous,
    ];
    let out = tenantplane(&baseline);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("prune: v1 LimitRange/tenant-acme/tenantplane-limits"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 8, "{stderr}");
    let table = stdout(&tenantplane(&[&baseline[..], &["--explain"]].concat()));
    assert!(
        table.lines().any(|l| l
            .starts_with("ValidatingAdmissionPolicy/tenantplane-acme-runtime-class ")
            && l.contains("prune")),
        "{table}"
    );
}

#[test]
fn bad_input_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, spec: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("apiVersion: tenantplane.io/v1alpha1\nkind: IsolationProfile\nmetadata:\n  name: bad\nspec:\n{spec}"),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    for (file, spec, expected) in [
        (
            "level.yaml",
            "  level: extreme\n",
            "spec.level: unknown variant `extreme`",
        ),
        (
            "quantity.yaml",
            "  resourceQuota:\n    hard:\n      pods: ten\n",
            "spec.resourceQuota.hard[pods]: \"ten\" is not a quantity",
        ),
        (
            "cidr.yaml",
            "  network:\n    allowedEgressCidrs: [10.0.0.0/8, 300.0.0.0/8]\n",
            "spec.network.allowedEgressCidrs[1]: \"300.0.0.0/8\" is not a CIDR",
        ),
        (
            "contradiction.yaml",
            "  level: baseline\n  network:\n    allowedEgressNamespaces: [monitoring]\n",
            "spec.network.allowedEgressNamespaces: an egress allow-list takes effect only with default-deny egress",
        ),
    ] {
        let path = write(file, spec);
        let out = tenantplane(&["--tenant", "tenant.yaml", "--profile", &path]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        assert!(out.stdout.is_empty(), "{file}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{file}: {stderr}");
    }
}
