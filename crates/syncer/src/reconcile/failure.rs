//! Host failure and supersession: a decision whose host write was not made is closed by a
//! Failed decision of its own (`closes` = its id): the host refused the write for its content, the
//! host object changed since the decision was taken (the write's precondition, a 409), the write
//! failed otherwise, or the syncer stopped before making it (found when the Tenant's runtime
//! starts, [`crate::settle`]).

use tenantplane_core::decision::{Decision, Outcome, Stamp};

use crate::writer::{WriteError, WriteFailure};

/// The decision that `decision` was not carried out, its host write having failed with `error`
/// (recorded; whether and when the object is decided again is the caller's, by
/// [`WriteError::failure`]): superseded when the host object changed since (a 409), refused by
/// the host for its content, otherwise failed.
pub fn unapplied(decision: &Decision, error: &WriteError, stamp: Stamp) -> Decision {
    let answer = error.to_string();
    match error.failure {
        WriteFailure::Changed => superseded(decision, &answer, stamp),
        WriteFailure::Refused => refused_by_host(decision, &answer, stamp),
        WriteFailure::Failed => failed(decision, &answer, stamp),
    }
}

/// A decision turned into Failed because its host write failed (recorded; the key is retried).
pub fn failed(decision: &Decision, error: &str, stamp: Stamp) -> Decision {
    closing(
        decision,
        "HostWriteFailed",
        format!(
            "{} of the host object failed (decision {} stands unapplied): {error}",
            decision.action.as_str(),
            decision.id
        ),
        stamp,
    )
}

/// A decision turned into Failed because the host object changed between the state it was taken
/// on and its write, whose precondition refused it (409): nothing was written, and the object is
/// decided again on fresh state.
fn superseded(decision: &Decision, error: &str, stamp: Stamp) -> Decision {
    closing(
        decision,
        "HostObjectChanged",
        format!(
            "{} of the host object refused: it changed since decision {} was taken, which \
             stands unapplied; decided again on the host's current state ({error})",
            decision.action.as_str(),
            decision.id
        ),
        stamp,
    )
}

/// A decision turned into Failed because the host API server refused its write for what it
/// writes (admission, such as Pod Security, 403; or validation, 422): the same content would be
/// refused again, so it is not retried with backoff but when the tenant object changes, and at
/// the next resync.
fn refused_by_host(decision: &Decision, error: &str, stamp: Stamp) -> Decision {
    closing(
        decision,
        "HostRefused",
        format!(
            "{} of the host object refused by the host API server (decision {} stands \
             unapplied; tried again when the tenant object changes, and at the next resync): \
             {error}",
            decision.action.as_str(),
            decision.id
        ),
        stamp,
    )
}

/// The Failed decision closing `decision`, whose host write was not made: `decision` with the
/// stamp's id and time, the reason and the message (the component and trace stay `decision`'s:
/// this process took it).
fn closing(decision: &Decision, reason: &str, message: String, stamp: Stamp) -> Decision {
    let mut d = decision.clone();
    d.id = stamp.id;
    d.time = stamp.time;
    d.outcome = Outcome::Failed;
    d.reason = reason.into();
    d.message = message;
    d.closes = Some(decision.id.clone());
    d
}

/// The decision closing `decision`, recorded by an earlier life of the syncer, whose host action
/// was not carried out (`why`, what the host shows): the syncer stopped before making it. Of this
/// process: the stamp's component and trace.
pub fn not_carried_out(decision: &Decision, why: &str, stamp: Stamp) -> Decision {
    let message = format!(
        "the {} recorded by decision {} was not carried out: the syncer stopped before making \
         it ({why}); the object is decided again",
        decision.action.as_str(),
        decision.id
    );
    let Stamp {
        component,
        component_version,
        trace_id,
        span_id,
        ..
    } = stamp.clone();
    let mut d = closing(decision, "NotCarriedOut", message, stamp);
    d.component = component;
    d.component_version = component_version;
    d.trace_id = trace_id;
    d.span_id = span_id;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::{cm, decide, planner, stamp};
    use tenantplane_core::decision::HostAction;

    /// A write that failed with the API server's answer `code`.
    fn write_error(code: u16, message: &str) -> WriteError {
        WriteError::from(kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            ..Default::default()
        })))
    }

    #[test]
    fn a_write_refused_by_its_precondition_is_recorded_as_not_applied() {
        let create = decide(&planner(), &cm("a"), None).decision;
        let d = unapplied(&create, &write_error(409, "AlreadyExists"), stamp());
        assert_eq!(d.outcome, Outcome::Failed);
        assert_eq!(d.reason, "HostObjectChanged");
        assert_ne!(d.id, create.id);
        assert_eq!(d.closes.as_deref(), Some(create.id.as_str()));
        assert!(
            d.message.contains(&create.id) && d.message.contains("stands unapplied"),
            "{}",
            d.message
        );
    }

    #[test]
    fn a_write_refused_for_its_content_or_failing_otherwise_is_recorded_as_such() {
        let create = decide(&planner(), &cm("a"), None).decision;
        let d = unapplied(&create, &write_error(403, "violates PodSecurity"), stamp());
        assert_eq!(
            (d.outcome, d.reason.as_str()),
            (Outcome::Failed, "HostRefused")
        );
        assert!(d.message.contains("violates PodSecurity"), "{}", d.message);
        let d = unapplied(&create, &write_error(503, "unavailable"), stamp());
        assert_eq!(d.reason, "HostWriteFailed");
    }

    #[test]
    fn an_action_an_earlier_life_did_not_carry_out_is_closed_by_this_process() {
        let mut create = decide(&planner(), &cm("a"), None).decision;
        create.component_version = "0.0.0-earlier".into();
        create.trace_id = Some("earlier".into());
        let d = not_carried_out(&create, "gone", stamp());
        assert_eq!(
            (d.outcome, d.action, d.reason.as_str(), d.closes.as_deref()),
            (
                Outcome::Failed,
                HostAction::Create,
                "NotCarriedOut",
                Some(create.id.as_str())
            )
        );
        assert_eq!(d.component_version, stamp().component_version);
        assert_eq!(d.trace_id, None);
        assert!(
            d.message
                .contains(&format!("create recorded by decision {}", create.id)),
            "{}",
            d.message
        );
    }
}
