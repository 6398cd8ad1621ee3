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
    "--profile",
    "examples/isolationprofile.yaml",
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
        stderr.contains(
            "16 documents: 7 Synced, 1 Skipped, 4 Rejected, 2 Conflict, 1 NotWatched, 1 error"
        ),
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

const POD_SECURITY: &[&str] = &[
    "explain-sync",
    "examples/hostile/tenant/pod-security.yaml",
    "--tenant",
    "examples/hostile/tenant.yaml",
    "--profile",
    "examples/hostile/isolationprofile.yaml",
];

#[test]
fn what_the_profile_refuses_is_predicted_with_the_check_and_what_the_tenant_does_at_apply() {
    let out = tenantplane(POD_SECURITY, None);
    assert_golden(
        "explain-sync-pod-security.txt",
        &String::from_utf8(out.stdout).unwrap(),
    );
    let mut json_args = POD_SECURITY.to_vec();
    json_args.extend(["-o", "json"]);
    let out = tenantplane(&json_args, None);
    let results: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let plain = &results[1]["decision"];
    assert_eq!(plain["subject"]["name"], "plain");
    assert_eq!(
        plain["profile"],
        serde_json::json!({"name": "hostile-restricted", "generation": 0,
            "fieldPath": "spec.level", "rule": "PodSecurity/allowPrivilegeEscalation"})
    );
    assert!(
        plain["message"].as_str().unwrap().ends_with(
            "pods \"plain-x-lab\" is forbidden: violates PodSecurity \"restricted:v1.34\": \
             allowPrivilegeEscalation != false (container \"app\" must set \
             securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \
             \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true \
             (pod or container \"app\" must set securityContext.runAsNonRoot=true), seccompProfile \
             (pod or container \"app\" must set securityContext.seccompProfile.type to \
             \"RuntimeDefault\" or \"Localhost\")"
        ),
        "{plain}"
    );
    assert_eq!(
        results[1]["tenantAdmission"],
        serde_json::json!({"atApply": "podSecurity", "enforced": "restricted:v1.34"})
    );
    let pinned = &results[6]["decision"]["message"];
    assert!(
        pinned.as_str().unwrap().contains(
            "spec.nodeName dropped: the host's scheduler places the pod; 1 of spec.tolerations \
             dropped"
        ),
        "{pinned}"
    );

    // Without --profile, the profile the Tenant names is looked for among --host: not there, so
    // the prediction goes without it, and says so.
    let out = tenantplane(
        &[
            "explain-sync",
            "examples/hostile/tenant/pod-security.yaml",
            "--tenant",
            "examples/hostile/tenant.yaml",
            "--host",
            "examples/hostile/host",
        ],
        None,
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "warning: Tenant hostile names IsolationProfile hostile-restricted, which is not among \
             the --host documents"
        ),
        "{stderr}"
    );
    // Among --host, it is found.
    let out = tenantplane(
        &[
            "explain-sync",
            "examples/hostile/tenant/pod-security.yaml",
            "--tenant",
            "examples/hostile/tenant.yaml",
            "--host",
            "examples/hostile/host",
            "--host",
            "examples/hostile/isolationprofile.yaml",
        ],
        None,
    );
    assert_golden(
        "explain-sync-pod-security.txt",
        &String::from_utf8(out.stdout).unwrap(),
    );
}

const UNWATCHED: &[&str] = &[
    "explain-sync",
    "examples/unwatched",
    "--tenant",
    "examples/tenant.yaml",
];

#[test]
fn objects_the_syncer_does_not_watch_have_no_host_target_and_say_why() {
    let out = tenantplane(UNWATCHED, None);
    assert_golden(
        "explain-sync-unwatched.txt",
        &String::from_utf8(out.stdout).unwrap(),
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("11 documents: 1 Synced, 10 NotWatched"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(0));

    let mut args = UNWATCHED.to_vec();
    args.extend(["-o", "json"]);
    let out = tenantplane(&args, None);
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fate = |kind: &str| {
        results
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["unrecorded"]["subject"]["kind"] == kind)
            .unwrap_or_else(|| panic!("no unrecorded {kind}: {results:#}"))["unrecorded"]
            .clone()
    };
    for kind in [
        "ClusterRoleBinding",
        "Namespace",
        "PersistentVolume",
        "Gadget",
    ] {
        let f = fate(kind);
        assert_eq!(f["fate"], "ClusterScoped", "{f:#}");
        assert_eq!(
            f["subject"]["namespace"], "",
            "{kind} is placed in no namespace: {f:#}"
        );
        assert!(
            f.get("decision").is_none() && f.get("target").is_none(),
            "{f:#}"
        );
    }
    assert_eq!(
        fate("Gadget")["scope"]["source"],
        "CustomResourceDefinition"
    );
    let deployment = fate("Deployment");
    assert_eq!(deployment["fate"], "KindNotSynced");
    assert_eq!(deployment["subject"]["namespace"], "shop");
    assert_eq!(deployment["verdict"]["policy"], "tenantplane-default");
    assert_eq!(deployment["verdict"]["action"], "Skip");
    assert!(
        deployment["verdict"]["rule"].is_null(),
        "the default decides"
    );
    assert_eq!(fate("Widget")["fate"], "KindNotSynced");
    assert_eq!(fate("LocalSubjectAccessReview")["fate"], "CreateOnly");
}

#[test]
fn a_custom_kind_synced_by_the_policy_is_planned_from_its_crd_or_its_scope_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "metadata: {name: gadgets}\nspec:\n  rules:\n  - {name: example, match: {groups: [example.com]}, action: Sync, reason: Examples}\n  default: {action: Skip, reason: NotSyncedByPolicy}\n").unwrap();
    let args = [
        "explain-sync",
        "examples/unwatched/custom-resources.yaml",
        "--policy",
        policy.to_str().unwrap(),
    ];
    let out = tenantplane(&args, None);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row = |source: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(source))
            .unwrap_or_else(|| panic!("no row {source}: {stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("Widget/lab/w1")[1..4],
        ["tenant-demo/w1-x-lab", "create", "Synced"],
        "namespaced by its CRD: planned"
    );
    assert_eq!(
        row("Gadget/g1")[1..],
        [
            "-",
            "none",
            "NotWatched",
            "gadgets/example",
            "ClusterScoped"
        ]
    );
    assert_eq!(
        row("Gizmo/lab/z1")[1..],
        [
            "-",
            "none",
            "UnknownScope",
            "gadgets/example",
            "UnknownScope"
        ]
    );
    assert_eq!(out.status.code(), Some(0));
    let mut strict = args.to_vec();
    strict.extend(["--fail-on", "unknownscope"]);
    assert_eq!(tenantplane(&strict, None).status.code(), Some(1));

    let bad = std::fs::read_to_string(repo().join("examples/unwatched/custom-resources.yaml"))
        .unwrap()
        .replacen("scope: Cluster", "scope: Global", 1);
    let out = tenantplane(&["explain-sync", "-"], Some(&bad));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("CustomResourceDefinition: spec.scope is \"Global\""),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("Gadget/default/g1") && l.contains("KindNotSynced")),
        "a bad CRD teaches no scope: {stdout}"
    );
    assert_eq!(out.status.code(), Some(1), "a bad CRD is an input error");
}

/// A host object tenantplane synced, exported with `kubectl get -o yaml` (no managedFields) after
/// someone edited it: explain-sync shows the drift the syncer will find and correct; the same
/// object as tenantplane left it shows none.
#[test]
fn a_host_object_edited_since_it_was_synced_is_predicted_drifted() {
    use tenantplane_api::Tenant;
    use tenantplane_core::planner::HostState;
    use tenantplane_core::{CompiledPolicy, Planner, TenantObject};

    let tenant_cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop", "uid": "u1"}, "data": {"mode": "fast"}});
    let planner = Planner::new(
        &Tenant::new("demo", Default::default()),
        CompiledPolicy::builtin_default(),
    );
    let object = TenantObject::from_value(tenant_cm.clone()).unwrap();
    let plan = planner.plan(&object, &HostState::default());
    let synced = planner
        .translate(
            &object,
            &plan,
            &HostState::default().in_namespace("tenant-demo"),
        )
        .unwrap()
        .object;
    let mut edited = synced.clone();
    edited["data"]["mode"] = "slow".into();
    edited["data"]["debug"] = "true".into();

    let dir = tempfile::tempdir().unwrap();
    let (input, host) = (dir.path().join("cm.json"), dir.path().join("host.json"));
    std::fs::write(&input, tenant_cm.to_string()).unwrap();
    let run = |host_object: &serde_json::Value, output: &str| {
        std::fs::write(&host, host_object.to_string()).unwrap();
        let out = tenantplane(
            &[
                "explain-sync",
                input.to_str().unwrap(),
                "--host",
                host.to_str().unwrap(),
                "-o",
                output,
                "--fail-on",
                "none",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = |text: String| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&text).unwrap()[0].clone()
    };
    let json = first(run(&edited, "json"));
    let decision = &json["decision"];
    assert_eq!(decision["outcome"], "Drifted", "{json}");
    assert_eq!(
        decision["action"], "Update",
        "corrected under the default Revert: {json}"
    );
    assert_eq!(decision["reason"], "HostObjectEdited");
    assert_eq!(
        decision["drift"]["fields"],
        serde_json::json!([{"change": "Changed", "path": "data.mode"},
                           {"change": "Added", "path": "data.debug"}]),
        "{json}"
    );
    let table = run(&edited, "table");
    assert!(
        table.contains("update   Drifted") && table.contains("HostObjectEdited"),
        "{table}"
    );
    let yaml = run(&edited, "yaml");
    assert!(
        yaml.contains(
            "data.mode changed (by whom is not known: the object came without managedFields)"
        ),
        "the message says what differs: {yaml}"
    );
    let json = first(run(&synced, "json"));
    assert_eq!(
        json["decision"]["outcome"], "Synced",
        "as tenantplane left it: {json}"
    );
    assert!(json["decision"].get("drift").is_none(), "{json}");
}
