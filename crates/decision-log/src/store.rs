//! The store interface both backends implement, chosen by URL, and what is built on it once
//! for both: verification and reading entries.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tenantplane_core::decision::Decision;
use tokio::sync::watch;

use crate::Error;
use crate::chain::{Checkpoint, Entry, Head, Link, Record, Verifier, VerifyReport};
use crate::index::IndexColumns;
use crate::postgres::PostgresStore;
use crate::query::{Page, Query};
use crate::signed::Published;
use crate::sqlite::{Durability, SqliteStore};

/// What a store method returns.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, Error>>;

/// A committed batch on its way to disk: resolves with where its decisions landed once they are
/// durable, or with the error that kept them from it (see
/// [`DecisionStore::append_records_pipelined`]).
pub type Durable = BoxFuture<'static, Result<Vec<Appended>, Error>>;

/// Where an appended decision landed in the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Appended {
    /// The decision id.
    pub id: String,
    /// Its sequence number.
    pub sequence: u64,
    /// Its link hash.
    pub hash: String,
}

/// How much history to keep. Links older than `max_age`, and links beyond the newest
/// `max_links`, are removed; a [`Checkpoint`] records where the chain was cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Remove decisions taken longer ago than this.
    pub max_age: Option<Duration>,
    /// Keep at most this many links.
    pub max_links: Option<u64>,
}

/// A decision log store. Appends are atomic per batch and serialized across writers (the
/// chain head row is locked in the transaction), so sequences are gap-free in commit order.
///
/// Methods return boxed futures so that the store can be shared as `Arc<dyn DecisionStore>`.
pub trait DecisionStore: Send + Sync + fmt::Debug {
    /// Appends `records` in order, in one transaction; resolves once it is committed.
    fn append_records(&self, records: Vec<Record>) -> StoreFuture<'_, Vec<Appended>>;
    /// Appends `records` like [`DecisionStore::append_records`], in two steps: resolves once
    /// the store can take the next batch, with a [`Durable`] that resolves once this one is
    /// durable. Nothing may act on the decisions before the [`Durable`] resolves. SQLite
    /// makes a batch durable while it commits the next one; a store whose commit is durable
    /// when it returns (PostgreSQL) resolves after it, with the [`Durable`] already resolved.
    fn append_records_pipelined(&self, records: Vec<Record>) -> StoreFuture<'_, Durable> {
        let appended = self.append_records(records);
        Box::pin(async move {
            let appended = appended.await?;
            Ok(Box::pin(std::future::ready(Ok(appended))) as Durable)
        })
    }
    /// Appends `decisions` in order, in one transaction; resolves once it is committed.
    fn append_batch(&self, decisions: Vec<Decision>) -> StoreFuture<'_, Vec<Appended>> {
        match decisions.into_iter().map(Record::new).collect() {
            Ok(records) => self.append_records(records),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
    /// The entry recording decision `id`.
    fn get(&self, id: String) -> StoreFuture<'_, Option<Entry>>;
    /// One page of entries matching a filter.
    fn query(&self, query: Query) -> StoreFuture<'_, Page>;
    /// Up to `limit` links after `sequence`, in order (Watch, export).
    fn links_after(&self, sequence: u64, limit: u32) -> StoreFuture<'_, Vec<Link>>;
    /// Like [`DecisionStore::links_after`], with each row's index columns as stored (verify).
    fn indexed_links_after(
        &self,
        sequence: u64,
        limit: u32,
    ) -> StoreFuture<'_, Vec<(Link, IndexColumns)>>;
    /// The recorded chain head.
    fn head(&self) -> StoreFuture<'_, Head>;
    /// The retention checkpoints, oldest first.
    fn checkpoints(&self) -> StoreFuture<'_, Vec<Checkpoint>>;
    /// Applies `retention` as of `now`; returns the checkpoint when something was removed.
    fn retain(&self, retention: Retention, now: Timestamp) -> StoreFuture<'_, Option<Checkpoint>>;
    /// The head sequence after each append made through this store object.
    fn subscribe(&self) -> watch::Receiver<u64>;
    /// The open host actions, oldest first: decisions recording a create, update or delete
    /// that no later decision closes and whose write was not confirmed
    /// ([`DecisionStore::carried_out`]); of one tenant, or of all.
    fn open_actions(&self, tenant: Option<String>) -> StoreFuture<'_, Vec<Entry>>;
    /// Confirms that the host actions of the decisions at `sequences` were carried out: they
    /// are no longer open. Sequences of no open action are ignored. Not durable on its own: a
    /// confirmation lost in a crash leaves the action open, and the syncer settles it from the
    /// host at its next start.
    fn carried_out(&self, sequences: Vec<u64>) -> StoreFuture<'_, ()>;
}

/// Opens the store a URL names, creating or migrating its schema:
/// `sqlite:PATH`, `sqlite://PATH` or a plain file path for SQLite (with
/// `?synchronous=normal` for [`Durability::Normal`]), and `postgres://...` or
/// `postgresql://...` for PostgreSQL.
pub async fn open(url: &str) -> Result<Arc<dyn DecisionStore>, Error> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        let (path, durability) = sqlite_location(url)?;
        Ok(Arc::new(SqliteStore::open_with(path, durability).await?))
    }
}

/// The file and durability a SQLite URL names.
fn sqlite_location(url: &str) -> Result<(&str, Durability), Error> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path.contains("://") {
        return Err(Error::Url(url.to_string()));
    }
    let mut durability = Durability::Full;
    for param in query.split('&').filter(|p| !p.is_empty()) {
        durability = match param.split_once('=') {
            Some(("synchronous", value)) => Durability::parse(value).ok_or_else(|| {
                Error::UrlParameter(format!(
                    "synchronous={value} in {url:?}: use synchronous=full or synchronous=normal"
                ))
            })?,
            _ => {
                return Err(Error::UrlParameter(format!(
                    "{param:?} in {url:?}: the only SQLite parameter is synchronous=full|normal"
                )));
            }
        };
    }
    Ok((path, durability))
}

/// How many links verification and export read per round trip.
pub(crate) const SCAN_CHUNK: u32 = 10_000;

/// Verifies the whole chain of `store`: the checkpoints, every link from the latest
/// checkpoint on with the index columns of its row, and the recorded head; optionally that
/// link `anchor.sequence` still has the hash an auditor recorded earlier.
pub async fn verify(
    store: &dyn DecisionStore,
    anchor: Option<Head>,
) -> Result<VerifyReport, Error> {
    verify_against(store, anchor, &Published::default()).await
}

/// [`verify`], and against signed checkpoints published outside the database: it detects links
/// removed from the tail, and a chain rewritten and rehashed, up to the furthest checkpoint.
/// Checkpoints signed after verification read the head are not held against it.
pub async fn verify_against(
    store: &dyn DecisionStore,
    anchor: Option<Head>,
    published: &Published,
) -> Result<VerifyReport, Error> {
    // The head first: links appended while verifying are past it and left for next time.
    let head = store.head().await?;
    let checkpoints = store.checkpoints().await?;
    let mut verifier = Verifier::new(&checkpoints, anchor)
        .with_checkpoints(published.checkpoints.clone(), &published.keys);
    let mut after = checkpoints
        .last()
        .map_or(0, |c| c.next_sequence.saturating_sub(1));
    while !verifier.is_broken() && after < head.sequence {
        let rows = store.indexed_links_after(after, SCAN_CHUNK).await?;
        let Some((last, _)) = rows.last() else { break };
        after = last.sequence;
        for (link, index) in rows.iter().take_while(|(l, _)| l.sequence <= head.sequence) {
            verifier.push_indexed(link, index);
        }
    }
    Ok(verifier.finish(Some(&head)))
}

/// Up to `limit` entries after `sequence`, in order.
pub async fn entries_after(
    store: &dyn DecisionStore,
    sequence: u64,
    limit: u32,
) -> Result<Vec<Entry>, Error> {
    store
        .links_after(sequence, limit)
        .await?
        .into_iter()
        .map(Entry::try_from)
        .collect()
}

/// The last sequence retention removes, if any: everything older than the age cut, and
/// everything before the newest `max_links`.
pub(crate) fn retention_cutoff(
    retention: &Retention,
    head: u64,
    first: Option<u64>,
    last_older_than_max_age: Option<u64>,
) -> Option<u64> {
    let first = first?;
    let by_count = retention
        .max_links
        .and_then(|keep| head.checked_sub(keep))
        .filter(|&cut| cut > 0);
    let cut = by_count.max(last_older_than_max_age)?;
    (cut >= first).then_some(cut)
}

/// The time before which retention removes decisions.
pub(crate) fn age_limit(retention: &Retention, now: Timestamp) -> Option<i64> {
    let age = retention.max_age?;
    let micros = i64::try_from(age.as_micros()).unwrap_or(i64::MAX);
    Some(now.as_microsecond().saturating_sub(micros))
}

/// The head signal a store publishes after each append.
pub(crate) fn head_signal(initial: u64) -> watch::Sender<u64> {
    watch::Sender::new(initial)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_the_file_and_durability() {
        let at = |url| sqlite_location(url).map_err(|e| e.to_string());
        assert_eq!(
            at("sqlite:/var/log.db"),
            Ok(("/var/log.db", Durability::Full))
        );
        assert_eq!(
            at("sqlite:///abs/log.db?synchronous=NORMAL"),
            Ok(("/abs/log.db", Durability::Normal))
        );
        assert_eq!(
            at("log.db?synchronous=full"),
            Ok(("log.db", Durability::Full))
        );
        let bad = at("sqlite:log.db?synchronous=off").unwrap_err();
        assert!(
            bad.contains("use synchronous=full or synchronous=normal"),
            "{bad}"
        );
        let unknown = at("sqlite:log.db?cache=big").unwrap_err();
        assert!(unknown.contains("\"cache=big\""), "{unknown}");
        assert!(at("sqlite:").is_err());
    }

    #[test]
    fn retention_keeps_the_newest_links() {
        let keep_10 = Retention {
            max_age: None,
            max_links: Some(10),
        };
        assert_eq!(retention_cutoff(&keep_10, 100, Some(1), None), Some(90));
        assert_eq!(retention_cutoff(&keep_10, 100, Some(91), None), None);
        assert_eq!(retention_cutoff(&keep_10, 5, Some(1), None), None);
        assert_eq!(retention_cutoff(&keep_10, 100, None, None), None);
        // The stricter of the two limits wins.
        assert_eq!(retention_cutoff(&keep_10, 100, Some(1), Some(95)), Some(95));
        assert_eq!(
            retention_cutoff(&Retention::default(), 100, Some(1), None),
            None
        );
    }
}
