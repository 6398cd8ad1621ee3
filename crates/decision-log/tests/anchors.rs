//! Signed checkpoints against the attacks an auditor cares about, on real SQLite files: tail
//! truncation with the head moved back, a link deleted, a record edited, the chain rewritten
//! and rehashed, an older copy of the database restored (alone, and appended to), checkpoints
//! checked with the wrong key or edited; retention and the offline export keep working.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tenantplane_decision_log::chain::link_hash;
use tenantplane_decision_log::export::{export_jsonl, verify_jsonl_against};
use tenantplane_decision_log::signed::{self, Published};
use tenantplane_decision_log::{
    Break, DecisionStore, Retention, SignedCheckpoint, VerifyReport, verify_against,
};

struct Log {
    path: PathBuf,
    store: Arc<dyn DecisionStore>,
    key: signed::SigningKey,
    public: signed::VerifyingKey,
    signed: Vec<SignedCheckpoint>,
    _dir: tempfile::TempDir,
}

impl Log {
    async fn new() -> Log {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.db");
        let (private, public) = signed::generate_key().unwrap();
        Log {
            store: open(&path).await,
            path,
            key: signed::signing_key(private.as_bytes(), "key").unwrap(),
            public: signed::verifying_key(public.as_bytes(), "public").unwrap(),
            signed: Vec::new(),
            _dir: dir,
        }
    }

    async fn fill(&self, from: u64, n: u64) {
        self.store
            .append_batch(common::decisions(from, n, 3))
            .await
            .unwrap();
    }

    /// Signs the current head, as the syncer does at its interval.
    async fn checkpoint(&mut self) -> SignedCheckpoint {
        let head = self.store.head().await.unwrap();
        let c = SignedCheckpoint::sign(&self.key, "test-log", &head, Timestamp::now());
        self.signed.push(c.clone());
        c
    }

    fn published(&self) -> Published {
        Published {
            checkpoints: self.signed.clone(),
            keys: vec![self.public],
        }
    }

    async fn verify(&self) -> VerifyReport {
        verify_against(&*self.store, None, &self.published())
            .await
            .unwrap()
    }

    async fn verify_message(&self) -> String {
        let report = self.verify().await;
        match &report.first_break {
            Some(b) => b.to_string(),
            None => panic!("the attack went unnoticed: {report:?}"),
        }
    }

    fn sql(&self, statements: &[&str]) {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        for s in statements {
            conn.execute_batch(s).unwrap();
        }
    }

    /// Rewrites the record of link `at` and recomputes every hash after it and the head: what
    /// someone with write access to the database can do without breaking the chain.
    async fn rewrite_and_rehash(&self, at: u64) {
        let links = self.store.links_after(0, 10_000).await.unwrap();
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        let mut prev = links[at as usize - 2].hash.clone();
        for link in links.iter().filter(|l| l.sequence >= at) {
            let record = if link.sequence == at {
                link.record.replace("decision ", "rewritten decision ")
            } else {
                link.record.clone()
            };
            let hash = link_hash(link.sequence, &prev, &record);
            conn.execute(
                "UPDATE decisions SET prev_hash = ?1, hash = ?2, record = ?3 WHERE seq = ?4",
                rusqlite::params![prev, hash, record, link.sequence as i64],
            )
            .unwrap();
            prev = hash;
        }
        conn.execute("UPDATE chain_head SET hash = ?1 WHERE id = 1", [&prev])
            .unwrap();
    }
}

async fn open(path: &Path) -> Arc<dyn DecisionStore> {
    tenantplane_decision_log::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_untouched_log_matches_its_checkpoints_and_names_the_last_one() {
    let mut log = Log::new().await;
    log.fill(0, 10).await;
    log.checkpoint().await;
    log.fill(10, 10).await;
    let last = log.checkpoint().await;
    log.fill(20, 5).await;
    let report = log.verify().await;
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.signed_checkpoints, 2);
    assert_eq!(report.last_signed, Some(last));
}

#[tokio::test]
async fn tail_truncation_with_the_head_moved_back_is_found() {
    let mut log = Log::new().await;
    log.fill(0, 20).await;
    log.checkpoint().await;
    let head_15: String = log.store.links_after(14, 1).await.unwrap()[0].hash.clone();
    log.sql(&[
        "DELETE FROM decisions WHERE seq > 15",
        &format!("UPDATE chain_head SET seq = 15, hash = '{head_15}' WHERE id = 1"),
    ]);
    // The chain alone still verifies: only the checkpoint shows what is missing.
    assert!(
        tenantplane_decision_log::verify(&*log.store, None)
            .await
            .unwrap()
            .is_ok()
    );
    let message = log.verify_message().await;
    assert!(
        message.starts_with("the log ends at link 15 but the checkpoint signed")
            && message.contains("covers link 20: 5 links were removed from the tail"),
        "{message}"
    );
}

#[tokio::test]
async fn a_deleted_or_edited_link_is_found() {
    let mut log = Log::new().await;
    log.fill(0, 20).await;
    log.checkpoint().await;
    log.sql(&["DELETE FROM decisions WHERE seq = 8"]);
    assert_eq!(
        log.verify().await.first_break,
        Some(Break::SequenceGap {
            expected: 8,
            found: 9
        })
    );

    let mut log = Log::new().await;
    log.fill(0, 20).await;
    log.checkpoint().await;
    log.sql(&[
        "UPDATE decisions SET record = replace(record, 'decision 4', 'decision 5') WHERE seq = 5",
    ]);
    assert_eq!(
        log.verify_message().await,
        "link 5 does not match its hash (record edited)"
    );
}

#[tokio::test]
async fn a_rewritten_and_rehashed_chain_is_found() {
    let mut log = Log::new().await;
    log.fill(0, 20).await;
    let signed = log.checkpoint().await;
    log.rewrite_and_rehash(12).await;
    assert!(
        tenantplane_decision_log::verify(&*log.store, None)
            .await
            .unwrap()
            .is_ok()
    );
    let message = log.verify_message().await;
    assert!(
        message.starts_with("link 20 has hash ")
            && message.contains(&format!("says {}", signed.hash))
            && message.ends_with("the chain was rewritten at or before link 20 and rehashed"),
        "{message}"
    );

    // Deleting a link in the middle and renumbering and rehashing the rest shows the same way.
    let mut log = Log::new().await;
    log.fill(0, 20).await;
    log.checkpoint().await;
    log.fill(20, 5).await;
    log.checkpoint().await;
    log.sql(&[
        "DELETE FROM decisions WHERE seq = 10",
        "UPDATE decisions SET seq = seq - 1 WHERE seq > 10",
        "UPDATE chain_head SET seq = 24 WHERE id = 1",
    ]);
    log.rewrite_and_rehash(10).await;
    assert!(
        tenantplane_decision_log::verify(&*log.store, None)
            .await
            .unwrap()
            .is_ok()
    );
    let message = log.verify_message().await;
    assert!(message.starts_with("link 20 has hash "), "{message}");
}

#[tokio::test]
async fn an_older_copy_of_the_database_is_found() {
    let mut log = Log::new().await;
    log.fill(0, 10).await;
    log.checkpoint().await;
    // The copy an attacker keeps (the store's WAL checkpointed into the file first).
    let old = log.path.with_extension("old");
    log.sql(&["PRAGMA wal_checkpoint(TRUNCATE)"]);
    std::fs::copy(&log.path, &old).unwrap();
    log.fill(10, 10).await;
    log.checkpoint().await;

    // Restored alone: it ends before the later checkpoint.
    let replayed = Log {
        store: open(&old).await,
        path: old.clone(),
        ..Log::new().await
    };
    let published = log.published();
    let report = verify_against(&*replayed.store, None, &published)
        .await
        .unwrap();
    let message = report.first_break.unwrap().to_string();
    assert!(
        message.starts_with("the log ends at link 10 but the checkpoint signed")
            && message.ends_with("or an older copy of the log was restored"),
        "{message}"
    );

    // Restored and appended to: the syncer's next checkpoint goes back, or (once past the
    // earlier one) gives its link another hash.
    replayed.fill(100, 3).await;
    let mut after = log.signed.clone();
    let head = replayed.store.head().await.unwrap();
    after.push(SignedCheckpoint::sign(
        &log.key,
        "test-log",
        &head,
        Timestamp::now(),
    ));
    let report = verify_against(
        &*replayed.store,
        None,
        &Published {
            checkpoints: after,
            keys: vec![log.public],
        },
    )
    .await
    .unwrap();
    let message = report.first_break.unwrap().to_string();
    assert!(
        message.starts_with("the log went back: the checkpoint signed")
            && message.contains("covers link 20")
            && message.contains("only link 13"),
        "{message}"
    );
    replayed.fill(200, 10).await;
    let head = replayed.store.head().await.unwrap();
    let mut forked = log.signed.clone();
    forked.push(SignedCheckpoint::sign(
        &log.key,
        "test-log",
        &head,
        Timestamp::now(),
    ));
    let report = verify_against(
        &*replayed.store,
        None,
        &Published {
            checkpoints: forked,
            keys: vec![log.public],
        },
    )
    .await
    .unwrap();
    let message = report.first_break.unwrap().to_string();
    assert!(message.starts_with("link 20 has hash "), "{message}");
}

#[tokio::test]
async fn checkpoints_checked_with_the_wrong_key_or_edited_are_refused() {
    let mut log = Log::new().await;
    log.fill(0, 5).await;
    let c = log.checkpoint().await;
    let (_, other) = signed::generate_key().unwrap();
    let other = signed::verifying_key(other.as_bytes(), "other").unwrap();
    let report = verify_against(
        &*log.store,
        None,
        &Published {
            checkpoints: log.signed.clone(),
            keys: vec![other],
        },
    )
    .await
    .unwrap();
    let message = report.first_break.unwrap().to_string();
    assert!(
        message.contains(&format!(
            "is signed by key {}, which is not among",
            c.key_id
        )) && message.contains("the wrong public key was given"),
        "{message}"
    );

    // A checkpoint moved back to hide a truncation no longer matches its signature.
    log.signed[0].sequence = 3;
    let message = log.verify_message().await;
    assert!(
        message.contains("does not match its signature: the checkpoint was edited or forged"),
        "{message}"
    );
}

#[tokio::test]
async fn retention_and_the_offline_export_keep_checkpoints_verifiable() {
    let mut log = Log::new().await;
    log.fill(0, 10).await;
    log.checkpoint().await;
    log.fill(10, 10).await;
    log.checkpoint().await;
    log.fill(20, 10).await;
    log.store
        .retain(
            Retention {
                max_age: None,
                max_links: Some(15),
            },
            Timestamp::now(),
        )
        .await
        .unwrap()
        .unwrap();
    let report = log.verify().await;
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        (report.signed_before_retention, report.signed_checkpoints),
        (1, 1)
    );

    // Offline: the export and the checkpoints written to files.
    let mut export = Vec::new();
    export_jsonl(&*log.store, &mut export).await.unwrap();
    let checkpoints = signed::to_jsonl(&log.signed).unwrap();
    let read = Published {
        checkpoints: signed::read_jsonl(checkpoints.as_bytes()).unwrap(),
        keys: vec![log.public],
    };
    assert!(
        verify_jsonl_against(&export[..], None, &read)
            .unwrap()
            .is_ok()
    );

    // An export cut short at link 18, with its Head line rewritten: found by the checkpoint.
    let text = String::from_utf8(export).unwrap();
    let mut cut = String::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        match v["kind"].as_str() {
            Some("Link") if v["sequence"] == 18 => {
                cut.push_str(&format!("{line}\n"));
                let head = serde_json::json!({"kind": "Head", "sequence": 18, "hash": v["hash"]});
                cut.push_str(&format!("{head}\n"));
                break;
            }
            _ => cut.push_str(&format!("{line}\n")),
        }
    }
    let report = verify_jsonl_against(cut.as_bytes(), None, &read).unwrap();
    let message = report.first_break.unwrap().to_string();
    assert!(
        message.starts_with("the log ends at link 18 but")
            && message.contains("covers link 20: 2 links were removed from the tail"),
        "{message}"
    );
}
