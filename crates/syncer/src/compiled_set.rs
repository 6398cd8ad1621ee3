//! A compiled set of objects kept in a cluster: the one apply-and-prune loop of every set the
//! syncer compiles, the Tenant's IsolationProfile in its host namespace ([`crate::isolation`])
//! and its admission in its control plane ([`crate::tenant_admission`]).
//!
//! ```text
//!  compiled objects ──digest annotation == what the cluster holds?──▶ yes: unchanged, no write, no record
//!                                                                   └─ no: apply ──┐
//!  held objects no longer compiled ─────────────────────────────────────▶ prune ──┤
//!                                                                                  ▼
//!  nothing to write: nothing recorded. Otherwise the compilation's decision, in the current span,
//!  then per object, in a child span: its decision → record → write (the decision id on the
//!  object) → confirmed, or a Failed decision of its own and the error.
//! ```
//!
//! What the set is compiled from and what each object's decision says are the source's
//! ([`compiled::Source`], [`Origin`], [`Verdict`]), gathered by its caller; the decisions are
//! [`crate::reconcile::compiled`]'s, the writes the [`Writer`]'s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_core::decision::{Decision, Outcome};
use tenantplane_core::drift;
use tenantplane_core::translate::{DESIRED_DIGEST, digest};
use tenantplane_isolation::ObjectRef;
use tracing::Instrument as _;

use crate::reconcile::{self, compiled};
use crate::record::{COMPONENT, DecisionRecorder};
use crate::trace;
use crate::writer::{FIELD_MANAGER, Write, Writer};

pub use crate::reconcile::compiled::{Origin, Verdict};

/// One compiled object, with what the cluster holds at its name.
#[derive(Debug)]
pub struct Compiled {
    /// Where it is written.
    pub api: Api<DynamicObject>,
    /// The object as compiled, ready to apply.
    pub object: Value,
    /// The object the cluster holds at its name, if any, with its managedFields.
    pub held: Option<Value>,
    /// What produced it.
    pub origin: Origin,
    /// The reason of the decision to apply it.
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

/// An object the cluster holds that the set no longer compiles.
#[derive(Debug)]
pub struct Stale {
    /// Where it is deleted.
    pub api: Api<DynamicObject>,
    /// Which.
    pub target: ObjectRef,
    /// Its uid, the delete's precondition.
    pub uid: Option<String>,
    /// What produced it.
    pub origin: Origin,
    /// The message of the decision to delete it.
    pub message: String,
}

/// One object of a set and the write it needs, with the decision's verdict.
#[derive(Debug)]
pub struct ObjectWrite {
    /// Which object.
    pub target: ObjectRef,
    /// Where it is written.
    pub api: Api<DynamicObject>,
    /// What produced it.
    pub origin: Origin,
    /// What its decision says.
    pub verdict: Verdict,
    /// The write, to which the decision id is added.
    pub write: Write,
}

/// What keeping a set did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Objects created or updated.
    pub applied: usize,
    /// Objects deleted.
    pub pruned: usize,
    /// Objects already as compiled: nothing written, nothing recorded.
    pub unchanged: usize,
}

/// A compiled set, where it is kept: the subject of its decisions, the writer of the cluster
/// that holds it, and the recorder of its decisions.
#[derive(Debug, Clone, Copy)]
pub struct CompiledSet<'a> {
    /// What it was compiled from.
    pub source: &'a compiled::Source,
    /// The writer of its cluster.
    pub writer: &'a Writer,
    /// The recorder of its decisions.
    pub recorder: &'a DecisionRecorder,
    /// When the evaluation of the set started: its decisions' latency counts from it.
    pub started: Instant,
    /// What the Tenant does about drift of the set's objects.
    pub drift: DriftPolicy,
}

impl CompiledSet<'_> {
    /// Applies the compiled objects the cluster does not hold as compiled and prunes the stale
    /// ones (see the module documentation). `compilation` says what was compiled, for the
    /// compilation's decision ("IsolationProfile p (generation 3) compiled for host namespace
    /// n"), with its reason and origin.
    pub async fn apply(
        &self,
        compiled: Vec<Compiled>,
        stale: Vec<Stale>,
        (reason, compilation, origin): (&'static str, String, Origin),
    ) -> anyhow::Result<Applied> {
        let mut result = Applied::default();
        let total = compiled.len();
        let mut writes = Vec::new();
        let mut drifts = Vec::new();
        for c in compiled {
            let target =
                ObjectRef::from_object(&c.object).context("a compiled object without identity")?;
            let (object, digest) = desired(&c.object);
            let held_digest = c
                .held
                .as_ref()
                .and_then(|h| h.pointer("/metadata/annotations"))
                .and_then(|a| a.get(DESIRED_DIGEST))
                .and_then(Value::as_str);
            if held_digest == Some(digest.as_str()) {
                let held = c.held.as_ref().expect("an object in place is held");
                match drift::detect(&object, held, FIELD_MANAGER) {
                    None => {
                        self.recorder
                            .ledger()
                            .undrifted(&self.source.key_of(&target));
                        result.unchanged += 1;
                    }
                    Some(found) => {
                        let corrected = Write::Replace(drift::corrected(&object, held));
                        drifts.push((target, c.api, c.origin, found, corrected));
                    }
                }
                continue;
            }
            // Gone, though the last this process recorded of it is that it was applied (or
            // drifted): deleted by someone else.
            let applied_before = self
                .recorder
                .ledger()
                .last_outcome(&self.source.key_of(&target))
                .is_some_and(|o| matches!(o, Outcome::Synced | Outcome::Drifted));
            if c.held.is_none() && applied_before {
                let found = drift::Drift::deleted();
                drifts.push((target, c.api, c.origin, found, Write::Create(object)));
                continue;
            }
            writes.push(ObjectWrite {
                target,
                api: c.api,
                origin: c.origin,
                verdict: Verdict::applied(c.held.is_some(), c.reason, c.message),
                write: Write::Apply(object),
            });
        }
        writes.extend(stale.into_iter().map(|s| ObjectWrite {
            write: Write::Delete {
                name: s.target.name.clone(),
                uid: s.uid,
            },
            target: s.target,
            api: s.api,
            origin: s.origin,
            verdict: Verdict::pruned(s.message),
        }));
        for (target, api, origin, found, corrected) in drifts {
            if self.drifted(target, api, origin, found, corrected).await? {
                result.applied += 1;
            } else {
                result.unchanged += 1;
            }
        }
        if writes.is_empty() {
            return Ok(result);
        }
        let verdict = Verdict::compiled(
            reason,
            format!(
                "{compilation}: {total} objects, {} to write, {} unchanged",
                writes.len(),
                result.unchanged
            ),
        );
        let decision = self.source.decision(
            None,
            &origin,
            &verdict,
            trace::stamp_in(&tracing::Span::current(), COMPONENT),
        );
        let input = &self.source.input_digest;
        self.recorder
            .record(&self.source.key(), &decision, input, None, self.started)
            .await?;
        for w in writes {
            let span = trace::follow_up_span(&decision);
            let about = self.source.decision(
                Some(&w.target),
                &w.origin,
                &w.verdict,
                trace::stamp_in(&span, COMPONENT),
            );
            self.write(&w, &about).instrument(span).await?;
            match w.verdict.outcome {
                Outcome::Deleted => result.pruned += 1,
                _ => result.applied += 1,
            }
        }
        Ok(result)
    }

    /// An object of the set that someone else changed where tenantplane sets it (in place by
    /// its digest) or deleted (`found`): a Drifted decision (the first in a row, the third and
    /// then every power of two of a tug of war), then under `Revert` the correction,
    /// `correction` (the object replaced, or created again), unless a tug of war holds it back
    /// (the next reconcile of the Tenant after it is due makes it). Returns whether it was
    /// corrected.
    async fn drifted(
        &self,
        target: ObjectRef,
        api: Api<DynamicObject>,
        origin: Origin,
        found: drift::Drift,
        correction: Write,
    ) -> anyhow::Result<bool> {
        let key = self.source.key_of(&target);
        let ledger = self.recorder.ledger();
        // What names the drift, so that the same one is not counted twice: the edited object's
        // resourceVersion; a delete, until the object is there again.
        let live = match &correction {
            Write::Replace(object) => Some(object.clone()),
            _ => None,
        };
        let field = |path: &str| {
            live.as_ref()
                .and_then(|o| o.pointer(path))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let version = match live {
            Some(_) => field("/metadata/resourceVersion"),
            None => Some("deleted".to_string()),
        };
        let seen = ledger.drift_seen(&key, version.as_deref());
        let span = tracing::Span::current();
        let base = self.source.decision(
            Some(&target),
            &origin,
            &Verdict::applied(live.is_some(), "HostObjectEdited", String::new()),
            trace::stamp_in(&span, COMPONENT),
        );
        let mut decision = reconcile::drift::drifted_decision(base, found, seen.times, self.drift);
        let seen = self
            .recorder
            .count_on(&key, &mut decision, seen, self.drift)
            .await;
        let times = seen.times + 1;
        let input = &self.source.input_digest;
        let drift_id = match (seen.same, seen.drift_id) {
            (true, Some(id)) => id,
            _ if times <= CORRECTED_AT_ONCE + 1 || times.is_power_of_two() => {
                self.recorder
                    .record(&key, &decision, input, None, self.started)
                    .await?;
                if let Some(target) = &decision.target {
                    let client = api.clone().into_client();
                    let uid = field("/metadata/uid");
                    crate::record::report_on_object(client, target, uid, &decision);
                }
                decision.id.clone()
            }
            (_, last) => last.unwrap_or_else(|| decision.id.clone()),
        };
        if self.drift == DriftPolicy::Record {
            ledger.drifted(&key, times, version.as_deref(), None, &drift_id);
            return Ok(false);
        }
        let due = seen
            .due
            .unwrap_or_else(|| Instant::now() + correction_delay(times));
        ledger.drifted(&key, times, version.as_deref(), Some(due), &drift_id);
        if due > Instant::now() {
            return Ok(false);
        }
        let span = trace::follow_up_span(&decision);
        let (corrected, write) = reconcile::drift::correction(
            &decision,
            &drift_id,
            correction,
            trace::stamp_in(&span, COMPONENT),
        );
        let w = ObjectWrite {
            target,
            api,
            origin,
            verdict: Verdict::applied(live.is_some(), "DriftCorrected", corrected.message.clone()),
            write,
        };
        self.write(&w, &corrected).instrument(span).await?;
        // Corrected: the next drift is a new one, whatever names it.
        ledger.drifted(&key, times, None, None, &drift_id);
        Ok(true)
    }

    /// Records the decision about one object, then makes its write with the decision's id on
    /// the object (in the decision's span); a failed write is a Failed decision of its own, in
    /// a child span, and the error.
    pub async fn write(&self, w: &ObjectWrite, decision: &Decision) -> anyhow::Result<()> {
        let key = self.source.key_of(&w.target);
        let input = &self.source.input_digest;
        let recorded = self
            .recorder
            .record(&key, decision, input, None, self.started)
            .await?;
        let r = &w.target;
        let (verb, write) = match &w.write {
            Write::Create(object) => ("creating", Write::Create(with_id(object, decision))),
            Write::Apply(object) => ("applying", Write::Apply(with_id(object, decision))),
            Write::Replace(object) => ("replacing", Write::Replace(with_id(object, decision))),
            Write::Merge { name, patch } => (
                "patching",
                Write::Merge {
                    name: name.clone(),
                    patch: with_id(patch, decision),
                },
            ),
            Write::Delete { .. } => ("pruning", w.write.clone()),
        };
        let namespace = r.namespace.as_deref().unwrap_or("");
        let Err(e) = self.writer.write(&w.api, &r.kind, namespace, &write).await else {
            self.recorder.carried_out(recorded);
            return Ok(());
        };
        let span = trace::follow_up_span(decision);
        let failed =
            reconcile::failure::failed(decision, &e.to_string(), trace::stamp_in(&span, COMPONENT));
        let _ = self
            .recorder
            .record(&key, &failed, input, None, self.started)
            .instrument(span)
            .await;
        Err(e).with_context(|| format!("{verb} {r}"))
    }
}

/// Drifts in a row corrected at once; from the next one on, corrections wait.
const CORRECTED_AT_ONCE: u32 = 2;

/// How long the correction of the `times`th drift in a row of a compiled object waits: nothing
/// for the first ones, then twice as long each time from one second up to five minutes (the
/// Tenant's next reconcile after that makes it).
fn correction_delay(times: u32) -> Duration {
    if times <= CORRECTED_AT_ONCE {
        return Duration::ZERO;
    }
    Duration::from_secs(1u64 << (times - CORRECTED_AT_ONCE - 1).min(9)).min(MAX_CORRECTION_DELAY)
}

/// The longest a tug of war holds a compiled object's correction back.
const MAX_CORRECTION_DELAY: Duration = Duration::from_secs(300);

/// `object` with the id of `decision` on it (`tenantplane.io/decision-id`).
fn with_id(object: &Value, decision: &Decision) -> Value {
    let mut object = object.clone();
    object["metadata"]["annotations"][provenance::DECISION_ID] = json!(decision.id);
    object
}

/// The compiled object as applied: with the [`DESIRED_DIGEST`] annotation of its content, so
/// that the next reconcile sees it is in place without writing.
fn desired(object: &Value) -> (Value, String) {
    let d = digest(object);
    let mut desired = object.clone();
    if let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        annotations[DESIRED_DIGEST] = json!(d);
    }
    (desired, d)
}

/// Resolves kinds against a cluster's discovery, caching answers.
#[derive(Debug, Default)]
pub struct Resolver {
    cache: HashMap<(String, String), (ApiResource, Scope)>,
}

impl Resolver {
    /// The API of `api_version`/`kind` in the cluster of `client`, for `namespace` when
    /// namespaced.
    pub async fn api(
        &mut self,
        client: &Client,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let key = (api_version.to_string(), kind.to_string());
        if !self.cache.contains_key(&key) {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let (ar, caps) = discovery::pinned_kind(client, &gvk)
                .await
                .with_context(|| format!("the host serves no {api_version} {kind}"))?;
            self.cache.insert(key.clone(), (ar, caps.scope));
        }
        let (ar, scope) = &self.cache[&key];
        Ok(match (scope, namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
            _ => Api::all_with(client.clone(), ar),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compiled_object_is_applied_with_the_digest_of_its_content() {
        let object = json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "tenantplane-quota", "namespace": "tenant-acme"},
            "spec": {"hard": {"pods": "10"}}});
        let (applied, d) = desired(&object);
        assert_eq!(d, digest(&object));
        assert_eq!(applied["metadata"]["annotations"][DESIRED_DIGEST], json!(d));
        assert_eq!(applied["spec"], object["spec"]);
    }
}
