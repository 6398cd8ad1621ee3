//! The SQL both backends run: schema, migrations, statements and the query builder.
//!
//! One text serves SQLite and PostgreSQL. Placeholders are `$1, $2, ...` in order of first
//! appearance: PostgreSQL reads them as positions, SQLite as parameters named `$1`, `$2`, ...
//! numbered in order of appearance, which binds the same values to the same places. The only
//! differences are in [`Dialect`].

use tenantplane_core::decision::Decision;

use crate::Error;
use crate::chain::{Checkpoint, Head, Link};
use crate::index::IndexColumns;
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
}

/// SQLite.
pub(crate) const SQLITE: Dialect = Dialect {
    seq_pk: "INTEGER PRIMARY KEY",
    lock_head: "",
};

/// PostgreSQL.
pub(crate) const POSTGRES: Dialect = Dialect {
    seq_pk: "BIGINT PRIMARY KEY",
    lock_head: " FOR UPDATE",
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
        // The index of migration 1 still serves subject queries across tenants.
        "CREATE INDEX decisions_tenant_subject
        ON decisions (tenant, subject_name, subject_namespace, seq)",
    ),
];

/// The migrations for `dialect`: (version, name, statements).
pub(crate) fn migrations(dialect: &Dialect) -> Vec<(i64, &'static str, Vec<String>)> {
    MIGRATIONS
        .iter()
        .map(|(version, name, text)| {
            let statements = text
                .replace("{seq_pk}", dialect.seq_pk)
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

/// Inserts one link; values from [`row`].
pub(crate) const INSERT_DECISION: &str = "INSERT INTO decisions (seq, id, time_us, tenant, \
     subject_kind, subject_namespace, subject_name, host_kind, host_namespace, host_name, \
     outcome, rule, prev_hash, hash, record) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

/// Inserts a whole batch in one statement (PostgreSQL): one array per column of
/// [`INSERT_DECISION`], in the same order, unnested into rows. One statement instead of one per
/// row saves the server a parse, bind and execute per decision.
pub(crate) const INSERT_DECISIONS_UNNEST: &str = "INSERT INTO decisions (seq, id, time_us, \
     tenant, subject_kind, subject_namespace, subject_name, host_kind, host_namespace, host_name, \
     outcome, rule, prev_hash, hash, record) \
     SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
     $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], \
     $13::text[], $14::text[], $15::text[])";

/// The columns every read returns, in the order [`Link`] is built from.
const LINK_COLUMNS: &str = "seq, prev_hash, hash, record";

/// One link by decision id.
pub(crate) const GET_BY_ID: &str =
    "SELECT seq, prev_hash, hash, record FROM decisions WHERE id = $1";

/// Links after a sequence, in order (Watch, verify, export).
pub(crate) const LINKS_AFTER: &str =
    "SELECT seq, prev_hash, hash, record FROM decisions WHERE seq > $1 ORDER BY seq LIMIT $2";

/// Links after a sequence with their index columns as stored, in order (verify); the
/// columns after the link's are those of [`IndexColumns`], in order.
pub(crate) const INDEXED_LINKS_AFTER: &str = "SELECT seq, prev_hash, hash, record, id, time_us, \
     tenant, subject_kind, subject_namespace, subject_name, host_kind, host_namespace, host_name, \
     outcome, rule FROM decisions WHERE seq > $1 ORDER BY seq LIMIT $2";

/// The checkpoints, in order.
pub(crate) const SELECT_CHECKPOINTS: &str = "SELECT number, time, next_sequence, anchor_hash, \
     removed, prev_hash, hash FROM checkpoints ORDER BY number";

/// Records a checkpoint; values from [`checkpoint_row`].
pub(crate) const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (number, time, next_sequence, \
     anchor_hash, removed, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)";

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

/// The values of [`INSERT_DECISION`] for `link`, which records `decision`.
fn row(link: Link, decision: &Decision) -> Vec<SqlValue> {
    let index = IndexColumns::of(decision);
    vec![
        SqlValue::Int(to_i64(link.sequence)),
        SqlValue::Text(index.id),
        SqlValue::Int(index.time_us),
        SqlValue::Text(index.tenant),
        SqlValue::Text(index.subject_kind),
        SqlValue::Text(index.subject_namespace),
        SqlValue::Text(index.subject_name),
        SqlValue::Text(index.host_kind),
        SqlValue::Text(index.host_namespace),
        SqlValue::Text(index.host_name),
        SqlValue::Text(index.outcome),
        SqlValue::Text(index.rule),
        SqlValue::Text(link.prev_hash),
        SqlValue::Text(link.hash),
        SqlValue::Text(link.record),
    ]
}

/// A batch chained after `head`: the rows of [`INSERT_DECISION`], where each decision landed,
/// and the new head. Both backends append through this, so the chain is computed in one place.
pub(crate) struct ChainedBatch {
    /// One row per decision, in order.
    pub rows: Vec<Vec<SqlValue>>,
    /// Where each decision landed.
    pub appended: Vec<Appended>,
    /// The head after the batch.
    pub head: Head,
}

/// Chains `decisions` after `head`.
pub(crate) fn chain_batch(head: Head, decisions: &[Decision]) -> Result<ChainedBatch, Error> {
    let mut batch = ChainedBatch {
        rows: Vec::with_capacity(decisions.len()),
        appended: Vec::with_capacity(decisions.len()),
        head,
    };
    for d in decisions {
        let link = Link::new(d, batch.head.sequence, &batch.head.hash)?;
        batch.appended.push(Appended {
            id: d.id.clone(),
            sequence: link.sequence,
            hash: link.hash.clone(),
        });
        batch.head = Head {
            sequence: link.sequence,
            hash: link.hash.clone(),
        };
        // The row takes the record over rather than copying it.
        batch.rows.push(row(link, d));
    }
    Ok(batch)
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
pub(crate) fn select_query(q: &Query) -> (String, Vec<SqlValue>) {
    let mut b = Builder::default();
    let f: &Filter = &q.filter;
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
    (
        format!(
            "SELECT {LINK_COLUMNS} FROM decisions{where_clause} ORDER BY seq {order} LIMIT {limit}"
        ),
        b.values,
    )
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
        let (sql, values) = select_query(&q);
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
