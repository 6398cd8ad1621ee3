//! Group commit: many callers append concurrently, one task commits their decisions in batches.
//!
//! [`Appender::append`] resolves only after the batch holding the decision is durable, so the
//! syncer can write the decision id on a host object knowing the decision is recorded. While one
//! batch commits, the next one fills up from the queue: under load batches grow to
//! [`AppenderConfig::max_batch`]; when idle a lone decision commits at once, with no timer to
//! wait for. The task gathers the next batch as soon as the store has committed one
//! ([`DecisionStore::append_records_pipelined`]); that batch's callers are answered when it is
//! durable (for SQLite, after the fsync that runs while the next batch commits).
//!
//! [`Appender::carried_out`] confirms that a decision's host action was carried out; the task
//! hands the confirmations gathered to the store after each batch (or at once when idle), so a
//! confirmation never waits for an fsync and never holds up an append.

use std::sync::{Arc, Mutex};

use tenantplane_core::decision::Decision;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::Error;
use crate::chain::Record;
use crate::store::{Appended, DecisionStore};

/// Tuning of the appender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppenderConfig {
    /// Most decisions in one transaction.
    pub max_batch: usize,
    /// Requests that may wait in the queue before `append` waits for room.
    pub queue: usize,
}

impl Default for AppenderConfig {
    fn default() -> Self {
        AppenderConfig {
            max_batch: 2048,
            queue: 65_536,
        }
    }
}

type Reply = oneshot::Sender<Result<Vec<Appended>, Arc<Error>>>;

/// A handle to the group-commit task; cheap to clone. The task ends when every handle is
/// dropped, after committing what was queued.
#[derive(Clone, Debug)]
pub struct Appender {
    queue: mpsc::Sender<(Vec<Record>, Reply)>,
    confirmations: Arc<Confirmations>,
}

/// Sequences of decisions whose host action was carried out, waiting for the task.
#[derive(Debug, Default)]
struct Confirmations {
    sequences: Mutex<Vec<u64>>,
    queued: Notify,
}

impl Confirmations {
    fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.sequences.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Appender {
    /// Starts the group-commit task on `store`.
    pub fn spawn(
        store: Arc<dyn DecisionStore>,
        config: AppenderConfig,
    ) -> (Appender, JoinHandle<()>) {
        let (queue, rx) = mpsc::channel(config.queue.max(1));
        let confirmations = Arc::new(Confirmations::default());
        let task = tokio::spawn(run(
            store,
            rx,
            confirmations.clone(),
            config.max_batch.max(1),
        ));
        (
            Appender {
                queue,
                confirmations,
            },
            task,
        )
    }

    /// Confirms that the host action of the decision at `sequence` was carried out (its write
    /// succeeded): it is no longer open. Returns at once; the task hands it to the store after
    /// the batch committing, or on its own when no append is waiting.
    pub fn carried_out(&self, sequence: u64) {
        self.confirmations
            .sequences
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sequence);
        self.confirmations.queued.notify_one();
    }

    /// Appends one decision; resolves once it is durable.
    pub async fn append(&self, decision: Decision) -> Result<Appended, Error> {
        let mut appended = self.append_all(vec![decision]).await?;
        appended.pop().ok_or(Error::Closed)
    }

    /// Appends decisions, kept together and in order in one transaction; resolves once they
    /// are durable. Their records are serialized here, on the caller's task, so that the
    /// group-commit task only chains and inserts them.
    pub async fn append_all(&self, decisions: Vec<Decision>) -> Result<Vec<Appended>, Error> {
        let records = decisions
            .into_iter()
            .map(Record::new)
            .collect::<Result<_, _>>()?;
        let (reply, done) = oneshot::channel();
        self.queue
            .send((records, reply))
            .await
            .map_err(|_| Error::Closed)?;
        done.await.map_err(|_| Error::Closed)?.map_err(Error::Batch)
    }
}

async fn run(
    store: Arc<dyn DecisionStore>,
    mut rx: mpsc::Receiver<(Vec<Record>, Reply)>,
    confirmations: Arc<Confirmations>,
    max_batch: usize,
) {
    // Batches committed and waiting to be durable; awaited before the task ends.
    let mut acknowledging: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            first = rx.recv() => first,
            () = confirmations.queued.notified() => {
                confirm(&*store, confirmations.take()).await;
                continue;
            }
        };
        let Some(first) = first else { break };
        let mut requests = vec![first];
        let mut size = requests[0].0.len();
        while size < max_batch {
            match rx.try_recv() {
                Ok(next) => {
                    size += next.0.len();
                    requests.push(next);
                }
                Err(_) => break,
            }
        }
        let mut records = Vec::with_capacity(size);
        let mut replies = Vec::with_capacity(requests.len());
        for (batch, reply) in requests {
            replies.push((batch.len(), reply));
            records.extend(batch);
        }
        match store.append_records_pipelined(records).await {
            Ok(durable) => {
                acknowledging.retain(|task| !task.is_finished());
                acknowledging.push(tokio::spawn(async move {
                    acknowledge(durable.await, replies);
                }));
            }
            Err(e) => acknowledge(Err(e), replies),
        }
        confirm(&*store, confirmations.take()).await;
    }
    confirm(&*store, confirmations.take()).await;
    for task in acknowledging {
        let _ = task.await;
    }
}

/// Hands confirmations to the store. One that fails leaves its actions open, which the syncer
/// settles from the host at its next start: logged, not retried.
async fn confirm(store: &dyn DecisionStore, sequences: Vec<u64>) {
    if sequences.is_empty() {
        return;
    }
    if let Err(e) = store.carried_out(sequences).await {
        tracing::warn!(error = %e, "confirming carried-out host actions failed; they stay open");
    }
}

/// Answers a batch's callers, each with its own decisions or the batch's error.
fn acknowledge(outcome: Result<Vec<Appended>, Error>, replies: Vec<(usize, Reply)>) {
    match outcome {
        Ok(appended) => {
            let mut appended = appended.into_iter();
            for (n, reply) in replies {
                // A caller that stopped waiting does not undo its append.
                let _ = reply.send(Ok(appended.by_ref().take(n).collect()));
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for (_, reply) in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
