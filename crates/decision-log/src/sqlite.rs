//! The embedded backend: one SQLite file in WAL mode. By default ([`Durability::Full`]) an
//! append is acknowledged only once its batch is on disk, with the fsync pipelined: the writer
//! commits without waiting for the disk and starts the next batch while a durability thread
//! fsyncs the WAL and then acknowledges the batch. One writer connection (appends take the
//! database write lock with `BEGIN IMMEDIATE`, which also serializes writers in other
//! processes) and a small pool of reader connections, which WAL lets read while the writer
//! commits. rusqlite is synchronous: writes run on a thread of their own that owns the writer
//! connection, reads on tokio's blocking pool. A checkpointer
//! thread with its own connection copies the WAL back into the database, so that the writer
//! does not.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, mpsc};

use k8s_openapi::jiff::Timestamp;
use rusqlite::hooks::Wal;
use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{Connection, OptionalExtension, Row, ToSql, TransactionBehavior, params_from_iter};
use tokio::sync::{oneshot, watch};

use crate::Error;
use crate::chain::{Checkpoint, Entry, Head, Link, Record};
use crate::index::IndexColumns;
use crate::query::{Page, Query};
use crate::sql::{self, SQLITE, SqlRef, SqlValue};
use crate::store::{
    Appended, DecisionStore, Durable, Retention, StoreFuture, age_limit, head_signal,
    retention_cutoff,
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

/// The page size of a new log. Larger than SQLite's default 4 KiB: an append inserts into the
/// table and five indexes, and with 8 KiB pages the trees are shallower, pages split half as
/// often and a commit writes half as many WAL frames for the table's rows. Measured at
/// 1,000,000 decisions: 10–20% more appends/s than with 4 KiB (docs/decision-log.md). A log
/// keeps the page size it was created with.
const PAGE_SIZE: i64 = 8_192;

/// WAL bytes not yet copied back after which the checkpointer copies them (32 MiB): a page
/// changed by several batches in between is copied once.
const WAL_PASS_BYTES: i64 = 32 << 20;

/// WAL bytes after which the writer finishes the checkpoint itself after its commit (512 MiB):
/// the bound on the WAL's size, and the disk space it takes besides the database. See
/// [`Checkpointer`]. That checkpoint stalls the writer for 40–70 ms (it copies what the
/// checkpointer has not yet, then fsyncs the WAL and the database), so the bound is set far
/// enough to make it rare: at 128 MiB it came 30 times per million appends and took 10% of the
/// writer's time, at 512 MiB 8 to 13 times and about 2% (0.4–0.5 s of a 20 s run).
const WAL_LIMIT_BYTES: i64 = 16 * WAL_PASS_BYTES;

/// How a SQLite append is made durable, chosen by the URL's `?synchronous=full|normal`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The default: an append is acknowledged only after an fsync of the WAL that started
    /// after its batch committed, so it survives a crash of the process, of the OS and a power
    /// loss, as with `synchronous = FULL`. The writer commits with `synchronous = NORMAL` (no
    /// fsync inside the commit) and a durability thread runs the fsync ([`Acknowledger`]),
    /// while the writer goes on with the next batch.
    #[default]
    Full,
    /// `synchronous = NORMAL`, acknowledged at commit: the WAL is fsynced only at checkpoints.
    /// A committed batch survives a crash of the process (the kill -9 test) but an OS crash or
    /// power loss may lose the last batches, while host objects written after them carry their
    /// ids: the log stays a verifiable chain, only shorter than what the syncer acted on.
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
}

/// Makes the WAL's committed frames durable: `fdatasync` of the `-wal` file, or a test's stand-in.
type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// A committed batch waiting for the fsync that makes it durable, and whom to tell.
type Pending = (Vec<Appended>, oneshot::Sender<Result<Vec<Appended>, Error>>);

/// The durability thread's side of [`Durability::Full`]: after each commit the writer hands it
/// the batch; the thread takes every batch queued, fsyncs the WAL once for all of them and then
/// acknowledges them. A batch is acknowledged only by an fsync that started after its commit
/// (it was queued before the fsync began), so its frames, written to the WAL by the commit,
/// are on disk. Once an fsync fails, that batch and every later one fail with
/// [`Error::NotDurable`] and the writer takes no more appends: the kernel may have dropped
/// pages of the WAL that a later successful fsync would not write again.
#[derive(Clone, Debug)]
struct Acknowledger {
    queue: mpsc::Sender<Pending>,
    failed: Arc<Mutex<Option<String>>>,
}

impl Acknowledger {
    /// Starts the durability thread, which fsyncs with `sync`.
    fn start(mut sync: SyncWal, wal: PathBuf) -> Result<Acknowledger, Error> {
        let (queue, pending) = mpsc::channel::<Pending>();
        let failed = Arc::new(Mutex::new(None));
        let acknowledger = Acknowledger {
            queue,
            failed: failed.clone(),
        };
        std::thread::Builder::new()
            .name("decision-log-durable".into())
            .spawn(move || {
                while let Ok(first) = pending.recv() {
                    let batches: Vec<Pending> =
                        std::iter::once(first).chain(pending.try_iter()).collect();
                    // Not locked during the fsync: the writer reads it before every batch.
                    let mut failure = failed.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if failure.is_none()
                        && let Err(e) = sync()
                    {
                        let why = format!(
                            "fsync of {} failed: {e}; the decisions of this batch may not be on \
                             disk and are not acknowledged, and the log takes no more appends \
                             until it is reopened",
                            wal.display()
                        );
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                        failure = Some(why);
                    }
                    for (appended, reply) in batches {
                        let _ = reply.send(match &failure {
                            None => Ok(appended),
                            Some(why) => Err(Error::NotDurable(why.clone())),
                        });
                    }
                }
            })
            .map_err(|e| Error::Task(format!("starting the durability thread: {e}")))?;
        Ok(acknowledger)
    }

    /// The error every append gets once an fsync has failed.
    fn refusal(&self) -> Option<Error> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.clone().map(Error::NotDurable)
    }

    /// Hands a committed batch to the thread; the receiver resolves once it is durable.
    fn committed(
        &self,
        appended: Vec<Appended>,
    ) -> oneshot::Receiver<Result<Vec<Appended>, Error>> {
        let (reply, durable) = oneshot::channel();
        // If the thread has stopped, the reply is dropped and the batch fails as not durable.
        let _ = self.queue.send((appended, reply));
        durable
    }
}

/// The production [`SyncWal`]: `fdatasync` of the database's `-wal` file through a handle of
/// its own. SQLite reuses that file (from its beginning after a checkpoint copied all of it,
/// never replacing it while a connection is open), so the one handle covers every commit.
/// The directory is fsynced once, so that the file's entry is on disk too.
fn wal_file_sync(wal: &Path) -> std::io::Result<SyncWal> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(wal)?;
    if let Some(dir) = wal.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(Box::new(move || file.sync_data()))
}

/// A decision log in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

/// Work for the writer thread.
type WriteJob = Box<dyn FnOnce(&mut Connection) + Send>;

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The writer thread's queue; the thread ends, closing the connection, when it is dropped.
    writer: std::sync::mpsc::Sender<WriteJob>,
    readers: Mutex<Vec<Connection>>,
    head: watch::Sender<u64>,
    checkpointer: Arc<Checkpointer>,
    /// The durability thread ([`Durability::Full`]); none when commits are acknowledged as
    /// they return ([`Durability::Normal`]).
    acknowledger: Option<Acknowledger>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.checkpointer.close();
    }
}

/// Copies the WAL back into the database on its own thread and connection, so that the
/// writer spends its time on appends. The writer reports the WAL's size after each commit
/// (SQLite's WAL hook, which replaces its automatic checkpoint); each time [`WAL_PASS_BYTES`]
/// more wait to be copied, the thread runs a `PASSIVE` checkpoint, which copies them
/// while the writer goes on appending.
///
/// The WAL starts over from its beginning only at a transaction that starts after a checkpoint
/// copied all of it, and the writer, always busy under load, is in its next transaction before
/// such a checkpoint ends. So once the WAL reaches [`WAL_LIMIT_BYTES`], the writer runs one
/// `PASSIVE` checkpoint itself right after its commit (as SQLite's automatic checkpoint
/// does), which copies only what the thread has not yet copied; its next transaction starts
/// the WAL over. That keeps the WAL bounded, also when the thread's checkpoints fail.
#[derive(Debug)]
struct Checkpointer {
    state: Mutex<WalState>,
    changed: Condvar,
    /// [`WAL_LIMIT_BYTES`] in pages of the log.
    limit_pages: i64,
}

#[derive(Debug)]
struct WalState {
    /// Pages in the WAL after the last commit.
    pages: i64,
    /// Pages the thread's last checkpoint copied from the WAL as it is now (0 after the WAL
    /// started over).
    copied: i64,
    closed: bool,
    /// [`WAL_PASS_BYTES`] in pages of the log.
    pass_pages: i64,
}

impl WalState {
    fn pass_due(&self) -> bool {
        self.pages - self.copied >= self.pass_pages
    }
}

impl Checkpointer {
    /// Starts the thread on a connection of its own to `path`, a log of `page_size` pages.
    fn start(path: &Path, page_size: i64) -> Result<Arc<Checkpointer>, Error> {
        let conn = connect(path)?;
        let checkpointer = Arc::new(Checkpointer {
            state: Mutex::new(WalState {
                pages: 0,
                copied: 0,
                closed: false,
                pass_pages: WAL_PASS_BYTES / page_size,
            }),
            changed: Condvar::new(),
            limit_pages: WAL_LIMIT_BYTES / page_size,
        });
        let shared = checkpointer.clone();
        std::thread::Builder::new()
            .name("decision-log-checkpoint".into())
            .spawn(move || shared.run(&conn))
            .map_err(|e| Error::Task(format!("starting the checkpointer thread: {e}")))?;
        Ok(checkpointer)
    }

    /// Called by the writer after each commit with the WAL's size in pages; true when the
    /// writer is to finish the checkpoint itself.
    fn committed(&self, pages: i32) -> bool {
        let pages = i64::from(pages);
        let mut state = self.lock();
        if pages < state.pages {
            state.copied = 0;
        }
        state.pages = pages;
        if state.pass_due() {
            self.changed.notify_one();
        }
        pages >= self.limit_pages
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, conn: &Connection) {
        loop {
            {
                let mut state = self.lock();
                while !state.pass_due() && !state.closed {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                if state.closed {
                    return;
                }
            }
            // (busy, pages in the WAL, pages copied back). A checkpoint that fails, or finds
            // the writer checkpointing (busy), is tried again after the next commit; the
            // writer's own checkpoint at WAL_LIMIT_BYTES bounds the WAL meanwhile.
            let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            });
            let mut state = self.lock();
            match done {
                // The WAL may have started over meanwhile: then its pages are fewer.
                Ok((0, pages, copied)) if pages <= state.pages => state.copied = copied,
                // Not copied: wait for the next commit's report.
                _ => state.copied = state.pages,
            }
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the log at `path` and migrates its schema; commits are
    /// [`Durability::Full`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, Durability::Full).await
    }

    /// Opens the log at `path`, its appends made durable as `durability` says.
    pub async fn open_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<SqliteStore, Error> {
        SqliteStore::start(path.as_ref().to_path_buf(), durability, wal_file_sync).await
    }

    /// Opens the log at `path`; with [`Durability::Full`], `sync_wal` makes the WAL file
    /// (named by its argument) a way to fsync it.
    async fn start(
        path: PathBuf,
        durability: Durability,
        sync_wal: impl FnOnce(&Path) -> std::io::Result<SyncWal> + Send + 'static,
    ) -> Result<SqliteStore, Error> {
        blocking(move || {
            let mut writer = connect(&path)?;
            // No fsync inside a commit: with Full the durability thread makes batches durable.
            writer.pragma_update(None, "synchronous", "NORMAL")?;
            // Appends dirty index pages all over the file; a larger cache keeps them in
            // memory between batches instead of reading them back.
            writer.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
            migrate(&mut writer)?;
            let head = read_head(&writer)?;
            let acknowledger = match durability {
                Durability::Full => {
                    // The file exists from the first transaction on a WAL-mode database.
                    let mut wal = path.clone().into_os_string();
                    wal.push("-wal");
                    let wal = PathBuf::from(wal);
                    let sync = sync_wal(&wal).map_err(|e| {
                        Error::NotDurable(format!("opening {} to fsync it: {e}", wal.display()))
                    })?;
                    Some(Acknowledger::start(sync, wal)?)
                }
                Durability::Normal => None,
            };
            let page_size = writer.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            let checkpointer = Checkpointer::start(&path, page_size)?;
            let reports = checkpointer.clone();
            writer.wal_hook(Some(move |wal: &mut Wal, pages: i32| {
                if reports.committed(pages) {
                    // Like SQLite's automatic checkpoint, whose failures are not reported
                    // either: the commit has happened, and an error returned here would make
                    // it look failed. The next commit tries again.
                    let _ = wal.checkpoint();
                }
                Ok(())
            }))?;
            let (jobs, queue) = mpsc::channel::<WriteJob>();
            std::thread::Builder::new()
                .name("decision-log-writer".into())
                .spawn(move || {
                    for job in queue {
                        job(&mut writer);
                    }
                })
                .map_err(|e| Error::Task(format!("starting the writer thread: {e}")))?;
            Ok(SqliteStore {
                inner: Arc::new(Inner {
                    path,
                    writer: jobs,
                    readers: Mutex::new(Vec::new()),
                    head: head_signal(head.sequence),
                    checkpointer,
                    acknowledger,
                }),
            })
        })
        .await
    }

    /// Runs `f` on the writer thread, which owns the writer connection: one thread always,
    /// so its pages and statements stay in one core's caches.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (reply, done) = oneshot::channel();
        self.inner
            .writer
            .send(Box::new(move |conn| {
                let _ = reply.send(f(conn));
            }))
            .map_err(|_| writer_stopped())?;
        done.await.map_err(|_| writer_stopped())?
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

fn writer_stopped() -> Error {
    Error::Task("the SQLite writer thread has stopped".into())
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
    // Only a new, empty file takes it, and only before it is switched to WAL.
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
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

/// Records chained and inserted together: a chunk's records, read by the hashing, are still in
/// the core's cache when they are bound (hashing the whole batch first left them to be fetched
/// again, a tenth of the writer's time in the copy SQLite makes of a bound text).
const CHAIN_CHUNK: usize = 32;

/// Chains `records` after `head` and inserts their rows through one cached statement, a chunk
/// at a time; returns where they landed and the new head.
fn chain_and_insert(
    conn: &Connection,
    mut head: Head,
    records: &[Record],
) -> Result<(Vec<Appended>, Head), Error> {
    let mut insert = conn.prepare_cached(&sql::insert_decision())?;
    let mut appended = Vec::with_capacity(records.len());
    for chunk in records.chunks(CHAIN_CHUNK) {
        let batch = sql::chain_batch(head, chunk);
        for (i, record) in chunk.iter().enumerate() {
            insert.execute(params_from_iter(batch.row(i)))?;
            match sql::action_change(record) {
                Some(sql::ActionChange::Open(tenant)) => {
                    let seq = sql::to_i64(batch.appended[i].sequence);
                    conn.prepare_cached(sql::OPEN_ACTION)?
                        .execute(rusqlite::params![seq, tenant])?;
                }
                Some(sql::ActionChange::Close(id)) => {
                    conn.prepare_cached(sql::CLOSE_ACTION)?.execute([id])?;
                }
                None => {}
            }
        }
        head = batch.head;
        appended.extend(batch.appended);
    }
    Ok((appended, head))
}

impl DecisionStore for SqliteStore {
    fn append_records(&self, records: Vec<Record>) -> StoreFuture<'_, Vec<Appended>> {
        Box::pin(async move { self.append_records_pipelined(records).await?.await })
    }

    fn append_records_pipelined(&self, records: Vec<Record>) -> StoreFuture<'_, Durable> {
        Box::pin(async move {
            let acknowledger = self.inner.acknowledger.clone();
            let (durable, head, records) = self
                .write(move |conn| {
                    if let Some(refusal) = acknowledger.as_ref().and_then(Acknowledger::refusal) {
                        return Err(refusal);
                    }
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let (appended, head) = chain_and_insert(&tx, read_head(&tx)?, &records)?;
                    tx.prepare_cached(sql::UPDATE_HEAD)?
                        .execute(params_from_iter(sql::head_row(&head)))?;
                    tx.commit()?;
                    // Handed over on this thread, so batches reach the durability thread in
                    // commit order.
                    let durable = match acknowledger {
                        Some(acknowledger) => acknowledger.committed(appended),
                        None => {
                            let (durable, now) = oneshot::channel();
                            let _ = durable.send(Ok(appended));
                            now
                        }
                    };
                    Ok((durable, head.sequence, records))
                })
                .await?;
            // Freed here rather than on the writer thread, which is free for the next batch.
            drop(records);
            let inner = self.inner.clone();
            let durable: Durable = Box::pin(async move {
                let appended = durable
                    .await
                    .map_err(|_| Error::NotDurable("the durability thread has stopped".into()))??;
                // Batches become durable in commit order, but their waiters may run in any.
                inner.head.send_if_modified(|signalled| {
                    let newer = head > *signalled;
                    if newer {
                        *signalled = head;
                    }
                    newer
                });
                Ok(appended)
            });
            Ok(durable)
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
            let (text, values) = sql::select_query(&SQLITE, &query);
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
            tx.execute(
                sql::SETTLE_THROUGH,
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

    fn open_actions(&self, tenant: Option<String>) -> StoreFuture<'_, Vec<Entry>> {
        Box::pin(async move {
            let found = self
                .read(move |conn| match tenant {
                    Some(t) => links(conn, sql::OPEN_ACTIONS_OF_TENANT, vec![SqlValue::Text(t)]),
                    None => links(conn, sql::OPEN_ACTIONS, vec![]),
                })
                .await?;
            found.into_iter().map(Entry::try_from).collect()
        })
    }

    fn carried_out(&self, sequences: Vec<u64>) -> StoreFuture<'_, ()> {
        Box::pin(self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut settle = tx.prepare_cached(sql::SETTLE_ACTION)?;
                for seq in sequences {
                    settle.execute([sql::to_i64(seq)])?;
                }
            }
            tx.commit()?;
            Ok(())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{Filter, ObjectFilter};

    /// The plan SQLite picks for `filter`, newest first, one line per step.
    fn plan(conn: &Connection, filter: Filter) -> String {
        let mut query = Query::new(filter, 50);
        query.newest_first = true;
        let (text, values) = sql::select_query(&SQLITE, &query);
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {text}")).unwrap();
        let steps = stmt
            .query_map(params_from_iter(values), |r| r.get::<_, String>(3))
            .unwrap();
        steps.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// A store whose WAL "fsync" is `sync`.
    async fn with_sync(path: &Path, sync: SyncWal) -> SqliteStore {
        SqliteStore::start(path.to_path_buf(), Durability::Full, move |_| Ok(sync))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn new_logs_have_8_kib_pages_and_older_files_keep_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let page_size = |path: &Path| -> i64 {
            let conn = Connection::open(path).unwrap();
            conn.query_row("PRAGMA page_size", [], |r| r.get(0))
                .unwrap()
        };
        let new = dir.path().join("new.db");
        let store = SqliteStore::open(&new).await.unwrap();
        store
            .append_batch(crate::test_decisions::decisions(0, 3, 2))
            .await
            .unwrap();
        assert_eq!(page_size(&new), PAGE_SIZE);
        // A file created in WAL mode with SQLite's default page size, as logs were before.
        let old = dir.path().join("old.db");
        let conn = Connection::open(&old).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute("CREATE TABLE created_before (x)", []).unwrap();
        drop(conn);
        let store = SqliteStore::open(&old).await.unwrap();
        store
            .append_batch(crate::test_decisions::decisions(0, 3, 2))
            .await
            .unwrap();
        assert_eq!(store.head().await.unwrap().sequence, 3);
        assert_eq!(page_size(&old), 4096);
    }

    #[tokio::test]
    async fn an_append_is_acknowledged_only_after_the_wal_fsync_the_next_batch_commits_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (release, gate) = mpsc::channel::<()>();
        let store = with_sync(
            &dir.path().join("log.db"),
            Box::new(move || {
                gate.recv().map_err(std::io::Error::other)?;
                Ok(())
            }),
        )
        .await;
        let watch = store.subscribe();
        let appending = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .append_batch(crate::test_decisions::decisions(0, 3, 2))
                    .await
            }
        });
        // Committed (readers see it) while its fsync is held back...
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.head().await.unwrap().sequence < 3 {
            assert!(std::time::Instant::now() < deadline, "never committed");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // ...but neither acknowledged nor announced to watchers.
        assert!(!appending.is_finished(), "acknowledged before the fsync");
        assert_eq!(*watch.borrow(), 0);
        // The writer does not wait for that fsync: the next batch commits meanwhile.
        let next = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            store.append_records_pipelined(
                crate::test_decisions::decisions(3, 2, 2)
                    .into_iter()
                    .map(Record::new)
                    .collect::<Result<_, _>>()
                    .unwrap(),
            ),
        )
        .await
        .expect("the next batch waited for the previous one's fsync")
        .unwrap();
        assert_eq!(store.head().await.unwrap().sequence, 5);
        assert!(!appending.is_finished(), "acknowledged before the fsync");
        // One fsync for each batch, or one for both.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let appended = appending.await.unwrap().unwrap();
        assert_eq!(
            appended.iter().map(|a| a.sequence).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(next.await.unwrap().len(), 2);
        assert_eq!(*watch.borrow(), 5);
    }

    #[tokio::test]
    async fn a_failed_fsync_fails_the_batch_and_every_later_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let store = with_sync(
            &path,
            Box::new(|| Err(std::io::Error::other("injected: device gone"))),
        )
        .await;
        let (appender, task) =
            crate::Appender::spawn(Arc::new(store.clone()), crate::AppenderConfig::default());
        let failed = appender
            .append(crate::test_decisions::decision(0, 1))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            failed.contains("decisions not durable: fsync of")
                && failed.contains("log.db-wal failed: injected: device gone")
                && failed.contains("not acknowledged"),
            "{failed}"
        );
        // No later append is acknowledged either, nor even committed.
        let later = store
            .append_batch(crate::test_decisions::decisions(1, 2, 1))
            .await
            .unwrap_err();
        assert!(matches!(later, Error::NotDurable(_)), "{later}");
        assert_eq!(store.head().await.unwrap().sequence, 1);
        drop(appender);
        task.await.unwrap();
        // The committed but unacknowledged batch is a whole link: the log verifies.
        drop(store);
        let reopened = SqliteStore::open(&path).await.unwrap();
        let report = crate::verify(&reopened, None).await.unwrap();
        assert!(report.is_ok() && report.links == 1, "{report:?}");
    }

    #[tokio::test]
    async fn subject_queries_read_the_tenant_subject_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        SqliteStore::open(&path).await.unwrap();
        let conn = Connection::open(&path).unwrap();
        let subject = ObjectFilter::parse("ConfigMap/default/cm-2");
        let across = plan(
            &conn,
            Filter {
                subject: subject.clone(),
                ..Filter::default()
            },
        );
        // The page's sequences from the index alone (sorting sequences, not rows), then
        // their rows by sequence; no step reads the whole table.
        assert!(
            across.contains("USING COVERING INDEX decisions_tenant_subject (tenant=? AND subject_name=? AND subject_namespace=?)")
                && across.contains("SEARCH decisions USING INTEGER PRIMARY KEY (rowid=?)")
                && !across.lines().any(|step| step == "SCAN decisions"),
            "{across}"
        );
        let of_tenant = plan(
            &conn,
            Filter {
                tenant: Some("acme".into()),
                subject,
                ..Filter::default()
            },
        );
        assert!(
            of_tenant.contains("USING INDEX decisions_tenant_subject (tenant=? AND subject_name=? AND subject_namespace=?)")
                && !of_tenant.contains("TEMP B-TREE"),
            "{of_tenant}"
        );
    }
}
