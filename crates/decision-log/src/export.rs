//! Exports: JSON Lines (the whole chain, verifiable offline) and wgpolicyk8s.io PolicyReports.
//!
//! A JSON Lines export holds, one JSON object a line, tagged by `kind`: every `Checkpoint`
//! (oldest first), every `Link` in sequence order (`sequence`, `prevHash`, `hash`, `decision`),
//! and last the `Head` the database recorded when the export started. [`verify_jsonl`] checks
//! it with the same [`Verifier`] as the database, so an auditor needs only the file.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenantplane_core::decision::{Decision, Outcome};

use crate::Error;
use crate::chain::{Checkpoint, Entry, Head, Link, Verifier, VerifyReport, canonical_json};
use crate::signed::Published;
use crate::store::{DecisionStore, SCAN_CHUNK, entries_after};

/// One line of a JSON Lines export.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum ExportLine {
    /// A retention checkpoint.
    Checkpoint(Checkpoint),
    /// A link of the chain with its decision.
    Link(ExportedLink),
    /// The head recorded by the database (the last line).
    Head(Head),
}

/// A link as exported: the decision as a JSON object rather than a string.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedLink {
    /// Sequence.
    pub sequence: u64,
    /// Previous hash.
    pub prev_hash: String,
    /// Hash.
    pub hash: String,
    /// The decision; its canonical JSON is what the hash covers.
    pub decision: Value,
}

impl ExportedLink {
    fn from_link(link: &Link) -> Result<ExportedLink, Error> {
        Ok(ExportedLink {
            sequence: link.sequence,
            prev_hash: link.prev_hash.clone(),
            hash: link.hash.clone(),
            decision: serde_json::from_str(&link.record)?,
        })
    }

    fn to_link(&self) -> Link {
        Link {
            sequence: self.sequence,
            prev_hash: self.prev_hash.clone(),
            hash: self.hash.clone(),
            record: canonical_json(&self.decision),
        }
    }
}

/// Writes the whole log of `store` as JSON Lines; returns the number of links written.
pub async fn export_jsonl(store: &dyn DecisionStore, out: &mut dyn Write) -> Result<u64, Error> {
    let head = store.head().await?;
    let checkpoints = store.checkpoints().await?;
    let mut after = checkpoints
        .last()
        .map_or(0, |c| c.next_sequence.saturating_sub(1));
    for c in checkpoints {
        write_line(out, &ExportLine::Checkpoint(c))?;
    }
    let mut written = 0;
    while after < head.sequence {
        let links = store.links_after(after, SCAN_CHUNK).await?;
        let Some(last) = links.last() else { break };
        after = last.sequence;
        for link in links.iter().take_while(|l| l.sequence <= head.sequence) {
            write_line(out, &ExportLine::Link(ExportedLink::from_link(link)?))?;
            written += 1;
        }
    }
    write_line(out, &ExportLine::Head(head))?;
    out.flush()?;
    Ok(written)
}

fn write_line(out: &mut dyn Write, line: &ExportLine) -> Result<(), Error> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Verifies a JSON Lines export offline, like [`crate::verify`] does a database.
pub fn verify_jsonl(input: impl BufRead, anchor: Option<Head>) -> Result<VerifyReport, Error> {
    verify_jsonl_against(input, anchor, &Published::default())
}

/// Verifies a JSON Lines export offline against signed checkpoints, like
/// [`crate::verify_against`] does a database.
pub fn verify_jsonl_against(
    input: impl BufRead,
    anchor: Option<Head>,
    published: &Published,
) -> Result<VerifyReport, Error> {
    let start = |checkpoints: &[Checkpoint], anchor: Option<Head>| {
        Verifier::new(checkpoints, anchor)
            .with_checkpoints(published.checkpoints.clone(), &published.keys)
    };
    let mut checkpoints = Vec::new();
    let mut verifier: Option<Verifier> = None;
    let mut head = None;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |detail: String| Error::Export {
            line: i + 1,
            detail,
        };
        let parsed: ExportLine = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        if head.is_some() {
            return Err(bad("a line follows the Head line".to_string()));
        }
        match parsed {
            ExportLine::Checkpoint(c) if verifier.is_none() => checkpoints.push(c),
            ExportLine::Checkpoint(_) => {
                return Err(bad("a Checkpoint line follows a Link line".to_string()));
            }
            ExportLine::Link(l) => verifier
                .get_or_insert_with(|| start(&checkpoints, anchor.clone()))
                .push(&l.to_link()),
            ExportLine::Head(h) => head = Some(h),
        }
    }
    // Without its Head line, links removed from the end of a file could not be noticed.
    let head = head.ok_or(Error::Export {
        line: 0,
        detail: "no Head line: the export is truncated".to_string(),
    })?;
    let verifier = verifier.unwrap_or_else(|| start(&checkpoints, anchor));
    Ok(verifier.finish(Some(&head)))
}

/// The wgpolicyk8s.io PolicyReport result of an outcome.
fn report_result(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Synced | Outcome::Unchanged | Outcome::Deleted => "pass",
        Outcome::Skipped => "skip",
        Outcome::Rejected | Outcome::Conflict => "fail",
        Outcome::Failed => "error",
        Outcome::Deferred | Outcome::Drifted => "warn",
    }
}

/// One PolicyReport (wgpolicyk8s.io/v1alpha2) per tenant, with one result per tenant object:
/// its latest decision. The report lives in the tenant's host namespace (where its objects
/// are placed), named `tenantplane-<tenant>`.
pub fn policy_reports(entries: impl IntoIterator<Item = Entry>) -> Vec<Value> {
    let mut latest = Latest::default();
    entries.into_iter().for_each(|e| latest.add(e));
    latest.into_reports()
}

/// A tenant object: apiVersion, kind, namespace, name.
type SubjectKey = (String, String, String, String);

/// The latest entry per tenant and tenant object.
#[derive(Default)]
struct Latest(BTreeMap<String, BTreeMap<SubjectKey, Entry>>);

impl Latest {
    fn add(&mut self, e: Entry) {
        let s = &e.decision.subject;
        let key = (
            s.api_version.clone(),
            s.kind.clone(),
            s.namespace.clone(),
            s.name.clone(),
        );
        let subjects = self.0.entry(e.decision.tenant.clone()).or_default();
        if subjects
            .get(&key)
            .is_none_or(|old| old.sequence < e.sequence)
        {
            subjects.insert(key, e);
        }
    }

    fn into_reports(self) -> Vec<Value> {
        self.0
            .into_iter()
            .map(|(tenant, subjects)| report(&tenant, subjects.into_values().collect()))
            .collect()
    }
}

fn report(tenant: &str, entries: Vec<Entry>) -> Value {
    let mut summary: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    let namespace = entries
        .iter()
        .find_map(|e| e.decision.target.as_ref().map(|t| t.namespace.clone()));
    let results: Vec<Value> = entries
        .iter()
        .map(|e| {
            let result = report_result(e.decision.outcome);
            *summary.entry(result).or_default() += 1;
            report_entry(e, result)
        })
        .collect();
    let mut metadata = json!({
        "name": format!("tenantplane-{tenant}"),
        "labels": {
            "app.kubernetes.io/managed-by": "tenantplane",
            "tenantplane.io/tenant": tenant,
        },
    });
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": metadata,
        "summary": summary,
        "results": results,
    })
}

fn report_entry(e: &Entry, result: &str) -> Value {
    let d: &Decision = &e.decision;
    // A decision carries a profile when the profile decided: its own objects, or a tenant object
    // the host would refuse under it (whose policy is the rule that let it through).
    let (policy, rule) = match (&d.policy, &d.profile) {
        (_, Some(p)) => (
            p.name.clone(),
            p.rule.clone().unwrap_or_else(|| p.field_path.clone()),
        ),
        (Some(p), None) => (
            p.name.clone(),
            p.rule.clone().unwrap_or_else(|| "default".into()),
        ),
        (None, None) => ("tenantplane".to_string(), d.reason.clone()),
    };
    let mut properties = json!({
        "decisionId": d.id,
        "sequence": e.sequence.to_string(),
        "outcome": d.outcome.as_str(),
        "reason": d.reason,
        "action": d.action.as_str(),
        "inputDigest": d.input_digest,
    });
    if let Some(p) = &d.policy {
        properties["policyRevision"] = json!(p.revision);
    }
    if let Some(t) = &d.target {
        properties["hostObject"] = json!(format!("{}/{}/{}", t.kind, t.namespace, t.name));
    }
    if let Some(f) = &d.field_path {
        properties["fieldPath"] = json!(f);
    }
    let mut resource = json!({
        "apiVersion": d.subject.api_version,
        "kind": d.subject.kind,
        "name": d.subject.name,
    });
    if !d.subject.namespace.is_empty() {
        resource["namespace"] = json!(d.subject.namespace);
    }
    if !d.subject.uid.is_empty() {
        resource["uid"] = json!(d.subject.uid);
    }
    json!({
        "source": "tenantplane",
        "policy": policy,
        "rule": rule,
        "result": result,
        "scored": true,
        "category": "Sync",
        "message": d.message,
        "timestamp": {
            "seconds": d.time.as_second(),
            "nanos": d.time.subsec_nanosecond(),
        },
        "resources": [resource],
        "properties": properties,
    })
}

/// The PolicyReports of every decision in `store`, or of one tenant's.
pub async fn policy_reports_from(
    store: &dyn DecisionStore,
    tenant: Option<&str>,
) -> Result<Vec<Value>, Error> {
    let mut latest = Latest::default();
    let mut after = 0;
    loop {
        let entries = entries_after(store, after, SCAN_CHUNK).await?;
        let Some(last) = entries.last() else { break };
        after = last.sequence;
        entries
            .into_iter()
            .filter(|e| tenant.is_none_or(|t| e.decision.tenant == t))
            .for_each(|e| latest.add(e));
    }
    Ok(latest.into_reports())
}
