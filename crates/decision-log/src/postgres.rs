//! The shared backend: PostgreSQL, for several syncer replicas writing one log.
//!
//! Appends lock the single chain head row (`SELECT ... FOR UPDATE`) in their transaction, so
//! replicas append one batch at a time and sequences are gap-free in commit order: a reader
//! that has seen link `n` committed never later sees a link below `n` appear. A batch is
//! streamed in by one binary `COPY`. Reads go through a second connection, so a long query
//! never waits behind an append.

use std::pin::pin;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Mutex, watch};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, NoTls, Row, Transaction};

use crate::Error;
use crate::chain::{Checkpoint, Entry, Head, Link, Record};
use crate::index::IndexColumns;
use crate::query::{Page, Query};
use crate::sql::{self, POSTGRES, SqlRef, SqlValue};
use crate::store::{
    Appended, DecisionStore, Retention, StoreFuture, age_limit, head_signal, retention_cutoff,
};

/// Serializes schema migrations between replicas starting at the same time.
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7370616330)";

/// A decision log in a PostgreSQL database.
#[derive(Debug)]
pub struct PostgresStore {
    writer: Mutex<Client>,
    reader: Client,
    head: watch::Sender<u64>,
}

type Params = Vec<Box<dyn ToSql + Sync + Send>>;

fn params(values: Vec<SqlValue>) -> Params {
    values
        .into_iter()
        .map(|v| -> Box<dyn ToSql + Sync + Send> {
            match v {
                SqlValue::Int(i) => Box::new(i),
                SqlValue::Text(s) => Box::new(s),
            }
        })
        .collect()
}

/// The column types of [`sql::copy_decisions`], in [`sql::ChainedBatch::row`] order: `seq`
/// and `time_us` are BIGINT, everything else TEXT.
const ROW_TYPES: [Type; sql::ROW_VALUES] = [
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
];

/// Streams the rows of `batch` into the table with one binary `COPY`.
async fn copy_rows(tx: &Transaction<'_>, batch: &sql::ChainedBatch<'_>) -> Result<(), Error> {
    let sink = tx.copy_in(&sql::copy_decisions()).await?;
    let mut writer = pin!(BinaryCopyInWriter::new(sink, &ROW_TYPES));
    for i in 0..batch.len() {
        let row = batch.row(i);
        let values: [&(dyn ToSql + Sync); sql::ROW_VALUES] =
            std::array::from_fn(|c| match &row[c] {
                SqlRef::Int(n) => n as &(dyn ToSql + Sync),
                SqlRef::Text(t) => t as &(dyn ToSql + Sync),
            });
        writer.as_mut().write(&values).await?;
    }
    writer.finish().await?;
    Ok(())
}

fn refs(params: &Params) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

impl PostgresStore {
    /// Connects to `url` (a libpq-style URL), creating or migrating the schema.
    pub async fn connect(url: &str) -> Result<PostgresStore, Error> {
        let mut writer = client(url).await?;
        let reader = client(url).await?;
        migrate(&mut writer).await?;
        let head = read_head(&reader, sql::SELECT_HEAD).await?;
        Ok(PostgresStore {
            writer: Mutex::new(writer),
            reader,
            head: head_signal(head.sequence),
        })
    }

    async fn links(&self, sql: &str, values: Vec<SqlValue>) -> Result<Vec<Link>, Error> {
        let p = params(values);
        let rows = self.reader.query(sql, &refs(&p)).await?;
        rows.iter().map(link_from).collect()
    }
}

async fn client(url: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        // The connection ends with an error when the server goes away; the client's next call
        // reports it to the caller, so there is nothing more to do with it here.
        let _ = connection.await;
    });
    Ok(client)
}

async fn migrate(client: &mut Client) -> Result<(), Error> {
    let tx = client.transaction().await?;
    tx.execute(MIGRATION_LOCK, &[]).await?;
    tx.execute(sql::CREATE_MIGRATIONS, &[]).await?;
    let applied: Vec<i64> = tx
        .query(sql::APPLIED_MIGRATIONS, &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (version, name, statements) in sql::migrations(&POSTGRES) {
        if applied.contains(&version) {
            continue;
        }
        for statement in &statements {
            tx.execute(statement.as_str(), &[]).await?;
        }
        let p = params(vec![SqlValue::Int(version), name.into()]);
        tx.execute(sql::RECORD_MIGRATION, &refs(&p)).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Reads the head with `statement` (locking it inside an append or retention).
async fn read_head(client: &impl GenericClient, statement: &str) -> Result<Head, Error> {
    let row = client.query_one(statement, &[]).await?;
    Ok(Head {
        sequence: sql::to_u64(row.try_get(0)?),
        hash: row.try_get(1)?,
    })
}

fn link_from(r: &Row) -> Result<Link, Error> {
    Ok(Link {
        sequence: sql::to_u64(r.try_get(0)?),
        prev_hash: r.try_get(1)?,
        hash: r.try_get(2)?,
        record: r.try_get(3)?,
    })
}

fn index_from(r: &Row, first: usize) -> Result<IndexColumns, Error> {
    Ok(IndexColumns {
        id: r.try_get(first)?,
        time_us: r.try_get(first + 1)?,
        tenant: r.try_get(first + 2)?,
        subject_kind: r.try_get(first + 3)?,
        subject_namespace: r.try_get(first + 4)?,
        subject_name: r.try_get(first + 5)?,
        host_kind: r.try_get(first + 6)?,
        host_namespace: r.try_get(first + 7)?,
        host_name: r.try_get(first + 8)?,
        outcome: r.try_get(first + 9)?,
        rule: r.try_get(first + 10)?,
    })
}

async fn read_checkpoints(client: &impl GenericClient) -> Result<Vec<Checkpoint>, Error> {
    client
        .query(sql::SELECT_CHECKPOINTS, &[])
        .await?
        .iter()
        .map(|r| {
            sql::checkpoint_from(
                r.try_get(0)?,
                r.try_get::<_, &str>(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
                r.try_get(5)?,
                r.try_get(6)?,
            )
        })
        .collect()
}

async fn optional_i64(
    client: &impl GenericClient,
    sql: &str,
    values: Vec<SqlValue>,
) -> Result<Option<i64>, Error> {
    let p = params(values);
    Ok(client.query_one(sql, &refs(&p)).await?.try_get(0)?)
}

impl DecisionStore for PostgresStore {
    fn append_records(&self, records: Vec<Record>) -> StoreFuture<'_, Vec<Appended>> {
        Box::pin(async move {
            let mut writer = self.writer.lock().await;
            let tx = writer.transaction().await?;
            let batch =
                sql::chain_batch(read_head(&tx, &sql::lock_head(&POSTGRES)).await?, &records);
            if batch.len() > 0 {
                copy_rows(&tx, &batch).await?;
                change_actions(&tx, &batch, &records).await?;
            }
            let head = params(sql::head_row(&batch.head));
            tx.execute(sql::UPDATE_HEAD, &refs(&head)).await?;
            tx.commit().await?;
            self.head.send_replace(batch.head.sequence);
            Ok(batch.appended)
        })
    }

    fn get(&self, id: String) -> StoreFuture<'_, Option<Entry>> {
        Box::pin(async move {
            let found = self.links(sql::GET_BY_ID, vec![SqlValue::Text(id)]).await?;
            found.into_iter().next().map(Entry::try_from).transpose()
        })
    }

    fn query(&self, query: Query) -> StoreFuture<'_, Page> {
        Box::pin(async move {
            let (text, values) = sql::select_query(&POSTGRES, &query);
            let found = self.links(&text, values).await?;
            crate::query::page(found, query.effective_limit())
        })
    }

    fn links_after(&self, sequence: u64, limit: u32) -> StoreFuture<'_, Vec<Link>> {
        Box::pin(self.links(
            sql::LINKS_AFTER,
            vec![
                SqlValue::Int(sql::to_i64(sequence)),
                SqlValue::Int(i64::from(limit)),
            ],
        ))
    }

    fn indexed_links_after(
        &self,
        sequence: u64,
        limit: u32,
    ) -> StoreFuture<'_, Vec<(Link, IndexColumns)>> {
        Box::pin(async move {
            let p = params(vec![
                SqlValue::Int(sql::to_i64(sequence)),
                SqlValue::Int(i64::from(limit)),
            ]);
            let rows = self
                .reader
                .query(sql::INDEXED_LINKS_AFTER, &refs(&p))
                .await?;
            rows.iter()
                .map(|r| Ok((link_from(r)?, index_from(r, 4)?)))
                .collect()
        })
    }

    fn head(&self) -> StoreFuture<'_, Head> {
        Box::pin(read_head(&self.reader, sql::SELECT_HEAD))
    }

    fn checkpoints(&self) -> StoreFuture<'_, Vec<Checkpoint>> {
        Box::pin(read_checkpoints(&self.reader))
    }

    fn retain(&self, retention: Retention, now: Timestamp) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(async move {
            let mut writer = self.writer.lock().await;
            let tx = writer.transaction().await?;
            let head = read_head(&tx, &sql::lock_head(&POSTGRES)).await?;
            let first = optional_i64(&tx, sql::FIRST_SEQ, vec![])
                .await?
                .map(sql::to_u64);
            let aged = match age_limit(&retention, now) {
                Some(t) => optional_i64(&tx, sql::LAST_SEQ_BEFORE, vec![SqlValue::Int(t)])
                    .await?
                    .map(sql::to_u64),
                None => None,
            };
            let Some(cut) = retention_cutoff(&retention, head.sequence, first, aged) else {
                return Ok(None);
            };
            let cut_param = params(vec![SqlValue::Int(sql::to_i64(cut))]);
            let anchor: String = tx
                .query_one(sql::HASH_OF, &refs(&cut_param))
                .await?
                .try_get(0)?;
            let previous = read_checkpoints(&tx).await?.pop();
            let removed = tx.execute(sql::DELETE_THROUGH, &refs(&cut_param)).await?;
            tx.execute(sql::SETTLE_THROUGH, &refs(&cut_param)).await?;
            let checkpoint = Checkpoint::new(previous.as_ref(), now, cut + 1, anchor, removed);
            let row = params(sql::checkpoint_row(&checkpoint));
            tx.execute(sql::INSERT_CHECKPOINT, &refs(&row)).await?;
            tx.commit().await?;
            Ok(Some(checkpoint))
        })
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.head.subscribe()
    }

    fn open_actions(&self, tenant: Option<String>) -> StoreFuture<'_, Vec<Entry>> {
        Box::pin(async move {
            let found = match tenant {
                Some(t) => {
                    self.links(sql::OPEN_ACTIONS_OF_TENANT, vec![SqlValue::Text(t)])
                        .await?
                }
                None => self.links(sql::OPEN_ACTIONS, vec![]).await?,
            };
            found.into_iter().map(Entry::try_from).collect()
        })
    }

    fn carried_out(&self, sequences: Vec<u64>) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let sequences: Vec<i64> = sequences.into_iter().map(sql::to_i64).collect();
            let writer = self.writer.lock().await;
            writer.execute(SETTLE_ACTIONS, &[&sequences]).await?;
            Ok(())
        })
    }
}

/// Opens many actions in one statement: sequences and tenants as arrays.
const OPEN_ACTIONS_UNNEST: &str = "INSERT INTO open_actions (seq, tenant) \
     SELECT * FROM UNNEST($1::bigint[], $2::text[])";

/// Settles many actions in one statement.
const SETTLE_ACTIONS: &str = "DELETE FROM open_actions WHERE seq = ANY($1::bigint[])";

/// Settles the actions of decisions closed by later ones, by decision id.
const CLOSE_ACTIONS: &str = "DELETE FROM open_actions \
     WHERE seq IN (SELECT seq FROM decisions WHERE id = ANY($1::text[]))";

/// Opens the actions a batch records and settles those it closes: one statement each, so a
/// batch costs two round trips more at most, not one per decision.
async fn change_actions(
    tx: &Transaction<'_>,
    batch: &sql::ChainedBatch<'_>,
    records: &[Record],
) -> Result<(), Error> {
    let (mut seqs, mut tenants, mut closed) = (vec![], vec![], vec![]);
    for (record, appended) in records.iter().zip(&batch.appended) {
        match sql::action_change(record) {
            Some(sql::ActionChange::Open(tenant)) => {
                seqs.push(sql::to_i64(appended.sequence));
                tenants.push(tenant);
            }
            Some(sql::ActionChange::Close(id)) => closed.push(id),
            None => {}
        }
    }
    if !seqs.is_empty() {
        tx.execute(OPEN_ACTIONS_UNNEST, &[&seqs, &tenants]).await?;
    }
    if !closed.is_empty() {
        tx.execute(CLOSE_ACTIONS, &[&closed]).await?;
    }
    Ok(())
}
