//! The decision log: every sync decision kept, searchable, and provably complete.
//!
//! ```text
//!  syncer ──append(decision).await──▶ Appender ──append_batch (group commit)──▶ DecisionStore
//!                                                                             ├─ SqliteStore   (file, WAL; default)
//!  DecisionLog gRPC / CLI ──get · query · links_after · verify · retain────────┴─ PostgresStore (several replicas)
//! ```
//!
//! - [`store`]: the [`DecisionStore`] trait, [`open`] by URL, and [`verify`] built once on it.
//! - [`sqlite`] and [`postgres`]: the two backends; the SQL they run is shared ([`sql`]).
//! - [`index`]: the [`IndexColumns`] stored beside each record, which verify checks too.
//! - [`chain`]: canonical JSON, link hashes, checkpoints and the [`Verifier`]. The chain is
//!   global (one sequence for all tenants): Watch needs one gap-free resume point anyway, and
//!   appends are serialized for it, so a global chain costs nothing more and proves the whole
//!   log complete, not each tenant's part separately.
//! - [`appender`]: the group-commit [`Appender`]; `append` resolves once the decision is durable.
//! - [`signed`]: Ed25519-signed checkpoints of the chain head, published outside the database,
//!   which verification checks the chain against (truncation, rewrites).
//! - [`export`]: JSON Lines (verifiable offline) and wgpolicyk8s.io PolicyReports.
//! - [`query`]: filters and pages.
//! - [`grpc`]: the `tenantplane.decisions.v1.DecisionLog` service over any store.

use std::sync::Arc;

pub mod appender;
pub mod chain;
pub mod export;
pub mod grpc;
pub mod index;
pub mod postgres;
pub mod query;
pub mod signed;
mod sql;
pub mod sqlite;
pub mod store;

#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_decisions;

pub use appender::{Appender, AppenderConfig};
pub use chain::{Break, Checkpoint, Entry, Head, Link, Record, Verifier, VerifyReport};
pub use index::IndexColumns;
pub use query::{Filter, ObjectFilter, Page, Query};
pub use signed::SignedCheckpoint;
pub use store::{
    Appended, DecisionStore, Durable, Retention, entries_after, open, verify, verify_against,
};

/// What can go wrong in the decision log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL reported an error.
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// A record could not be (de)serialized.
    #[error("record: {0}")]
    Json(#[from] serde_json::Error),
    /// Reading or writing a file failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The URL names no known backend.
    #[error("unsupported decision log URL {0:?}: use sqlite:PATH, a file path, or postgres://...")]
    Url(String),
    /// A parameter of the URL that the backend does not know or a value it does not take.
    #[error("decision log URL parameter {0}")]
    UrlParameter(String),
    /// Stored data that cannot be read back.
    #[error("corrupt log: {0}")]
    Corrupt(String),
    /// A JSON Lines export line that cannot be read.
    #[error("export line {line}: {detail}")]
    Export {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// A blocking task panicked or was cancelled.
    #[error("background task failed: {0}")]
    Task(String),
    /// The batch holding this decision failed to commit; nothing of it was recorded.
    #[error("append failed: {0}")]
    Batch(Arc<Error>),
    /// A committed batch could not be made durable (SQLite: the fsync of the WAL failed); its
    /// decisions are not acknowledged.
    #[error("decisions not durable: {0}")]
    NotDurable(String),
    /// A checkpoint key cannot be read or made.
    #[error("checkpoint key {0}")]
    Key(String),
    /// The appender task has stopped.
    #[error("the decision log appender is stopped")]
    Closed,
}
