//! The hash chain: canonical JSON, the link hash, checkpoints and the verifier.
//!
//! The chain is global: one sequence for every tenant. Link `n` stores
//! `hash(n) = SHA-256("tenantplane.decision.v1\n" ‖ n ‖ "\n" ‖ hash(n-1) ‖ "\n" ‖ record)`, where
//! `record` is the decision as canonical JSON (object keys sorted, no whitespace) and is stored
//! byte for byte, so that verification recomputes exactly what was hashed. Link 1 chains to
//! [`GENESIS_HASH`]. Retention removes a prefix of the chain and records a [`Checkpoint`] holding
//! the hash of the last removed link; checkpoints are chained among themselves the same way.
//!
//! Both the database verifier and the JSON Lines verifier feed links to one [`Verifier`], which
//! reports the first broken link; the database verifier also gives it each row's index columns,
//! which must be what the record says.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tenantplane_core::decision::Decision;

use crate::Error;
use crate::index::IndexColumns;
use crate::signed::{SignatureProblem, SignedCheckpoint};

/// The previous hash of the first link ever appended.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Domain separation for link hashes.
const LINK_DOMAIN: &str = "tenantplane.decision.v1";
/// Domain separation for checkpoint hashes.
const CHECKPOINT_DOMAIN: &str = "tenantplane.checkpoint.v1";

/// One link of the chain as stored: what verification needs, nothing parsed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    /// Global sequence number, from 1, without gaps.
    pub sequence: u64,
    /// Hash of the previous link (hex).
    pub prev_hash: String,
    /// Hash of this link (hex).
    pub hash: String,
    /// The decision as canonical JSON: the exact bytes that were hashed.
    pub record: String,
}

impl Link {
    /// Chains `decision` after `(prev_sequence, prev_hash)`.
    pub fn new(decision: &Decision, prev_sequence: u64, prev_hash: &str) -> Result<Link, Error> {
        let record = checked_record(decision)?;
        let sequence = prev_sequence + 1;
        Ok(Link {
            sequence,
            hash: link_hash(sequence, prev_hash, &record),
            prev_hash: prev_hash.to_string(),
            record,
        })
    }

    /// The decision this link records.
    pub fn decision(&self) -> Result<Decision, Error> {
        Ok(serde_json::from_str(&self.record)?)
    }
}

/// A decision with its place in the chain: what queries and Watch return.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Global sequence number.
    pub sequence: u64,
    /// Hash of the previous link (hex).
    pub prev_hash: String,
    /// Hash of this link (hex).
    pub hash: String,
    /// The decision.
    pub decision: Decision,
}

impl TryFrom<Link> for Entry {
    type Error = Error;
    fn try_from(link: Link) -> Result<Entry, Error> {
        Ok(Entry {
            decision: link.decision()?,
            sequence: link.sequence,
            prev_hash: link.prev_hash,
            hash: link.hash,
        })
    }
}

/// The last link of the chain (sequence 0 and [`GENESIS_HASH`] for an empty log).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    /// Sequence of the last link appended.
    pub sequence: u64,
    /// Its hash.
    pub hash: String,
}

impl Head {
    /// The head of an empty log.
    pub fn genesis() -> Head {
        Head {
            sequence: 0,
            hash: GENESIS_HASH.to_string(),
        }
    }
}

/// Where retention cut the chain: the links before `next_sequence` are gone, and the last of
/// them had hash `anchor_hash`. Checkpoints chain to each other like links do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Checkpoint number, from 1.
    pub number: u64,
    /// When retention ran.
    pub time: Timestamp,
    /// The first link kept.
    pub next_sequence: u64,
    /// Hash of the last link removed (the `prev_hash` of link `next_sequence`).
    pub anchor_hash: String,
    /// How many links this retention run removed.
    pub removed: u64,
    /// Hash of the previous checkpoint ([`GENESIS_HASH`] for the first).
    pub prev_hash: String,
    /// Hash of this checkpoint.
    pub hash: String,
}

impl Checkpoint {
    /// A checkpoint after `prev` (if any) cutting the chain before `next_sequence`.
    pub fn new(
        prev: Option<&Checkpoint>,
        time: Timestamp,
        next_sequence: u64,
        anchor_hash: String,
        removed: u64,
    ) -> Checkpoint {
        let (number, prev_hash) = match prev {
            Some(p) => (p.number + 1, p.hash.clone()),
            None => (1, GENESIS_HASH.to_string()),
        };
        let mut checkpoint = Checkpoint {
            number,
            time,
            next_sequence,
            anchor_hash,
            removed,
            prev_hash,
            hash: String::new(),
        };
        checkpoint.hash = checkpoint.compute_hash();
        checkpoint
    }

    fn compute_hash(&self) -> String {
        let text = format!(
            "{CHECKPOINT_DOMAIN}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.number,
            self.prev_hash,
            self.time,
            self.next_sequence,
            self.anchor_hash,
            self.removed
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

/// The hash of link `sequence` with previous hash `prev_hash` over canonical `record`.
pub fn link_hash(sequence: u64, prev_hash: &str, record: &str) -> String {
    let mut h = Sha256::new();
    h.update(LINK_DOMAIN.as_bytes());
    h.update(b"\n");
    h.update(itoa::Buffer::new().format(sequence).as_bytes());
    h.update(b"\n");
    h.update(prev_hash.as_bytes());
    h.update(b"\n");
    h.update(record.as_bytes());
    // The single writer hashes every link: hex through a buffer, not a char at a time.
    let mut hex = [0u8; 64];
    hex::encode_to_slice(h.finalize(), &mut hex).expect("a SHA-256 digest is 32 bytes");
    String::from_utf8(hex.to_vec()).expect("hex digits are ASCII")
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
/// serde_json's string and number formatting. Independent of serde_json's `preserve_order`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A decision with its canonical record, serialized before it reaches the log's single
/// writer: [`Appender::append`](crate::Appender::append) builds it on the caller's task, so
/// the writer only hashes the records into the chain and inserts them.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    decision: Decision,
    json: String,
}

impl Record {
    /// Serializes `decision` as its canonical record.
    pub fn new(decision: Decision) -> Result<Record, Error> {
        let json = checked_record(&decision)?;
        Ok(Record { decision, json })
    }

    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Its canonical JSON: the bytes hashed into the link and stored.
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// [`canonical_record`], compared with [`canonical_json`] in debug builds.
fn checked_record(decision: &Decision) -> Result<String, Error> {
    let record = canonical_record(decision)?;
    debug_assert_eq!(
        record,
        canonical_json(&serde_json::to_value(decision)?),
        "canonical_record must write what canonical_json does"
    );
    Ok(record)
}

/// The canonical JSON of `decision`, written straight from the struct: the same text as
/// `canonical_json(&serde_json::to_value(decision)?)`, without building the intermediate
/// [`Value`] and sorting its keys (which was most of the cost of an append). The keys below
/// are in byte order; a test and a debug assertion in [`Record::new`] compare it with
/// [`canonical_json`], and a field added to [`Decision`] fails that test until it is written
/// here too.
pub fn canonical_record(decision: &Decision) -> Result<String, Error> {
    let mut out = Vec::with_capacity(1024);
    canonical_record_into(decision, &mut out)?;
    String::from_utf8(out).map_err(|e| Error::Corrupt(format!("record is not UTF-8: {e}")))
}

/// Appends the canonical JSON of `decision` to `out`.
fn canonical_record_into(decision: &Decision, out: &mut Vec<u8>) -> Result<(), Error> {
    let d = decision;
    let mut o = Object::open(out);
    o.field("action", &d.action)?;
    o.optional("closes", &d.closes)?;
    o.field("component", &d.component)?;
    o.field("componentVersion", &d.component_version)?;
    o.optional("drift", &d.drift)?;
    o.optional("fieldPath", &d.field_path)?;
    o.field("id", &d.id)?;
    o.field("inputDigest", &d.input_digest)?;
    o.field("mappingVersion", &d.mapping_version)?;
    o.field("message", &d.message)?;
    o.field("outcome", &d.outcome)?;
    if let Some(p) = &d.policy {
        let mut p_o = o.object("policy");
        p_o.field("name", &p.name)?;
        p_o.field("revision", &p.revision)?;
        p_o.optional("rule", &p.rule)?;
        p_o.close();
    }
    if let Some(p) = &d.profile {
        let mut p_o = o.object("profile");
        p_o.field("fieldPath", &p.field_path)?;
        p_o.field("generation", &p.generation)?;
        p_o.field("name", &p.name)?;
        p_o.optional("rule", &p.rule)?;
        p_o.close();
    }
    o.field("reason", &d.reason)?;
    o.optional("spanId", &d.span_id)?;
    if !d.stripped_keys.is_empty() {
        o.field("strippedKeys", &d.stripped_keys)?;
    }
    let s = &d.subject;
    let mut s_o = o.object("subject");
    s_o.field("apiVersion", &s.api_version)?;
    s_o.field("kind", &s.kind)?;
    s_o.field("name", &s.name)?;
    s_o.field("namespace", &s.namespace)?;
    s_o.field("resourceVersion", &s.resource_version)?;
    s_o.field("uid", &s.uid)?;
    s_o.close();
    if let Some(t) = &d.target {
        let mut t_o = o.object("target");
        t_o.field("apiVersion", &t.api_version)?;
        t_o.field("kind", &t.kind)?;
        t_o.field("name", &t.name)?;
        t_o.field("namespace", &t.namespace)?;
        t_o.close();
    }
    o.field("tenant", &d.tenant)?;
    o.field("time", &d.time)?;
    if !d.tokens.is_empty() {
        o.field("tokens", &d.tokens)?;
    }
    o.optional("traceId", &d.trace_id)?;
    o.close();
    Ok(())
}

/// A JSON object being written: fields go in the order they are given, which the caller keeps
/// sorted; values are written by serde_json, so strings and numbers are formatted as
/// [`canonical_json`] formats them.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, empty: true }
    }

    fn key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        // Keys are plain ASCII identifiers: nothing to escape.
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn field(&mut self, key: &str, value: &impl Serialize) -> Result<(), Error> {
        self.key(key);
        serde_json::to_writer(&mut *self.out, value)?;
        Ok(())
    }

    fn optional(&mut self, key: &str, value: &Option<impl Serialize>) -> Result<(), Error> {
        match value {
            Some(v) => self.field(key, v),
            None => Ok(()),
        }
    }

    fn object(&mut self, key: &str) -> Object<'_> {
        self.key(key);
        Object::open(self.out)
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// Why verification stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Break {
    /// A link is missing or links are out of order.
    SequenceGap {
        /// The sequence that should have come next.
        expected: u64,
        /// The sequence found instead.
        found: u64,
    },
    /// A link does not chain to its predecessor: a link before it was removed, inserted or
    /// replaced, or links were reordered.
    PrevHashMismatch {
        /// The link whose `prev_hash` is wrong.
        sequence: u64,
    },
    /// A link's content does not match its hash: the record was edited.
    HashMismatch {
        /// The edited link.
        sequence: u64,
    },
    /// An index column of a row differs from what its record says: the column was edited, so
    /// queries on it return the wrong decisions.
    IndexMismatch {
        /// The link.
        sequence: u64,
        /// The column.
        column: String,
        /// The value stored in the column.
        stored: String,
        /// The value the hashed record gives.
        recorded: String,
    },
    /// A record is not canonical JSON of a decision.
    BadRecord {
        /// The link.
        sequence: u64,
        /// What is wrong.
        detail: String,
    },
    /// A checkpoint does not chain to the previous one or was edited.
    BadCheckpoint {
        /// The checkpoint number.
        number: u64,
    },
    /// The recorded chain head does not match the last link: links were removed at the end.
    HeadMismatch {
        /// The recorded head.
        recorded: Head,
        /// The last link found.
        found: Head,
    },
    /// A link the auditor recorded earlier is not in the chain with the recorded hash.
    AnchorMismatch {
        /// The recorded sequence.
        sequence: u64,
    },
    /// A signed checkpoint's signature does not hold.
    CheckpointSignature {
        /// The checkpoint.
        checkpoint: Box<SignedCheckpoint>,
        /// What is wrong with its signature.
        problem: SignatureProblem,
    },
    /// Two signed checkpoints contradict each other: the log went back between them.
    CheckpointsDisagree {
        /// The one signed first.
        earlier: Box<SignedCheckpoint>,
        /// The one signed after it.
        later: Box<SignedCheckpoint>,
    },
    /// A link differs from what a signed checkpoint says of it: the chain was rewritten at or
    /// before it and its hashes recomputed.
    CheckpointMismatch {
        /// The checkpoint.
        checkpoint: Box<SignedCheckpoint>,
        /// The hash the link has now.
        found: String,
    },
    /// The chain ends before a signed checkpoint: links were removed from the tail (with the
    /// chain head moved back), or an older copy of the log was restored.
    TailMissing {
        /// The last link of the chain.
        last: u64,
        /// The checkpoint covering the furthest link.
        checkpoint: Box<SignedCheckpoint>,
    },
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Break::SequenceGap { expected, found } => write!(
                f,
                "sequence gap: expected link {expected}, found {found} (links removed or reordered)"
            ),
            Break::PrevHashMismatch { sequence } => write!(
                f,
                "link {sequence} does not chain to link {} (a link was removed, inserted, replaced or reordered)",
                sequence.saturating_sub(1)
            ),
            Break::HashMismatch { sequence } => {
                write!(f, "link {sequence} does not match its hash (record edited)")
            }
            Break::IndexMismatch {
                sequence,
                column,
                stored,
                recorded,
            } => write!(
                f,
                "link {sequence}: index column {column} holds {stored:?} but the record says \
                 {recorded:?} (column edited; queries on it return wrong results)"
            ),
            Break::BadRecord { sequence, detail } => {
                write!(
                    f,
                    "link {sequence} is not a canonical decision record: {detail}"
                )
            }
            Break::BadCheckpoint { number } => {
                write!(
                    f,
                    "checkpoint {number} is edited or does not chain to the previous one"
                )
            }
            Break::HeadMismatch { recorded, found } => write!(
                f,
                "the chain ends at link {} but the recorded head is link {} (links removed at the end)",
                found.sequence, recorded.sequence
            ),
            Break::AnchorMismatch { sequence } => write!(
                f,
                "link {sequence} is missing or differs from the recorded anchor"
            ),
            Break::CheckpointSignature {
                checkpoint: c,
                problem: SignatureProblem::UnknownKey { key_id, known },
            } => write!(
                f,
                "the checkpoint at link {} (signed {}) is signed by key {key_id}, which is not among the public keys given ({}): signed by another key, or the wrong public key was given",
                c.sequence,
                c.time,
                known.join(", ")
            ),
            Break::CheckpointSignature {
                checkpoint: c,
                problem: SignatureProblem::Invalid,
            } => write!(
                f,
                "the checkpoint at link {} (signed {} by key {}) does not match its signature: the checkpoint was edited or forged",
                c.sequence, c.time, c.key_id
            ),
            Break::CheckpointsDisagree { earlier, later } if later.sequence < earlier.sequence => {
                write!(
                    f,
                    "the log went back: the checkpoint signed {} covers link {}, the one signed later, {}, only link {}: between them links were removed from the tail or an older copy of the log was restored",
                    earlier.time, earlier.sequence, later.time, later.sequence
                )
            }
            Break::CheckpointsDisagree { earlier, later } => write!(
                f,
                "the log forked: the checkpoints signed {} and {} give link {} different hashes ({} and {}): an older copy of the log was restored and appended to, or the chain was rewritten between them",
                earlier.time, later.time, earlier.sequence, earlier.hash, later.hash
            ),
            Break::CheckpointMismatch {
                checkpoint: c,
                found,
            } => write!(
                f,
                "link {} has hash {found} but the checkpoint signed {} by key {} says {}: the chain was rewritten at or before link {} and rehashed",
                c.sequence, c.time, c.key_id, c.hash, c.sequence
            ),
            Break::TailMissing {
                last,
                checkpoint: c,
            } => write!(
                f,
                "the log ends at link {last} but the checkpoint signed {} by key {} covers link {}: {} links were removed from the tail, or an older copy of the log was restored",
                c.time,
                c.key_id,
                c.sequence,
                c.sequence - last
            ),
        }
    }
}

/// The outcome of a verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Links checked.
    pub links: u64,
    /// First sequence checked (the latest checkpoint's `next_sequence`, or 1).
    pub first_sequence: u64,
    /// The last link that verified: record it to anchor a later verification.
    pub head: Head,
    /// Checkpoints checked.
    pub checkpoints: u64,
    /// The first broken link, if any.
    pub first_break: Option<Break>,
    /// Signed checkpoints the chain was checked against and matched.
    #[serde(default)]
    pub signed_checkpoints: u64,
    /// Signed checkpoints of links retention has removed: their signatures were checked, the
    /// links they cover no longer can be.
    #[serde(default)]
    pub signed_before_retention: u64,
    /// The signed checkpoint covering the furthest link that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_signed: Option<SignedCheckpoint>,
}

impl VerifyReport {
    /// True when nothing is broken.
    pub fn is_ok(&self) -> bool {
        self.first_break.is_none()
    }
}

/// Checks links one at a time, in sequence order, and stops at the first break.
#[derive(Debug)]
pub struct Verifier {
    report: VerifyReport,
    anchor: Option<Head>,
    anchor_seen: bool,
    /// Signed checkpoints still to meet, furthest link first (popped from the end).
    signed: Vec<SignedCheckpoint>,
}

impl Verifier {
    /// A verifier starting after the latest of `checkpoints` (or at genesis), optionally
    /// requiring that the link `anchor.sequence` has hash `anchor.hash`.
    pub fn new(checkpoints: &[Checkpoint], anchor: Option<Head>) -> Verifier {
        let mut report = VerifyReport {
            links: 0,
            first_sequence: 1,
            head: Head::genesis(),
            checkpoints: 0,
            first_break: None,
            signed_checkpoints: 0,
            signed_before_retention: 0,
            last_signed: None,
        };
        let mut prev: Option<&Checkpoint> = None;
        for c in checkpoints {
            let expected_prev = prev.map_or(GENESIS_HASH, |p| p.hash.as_str());
            let expected_number = prev.map_or(1, |p| p.number + 1);
            if c.number != expected_number
                || c.prev_hash != expected_prev
                || c.hash != c.compute_hash()
                || prev.is_some_and(|p| c.next_sequence < p.next_sequence)
            {
                report.first_break = Some(Break::BadCheckpoint { number: c.number });
                break;
            }
            report.checkpoints += 1;
            prev = Some(c);
        }
        if let Some(c) = prev {
            report.first_sequence = c.next_sequence;
            report.head = Head {
                sequence: c.next_sequence - 1,
                hash: c.anchor_hash.clone(),
            };
        }
        // An anchor inside the removed prefix cannot be checked any more; one at the cut can.
        let anchor_seen = anchor
            .as_ref()
            .is_some_and(|a| a.sequence < report.head.sequence);
        let mut verifier = Verifier {
            report,
            anchor,
            anchor_seen,
            signed: Vec::new(),
        };
        verifier.check_anchor();
        verifier
    }

    /// Also checks the chain against signed checkpoints: their signatures with `keys`, that
    /// they agree with each other (a later one never covers less, two never give one link
    /// different hashes), and, as links arrive, that each covered link has the signed hash; at
    /// [`Verifier::finish`], that the chain reaches the furthest of them. Call before the
    /// first link.
    pub fn with_checkpoints(
        mut self,
        mut signed: Vec<SignedCheckpoint>,
        keys: &[crate::signed::VerifyingKey],
    ) -> Verifier {
        if self.is_broken() {
            return self;
        }
        if let Some((c, problem)) = signed
            .iter()
            .find_map(|c| c.check_signature(keys).err().map(|p| (c, p)))
        {
            self.report.first_break = Some(Break::CheckpointSignature {
                checkpoint: Box::new(c.clone()),
                problem,
            });
            return self;
        }
        signed.sort_by_key(|c| (c.time, c.sequence));
        let mut furthest: Option<&SignedCheckpoint> = None;
        let mut by_sequence: std::collections::HashMap<u64, &SignedCheckpoint> = Default::default();
        for c in &signed {
            let went_back = furthest.filter(|f| c.sequence < f.sequence);
            let forked = by_sequence.get(&c.sequence).filter(|o| o.hash != c.hash);
            if let Some(earlier) = went_back.or(forked.copied()) {
                self.report.first_break = Some(Break::CheckpointsDisagree {
                    earlier: Box::new(earlier.clone()),
                    later: Box::new(c.clone()),
                });
                return self;
            }
            by_sequence.insert(c.sequence, c);
            if furthest.is_none_or(|f| c.sequence >= f.sequence) {
                furthest = Some(c);
            }
        }
        // One per link (they agree), furthest first; those at or before where verification
        // starts are met now.
        signed.sort_by_key(|c| std::cmp::Reverse(c.sequence));
        signed.dedup_by_key(|c| c.sequence);
        self.signed = signed;
        while let Some(c) = self.signed.last() {
            let start = &self.report.head;
            if c.sequence > start.sequence {
                break;
            }
            let c = self.signed.pop().expect("checked above");
            if c.sequence < start.sequence {
                self.report.signed_before_retention += 1;
            } else {
                let found = start.hash.clone();
                self.meet(c, &found);
            }
        }
        self
    }

    /// Compares the link a signed checkpoint covers with it.
    fn meet(&mut self, checkpoint: SignedCheckpoint, found: &str) {
        if checkpoint.hash == found {
            self.report.signed_checkpoints += 1;
            self.report.last_signed = Some(checkpoint);
        } else {
            self.report.first_break = Some(Break::CheckpointMismatch {
                checkpoint: Box::new(checkpoint),
                found: found.to_string(),
            });
        }
    }

    /// True once a break was found; further links are ignored.
    pub fn is_broken(&self) -> bool {
        self.report.first_break.is_some()
    }

    /// Checks the next link.
    pub fn push(&mut self, link: &Link) {
        self.check(link, None);
    }

    /// Checks the next link of a database, and that its index columns, as stored, are what
    /// its record says.
    pub fn push_indexed(&mut self, link: &Link, stored: &IndexColumns) {
        self.check(link, Some(stored));
    }

    fn check(&mut self, link: &Link, stored: Option<&IndexColumns>) {
        if self.is_broken() {
            return;
        }
        let expected = self.report.head.sequence + 1;
        let found = if link.sequence != expected {
            Some(Break::SequenceGap {
                expected,
                found: link.sequence,
            })
        } else if link.prev_hash != self.report.head.hash {
            Some(Break::PrevHashMismatch {
                sequence: link.sequence,
            })
        } else if link_hash(link.sequence, &link.prev_hash, &link.record) != link.hash {
            Some(Break::HashMismatch {
                sequence: link.sequence,
            })
        } else {
            match (check_record(link), stored) {
                (Err(b), _) => Some(b),
                (Ok(decision), Some(stored)) => check_index(link.sequence, &decision, stored),
                (Ok(_), None) => None,
            }
        };
        match found {
            Some(b) => self.report.first_break = Some(b),
            None => {
                self.report.links += 1;
                self.report.head = Head {
                    sequence: link.sequence,
                    hash: link.hash.clone(),
                };
                self.check_anchor();
                if self
                    .signed
                    .last()
                    .is_some_and(|c| c.sequence == link.sequence)
                {
                    let c = self.signed.pop().expect("checked above");
                    self.meet(c, &link.hash);
                }
            }
        }
    }

    fn check_anchor(&mut self) {
        if let Some(a) = &self.anchor
            && !self.anchor_seen
            && a.sequence == self.report.head.sequence
        {
            self.anchor_seen = true;
            if a.hash != self.report.head.hash {
                self.report.first_break = Some(Break::AnchorMismatch {
                    sequence: a.sequence,
                });
            }
        }
    }

    /// Ends verification, comparing the last link with the recorded head when there is one
    /// (a database has one; a JSON Lines export carries it as its last line).
    pub fn finish(mut self, recorded_head: Option<&Head>) -> VerifyReport {
        if self.is_broken() {
            return self.report;
        }
        if let Some(recorded) = recorded_head
            && *recorded != self.report.head
        {
            self.report.first_break = Some(Break::HeadMismatch {
                recorded: recorded.clone(),
                found: self.report.head.clone(),
            });
        } else if let Some(a) = &self.anchor
            && !self.anchor_seen
        {
            self.report.first_break = Some(Break::AnchorMismatch {
                sequence: a.sequence,
            });
        } else if let Some(furthest) = self.signed.first() {
            self.report.first_break = Some(Break::TailMissing {
                last: self.report.head.sequence,
                checkpoint: Box::new(furthest.clone()),
            });
        }
        self.report
    }
}

/// A record must be a decision in canonical form: otherwise two different texts could stand
/// for one decision, and what the hash covers would be ambiguous.
fn check_record(link: &Link) -> Result<Decision, Break> {
    let bad = |detail: String| Break::BadRecord {
        sequence: link.sequence,
        detail,
    };
    let value: Value = serde_json::from_str(&link.record).map_err(|e| bad(e.to_string()))?;
    if canonical_json(&value) != link.record {
        return Err(bad("not in canonical form".to_string()));
    }
    serde_json::from_value::<Decision>(value).map_err(|e| bad(e.to_string()))
}

/// The index columns of a row must be what its record says: they are not hashed, and queries
/// select rows by them.
fn check_index(sequence: u64, decision: &Decision, stored: &IndexColumns) -> Option<Break> {
    stored
        .first_difference(&IndexColumns::of(decision))
        .map(|(column, stored, recorded)| Break::IndexMismatch {
            sequence,
            column: column.to_string(),
            stored,
            recorded,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantplane_core::decision::{
        HostAction, HostTarget, Outcome, PolicyRef, ProfileRef, Subject,
    };

    /// The link hash is part of every stored log: its input must never change, or logs
    /// written before would no longer verify. The expected value is computed independently:
    /// `sha256("tenantplane.decision.v1\n1234567\n" + "0" * 64 + "\n" + '{"id":"x"}')`.
    #[test]
    fn the_link_hash_input_is_fixed() {
        assert_eq!(
            link_hash(1234567, GENESIS_HASH, r#"{"id":"x"}"#),
            "fa3e2cdccfdf0b25bc01ab7bd75c6ae4e40d35bf1b5a31ff956cd6c5ed2093c5"
        );
    }

    /// Every field set, with text that needs escaping.
    fn full() -> Decision {
        Decision {
            id: "0193a4e2-7c1d-7000-8000-000000000001".into(),
            time: "2026-11-29T21:00:00.123456789Z".parse().unwrap(),
            tenant: "acme".into(),
            subject: Subject {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "default".into(),
                name: "web \"quoted\" \\ é ✓ \u{1}".into(),
                uid: "uid-1".into(),
                resource_version: "42".into(),
            },
            target: Some(HostTarget {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "tp-acme".into(),
                name: "web-x-default".into(),
            }),
            outcome: Outcome::Rejected,
            action: HostAction::None,
            policy: Some(PolicyRef {
                name: "default".into(),
                revision: "sha256:00".into(),
                rule: Some("no-\nnewlines".into()),
            }),
            profile: Some(ProfileRef {
                name: "strict".into(),
                generation: -3,
                field_path: "spec.network.allowDns".into(),
                rule: Some("PodSecurity/\u{7f}runAsUser".into()),
            }),
            reason: "RuleMatched".into(),
            message: "tab\there </script>".into(),
            field_path: Some("spec.data".into()),
            stripped_keys: vec!["tenantplane.io/a".into(), "tenantplane.io/b".into()],
            input_digest: "sha256:01".into(),
            mapping_version: "v1".into(),
            component: "tenantplane-syncer".into(),
            component_version: "0.1.0".into(),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            span_id: Some("00f067aa0ba902b7".into()),
            closes: Some("0193a4e2-7c1d-7000-8000-000000000000".into()),
            tokens: Vec::new(),
            drift: Some(tenantplane_core::drift::Drift {
                change: tenantplane_core::drift::DriftChange::Edited,
                corrects: Some("0193a4e2-7c1d-7000-8000-000000000001".into()),
                fields: vec![tenantplane_core::drift::DriftedField {
                    by: Some(tenantplane_core::drift::FieldWriter {
                        manager: "kubectl-patch".into(),
                        operation: "Update".into(),
                        time: Some("2026-12-04T10:05:00Z".parse().unwrap()),
                    }),
                    change: tenantplane_core::drift::FieldChange::Changed,
                    path: "data[\"k\"]".into(),
                }],
                times: 2,
            }),
        }
    }

    #[test]
    fn canonical_record_writes_what_canonical_json_writes() {
        let minimal = Decision {
            target: None,
            policy: None,
            profile: None,
            field_path: None,
            stripped_keys: vec![],
            trace_id: None,
            span_id: None,
            closes: None,
            tokens: Vec::new(),
            drift: None,
            ..full()
        };
        let no_rule = Decision {
            policy: Some(PolicyRef {
                rule: None,
                ..full().policy.unwrap()
            }),
            ..full()
        };
        for d in [full(), minimal, no_rule] {
            let slow = canonical_json(&serde_json::to_value(&d).unwrap());
            assert_eq!(canonical_record(&d).unwrap(), slow);
            let back: Decision = serde_json::from_str(&slow).unwrap();
            assert_eq!(back, d);
        }
    }
}
