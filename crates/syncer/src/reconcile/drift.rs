//! Drift decisions: a host object tenantplane manages that someone else edited or deleted on the
//! host ([`tenantplane_core::drift`] finds what differs and who did it), the Drifted decision that
//! records it, and the decision that corrects it (the fields tenantplane sets re-applied, the
//! object re-created), linked to it by [`Drift::corrects`].
//!
//! ```text
//!  host event (not this syncer's write) ──▶ HostChange::Changed(the object as the host sent it)
//!  host delete (not this syncer's)      ──▶ HostChange::Deleted(the digest it recorded)
//!        │
//!        ▼  reconcile_present, when the tenant object is unchanged since tenantplane set the host object
//!  drift::detect ──▶ Drifted decision (who, what, when; times in a row)
//!                        └─ Revert: correction(drifted) ──▶ Synced decision + its write (PUT / POST)
//!                           Record: nothing written; the Tenant's Drifted condition says so
//! ```

use serde_json::Value;
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_core::decision::{Decision, HostAction, Outcome, Stamp};
use tenantplane_core::drift::{Drift, DriftChange};

use super::{Step, with_decision_id};
use crate::writer::Write;

/// What the host shows of a host object since the syncer last decided about it.
#[derive(Clone, Copy, Debug, Default)]
pub enum HostChange<'a> {
    /// Nothing written by anyone else: only this syncer's own writes, or status.
    #[default]
    Unseen,
    /// Written by another hand: the object as the host sent it, managedFields and all.
    Changed(&'a Value),
    /// Deleted by someone else while its source still wants it; with the desired digest the
    /// deleted object recorded (what the tenant object produced then).
    Deleted(Option<&'a str>),
}

/// The Drifted decision taking the place of `step` (the decision and write that would correct
/// the drift): same subject and target, outcome Drifted, no write; the correction's write kept
/// for [`correction`] under `Revert`. `streak`: how many times in a row the object drifted
/// before.
pub fn drifted(step: Step, drift: Drift, streak: u32, policy: DriftPolicy) -> Step {
    Step {
        decision: drifted_decision(step.decision, drift, streak, policy),
        write: None,
        status_up: None,
        correction: step.write.filter(|_| policy == DriftPolicy::Revert),
    }
}

/// `decision` (about the drifted host object) made the Drifted decision that records `drift`,
/// the `streak + 1`th in a row.
pub fn drifted_decision(
    mut decision: Decision,
    mut drift: Drift,
    streak: u32,
    policy: DriftPolicy,
) -> Decision {
    drift.times = streak + 1;
    decision.message = drift.message(policy);
    decision.outcome = Outcome::Drifted;
    decision.action = HostAction::None;
    decision.reason = drift.change.reason().into();
    decision.drift = Some(drift);
    decision
}

/// The decision correcting the drift `drifted` finds, linked to the Drifted decision that
/// recorded it (`corrects`: `drifted` itself, or in a tug of war the last one recorded), with
/// `write` (the Drifted step's correction) carrying its id: Synced, the host object re-applied
/// (a replace, which also removes what another manager added to the tenant's content) or
/// re-created.
pub fn correction(
    drifted: &Decision,
    corrects: &str,
    write: Write,
    stamp: Stamp,
) -> (Decision, Write) {
    let drift = drifted
        .drift
        .as_ref()
        .expect("a Drifted decision carries its drift");
    let (action, reason, what) = match drift.change {
        DriftChange::Deleted => (
            HostAction::Create,
            "HostObjectRecreated",
            "re-created the host object deleted on the host",
        ),
        DriftChange::ProvenanceRemoved => (
            HostAction::Update,
            "HostProvenanceRestored",
            "restored the provenance removed on the host, and every field tenantplane sets",
        ),
        DriftChange::Edited => (
            HostAction::Update,
            "HostEditReverted",
            "re-applied what tenantplane sets over the edit made on the host",
        ),
    };
    let decision = Decision {
        id: stamp.id,
        time: stamp.time,
        outcome: Outcome::Synced,
        action,
        reason: reason.into(),
        message: format!("{what} (drift decision {corrects})"),
        component: stamp.component,
        component_version: stamp.component_version,
        trace_id: stamp.trace_id,
        span_id: stamp.span_id,
        closes: None,
        drift: Some(drift.correcting(corrects)),
        ..drifted.clone()
    };
    let write = match write {
        Write::Create(o) => Write::Create(with_decision_id(o, &decision.id)),
        Write::Replace(o) => Write::Replace(with_decision_id(o, &decision.id)),
        other => other,
    };
    (decision, write)
}
