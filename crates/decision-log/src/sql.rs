//! The SQL both backends run: schema, migrations, statements and the query builder.
//!
//! One text serves SQLite and PostgreSQL. Placeholders are `$1, $2, ...` in order of first
//! appearance: PostgreSQL reads them as positions, SQLite as parameters named `$1`, `$2`, ...
//! numbered in order of appearance, which binds the same values to the same places. The only
//! differences are in [`Dialect`].

use crate::Error;
use crate::chain::{Checkpoint, Head, Record, link_hash};
use crate::index::IndexRef;
use crate::query::{Filter, ObjectFilter, Query};
use crate::store::Appended;

/// What differs between the two SQL dialects.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Column type of the sequence primary key (SQLite's rowid alias is `INTEGER PRIMARY KEY`).
    seq_pk: &'static str,
    /// Suffix that locks the chain head row for the rest of the transaction (SQLite has
    /// already taken the database write lock with `BEGIN IMMEDIATE`).
    lock_head: &'static str,
    /// Whether `decisions_subject` serves queries by subject across tenants. SQLite drops it
    /// (migration 3): it was about a quarter of the insert work of SQLite's single writer,
    /// and reading the tenant-led index once per tenant stays well under the query goal.
    /// PostgreSQL keeps it: its appends were not faster without it, and its query by subject
    /// across tenants read once per tenant took 4 ms at the median and 53 ms at the 99th
    /// percentile on a log of 1,000,000 decisions (a loaded machine), 0.6 and 3 ms with it.
    subject_index: bool,
}

/// SQLite.
pub(crate) const SQLITE: Dialect = Dialect {
    seq_pk: "INTEGER PRIMARY KEY",
    lock_head: "",
    subject_index: false,
};

/// PostgreSQL.
pub(crate) const POSTGRES: Dialect = Dialect {
    seq_pk: "BIGINT PRIMARY KEY",
    lock_head: " FOR UPDATE",
    subject_index: true,
};

/// The table that records which migrations ran.
pub(crate) const CREATE_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS decision_log_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL)";

/// Versions already applied.
pub(crate) const APPLIED_MIGRATIONS: &str = "SELECT version FROM decision_log_migrations";

/// Records a migration.
pub(crate) const RECORD_MIGRATION: &str =
    "INSERT INTO decision_log_migrations (version, name) VALUES ($1, $2)";

/// Schema migrations, in order: (version, name, statements separated by `;`).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "decisions, chain head, checkpoints",
        "CREATE TABLE decisions (
        seq {seq_pk},
        id TEXT NOT NULL UNIQUE,
        time_us BIGINT NOT NULL,
        tenant TEXT NOT NULL,
        subject_kind TEXT NOT NULL,
        subject_namespace TEXT NOT NULL,
        subject_name TEXT NOT NULL,
        host_kind TEXT NOT NULL,
        host_namespace TEXT NOT NULL,
        host_name TEXT NOT NULL,
        outcome TEXT NOT NULL,
        rule TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX decisions_subject ON decisions (subject_name, subject_namespace, seq);
    CREATE INDEX decisions_host ON decisions (host_name, host_namespace, seq);
    CREATE INDEX decisions_tenant ON decisions (tenant, seq);
    CREATE INDEX decisions_time ON decisions (time_us);
    CREATE TABLE chain_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq BIGINT NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO chain_head (id, seq, hash)
        VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
    CREATE TABLE checkpoints (
        number BIGINT PRIMARY KEY,
        time TEXT NOT NULL,
        next_sequence BIGINT NOT NULL,
        anchor_hash TEXT NOT NULL,
        removed BIGINT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    )",
    ),
    (
        2,
        "subject index led by the tenant",
        // The WHERE and ORDER BY of a query by tenant and subject namespace/name (what `why`
        // runs for a tenant object): the newest rows are the first index entries visited. A
        // kind, when given, is checked on those rows; few kinds share a name in a namespace.
        "CREATE INDEX decisions_tenant_subject
        ON decisions (tenant, subject_name, subject_namespace, seq)",
    ),
    (
        3,
        "the subject kind in the tenant-led index; SQLite without the subject index",
        // Where decisions_subject is dropped ([`Dialect::subject_index`]) a query by subject
        // across tenants reads decisions_tenant_subject once per tenant ([`TENANTS`]); with
        // the kind in it, that query picks the sequences of its page from the index alone and
        // reads only their rows.
        "{drop_subject_index}
        DROP INDEX decisions_tenant_subject;
        CREATE INDEX decisions_tenant_subject
        ON decisions (tenant, subject_name, subject_namespace, seq, subject_kind)",
    ),
    (
        4,
        "open host actions",
        // The decisions whose host action is not yet known to be carried out: a row per open
        // action, inserted with the decision, removed when the syncer confirms the write or a
        // later decision closes it. Small (the writes in flight and those confirmed since the
        // last batch) and keyed by sequence alone, so an insert lands on the right edge of one
        // tree and a tenant's rows are found by reading all of them.
        "CREATE TABLE open_actions (
        seq {seq_pk},
        tenant TEXT NOT NULL
    )",
    ),
];

/// The tenants that have decisions, found by a loose index scan of `decisions_tenant`: one
/// index seek per tenant (neither PostgreSQL before 18 nor SQLite without statistics skips
/// through an index by itself). The last row is NULL. A query by subject without a tenant
/// reads `decisions_tenant_subject` once per tenant ([`select_query`]).
const TENANTS: &str = "WITH RECURSIVE tenants (tenant) AS (\
     SELECT (SELECT tenant FROM decisions ORDER BY tenant LIMIT 1) \
     UNION ALL \
     SELECT (SELECT d.tenant FROM decisions d WHERE d.tenant > tenants.tenant \
     ORDER BY d.tenant LIMIT 1) FROM tenants WHERE tenants.tenant IS NOT NULL) ";

/// The migrations for `dialect`: (version, name, statements).
pub(crate) fn migrations(dialect: &Dialect) -> Vec<(i64, &'static str, Vec<String>)> {
    MIGRATIONS
        .iter()
        .map(|(version, name, text)| {
            let statements = text
                .replace("{seq_pk}", dialect.seq_pk)
                .replace(
                    "{drop_subject_index}",
                    if dialect.subject_index {
                        ""
                    } else {
                        "DROP INDEX IF EXISTS decisions_subject;"
                    },
                )
                .split(';')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            (*version, *name, statements)
        })
        .collect()
}

/// Reads the chain head.
pub(crate) const SELECT_HEAD: &str = "SELECT seq, hash FROM chain_head WHERE id = 1";

/// Reads the chain head and locks it for the rest of the transaction.
pub(crate) fn lock_head(dialect: &Dialect) -> String {
    format!("{SELECT_HEAD}{}", dialect.lock_head)
}

/// Moves the chain head.
pub(crate) const UPDATE_HEAD: &str = "UPDATE chain_head SET seq = $1, hash = $2 WHERE id = 1";

/// The columns of a `decisions` row in the order [`ChainedBatch::row`] gives their values.
const DECISION_COLUMNS: &str = "seq, id, time_us, tenant, subject_kind, subject_namespace, \
     subject_name, host_kind, host_namespace, host_name, outcome, rule, prev_hash, hash, record";

/// Values in one `decisions` row.
pub(crate) const ROW_VALUES: usize = 15;

/// Inserts one link (SQLite); values from [`ChainedBatch::row`]. One statement per row: a
/// multi-row `VALUES (...), (...)` makes SQLite keep a statement journal (a copy of every page
/// the statement changes, to undo it alone), which costs more than the executions it saves.
pub(crate) fn insert_decision() -> String {
    let values: Vec<String> = (1..=ROW_VALUES).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO decisions ({DECISION_COLUMNS}) VALUES ({})",
        values.join(", ")
    )
}

/// Streams a batch into the table (PostgreSQL): binary `COPY`, one row per decision with the
/// values of [`ChainedBatch::row`]. The server neither parses SQL per row nor unpacks arrays.
pub(crate) fn copy_decisions() -> String {
    format!("COPY decisions ({DECISION_COLUMNS}) FROM STDIN (FORMAT binary)")
}

/// The columns every read returns, in the order [`Link`](crate::chain::Link) is built from.
const LINK_COLUMNS: &str = "seq, prev_hash, hash, record";

/// One link by decision id.
pub(crate) const GET_BY_ID: &str =
    "SELECT seq, prev_hash, hash, record FROM decisions WHERE id = $1";

/// Links after a sequence, in order (Watch, verify, export).
pub(crate) const LINKS_AFTER: &str =
    "SELECT seq, prev_hash, hash, record FROM decisions WHERE seq > $1 ORDER BY seq LIMIT $2";

/// Links after a sequence with their index columns as stored, in order (verify); the
/// columns after the link's are those of [`IndexColumns`](crate::index::IndexColumns), in order.
pub(crate) const INDEXED_LINKS_AFTER: &str = "SELECT seq, prev_hash, hash, record, id, time_us, \
     tenant, subject_kind, subject_namespace, subject_name, host_kind, host_namespace, host_name, \
     outcome, rule FROM decisions WHERE seq > $1 ORDER BY seq LIMIT $2";

/// The checkpoints, in order.
pub(crate) const SELECT_CHECKPOINTS: &str = "SELECT number, time, next_sequence, anchor_hash, \
     removed, prev_hash, hash FROM checkpoints ORDER BY number";

/// Records a checkpoint; values from [`checkpoint_row`].
pub(crate) const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (number, time, next_sequence, \
     anchor_hash, removed, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Opens a host action: the decision's sequence and tenant.
pub(crate) const OPEN_ACTION: &str = "INSERT INTO open_actions (seq, tenant) VALUES ($1, $2)";

/// Removes an open action (carried out).
pub(crate) const SETTLE_ACTION: &str = "DELETE FROM open_actions WHERE seq = $1";

/// Removes the open action of a decision closed by a later one.
pub(crate) const CLOSE_ACTION: &str =
    "DELETE FROM open_actions WHERE seq = (SELECT seq FROM decisions WHERE id = $1)";

/// The open actions of one tenant, oldest first, as links.
pub(crate) const OPEN_ACTIONS_OF_TENANT: &str = "SELECT d.seq, d.prev_hash, d.hash, d.record \
     FROM open_actions o JOIN decisions d ON d.seq = o.seq WHERE o.tenant = $1 ORDER BY o.seq";

/// Every open action, oldest first, as links.
pub(crate) const OPEN_ACTIONS: &str = "SELECT d.seq, d.prev_hash, d.hash, d.record \
     FROM open_actions o JOIN decisions d ON d.seq = o.seq ORDER BY o.seq";

/// Removes the open actions of a removed prefix of the chain (retention).
pub(crate) const SETTLE_THROUGH: &str = "DELETE FROM open_actions WHERE seq <= $1";

/// What appending a record does to the open actions: opens its own, or settles the one it
/// closes.
pub(crate) enum ActionChange<'a> {
    /// The decision records a host action to carry out, for this tenant.
    Open(&'a str),
    /// The decision closes an earlier one that was not carried out.
    Close(&'a str),
}

/// The change appending `record` makes to the open actions, if any.
pub(crate) fn action_change(record: &Record) -> Option<ActionChange<'_>> {
    let d = record.decision();
    match &d.closes {
        Some(closed) => Some(ActionChange::Close(closed)),
        None if d.opens_action() => Some(ActionChange::Open(&d.tenant)),
        None => None,
    }
}

/// The newest link older than a time (retention by age).
pub(crate) const LAST_SEQ_BEFORE: &str = "SELECT MAX(seq) FROM decisions WHERE time_us < $1";

/// The first link kept.
pub(crate) const FIRST_SEQ: &str = "SELECT MIN(seq) FROM decisions";

/// The hash of one link.
pub(crate) const HASH_OF: &str = "SELECT hash FROM decisions WHERE seq = $1";

/// Removes a prefix of the chain.
pub(crate) const DELETE_THROUGH: &str = "DELETE FROM decisions WHERE seq <= $1";

/// A value bound to a placeholder. Every column is an integer or text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SqlValue {
    /// BIGINT.
    Int(i64),
    /// TEXT.
    Text(String),
}

impl From<&str> for SqlValue {
    fn from(s: &str) -> Self {
        SqlValue::Text(s.to_string())
    }
}

/// A value of a `decisions` row, borrowed from the decision or the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SqlRef<'a> {
    /// BIGINT.
    Int(i64),
    /// TEXT.
    Text(&'a str),
}

/// A batch chained after a head: each record's link hash, where each landed, and the new head.
/// Both backends append through this, so the chain is computed in one place; rows are bound
/// from it without copying the decisions' text.
pub(crate) struct ChainedBatch<'a> {
    records: &'a [Record],
    /// The hash the first link chains to.
    first_prev_hash: String,
    /// Where each decision landed.
    pub appended: Vec<Appended>,
    /// The head after the batch.
    pub head: Head,
}

impl ChainedBatch<'_> {
    /// How many links the batch holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// The values of link `i`'s row, in [`DECISION_COLUMNS`] order.
    pub fn row(&self, i: usize) -> [SqlRef<'_>; ROW_VALUES] {
        let c = IndexRef::of(self.records[i].decision());
        let prev_hash = match i {
            0 => &self.first_prev_hash,
            _ => &self.appended[i - 1].hash,
        };
        [
            SqlRef::Int(to_i64(self.appended[i].sequence)),
            SqlRef::Text(c.id),
            SqlRef::Int(c.time_us),
            SqlRef::Text(c.tenant),
            SqlRef::Text(c.subject_kind),
            SqlRef::Text(c.subject_namespace),
            SqlRef::Text(c.subject_name),
            SqlRef::Text(c.host_kind),
            SqlRef::Text(c.host_namespace),
            SqlRef::Text(c.host_name),
            SqlRef::Text(c.outcome),
            SqlRef::Text(c.rule),
            SqlRef::Text(prev_hash),
            SqlRef::Text(&self.appended[i].hash),
            SqlRef::Text(self.records[i].json()),
        ]
    }
}

/// Chains `records` after `head`: hashes each link over its record and the previous link's
/// hash. This is the only per-record work that has to wait for the previous batch.
pub(crate) fn chain_batch(head: Head, records: &[Record]) -> ChainedBatch<'_> {
    let mut appended: Vec<Appended> = Vec::with_capacity(records.len());
    for r in records {
        let prev_hash = appended.last().map_or(head.hash.as_str(), |a| &a.hash);
        let sequence = head.sequence + appended.len() as u64 + 1;
        let hash = link_hash(sequence, prev_hash, r.json());
        appended.push(Appended {
            id: r.decision().id.clone(),
            sequence,
            hash,
        });
    }
    let new_head = match appended.last() {
        Some(last) => Head {
            sequence: last.sequence,
            hash: last.hash.clone(),
        },
        None => head.clone(),
    };
    ChainedBatch {
        records,
        first_prev_hash: head.hash,
        appended,
        head: new_head,
    }
}

/// The values of [`UPDATE_HEAD`].
pub(crate) fn head_row(head: &Head) -> Vec<SqlValue> {
    vec![
        SqlValue::Int(to_i64(head.sequence)),
        head.hash.as_str().into(),
    ]
}

/// The values of [`INSERT_CHECKPOINT`].
pub(crate) fn checkpoint_row(c: &Checkpoint) -> Vec<SqlValue> {
    vec![
        SqlValue::Int(to_i64(c.number)),
        SqlValue::Text(c.time.to_string()),
        SqlValue::Int(to_i64(c.next_sequence)),
        c.anchor_hash.as_str().into(),
        SqlValue::Int(to_i64(c.removed)),
        c.prev_hash.as_str().into(),
        c.hash.as_str().into(),
    ]
}

/// A checkpoint read back from the columns of [`SELECT_CHECKPOINTS`].
pub(crate) fn checkpoint_from(
    number: i64,
    time: &str,
    next_sequence: i64,
    anchor_hash: String,
    removed: i64,
    prev_hash: String,
    hash: String,
) -> Result<Checkpoint, Error> {
    Ok(Checkpoint {
        number: to_u64(number),
        time: time
            .parse()
            .map_err(|e| Error::Corrupt(format!("checkpoint {number} time {time:?}: {e}")))?,
        next_sequence: to_u64(next_sequence),
        anchor_hash,
        removed: to_u64(removed),
        prev_hash,
        hash,
    })
}

/// Sequences are positive and far below `i64::MAX`; the database stores them as BIGINT.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Reads a BIGINT sequence back.
pub(crate) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A query's SQL and values. It fetches one row more than the page to know whether another
/// page follows.
pub(crate) fn select_query(dialect: &Dialect, q: &Query) -> (String, Vec<SqlValue>) {
    let mut b = Builder::default();
    let f: &Filter = &q.filter;
    let across_tenants = !dialect.subject_index && f.tenant.is_none() && f.subject.name.is_some();
    if across_tenants {
        b.conditions
            .push("tenant IN (SELECT tenant FROM tenants)".to_string());
    }
    b.eq_opt("tenant", f.tenant.as_deref());
    b.object("subject", &f.subject);
    b.object("host", &f.host);
    if !f.outcomes.is_empty() {
        let placeholders: Vec<String> = f
            .outcomes
            .iter()
            .map(|o| b.bind(o.as_str().into()))
            .collect();
        b.conditions
            .push(format!("outcome IN ({})", placeholders.join(", ")));
    }
    b.eq_opt("rule", f.rule.as_deref());
    if let Some(t) = f.since {
        let p = b.bind(SqlValue::Int(t.as_microsecond()));
        b.conditions.push(format!("time_us >= {p}"));
    }
    if let Some(t) = f.until {
        let p = b.bind(SqlValue::Int(t.as_microsecond()));
        b.conditions.push(format!("time_us < {p}"));
    }
    let (cmp, order) = if q.newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    if let Some(token) = q.page_token {
        let p = b.bind(SqlValue::Int(to_i64(token)));
        b.conditions.push(format!("seq {cmp} {p}"));
    }
    let limit = b.bind(SqlValue::Int(i64::from(q.effective_limit()) + 1));
    let where_clause = if b.conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", b.conditions.join(" AND "))
    };
    let text = if across_tenants {
        // The rows of a subject in every tenant are not in sequence order in any index: the
        // page's sequences are picked first (from the index alone when only the subject is
        // filtered on), then only their rows are read.
        format!(
            "{TENANTS}SELECT {LINK_COLUMNS} FROM decisions WHERE seq IN (SELECT seq FROM \
             decisions{where_clause} ORDER BY seq {order} LIMIT {limit}) ORDER BY seq {order}"
        )
    } else {
        format!(
            "SELECT {LINK_COLUMNS} FROM decisions{where_clause} ORDER BY seq {order} LIMIT {limit}"
        )
    };
    (text, b.values)
}

#[derive(Default)]
struct Builder {
    conditions: Vec<String>,
    values: Vec<SqlValue>,
}

impl Builder {
    fn bind(&mut self, v: SqlValue) -> String {
        self.values.push(v);
        format!("${}", self.values.len())
    }

    fn eq_opt(&mut self, column: &str, value: Option<&str>) {
        if let Some(v) = value {
            let p = self.bind(v.into());
            self.conditions.push(format!("{column} = {p}"));
        }
    }

    fn object(&mut self, prefix: &str, o: &ObjectFilter) {
        // Name first: it leads the indexes.
        self.eq_opt(&format!("{prefix}_name"), o.name.as_deref());
        self.eq_opt(&format!("{prefix}_namespace"), o.namespace.as_deref());
        self.eq_opt(&format!("{prefix}_kind"), o.kind.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantplane_core::decision::Outcome;

    #[test]
    fn query_binds_placeholders_in_order_of_appearance() {
        let q = Query {
            filter: Filter {
                tenant: Some("acme".into()),
                subject: ObjectFilter::parse("Pod/default/web"),
                outcomes: vec![Outcome::Rejected, Outcome::Conflict],
                ..Filter::default()
            },
            newest_first: true,
            page_token: Some(42),
            limit: 10,
        };
        let (sql, values) = select_query(&SQLITE, &q);
        assert_eq!(
            sql,
            "SELECT seq, prev_hash, hash, record FROM decisions WHERE tenant = $1 AND \
             subject_name = $2 AND subject_namespace = $3 AND subject_kind = $4 AND \
             outcome IN ($5, $6) AND seq < $7 ORDER BY seq DESC LIMIT $8"
        );
        assert_eq!(values.len(), 8);
        assert_eq!(values[7], SqlValue::Int(11));
    }

    #[test]
    fn migrations_substitute_the_dialect() {
        let sqlite = migrations(&SQLITE);
        let pg = migrations(&POSTGRES);
        assert!(sqlite[0].2[0].contains("seq INTEGER PRIMARY KEY"));
        assert!(pg[0].2[0].contains("seq BIGINT PRIMARY KEY"));
        assert_eq!(sqlite[0].2.len(), pg[0].2.len());
    }
}
