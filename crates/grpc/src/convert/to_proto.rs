//! Core → wire: what the servers answer with, and what the client sends.

use k8s_openapi::jiff::Timestamp;
use tenantplane_api::{IsolationLevel, SyncAction, Tenant};
use tenantplane_core::collision::{Collision, ConflictCause};
use tenantplane_core::decision::{HostAction, HostTarget, PolicyRef, ProfileRef, Stamp, Subject};
use tenantplane_core::drift::{Drift, DriftChange, FieldChange};
use tenantplane_core::mapping::{HostNameForm, MappingVersion, Provenance};
use tenantplane_core::{Decision, Outcome, Placement, Plan, SourceIdentity, Verdict};
use tenantplane_isolation::{CompiledObject, IsolationProvenance, ObjectRef};
use tenantplane_proto::isolation::v1 as isolation;
use tenantplane_proto::planner::v1 as planner;
use tenantplane_proto::types::v1 as types;

/// A tenant as the wire carries it: its name, explicit host namespace (empty: the default) and
/// the mapping scheme it resolves to.
pub fn tenant(tenant: &Tenant) -> types::TenantRef {
    types::TenantRef {
        name: tenant.name().to_string(),
        host_namespace: tenant.spec.host_namespace.clone().unwrap_or_default(),
        mapping_version: tenant.mapping_version().to_string(),
    }
}

/// The plan of one tenant object with its decision record, moved into the response (the server
/// builds them for the response alone, so nothing is copied). In `PLACEMENT_FORM_DERIVED` the
/// placement carries its target and name form only; in `PLAN_FORM_MINIMAL` the plan carries only
/// what the caller cannot derive from its request and the response (see planner.proto), and
/// `decision` is expected in the compact form.
pub fn object_plan(
    source: SourceIdentity,
    plan: Plan,
    mut decision: types::Decision,
    placement_form: planner::PlacementForm,
    plan_form: planner::PlanForm,
) -> planner::ObjectPlan {
    let Plan {
        placement,
        verdict,
        collision,
        outcome,
        action,
        mut reason,
        mut message,
        profile,
    } = plan;
    let minimal = plan_form == planner::PlanForm::Minimal;
    if minimal {
        // What equals the verdict's, the response's or the request's is left to the caller.
        if reason == verdict.reason {
            reason.clear();
        }
        if message == verdict.message {
            message.clear();
        }
        decision.mapping_version.clear();
        decision.component.clear();
        decision.component_version.clear();
    }
    let mut verdict = self::verdict(verdict);
    if let Some(policy) = verdict.policy.as_mut().filter(|_| minimal) {
        policy.name.clear();
        policy.revision.clear();
    }
    planner::ObjectPlan {
        source: (!minimal).then(|| source_identity(source)),
        placement: (!minimal).then(|| self::placement(placement, placement_form)),
        verdict: Some(verdict),
        collision: collision.as_ref().map(self::collision),
        outcome: self::outcome(outcome).into(),
        action: host_action(action).into(),
        reason,
        message,
        decision: Some(decision),
        profile: profile.map(profile_ref),
    }
}

/// A decision record in the compact form (`DECISION_FORM_COMPACT`): only what its plan and
/// request do not determine, the stamp and the digest of the object as the planner read it; see
/// planner.proto for how a client rebuilds the rest.
pub fn compact_decision(
    stamp: Stamp,
    input_digest: String,
    mapping: MappingVersion,
) -> types::Decision {
    let Stamp {
        id,
        time,
        component,
        component_version,
        trace_id,
        span_id,
    } = stamp;
    types::Decision {
        id,
        time: Some(timestamp(time)),
        input_digest,
        mapping_version: mapping.to_string(),
        component,
        component_version,
        trace_id: trace_id.unwrap_or_default(),
        span_id: span_id.unwrap_or_default(),
        ..types::Decision::default()
    }
}

/// A tenant object's identity.
fn source_identity(id: SourceIdentity) -> types::SourceIdentity {
    let SourceIdentity {
        api_version,
        kind,
        namespace,
        name,
        uid,
    } = id;
    types::SourceIdentity {
        api_version,
        kind,
        namespace,
        name,
        uid,
    }
}

fn placement(p: Placement, form: planner::PlacementForm) -> planner::Placement {
    let derived = form == planner::PlacementForm::Derived;
    planner::Placement {
        target: Some(types::ObjectRef {
            api_version: p.api_version,
            kind: p.kind,
            namespace: p.namespace,
            name: p.name,
        }),
        name_form: match p.name_form {
            HostNameForm::Readable => planner::NameForm::Readable,
            HostNameForm::Hashed => planner::NameForm::Hashed,
        }
        .into(),
        labels: if derived {
            Default::default()
        } else {
            p.labels.into_iter().collect()
        },
        annotations: if derived {
            Default::default()
        } else {
            p.annotations.into_iter().collect()
        },
        stripped_keys: if derived { Vec::new() } else { p.stripped_keys },
    }
}

fn verdict(v: Verdict) -> planner::Verdict {
    planner::Verdict {
        policy: Some(types::PolicyRef {
            name: v.policy,
            revision: v.policy_revision,
            rule: v.rule.unwrap_or_default(),
        }),
        action: match v.action {
            SyncAction::Sync => planner::SyncAction::Sync,
            SyncAction::Skip => planner::SyncAction::Skip,
            SyncAction::Reject => planner::SyncAction::Reject,
        }
        .into(),
        reason: v.reason,
        message: v.message,
        field_path: v.field_path.unwrap_or_default(),
    }
}

/// A SyncPolicy (no rule: the policy as a whole).
pub fn policy_ref(name: &str, revision: &str) -> types::PolicyRef {
    types::PolicyRef {
        name: name.to_string(),
        revision: revision.to_string(),
        rule: String::new(),
    }
}

fn collision(c: &Collision) -> planner::Collision {
    let (kind, owner, cause) = match c {
        Collision::Create => (planner::CollisionKind::Create, "", None),
        Collision::UpdateOwn => (planner::CollisionKind::UpdateOwn, "", None),
        Collision::Conflict { owner, differs } => (
            planner::CollisionKind::Conflict,
            owner.as_str(),
            Some(*differs),
        ),
    };
    planner::Collision {
        kind: kind.into(),
        owner: owner.to_string(),
        cause: cause
            .map_or(planner::ConflictCause::Unspecified, conflict_cause)
            .into(),
    }
}

fn conflict_cause(cause: ConflictCause) -> planner::ConflictCause {
    match cause {
        ConflictCause::NoProvenance => planner::ConflictCause::NoProvenance,
        ConflictCause::IncompleteProvenance => planner::ConflictCause::IncompleteProvenance,
        ConflictCause::OtherTenant => planner::ConflictCause::OtherTenant,
        ConflictCause::OtherKind => planner::ConflictCause::OtherKind,
        ConflictCause::OtherSource => planner::ConflictCause::OtherSource,
        ConflictCause::OtherUid => planner::ConflictCause::OtherUid,
    }
}

fn outcome(o: Outcome) -> types::Outcome {
    match o {
        Outcome::Synced => types::Outcome::Synced,
        Outcome::Unchanged => types::Outcome::Unchanged,
        Outcome::Skipped => types::Outcome::Skipped,
        Outcome::Rejected => types::Outcome::Rejected,
        Outcome::Conflict => types::Outcome::Conflict,
        Outcome::Deleted => types::Outcome::Deleted,
        Outcome::Failed => types::Outcome::Failed,
        Outcome::Deferred => types::Outcome::Deferred,
        Outcome::Drifted => types::Outcome::Drifted,
    }
}

fn host_action(a: HostAction) -> types::HostAction {
    match a {
        HostAction::Create => types::HostAction::Create,
        HostAction::Update => types::HostAction::Update,
        HostAction::Delete => types::HostAction::Delete,
        HostAction::None => types::HostAction::None,
    }
}

/// A decision record.
pub fn decision(d: &Decision) -> types::Decision {
    decision_of(d.clone())
}

/// A decision record, moved.
pub fn decision_of(d: Decision) -> types::Decision {
    let Subject {
        api_version,
        kind,
        namespace,
        name,
        uid,
        resource_version,
    } = d.subject;
    types::Decision {
        id: d.id,
        time: Some(timestamp(d.time)),
        tenant: d.tenant,
        subject: Some(types::Subject {
            api_version,
            kind,
            namespace,
            name,
            uid,
            resource_version,
        }),
        target: d.target.map(|t: HostTarget| types::ObjectRef {
            api_version: t.api_version,
            kind: t.kind,
            namespace: t.namespace,
            name: t.name,
        }),
        outcome: outcome(d.outcome).into(),
        action: host_action(d.action).into(),
        policy: d.policy.map(|p: PolicyRef| types::PolicyRef {
            name: p.name,
            revision: p.revision,
            rule: p.rule.unwrap_or_default(),
        }),
        profile: d.profile.map(profile_ref),
        reason: d.reason,
        message: d.message,
        field_path: d.field_path.unwrap_or_default(),
        stripped_keys: d.stripped_keys,
        input_digest: d.input_digest,
        mapping_version: d.mapping_version,
        component: d.component,
        component_version: d.component_version,
        trace_id: d.trace_id.unwrap_or_default(),
        span_id: d.span_id.unwrap_or_default(),
        closes: d.closes.unwrap_or_default(),
        tokens: d
            .tokens
            .into_iter()
            .map(|t| types::IssuedToken {
                service_account: t.service_account,
                audiences: t.audiences,
                expires: Some(timestamp(t.expires)),
                key: t.key,
            })
            .collect(),
        drift: d.drift.map(drift),
    }
}

/// A decision's drift.
fn drift(d: Drift) -> types::Drift {
    let change = match d.change {
        DriftChange::Edited => types::DriftChange::Edited,
        DriftChange::Deleted => types::DriftChange::Deleted,
        DriftChange::ProvenanceRemoved => types::DriftChange::ProvenanceRemoved,
    };
    types::Drift {
        change: change.into(),
        corrects: d.corrects.unwrap_or_default(),
        fields: d
            .fields
            .into_iter()
            .map(|f| {
                let change = match f.change {
                    FieldChange::Changed => types::FieldChange::Changed,
                    FieldChange::Removed => types::FieldChange::Removed,
                    FieldChange::Added => types::FieldChange::Added,
                };
                types::DriftedField {
                    path: f.path,
                    change: change.into(),
                    by: f.by.map(|w| types::FieldWriter {
                        manager: w.manager,
                        operation: w.operation,
                        time: w.time.map(timestamp),
                    }),
                }
            })
            .collect(),
        times: d.times,
    }
}

/// An IsolationProfile reference.
pub fn profile_ref(p: ProfileRef) -> types::ProfileRef {
    types::ProfileRef {
        name: p.name,
        generation: p.generation,
        field_path: p.field_path,
        rule: p.rule.unwrap_or_default(),
    }
}

fn timestamp(t: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.as_second(),
        nanos: t.subsec_nanosecond(),
    }
}

/// A host object's provenance.
pub fn provenance(p: &Provenance) -> planner::Provenance {
    planner::Provenance {
        tenant: p.tenant.clone(),
        source: Some(source_identity(p.source.clone())),
        mapping_version: p.mapping_version.clone(),
        decision_id: p.decision_id.clone().unwrap_or_default(),
    }
}

/// An object identity (cluster-scoped: empty namespace).
pub fn object_ref(r: &ObjectRef) -> types::ObjectRef {
    types::ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone().unwrap_or_default(),
        name: r.name.clone(),
    }
}

/// A compiled isolation object: identity, JSON and provenance.
pub fn compiled_object(o: &CompiledObject) -> isolation::CompiledObject {
    let IsolationProvenance {
        profile,
        generation,
        level,
        field_paths,
        explanation,
        refused_field,
    } = &o.provenance;
    isolation::CompiledObject {
        r#ref: ObjectRef::from_object(&o.object).as_ref().map(object_ref),
        object: serde_json::to_vec(&o.object).expect("a JSON value always serializes"),
        provenance: Some(isolation::IsolationProvenance {
            profile: profile.clone(),
            generation: *generation,
            level: isolation_level(*level).into(),
            field_paths: field_paths.clone(),
            explanation: explanation.clone(),
            refused_field: refused_field.clone().unwrap_or_default(),
        }),
    }
}

fn isolation_level(level: IsolationLevel) -> isolation::IsolationLevel {
    match level {
        IsolationLevel::Baseline => isolation::IsolationLevel::Baseline,
        IsolationLevel::Restricted => isolation::IsolationLevel::Restricted,
        IsolationLevel::Strict => isolation::IsolationLevel::Strict,
    }
}
