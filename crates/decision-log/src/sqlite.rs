//! The embedded backend: one SQLite file in WAL mode with `synchronous = FULL` by default, so
//! a commit is on disk when it returns ([`Durability`]). One writer connection (appends take
//! the database write lock with `BEGIN IMMEDIATE`, which also serializes writers in other
//! processes) and a small pool of reader connections, which WAL lets read while the writer
//! commits. rusqlite is synchronous: every call runs on tokio's blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{Connection, OptionalExtension, Row, ToSql, TransactionBehavior, params_from_iter};
use tenantplane_core::decision::Decision;
use tokio::sync::watch;

use crate::Error;
use crate::chain::{Checkpoint, Entry, Head, Link};
use crate::index::IndexColumns;
use crate::query::{Page, Query};
use crate::sql::{self, SQLITE, SqlRef, SqlValue};
use crate::store::{
    Appended, DecisionStore, Retention, StoreFuture, age_limit, head_signal, retention_cutoff,
};

impl ToSql for SqlRef<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            SqlRef::Int(i) => ToSqlOutput::Owned(Value::Integer(i)),
            SqlRef::Text(s) => ToSqlOutput::Borrowed(s.into()),
        })
    }
}

impl ToSql for SqlValue {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            SqlValue::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            SqlValue::Text(s) => ToSqlOutput::Borrowed(s.as_str().into()),
        })
    }
}

/// The writer's page cache, in KiB (`cache_size` takes a negative number for KiB).
const WRITER_CACHE_KIB: i64 = -65_536;

/// WAL pages after which a commit copies the WAL back into the database.
const WAL_CHECKPOINT_PAGES: i64 = 16_384;

/// How a SQLite commit is made durable (`PRAGMA synchronous`), chosen by the URL's
/// `?synchronous=full|normal`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous = FULL`, the default: every commit fsyncs the WAL, so a batch whose
    /// `append` returned survives a crash of the process, of the OS and a power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: the WAL is fsynced only at checkpoints. A committed batch
    /// survives a crash of the process (the kill -9 test) but an OS crash or power loss may lose
    /// the last batches, while host objects written after them carry their ids: the log stays
    /// a verifiable chain, only shorter than what the syncer acted on.
    Normal,
}

impl Durability {
    /// Reads the `synchronous` URL parameter.
    pub fn parse(value: &str) -> Option<Durability> {
        match value.to_ascii_lowercase().as_str() {
            "full" => Some(Durability::Full),
            "normal" => Some(Durability::Normal),
            _ => None,
        }
    }

    fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// A decision log in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    head: watch::Sender<u64>,
}

impl SqliteStore {
    /// Opens (creating if needed) the log at `path` and migrates its schema; commits are
    /// [`Durability::Full`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, Durability::Full).await
    }

    /// Opens the log at `path`, its commits made durable as `durability` says.
    pub async fn open_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        blocking(move || {
            let mut writer = connect(&path)?;
            writer.pragma_update(None, "synchronous", durability.pragma())?;
            // Appends dirty index pages all over the file; a larger cache keeps them in
            // memory between batches instead of reading them back, and a larger WAL lets a
            // page changed by many batches be copied back to the database once per checkpoint.
            writer.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
            writer.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)?;
            migrate(&mut writer)?;
            let head = read_head(&writer)?;
            Ok(SqliteStore {
                inner: Arc::new(Inner {
                    path,
                    writer: Mutex::new(writer),
                    readers: Mutex::new(Vec::new()),
                    head: head_signal(head.sequence),
                }),
            })
        })
        .await
    }

    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let inner = self.inner.clone();
        blocking(move || {
            let mut conn = inner.writer.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut conn)
        })
        .await
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let inner = self.inner.clone();
        blocking(move || {
            let pooled = inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            let conn = match pooled {
                Some(c) => c,
                None => connect(&inner.path)?,
            };
            let result = f(&conn);
            inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
            result
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

fn connect(path: &Path) -> Result<Connection, Error> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", Durability::Full.pragma())?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(sql::CREATE_MIGRATIONS, [])?;
    let applied: Vec<i64> = tx
        .prepare(sql::APPLIED_MIGRATIONS)?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for (version, name, statements) in sql::migrations(&SQLITE) {
        if applied.contains(&version) {
            continue;
        }
        for statement in &statements {
            tx.execute(statement, [])?;
        }
        tx.execute(
            sql::RECORD_MIGRATION,
            params_from_iter([SqlValue::Int(version), name.into()]),
        )?;
    }
    tx.commit()?;
    Ok(())
}

fn read_head(conn: &Connection) -> Result<Head, Error> {
    Ok(conn.prepare_cached(sql::SELECT_HEAD)?.query_row([], |r| {
        Ok(Head {
            sequence: sql::to_u64(r.get(0)?),
            hash: r.get(1)?,
        })
    })?)
}

fn link_from(r: &Row<'_>) -> rusqlite::Result<Link> {
    Ok(Link {
        sequence: sql::to_u64(r.get(0)?),
        prev_hash: r.get(1)?,
        hash: r.get(2)?,
        record: r.get(3)?,
    })
}

fn index_from(r: &Row<'_>, first: usize) -> rusqlite::Result<IndexColumns> {
    Ok(IndexColumns {
        id: r.get(first)?,
        time_us: r.get(first + 1)?,
        tenant: r.get(first + 2)?,
        subject_kind: r.get(first + 3)?,
        subject_namespace: r.get(first + 4)?,
        subject_name: r.get(first + 5)?,
        host_kind: r.get(first + 6)?,
        host_namespace: r.get(first + 7)?,
        host_name: r.get(first + 8)?,
        outcome: r.get(first + 9)?,
        rule: r.get(first + 10)?,
    })
}

fn links(conn: &Connection, sql: &str, values: Vec<SqlValue>) -> Result<Vec<Link>, Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params_from_iter(values), link_from)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn read_checkpoints(conn: &Connection) -> Result<Vec<Checkpoint>, Error> {
    let mut stmt = conn.prepare_cached(sql::SELECT_CHECKPOINTS)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
        ))
    })?;
    rows.map(|r| {
        let (n, t, next, anchor, removed, prev, hash) = r?;
        sql::checkpoint_from(n, &t, next, anchor, removed, prev, hash)
    })
    .collect()
}

fn optional_i64(conn: &Connection, sql: &str, values: Vec<SqlValue>) -> Result<Option<i64>, Error> {
    Ok(conn
        .query_row(sql, params_from_iter(values), |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()?
        .flatten())
}

/// Inserts the rows of `batch` through one cached statement.
fn insert_rows(conn: &Connection, batch: &sql::ChainedBatch<'_>) -> Result<(), Error> {
    let mut insert = conn.prepare_cached(&sql::insert_decision())?;
    for i in 0..batch.len() {
        insert.execute(params_from_iter(batch.row(i)))?;
    }
    Ok(())
}

impl DecisionStore for SqliteStore {
    fn append_batch(&self, decisions: Vec<Decision>) -> StoreFuture<'_, Vec<Appended>> {
        Box::pin(async move {
            let (appended, head) = self
                .write(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let batch = sql::chain_batch(read_head(&tx)?, &decisions)?;
                    insert_rows(&tx, &batch)?;
                    tx.prepare_cached(sql::UPDATE_HEAD)?
                        .execute(params_from_iter(sql::head_row(&batch.head)))?;
                    tx.commit()?;
                    Ok((batch.appended, batch.head.sequence))
                })
                .await?;
            self.inner.head.send_replace(head);
            Ok(appended)
        })
    }

    fn get(&self, id: String) -> StoreFuture<'_, Option<Entry>> {
        Box::pin(async move {
            let found = self
                .read(move |conn| links(conn, sql::GET_BY_ID, vec![SqlValue::Text(id)]))
                .await?;
            found.into_iter().next().map(Entry::try_from).transpose()
        })
    }

    fn query(&self, query: Query) -> StoreFuture<'_, Page> {
        Box::pin(async move {
            let (text, values) = sql::select_query(&query);
            let found = self.read(move |conn| links(conn, &text, values)).await?;
            crate::query::page(found, query.effective_limit())
        })
    }

    fn links_after(&self, sequence: u64, limit: u32) -> StoreFuture<'_, Vec<Link>> {
        Box::pin(self.read(move |conn| {
            links(
                conn,
                sql::LINKS_AFTER,
                vec![
                    SqlValue::Int(sql::to_i64(sequence)),
                    SqlValue::Int(i64::from(limit)),
                ],
            )
        }))
    }

    fn indexed_links_after(
        &self,
        sequence: u64,
        limit: u32,
    ) -> StoreFuture<'_, Vec<(Link, IndexColumns)>> {
        Box::pin(self.read(move |conn| {
            let mut stmt = conn.prepare_cached(sql::INDEXED_LINKS_AFTER)?;
            let values = [
                SqlValue::Int(sql::to_i64(sequence)),
                SqlValue::Int(i64::from(limit)),
            ];
            let rows = stmt.query_map(params_from_iter(values), |r| {
                Ok((link_from(r)?, index_from(r, 4)?))
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        }))
    }

    fn head(&self) -> StoreFuture<'_, Head> {
        Box::pin(self.read(read_head))
    }

    fn checkpoints(&self) -> StoreFuture<'_, Vec<Checkpoint>> {
        Box::pin(self.read(read_checkpoints))
    }

    fn retain(&self, retention: Retention, now: Timestamp) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let head = read_head(&tx)?;
            let first = optional_i64(&tx, sql::FIRST_SEQ, vec![])?.map(sql::to_u64);
            let aged = match age_limit(&retention, now) {
                Some(t) => optional_i64(&tx, sql::LAST_SEQ_BEFORE, vec![SqlValue::Int(t)])?
                    .map(sql::to_u64),
                None => None,
            };
            let Some(cut) = retention_cutoff(&retention, head.sequence, first, aged) else {
                return Ok(None);
            };
            let anchor: String = tx.query_row(
                sql::HASH_OF,
                params_from_iter([SqlValue::Int(sql::to_i64(cut))]),
                |r| r.get(0),
            )?;
            let previous = read_checkpoints(&tx)?.pop();
            let removed = tx.execute(
                sql::DELETE_THROUGH,
                params_from_iter([SqlValue::Int(sql::to_i64(cut))]),
            )?;
            let checkpoint =
                Checkpoint::new(previous.as_ref(), now, cut + 1, anchor, removed as u64);
            tx.execute(
                sql::INSERT_CHECKPOINT,
                params_from_iter(sql::checkpoint_row(&checkpoint)),
            )?;
            tx.commit()?;
            Ok(Some(checkpoint))
        }))
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.head.subscribe()
    }
}
