//! Wire → core: request fields the servers read, and responses the client turns back into the
//! core's own types (so a remote plan is the very `Plan` and `Decision` the offline path makes).
//!
//! Every function names the offending field by its proto path in a [`FieldError`]: the servers
//! answer it as INVALID_ARGUMENT, the client reports it as a malformed response.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tenantplane_api::{IsolationLevel, IsolationProfile, SyncAction, Tenant, TenantSpec};
use tenantplane_core::collision::{Collision, ConflictCause};
use tenantplane_core::decision::{
    HostAction, HostTarget, IssuedToken, PolicyRef, ProfileRef, Stamp, Subject,
};
use tenantplane_core::drift::{Drift, DriftChange, DriftedField, FieldChange, FieldWriter};
use tenantplane_core::mapping::{
    self, HostNameForm, MappingVersion, NameSyntax, Provenance, TenantPlacement,
};
use tenantplane_core::planner::json_digest;
use tenantplane_core::{Decision, Outcome, Placement, Plan, SourceIdentity, TenantObject, Verdict};
use tenantplane_isolation::{CompiledObject, IsolationProvenance, ObjectRef};
use tenantplane_proto::isolation::v1 as isolation;
use tenantplane_proto::planner::v1 as planner;
use tenantplane_proto::types::v1 as types;

use crate::error::{FieldError, RequestError};

/// The Tenant a TenantRef names: a DNS-1123 label name, an optional host namespace and its
/// mapping scheme (empty: `v1`).
pub fn tenant(tenant: Option<&types::TenantRef>) -> Result<Tenant, FieldError> {
    let tenant = tenant.ok_or_else(|| FieldError::new("tenant", "is required"))?;
    dns_label("tenant.name", &tenant.name)?;
    let host_namespace = if tenant.host_namespace.is_empty() {
        None
    } else {
        dns_label("tenant.host_namespace", &tenant.host_namespace)?;
        Some(tenant.host_namespace.clone())
    };
    let mapping_version = match tenant.mapping_version.as_str() {
        "" => MappingVersion::V1,
        v => MappingVersion::parse(v).ok_or_else(|| {
            FieldError::new(
                "tenant.mapping_version",
                format!("is {v:?}; this planner computes the mapping schemes v1 and v2"),
            )
        })?,
    };
    Ok(Tenant::new(
        &tenant.name,
        TenantSpec {
            host_namespace,
            mapping_version: Some(mapping_version),
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

/// A Kubernetes object carried as UTF-8 JSON bytes; `field`, its proto path, is only formatted
/// for an error.
pub fn json_object(field: impl fmt::Display, bytes: &[u8]) -> Result<Value, FieldError> {
    // The document is checked for UTF-8 once, so that the parser need not check each string.
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FieldError::new(field.to_string(), format!("is not UTF-8 JSON: {e}")))?;
    serde_json::from_str(text)
        .map_err(|e| FieldError::new(field.to_string(), format!("is not a JSON document: {e}")))
}

/// A YAML or JSON document (a SyncPolicy or an IsolationProfile) carried as UTF-8 bytes.
pub fn text(field: &str, bytes: &[u8]) -> Result<String, FieldError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|e| FieldError::new(field, format!("is not UTF-8 text: {e}")))
}

/// The IsolationProfile (YAML or JSON) carried at the request field `at`.
pub fn isolation_profile(at: &'static str, bytes: &[u8]) -> Result<IsolationProfile, RequestError> {
    let text = text(at, bytes)?;
    let document: Value = serde_norway::from_str(&text)
        .map_err(|e| FieldError::new(at, format!("is not YAML or JSON: {e}")))?;
    tenantplane_isolation::decode(&document).map_err(RequestError::isolation(at))
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

/// The plan and decision of one object, as the planner answered them in the full forms (every
/// decision and placement field set), moved out of the response.
pub fn object_plan(field: &str, p: planner::ObjectPlan) -> Result<(Plan, Decision), FieldError> {
    // The full placement names its mapping scheme in its annotations; v1 is what planners that
    // predate v2 placed with.
    let (_, plan, decision) = plan_parts(field, p, None, None, MappingVersion::V1)?;
    Ok((plan, decision_of(&format!("{field}.decision"), decision)?))
}

/// An object a client sent to be planned, with what completes the planner's answer for it in
/// the derived and minimal forms: where the mapping places it and the digest of the JSON sent.
/// Both are computed while the object is encoded for the request, whatever form the planner then
/// answers in, since the client learns the form from the answer.
#[derive(Clone, Debug)]
pub struct SentObject<'a> {
    object: &'a TenantObject,
    placement: Placement,
    input_digest: String,
}

impl<'a> SentObject<'a> {
    /// `object`, sent for `tenant`: its [`object_json`] for the request, and the object placed
    /// by [`mapping::place`], the code the planner runs, with the input digest of that JSON.
    pub fn encode(tenant: &TenantPlacement, object: &'a TenantObject) -> (Vec<u8>, Self) {
        let json = object_json(object);
        let sent = SentObject {
            object,
            placement: mapping::place(tenant, object),
            input_digest: json_digest(&json),
        };
        (json, sent)
    }

    /// Where the mapping places the object.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }
}

/// A tenant object as the JSON a Plan request carries: canonical (serde_json keeps object keys
/// sorted), so that its digest is the object's input digest.
pub fn object_json(object: &TenantObject) -> Vec<u8> {
    serde_json::to_vec(&object.object).expect("a JSON value serializes")
}

/// How the plans of one Plan answer are completed: in the forms the response says it is in,
/// what the planner left out is derived or rebuilt here, by the core code that computed it on the
/// planner, from what was sent. The request named the tenant's mapping scheme.
#[derive(Clone, Copy, Debug)]
pub struct PlanAnswer<'a> {
    /// The tenant of the request.
    tenant: &'a TenantPlacement,
    /// `DECISION_FORM_COMPACT`: each decision is rebuilt from its plan.
    compact_decisions: bool,
    /// `PLACEMENT_FORM_DERIVED`: each placement's labels, annotations and stripped keys are
    /// derived from the object sent.
    derived_placements: bool,
    /// `PLAN_FORM_MINIMAL`: what the response says once for all its plans.
    minimal: Option<Shared<'a>>,
}

/// What the plans of an answer in `PLAN_FORM_MINIMAL` leave to their response.
#[derive(Clone, Copy, Debug)]
struct Shared<'a> {
    /// The policy of every verdict, but for its rule.
    policy: &'a types::PolicyRef,
    /// The component that stamped the decisions, and its version.
    component: &'a str,
    component_version: &'a str,
}

impl<'a> PlanAnswer<'a> {
    /// The forms of `response` (its plans taken out or not), to a request for `tenant`.
    pub fn of(
        response: &'a planner::PlanResponse,
        tenant: &'a TenantPlacement,
    ) -> Result<Self, FieldError> {
        let minimal = if response.plan_form() == planner::PlanForm::Minimal {
            let component = response.component.as_str();
            if component.is_empty() {
                return Err(FieldError::new(
                    "component",
                    "is required in PLAN_FORM_MINIMAL",
                ));
            }
            Some(Shared {
                policy: response
                    .policy
                    .as_ref()
                    .ok_or_else(|| FieldError::new("policy", "is required in PLAN_FORM_MINIMAL"))?,
                component,
                component_version: &response.component_version,
            })
        } else {
            None
        };
        Ok(PlanAnswer {
            tenant,
            compact_decisions: response.decision_form() == planner::DecisionForm::Compact,
            derived_placements: response.placement_form() == planner::PlacementForm::Derived,
            minimal,
        })
    }

    /// The plan and decision of `p`, the answer at `field` for the object `sent` (the object
    /// sent as `objects[i]`), moved out of the response. In the compact decision form the
    /// decision (which carries its stamp, digest and mapping version only) is rebuilt by
    /// [`Plan::decision_about`], the code that built it on the planner, from the plan, the tenant
    /// and the object sent. In the derived placement form the placement is the object's
    /// [`mapping::place`], which must land at the target the planner answered; in the minimal
    /// form, which leaves the target out too, it is that placement as it is.
    pub fn object_plan(
        &self,
        field: &str,
        p: planner::ObjectPlan,
        sent: SentObject,
    ) -> Result<(Plan, Decision), FieldError> {
        let derived = self.derived_placements.then_some(sent.placement);
        let (source, plan, d) = plan_parts(
            field,
            p,
            derived,
            self.minimal.as_ref(),
            self.tenant.mapping,
        )?;
        if !self.compact_decisions {
            return Ok((plan, decision_of(&format!("{field}.decision"), d)?));
        }
        let source = match (source, &self.minimal) {
            (Some(source), _) => source_identity_of(source),
            (None, Some(_)) => sent.object.identity.clone(),
            (None, None) => return Err(FieldError::new(format!("{field}.source"), "is required")),
        };
        let (component, component_version, mapping_version, input_digest) = match &self.minimal {
            Some(shared) => (
                shared.component.to_string(),
                shared.component_version.to_string(),
                self.tenant.mapping.to_string(),
                sent.input_digest,
            ),
            None => (
                d.component,
                d.component_version,
                d.mapping_version,
                d.input_digest,
            ),
        };
        let time = required(field, "decision.time", d.time.as_ref())?;
        let stamp = Stamp {
            time: timestamp(field, "decision.time", time)?,
            id: d.id,
            component,
            component_version,
            trace_id: some_moved(d.trace_id),
            span_id: some_moved(d.span_id),
        };
        // The input digest is the planner's (of the object as it read it) or, in minimal plans,
        // that of the JSON sent, so the object is not serialized again.
        let decision = plan.decision_about(
            &self.tenant.tenant,
            source,
            sent.object.resource_version.clone().unwrap_or_default(),
            stamp,
            input_digest,
            mapping_version,
        );
        Ok((plan, decision))
    }
}

/// An ObjectPlan's source identity (which the full form does not need), plan and decision
/// message. With `derived` (the sent object's placement), the answer carries only the target
/// and name form, which must be where `derived` lands, or, with `minimal`, no placement at all;
/// with `minimal`, what the plan leaves out is the verdict's or the response's.
fn plan_parts(
    field: &str,
    p: planner::ObjectPlan,
    derived: Option<Placement>,
    minimal: Option<&Shared>,
    mapping: MappingVersion,
) -> Result<(Option<types::SourceIdentity>, Plan, types::Decision), FieldError> {
    let (outcome, host_action) = (p.outcome(), p.action());
    let placement = match (p.placement, derived) {
        (None, Some(derived)) if minimal.is_some() => derived,
        (placement, derived) => placement_of(
            field,
            required_moved(field, "placement", placement)?,
            derived,
            mapping,
        )?,
    };
    let v = required_moved(field, "verdict", p.verdict)?;
    let action = v.action();
    let mut policy = required_moved(field, "verdict.policy", v.policy)?;
    let (mut reason, mut message) = (p.reason, p.message);
    if let Some(shared) = minimal {
        policy.name.clone_from(&shared.policy.name);
        policy.revision.clone_from(&shared.policy.revision);
        if reason.is_empty() {
            reason.clone_from(&v.reason);
        }
        if message.is_empty() {
            message.clone_from(&v.message);
        }
    }
    let plan = Plan {
        placement,
        verdict: Verdict {
            policy: policy.name,
            policy_revision: policy.revision,
            rule: some_moved(policy.rule),
            action: match action {
                planner::SyncAction::Sync => SyncAction::Sync,
                planner::SyncAction::Skip => SyncAction::Skip,
                planner::SyncAction::Reject => SyncAction::Reject,
                planner::SyncAction::Unspecified => {
                    return Err(unspecified(&format!("{field}.verdict.action")));
                }
            },
            reason: v.reason,
            message: v.message,
            field_path: some_moved(v.field_path),
        },
        collision: p
            .collision
            .as_ref()
            .map(|c| collision(field, c))
            .transpose()?,
        outcome: self::outcome(field, outcome)?,
        action: self::host_action(field, host_action)?,
        reason,
        message,
        profile: p.profile.map(profile_ref),
    };
    let decision = required_moved(field, "decision", p.decision)?;
    Ok((p.source, plan, decision))
}

/// The placement of the ObjectPlan at `field`. With `derived` (the sent object's placement), the
/// answer carries only the target and name form, which must be where `derived` lands.
fn placement_of(
    field: &str,
    placement: planner::Placement,
    derived: Option<Placement>,
    mapping: MappingVersion,
) -> Result<Placement, FieldError> {
    let name_form = match placement.name_form() {
        planner::NameForm::Readable => HostNameForm::Readable,
        planner::NameForm::Hashed => HostNameForm::Hashed,
        planner::NameForm::Unspecified => {
            return Err(unspecified(&format!("{field}.placement.name_form")));
        }
    };
    let target = required_moved(field, "placement.target", placement.target)?;
    let Some(derived) = derived else {
        let mapping = placement
            .annotations
            .get(tenantplane_api::provenance::MAPPING_VERSION)
            .and_then(|v| MappingVersion::parse(v))
            .unwrap_or(mapping);
        return Ok(Placement {
            api_version: target.api_version,
            kind: target.kind,
            namespace: target.namespace,
            name: target.name,
            name_form,
            labels: placement.labels.into_iter().collect(),
            annotations: placement.annotations.into_iter().collect(),
            mapping_version: mapping,
            stripped_keys: placement.stripped_keys,
        });
    };
    let lands = (
        derived.api_version.as_str(),
        derived.kind.as_str(),
        derived.namespace.as_str(),
        derived.name.as_str(),
        derived.name_form,
    );
    let answered = (
        target.api_version.as_str(),
        target.kind.as_str(),
        target.namespace.as_str(),
        target.name.as_str(),
        name_form,
    );
    if lands != answered {
        return Err(FieldError::new(
            format!("{field}.placement.target"),
            format!("is {answered:?}, but mapping {mapping} places the object sent at {lands:?}"),
        ));
    }
    Ok(derived)
}

/// The collision check of the ObjectPlan at `field`.
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
                    return Err(unspecified(&format!("{field}.collision.cause")));
                }
            },
        },
        planner::CollisionKind::Unspecified => {
            return Err(unspecified(&format!("{field}.collision.kind")));
        }
    })
}

/// A decision record.
pub fn decision(field: &str, d: &types::Decision) -> Result<Decision, FieldError> {
    decision_of(field, d.clone())
}

/// A decision record, moved.
fn decision_of(field: &str, d: types::Decision) -> Result<Decision, FieldError> {
    let time = required(field, "time", d.time.as_ref())?;
    let time = timestamp(field, "time", time)?;
    let (outcome, action) = (d.outcome(), d.action());
    let subject = required_moved(field, "subject", d.subject)?;
    Ok(Decision {
        id: d.id,
        time,
        tenant: d.tenant,
        subject: Subject {
            api_version: subject.api_version,
            kind: subject.kind,
            namespace: subject.namespace,
            name: subject.name,
            uid: subject.uid,
            resource_version: subject.resource_version,
        },
        target: d.target.map(|t| HostTarget {
            api_version: t.api_version,
            kind: t.kind,
            namespace: t.namespace,
            name: t.name,
        }),
        outcome: self::outcome(field, outcome)?,
        action: host_action(field, action)?,
        policy: d.policy.map(|p| PolicyRef {
            name: p.name,
            revision: p.revision,
            rule: some_moved(p.rule),
        }),
        profile: d.profile.map(profile_ref),
        reason: d.reason,
        message: d.message,
        field_path: some_moved(d.field_path),
        stripped_keys: d.stripped_keys,
        input_digest: d.input_digest,
        mapping_version: d.mapping_version,
        component: d.component,
        component_version: d.component_version,
        trace_id: some_moved(d.trace_id),
        span_id: some_moved(d.span_id),
        closes: some_moved(d.closes),
        tokens: d
            .tokens
            .into_iter()
            .map(|t| {
                let expires = required(field, "tokens.expires", t.expires.as_ref())?;
                Ok(IssuedToken {
                    service_account: t.service_account,
                    audiences: t.audiences,
                    expires: timestamp(field, "tokens.expires", expires)?,
                    key: t.key,
                })
            })
            .collect::<Result<_, FieldError>>()?,
        drift: d.drift.map(|x| drift_of(field, x)).transpose()?,
    })
}

/// A decision's drift, moved.
fn drift_of(field: &str, d: types::Drift) -> Result<Drift, FieldError> {
    let change = match d.change() {
        types::DriftChange::Edited => DriftChange::Edited,
        types::DriftChange::Deleted => DriftChange::Deleted,
        types::DriftChange::ProvenanceRemoved => DriftChange::ProvenanceRemoved,
        types::DriftChange::Unspecified => {
            return Err(unspecified(&format!("{field}.drift.change")));
        }
    };
    let fields = d
        .fields
        .into_iter()
        .map(|f| {
            let change = match f.change() {
                types::FieldChange::Changed => FieldChange::Changed,
                types::FieldChange::Removed => FieldChange::Removed,
                types::FieldChange::Added => FieldChange::Added,
                types::FieldChange::Unspecified => {
                    return Err(unspecified(&format!("{field}.drift.fields.change")));
                }
            };
            let by =
                f.by.map(|w| {
                    let time = w
                        .time
                        .as_ref()
                        .map(|t| timestamp(field, "drift.fields.by.time", t))
                        .transpose()?;
                    Ok(FieldWriter {
                        manager: w.manager,
                        operation: w.operation,
                        time,
                    })
                })
                .transpose()?;
            Ok(DriftedField {
                by,
                change,
                path: f.path,
            })
        })
        .collect::<Result<_, FieldError>>()?;
    Ok(Drift {
        change,
        corrects: some_moved(d.corrects),
        fields,
        times: d.times,
    })
}

/// An IsolationProfile reference, moved.
pub fn profile_ref(p: types::ProfileRef) -> ProfileRef {
    ProfileRef {
        name: p.name,
        generation: p.generation,
        field_path: p.field_path,
        rule: some_moved(p.rule),
    }
}

/// A timestamp, at `{field}.{name}`.
fn timestamp(field: &str, name: &str, t: &prost_types::Timestamp) -> Result<Timestamp, FieldError> {
    Timestamp::new(t.seconds, t.nanos)
        .map_err(|e| FieldError::new(format!("{field}.{name}"), e.to_string()))
}

/// The outcome of the message at `field` (a plan or a decision).
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
        types::Outcome::Drifted => Outcome::Drifted,
        types::Outcome::Unspecified => return Err(unspecified(&format!("{field}.outcome"))),
    })
}

/// The host action of the message at `field` (a plan or a decision).
fn host_action(field: &str, a: types::HostAction) -> Result<HostAction, FieldError> {
    Ok(match a {
        types::HostAction::Create => HostAction::Create,
        types::HostAction::Update => HostAction::Update,
        types::HostAction::Delete => HostAction::Delete,
        types::HostAction::None => HostAction::None,
        types::HostAction::Unspecified => return Err(unspecified(&format!("{field}.action"))),
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
    source_identity_of(id.clone())
}

/// A tenant object's identity, moved.
fn source_identity_of(id: types::SourceIdentity) -> SourceIdentity {
    let types::SourceIdentity {
        api_version,
        kind,
        namespace,
        name,
        uid,
    } = id;
    SourceIdentity {
        api_version,
        kind,
        namespace,
        name,
        uid,
    }
}

/// A compiled isolation object.
pub fn compiled_object(
    field: &str,
    o: &isolation::CompiledObject,
) -> Result<CompiledObject, FieldError> {
    let p = required(field, "provenance", o.provenance.as_ref())?;
    Ok(CompiledObject {
        object: json_object(format_args!("{field}.object"), &o.object)?,
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
            refused_field: some(&p.refused_field),
        },
    })
}

fn required_moved<T>(field: &str, name: &str, value: Option<T>) -> Result<T, FieldError> {
    value.ok_or_else(|| FieldError::new(format!("{field}.{name}"), "is required"))
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

/// An absent string: empty on the wire, moved.
fn some_moved(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}
