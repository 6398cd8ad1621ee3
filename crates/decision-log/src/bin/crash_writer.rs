//! Test helper for `tests/crash.rs`: appends batches to the log at the URL given as the first
//! argument, `BATCH` decisions at a time (second argument), and prints the head sequence after
//! each commit, until it is killed.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Write;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), tenantplane_decision_log::Error> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .expect("usage: decision-log-crash-writer URL BATCH");
    let batch: u64 = args.next().and_then(|b| b.parse().ok()).unwrap_or(500);
    let store = tenantplane_decision_log::open(&url).await?;
    let mut next = 0;
    loop {
        let appended = store
            .append_batch(common::decisions(next, batch, 3))
            .await?;
        next += batch;
        if let Some(last) = appended.last() {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", last.sequence)?;
            out.flush()?;
        }
    }
}
