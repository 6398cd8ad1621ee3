//! `tenantplane explain-sync` as a user runs it: the binary on the examples/ corpus, compared with
//! golden files (`TENANTPLANE_BLESS=1` rewrites them), plus exit statuses and error reports.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn tenantplane(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

const EXAMPLES: &[&str] = &[
    "explain-sync",
    "examples/workloads",
    "--tenant",
    "examples/tenant.yaml",
    "--policy",
    "examples/syncpolicy.yaml",
    "--host",
    "examples/host",
];

#[track_caller]
fn assert_golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("TENANTPLANE_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "golden file {} differs (TENANTPLANE_BLESS=1 to accept)",
        path.display()
    );
}

#[test]
fn examples_table_matches_golden_and_the_bad_document_fails_the_run() {
    let out = tenantplane(EXAMPLES, None);
    assert_golden(
        "explain-sync-examples.txt",
        &String::from_utf8(out.stdout).unwrap(),
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("15 documents: 7 Synced, 2 Skipped, 3 Rejected, 2 Conflict, 1 error"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "default --fail-on error");
}

#[test]
fn examples_json_matches_golden_apart_from_ids_and_times() {
    let mut args = EXAMPLES.to_vec();
    args.extend(["-o", "json", "--fail-on", "none"]);
    let out = tenantplane(&args, None);
    assert_eq!(out.status.code(), Some(0));
    let mut value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for result in value.as_array_mut().unwrap() {
        if let Some(decision) = result.get_mut("decision") {
            assert!(
                uuid_like(&decision["id"]),
                "decision ids are UUIDs: {}",
                decision["id"]
            );
            decision["id"] = "<id>".into();
            decision["time"] = "<time>".into();
        }
    }
    assert_golden(
        "explain-sync-examples.json",
        &(serde_json::to_string_pretty(&value).unwrap() + "\n"),
    );
}

fn uuid_like(v: &serde_json::Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 36 && s.matches('-').count() == 4)
}

#[test]
fn fail_on_selects_the_outcomes_that_fail_a_script() {
    let shop = [
        "explain-sync",
        "examples/workloads/shop.yaml",
        "--tenant",
        "examples/tenant.yaml",
        "--policy",
        "examples/syncpolicy.yaml",
    ];
    let mut args = shop.to_vec();
    args.extend(["--fail-on", "reject,conflict"]);
    assert_eq!(
        tenantplane(&args, None).status.code(),
        Some(0),
        "no host state: nothing conflicts"
    );
    args.extend(["--host", "examples/host"]);
    assert_eq!(
        tenantplane(&args, None).status.code(),
        Some(1),
        "web-config collides with a hand-made host ConfigMap"
    );
    let out = tenantplane(&["explain-sync", "-", "--fail-on", "bogus"], Some(""));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown outcome \"bogus\""));
}

#[test]
fn stdin_json_and_lists_are_read_and_a_syntax_error_spares_the_other_documents() {
    let input = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: n}, spec: {hostPID: true}}\n---\nkind: [broken\n---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}\n";
    let out = tenantplane(&["explain-sync", "-", "--fail-on", "none"], Some(input));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (table, admission) = stdout
        .split_once("\n\n")
        .expect("the table, then admission");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    // The refused Pod would not even have been created in the tenant control plane.
    assert_eq!(
        admission.lines().nth(1),
        Some(
            "Pod/n/a   refused at apply time (ValidatingAdmissionPolicy tenantplane-demo-no-host-pid)"
        ),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("Pod/n/a")
            && lines[1].contains("Rejected")
            && lines[1].contains("no-host-pid"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("- document 2") && lines[2].contains("Error"),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("ConfigMap/default/c") && lines[3].contains("tenant-demo/c-x-default"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_bad_policy_or_a_missing_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "metadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {conditions: [{name: c, expression: 'object.(('}]}\n    action: Sync\n    reason: R\n  default: {action: Skip, reason: D}\n").unwrap();
    let out = tenantplane(
        &[
            "explain-sync",
            "examples/workloads",
            "--policy",
            policy.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("spec.rules[0].match.conditions[0].expression"),
        "{stderr}"
    );

    let out = tenantplane(&["explain-sync", "no/such/dir"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no/such/dir: no such file or directory")
    );
}
