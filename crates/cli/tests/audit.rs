//! `tenantplane audit verify|export|retain` and `tenantplane decisions --db` on a real SQLite
//! log: exit statuses, the first broken link, and the output formats.

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::jiff::Timestamp;
use tenantplane_core::decision::{Decision, HostAction, HostTarget, Outcome, Subject};

fn decision(i: usize) -> Decision {
    Decision {
        id: tenantplane_core::decision::new_decision_id(),
        time: Timestamp::now(),
        tenant: format!("tenant-{}", i % 2),
        subject: Subject {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: format!("web-{i}"),
            uid: String::new(),
            resource_version: String::new(),
        },
        target: Some(HostTarget {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: format!("tenant-{}", i % 2),
            name: format!("web-{i}-x-default"),
        }),
        outcome: if i.is_multiple_of(3) {
            Outcome::Rejected
        } else {
            Outcome::Synced
        },
        action: HostAction::Create,
        policy: None,
        profile: None,
        reason: "Test".into(),
        message: format!("decision {i}"),
        field_path: None,
        stripped_keys: vec![],
        input_digest: "sha256:00".into(),
        mapping_version: "v1".into(),
        component: "test".into(),
        component_version: "0".into(),
        trace_id: None,
        span_id: None,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}

fn make_log(path: &Path, n: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = tenantplane_decision_log::open(&path.display().to_string())
            .await
            .unwrap();
        store
            .append_batch((0..n).map(decision).collect())
            .await
            .unwrap();
    });
}

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .env_remove("TENANTPLANE_DECISION_LOG")
        .env_remove("TENANTPLANE_DECISIONS_SERVER")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn audit_verify_export_and_retain_on_a_sqlite_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("decisions.db");
    make_log(&db, 12);
    let db = db.display().to_string();

    let ok = tenantplane(&["audit", "verify", "--db", &db]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(
        stdout(&ok).starts_with("ok: 12 links verified"),
        "{}",
        stdout(&ok)
    );

    let export = dir.path().join("log.jsonl").display().to_string();
    let out = tenantplane(&["audit", "export", "--db", &db, "-f", &export]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        tenantplane(&["audit", "verify", "--file", &export])
            .status
            .success()
    );

    // Edit the message of link 4 in the export: verify names it and exits 1.
    let text = std::fs::read_to_string(&export).unwrap();
    std::fs::write(&export, text.replace("decision 3\"", "decision 33\"")).unwrap();
    let broken = tenantplane(&["audit", "verify", "--file", &export]);
    assert_eq!(broken.status.code(), Some(1));
    assert!(
        stdout(&broken).contains("link 4 does not match its hash"),
        "{}",
        stdout(&broken)
    );

    let reports = tenantplane(&["audit", "export", "--db", &db, "--format", "policy-report"]);
    let yaml = stdout(&reports);
    assert_eq!(yaml.matches("kind: PolicyReport").count(), 2, "{yaml}");

    let retained = tenantplane(&["audit", "retain", "--db", &db, "--max-links", "5"]);
    assert!(
        stdout(&retained).starts_with("removed 7 decisions"),
        "{retained:?}"
    );
    let after = tenantplane(&["audit", "verify", "--db", &db]);
    assert!(after.status.success(), "{after:?}");

    let missing = tenantplane(&["audit", "verify", "--db", "/nonexistent/decisions.db"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn decisions_filters_a_sqlite_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("decisions.db");
    make_log(&db, 12);
    let db = db.display().to_string();

    let json = tenantplane(&[
        "decisions",
        "--db",
        &db,
        "--tenant",
        "tenant-0",
        "--outcome",
        "Rejected",
        "-o",
        "json",
    ]);
    assert!(json.status.success(), "{json:?}");
    let entries: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    // tenant-0 holds 0, 2, ..., 10; Rejected are multiples of 3: 0 and 6, oldest first.
    let messages: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["decision"]["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, vec!["decision 0", "decision 6"]);

    let table = tenantplane(&["decisions", "--db", &db, "--subject", "Pod/default/web-5"]);
    let text = stdout(&table);
    assert!(text.starts_with("SEQ"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("tenant-1/web-5-x-default"), "{text}");
}

/// Signs the head of the log at `path` with the private key file `key` and adds it to the
/// checkpoints file `out`, as the syncer publishes and `audit checkpoints` keeps them.
fn sign_head(path: &Path, key: &Path, out: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use tenantplane_decision_log::signed;
        let store = tenantplane_decision_log::open(&path.display().to_string())
            .await
            .unwrap();
        let key = signed::signing_key(&std::fs::read(key).unwrap(), "key").unwrap();
        let head = store.head().await.unwrap();
        let c =
            tenantplane_decision_log::SignedCheckpoint::sign(&key, "test", &head, Timestamp::now());
        let mut all = std::fs::read_to_string(out).unwrap_or_default();
        all.push_str(&signed::to_jsonl(&[c]).unwrap());
        std::fs::write(out, all).unwrap();
    });
}

#[test]
fn audit_verify_checks_signed_checkpoints_offline() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("decisions.db");
    let (key, public, checkpoints, export) = (
        dir.path().join("checkpoint.key"),
        dir.path().join("checkpoint.pub"),
        dir.path().join("checkpoints.jsonl"),
        dir.path().join("log.jsonl"),
    );
    let s = |p: &Path| p.display().to_string();
    let o = tenantplane(&[
        "audit",
        "keygen",
        "--private-key",
        &s(&key),
        "--public-key",
        &s(&public),
    ]);
    assert!(o.status.success(), "{o:?}");
    let again = tenantplane(&[
        "audit",
        "keygen",
        "--private-key",
        &s(&key),
        "--public-key",
        &s(&public),
    ]);
    assert!(
        !again.status.success(),
        "an existing key is never overwritten"
    );

    make_log(&db, 20);
    sign_head(&db, &key, &checkpoints);
    let o = tenantplane(&["audit", "export", "--db", &s(&db), "-f", &s(&export)]);
    assert!(o.status.success(), "{o:?}");
    let verify = |file: &Path| {
        tenantplane(&[
            "audit",
            "verify",
            "--file",
            &s(file),
            "--checkpoints",
            &s(&checkpoints),
            "--public-key",
            &s(&public),
        ])
    };
    let ok = verify(&export);
    assert!(ok.status.success(), "{ok:?}");
    assert!(
        stdout(&ok).contains("1 signed checkpoints matched") && stdout(&ok).contains("at link 20"),
        "{}",
        stdout(&ok)
    );

    // The export cut short at link 15, its Head line rewritten to match.
    let text = std::fs::read_to_string(&export).unwrap();
    let mut cut = String::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        cut.push_str(line);
        cut.push('\n');
        if v["kind"] == "Link" && v["sequence"] == 15 {
            let head = serde_json::json!({"kind": "Head", "sequence": 15, "hash": v["hash"]});
            cut.push_str(&format!("{head}\n"));
            break;
        }
    }
    let truncated = dir.path().join("truncated.jsonl");
    std::fs::write(&truncated, cut).unwrap();
    let broken = verify(&truncated);
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
    assert!(
        stdout(&broken).contains("5 links were removed from the tail"),
        "{}",
        stdout(&broken)
    );

    // Checkpoints without the public key that signed them are refused, not ignored.
    let o = tenantplane(&[
        "audit",
        "verify",
        "--file",
        &s(&export),
        "--checkpoints",
        &s(&checkpoints),
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--public-key"),
        "{o:?}"
    );
}

#[test]
fn decisions_show_what_closes_a_recorded_action_and_what_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("decisions.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (create, other) = (decision(1), decision(3));
    let mut closing = decision(1);
    closing.outcome = Outcome::Failed;
    closing.reason = "NotCarriedOut".into();
    closing.closes = Some(create.id.clone());
    runtime.block_on(async {
        let store = tenantplane_decision_log::open(&db.display().to_string())
            .await
            .unwrap();
        store
            .append_batch(vec![create.clone(), other.clone(), closing])
            .await
            .unwrap();
    });
    let db = db.display().to_string();
    let table = stdout(&tenantplane(&["decisions", "--db", &db]));
    assert!(
        table.contains(&format!("NotCarriedOut (closes {})", create.id)),
        "{table}"
    );
    // The create is closed; the other one (tenant-1) is still open.
    let open = stdout(&tenantplane(&[
        "decisions",
        "--db",
        &db,
        "--open",
        "-o",
        "json",
    ]));
    let ids: Vec<String> = open
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["decision"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, vec![other.id.clone()], "{open}");
    let none = stdout(&tenantplane(&[
        "decisions",
        "--db",
        &db,
        "--open",
        "--tenant",
        "tenant-0",
    ]));
    assert_eq!(none.trim(), "no open host actions");
}

#[test]
fn decisions_stop_quietly_when_their_reader_goes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("decisions.db");
    make_log(&db, 2000);
    // `tenantplane decisions | head -1`: the pipe closes after the first line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "decisions",
            "--db",
            &db.display().to_string(),
            "--limit",
            "1000",
        ])
        .env_remove("TENANTPLANE_DECISION_LOG")
        .env_remove("TENANTPLANE_DECISIONS_SERVER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.starts_with("SEQ"), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
