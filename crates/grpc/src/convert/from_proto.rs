//! Wire → core: request fields the servers read, and responses the client turns back into the
//! core's own types (so a remote plan is the very `Plan` and `Decision` the offline path makes).
//!
//! Every function names the offending field by its proto path in a [`FieldError`]: the servers
//! answer it as INVALID_ARGUMENT, the client reports it as a malformed response.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tenantplane_api::{IsolationLevel, SyncAction, Tenant, TenantSpec};
use tenantplane_core::collision::{Collision, ConflictCause};
use tenantplane_core::decision::{HostAction, HostTarget, PolicyRef, ProfileRef, Subject};
use tenantplane_core::mapping::{HostNameForm, NameSyntax, Provenance};
use tenantplane_core::{Decision, Outcome, Placement, Plan, SourceIdentity, Verdict};
use tenantplane_isolation::{CompiledObject, IsolationProvenance, ObjectRef};
use tenantplane_proto::isolation::v1 as isolation;
use tenantplane_proto::planner::v1 as planner;
use tenantplane_proto::types::v1 as types;

use crate::error::FieldError;

/// The Tenant a TenantRef names: a DNS-1123 label name and an optional host namespace.
pub fn tenant(tenant: Option<&types::TenantRef>) -> Result<Tenant, FieldError> {
    let tenant = tenant.ok_or_else(|| FieldError::new("tenant", "is required"))?;
    dns_label("tenant.name", &tenant.name)?;
    let host_namespace = if tenant.host_namespace.is_empty() {
        None
    } else {
        dns_label("tenant.host_namespace", &tenant.host_namespace)?;
        Some(tenant.host_namespace.clone())
    };
    Ok(Tenant::new(
        &tenant.name,
        TenantSpec {
            host_namespace,
            ..TenantSpec::default()
        },
    ))
}

fn dns_label(field: &str, value: &str) -> Result<(), FieldError> {
    if value.is_empty() {
        return Err(FieldError::new(field, "is required"));
    }
    if value.len() > 63 || value.contains('.') || !NameSyntax::Dns1123Subdomain.is_valid(value) {
        return Err(FieldError::new(
            field,
            format!(
                "{value:?} is not a DNS-1123 label (lowercase letters, digits and '-', \
                 at most 63 characters, starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// A Kubernetes object carried as UTF-8 JSON bytes.
pub fn json_object(field: &str, bytes: &[u8]) -> Result<Value, FieldError> {
    serde_json::from_slice(bytes)
        .map_err(|e| FieldError::new(field, format!("is not a JSON document: {e}")))
}

/// A YAML or JSON document (a SyncPolicy or an IsolationProfile) carried as UTF-8 bytes.
pub fn text(field: &str, bytes: &[u8]) -> Result<String, FieldError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|e| FieldError::new(field, format!("is not UTF-8 text: {e}")))
}

/// An object identity, namespace empty for cluster-scoped objects.
pub fn object_ref(field: &str, r: &types::ObjectRef) -> Result<ObjectRef, FieldError> {
    for (name, value) in [
        ("api_version", &r.api_version),
        ("kind", &r.kind),
        ("name", &r.name),
    ] {
        if value.is_empty() {
            return Err(FieldError::new(format!("{field}.{name}"), "is required"));
        }
    }
    Ok(ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: some(&r.namespace),
        name: r.name.clone(),
    })
}

/// The plan and decision of one object, as the planner answered them.
pub fn object_plan(field: &str, p: &planner::ObjectPlan) -> Result<(Plan, Decision), FieldError> {
    let placement = required(field, "placement", p.placement.as_ref())?;
    let target = required(field, "placement.target", placement.target.as_ref())?;
    let v = required(field, "verdict", p.verdict.as_ref())?;
    let policy = required(field, "verdict.policy", v.policy.as_ref())?;
    let plan = Plan {
        placement: Placement {
            api_version: target.api_version.clone(),
            kind: target.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            name_form: match placement.name_form() {
                planner::NameForm::Readable => HostNameForm::Readable,
                planner::NameForm::Hashed => HostNameForm::Hashed,
                planner::NameForm::Unspecified => {
                    return Err(unspecified(&format!("{field}.placement.name_form")));
                }
            },
            labels: placement.labels.clone().into_iter().collect(),
            annotations: placement.annotations.clone().into_iter().collect(),
            stripped_keys: placement.stripped_keys.clone(),
        },
        verdict: Verdict {
            policy: policy.name.clone(),
            policy_revision: policy.revision.clone(),
            rule: some(&policy.rule),
            action: match v.action() {
                planner::SyncAction::Sync => SyncAction::Sync,
                planner::SyncAction::Skip => SyncAction::Skip,
                planner::SyncAction::Reject => SyncAction::Reject,
                planner::SyncAction::Unspecified => {
                    return Err(unspecified(&format!("{field}.verdict.action")));
                }
            },
            reason: v.reason.clone(),
            message: v.message.clone(),
            field_path: some(&v.field_path),
        },
        collision: p
            .collision
            .as_ref()
            .map(|c| collision(&format!("{field}.collision"), c))
            .transpose()?,
        outcome: outcome(&format!("{field}.outcome"), p.outcome())?,
        action: host_action(&format!("{field}.action"), p.action())?,
        reason: p.reason.clone(),
        message: p.message.clone(),
    };
    let decision = decision(
        &format!("{field}.decision"),
        required(field, "decision", p.decision.as_ref())?,
    )?;
    Ok((plan, decision))
}

fn collision(field: &str, c: &planner::Collision) -> Result<Collision, FieldError> {
    Ok(match c.kind() {
        planner::CollisionKind::Create => Collision::Create,
        planner::CollisionKind::UpdateOwn => Collision::UpdateOwn,
        planner::CollisionKind::Conflict => Collision::Conflict {
            owner: c.owner.clone(),
            differs: match c.cause() {
                planner::ConflictCause::NoProvenance => ConflictCause::NoProvenance,
                planner::ConflictCause::IncompleteProvenance => ConflictCause::IncompleteProvenance,
                planner::ConflictCause::OtherTenant => ConflictCause::OtherTenant,
                planner::ConflictCause::OtherKind => ConflictCause::OtherKind,
                planner::ConflictCause::OtherSource => ConflictCause::OtherSource,
                planner::ConflictCause::OtherUid => ConflictCause::OtherUid,
                planner::ConflictCause::Unspecified => {
                    return Err(unspecified(&format!("{field}.cause")));
                }
            },
        },
        planner::CollisionKind::Unspecified => return Err(unspecified(&format!("{field}.kind"))),
    })
}

/// A decision record.
pub fn decision(field: &str, d: &types::Decision) -> Result<Decision, FieldError> {
    let time = required(field, "time", d.time.as_ref())?;
    let subject = required(field, "subject", d.subject.as_ref())?;
    Ok(Decision {
        id: d.id.clone(),
        time: Timestamp::new(time.seconds, time.nanos)
            .map_err(|e| FieldError::new(format!("{field}.time"), e.to_string()))?,
        tenant: d.tenant.clone(),
        subject: Subject {
            api_version: subject.api_version.clone(),
            kind: subject.kind.clone(),
            namespace: subject.namespace.clone(),
            name: subject.name.clone(),
            uid: subject.uid.clone(),
            resource_version: subject.resource_version.clone(),
        },
        target: d.target.as_ref().map(|t| HostTarget {
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
        }),
        outcome: outcome(&format!("{field}.outcome"), d.outcome())?,
        action: host_action(&format!("{field}.action"), d.action())?,
        policy: d.policy.as_ref().map(|p| PolicyRef {
            name: p.name.clone(),
            revision: p.revision.clone(),
            rule: some(&p.rule),
        }),
        profile: d.profile.as_ref().map(|p| ProfileRef {
            name: p.name.clone(),
            generation: p.generation,
            field_path: p.field_path.clone(),
        }),
        reason: d.reason.clone(),
        message: d.message.clone(),
        field_path: some(&d.field_path),
        stripped_keys: d.stripped_keys.clone(),
        input_digest: d.input_digest.clone(),
        mapping_version: d.mapping_version.clone(),
        component: d.component.clone(),
        component_version: d.component_version.clone(),
        trace_id: some(&d.trace_id),
        span_id: some(&d.span_id),
    })
}

fn outcome(field: &str, o: types::Outcome) -> Result<Outcome, FieldError> {
    Ok(match o {
        types::Outcome::Synced => Outcome::Synced,
        types::Outcome::Unchanged => Outcome::Unchanged,
        types::Outcome::Skipped => Outcome::Skipped,
        types::Outcome::Rejected => Outcome::Rejected,
        types::Outcome::Conflict => Outcome::Conflict,
        types::Outcome::Deleted => Outcome::Deleted,
        types::Outcome::Failed => Outcome::Failed,
        types::Outcome::Deferred => Outcome::Deferred,
        types::Outcome::Unspecified => return Err(unspecified(field)),
    })
}

fn host_action(field: &str, a: types::HostAction) -> Result<HostAction, FieldError> {
    Ok(match a {
        types::HostAction::Create => HostAction::Create,
        types::HostAction::Update => HostAction::Update,
        types::HostAction::Delete => HostAction::Delete,
        types::HostAction::None => HostAction::None,
        types::HostAction::Unspecified => return Err(unspecified(field)),
    })
}

/// A host object's provenance.
pub fn provenance(field: &str, p: &planner::Provenance) -> Result<Provenance, FieldError> {
    Ok(Provenance {
        tenant: p.tenant.clone(),
        source: source_identity(required(field, "source", p.source.as_ref())?),
        mapping_version: p.mapping_version.clone(),
        decision_id: some(&p.decision_id),
    })
}

/// A tenant object's identity.
pub fn source_identity(id: &types::SourceIdentity) -> SourceIdentity {
    SourceIdentity {
        api_version: id.api_version.clone(),
        kind: id.kind.clone(),
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        uid: id.uid.clone(),
    }
}

/// A compiled isolation object.
pub fn compiled_object(
    field: &str,
    o: &isolation::CompiledObject,
) -> Result<CompiledObject, FieldError> {
    let p = required(field, "provenance", o.provenance.as_ref())?;
    Ok(CompiledObject {
        object: json_object(&format!("{field}.object"), &o.object)?,
        provenance: IsolationProvenance {
            profile: p.profile.clone(),
            generation: p.generation,
            level: match p.level() {
                isolation::IsolationLevel::Baseline => IsolationLevel::Baseline,
                isolation::IsolationLevel::Restricted => IsolationLevel::Restricted,
                isolation::IsolationLevel::Strict => IsolationLevel::Strict,
                isolation::IsolationLevel::Unspecified => {
                    return Err(unspecified(&format!("{field}.provenance.level")));
                }
            },
            field_paths: p.field_paths.clone(),
            explanation: p.explanation.clone(),
        },
    })
}

fn required<'a, T>(field: &str, name: &str, value: Option<&'a T>) -> Result<&'a T, FieldError> {
    value.ok_or_else(|| FieldError::new(format!("{field}.{name}"), "is required"))
}

/// An enum at its UNSPECIFIED zero. prost's getters turn values unknown to this build into the
/// zero value, so this also covers values a newer peer added.
fn unspecified(field: &str) -> FieldError {
    FieldError::new(field, "is unspecified or unknown to this client")
}

/// An absent string: empty on the wire.
fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}
