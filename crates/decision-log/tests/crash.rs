//! kill -9 of a writer in the middle of its batches leaves a log that verifies and holds only
//! whole batches: every batch the writer reported committed, and no partial one.

mod common;
#[path = "common/postgres.rs"]
mod pg;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use tenantplane_decision_log::{open, verify};

const BATCH: u64 = 500;

/// Starts the writer on `url`, lets it commit a few batches, SIGKILLs it while it is writing
/// the next one, and checks what is left.
async fn kill_writer_mid_batch(url: &str) {
    let base = open(url).await.unwrap().head().await.unwrap().sequence;
    let mut child = Command::new(env!("CARGO_BIN_EXE_decision-log-crash-writer"))
        .args([url, &BATCH.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the writer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut reported = 0;
    for _ in 0..5 {
        reported = lines.next().unwrap().unwrap().parse::<u64>().unwrap();
    }
    // The writer starts its next batch at once; give it part of a batch's time.
    std::thread::sleep(Duration::from_millis(3));
    child.kill().expect("SIGKILL the writer"); // Child::kill is SIGKILL on Unix.
    child.wait().unwrap();

    let store = open(url).await.unwrap();
    let report = verify(&*store, None).await.unwrap();
    assert!(report.is_ok(), "{url}: {report:?}");
    let head = report.head.sequence;
    assert!(
        head >= reported,
        "a reported commit was lost: {head} < {reported}"
    );
    assert_eq!(
        (head - base) % BATCH,
        0,
        "a partial batch was recorded: {base}..{head}"
    );
    assert_eq!(report.links, head);

    // The log takes appends again after the crash, chained to what survived.
    let more = store
        .append_batch(common::decisions(head, 3, 3))
        .await
        .unwrap();
    assert_eq!(more[0].sequence, head + 1);
    assert!(verify(&*store, None).await.unwrap().is_ok());
}

#[tokio::test]
async fn sqlite_writer_killed_mid_batch_leaves_a_verifiable_log() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("crash.db").display());
    for _ in 0..2 {
        kill_writer_mid_batch(&url).await;
    }
}

#[tokio::test]
async fn postgres_writer_killed_mid_batch_leaves_a_verifiable_log() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    for _ in 0..2 {
        kill_writer_mid_batch(&url).await;
    }
}
