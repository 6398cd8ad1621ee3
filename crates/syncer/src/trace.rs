//! The syncer's spans: one per sync decision, and what it contains (docs/tracing.md walks
//! through a trace).
//!
//! ```text
//!  tenantplane.sync.decision            root of its own trace; links to the previous decision's span
//!  ├─ tenantplane.planner.plan_object   (planner process, via the Plan request's trace_contexts)
//!  ├─ tenantplane.host.write            the host create / apply / delete of the decision
//!  ├─ tenantplane.tenant.status_up      the status written back to the tenant object
//!  └─ tenantplane.sync.decision         a Failed decision, when the host write failed
//!  tenantplane.sync.plan_batch          the Plan call of a batch, linked to each object's span
//!  └─ grpc.server Plan                  (planner process, via the call's traceparent)
//!  tenantplane.sync.decision            a Tenant's IsolationProfile compiled (subject: the profile)
//!  ├─ grpc.server Compile               (isolation-compiler process)
//!  └─ tenantplane.sync.decision         one per compiled object applied or pruned
//!     └─ tenantplane.host.write         its server-side apply / delete
//! ```
//!
//! A span opens when a tenant object leaves the work queue to be evaluated, before planning, so
//! that the planner can make its own span a child. Evaluating does not always produce a new
//! decision: an evaluation whose decision repeats the one already recorded (a resync) is recorded
//! nowhere, and its span is named `tenantplane.sync.reevaluation`. Only
//! [`record`](crate::record::DecisionRecorder::record) names a span `tenantplane.sync.decision`,
//! so there is exactly one such span per recorded decision, and the decision carries its ids.

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanRef, Status, TraceContextExt as _};
use tenantplane_core::decision::{Decision, Stamp};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The span of a recorded sync decision.
pub const DECISION_SPAN: &str = "tenantplane.sync.decision";
/// The span of an evaluation that repeated the recorded decision (nothing new recorded).
pub const REEVALUATION_SPAN: &str = "tenantplane.sync.reevaluation";

/// The span of evaluating one tenant object, the root of a trace of its own; named
/// [`REEVALUATION_SPAN`] until a decision is recorded in it.
pub fn evaluation_span(
    tenant: &str,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> tracing::Span {
    span(None, tenant, api_version, kind, namespace, name)
}

/// The span of evaluating a Tenant's IsolationProfile: the compile call and the decisions about
/// the compiled objects happen in it. Like [`evaluation_span`], the root of its own trace,
/// named [`REEVALUATION_SPAN`] until the compilation is recorded as a decision in it.
pub fn isolation_span(tenant: &str, profile: &str) -> tracing::Span {
    let api_version = format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION);
    span(None, tenant, &api_version, "IsolationProfile", "", profile)
}

/// The span of a Kubernetes API call made for a sync decision (a child of the current span): a
/// write ([`crate::writer`]: `tenantplane.host.write`, `tenantplane.tenant.write`) or the status
/// it brings up (`tenantplane.tenant.status_up`).
pub fn kube_call_span(
    name: &str,
    verb: &str,
    kind: &str,
    namespace: &str,
    object: &str,
) -> tracing::Span {
    tracing::info_span!(
        "tenantplane.kube.call",
        otel.name = name,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = verb,
        http.response.status_code = tracing::field::Empty,
        k8s.object.kind = kind,
        k8s.namespace.name = namespace,
        k8s.object.name = object,
    )
}

/// The span of a decision taken inside another decision's span, a child of the current span:
/// a host write failed (the Failed decision), or an object of a recorded isolation compilation.
pub fn follow_up_span(decision: &Decision) -> tracing::Span {
    let s = &decision.subject;
    span(
        tracing::Span::current().id(),
        &decision.tenant,
        &s.api_version,
        &s.kind,
        &s.namespace,
        &s.name,
    )
}

fn span(
    parent: Option<tracing::Id>,
    tenant: &str,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> tracing::Span {
    // What is known when the evaluation starts; what it concludes is set on the OpenTelemetry
    // span in one call ([`describe`]).
    tracing::info_span!(
        parent: parent,
        "tenantplane.sync.decision",
        otel.name = REEVALUATION_SPAN,
        tenantplane.tenant = tenant,
        tenantplane.subject.api_version = api_version,
        tenantplane.subject.kind = kind,
        tenantplane.subject.namespace = namespace,
        tenantplane.subject.name = name,
    )
}

/// A stamp for a decision taken in `span`: fresh id and time, and the span's trace and span
/// ids when it is traced (so that the decision log, the host object's decision id and the span
/// name each other).
pub fn stamp_in(span: &tracing::Span, component: &str) -> Stamp {
    let mut stamp = Stamp::now(component);
    let context = span.context();
    let span_ref = context.span();
    let span_context = span_ref.span_context();
    if span_context.is_valid() && span_context.is_sampled() {
        stamp.trace_id = Some(span_context.trace_id().to_string());
        stamp.span_id = Some(span_context.span_id().to_string());
    }
    stamp
}

/// What an evaluation concluded, on its span: called once per span, by
/// [`mark_decision`] when the decision is recorded, else by the evaluation (the attributes of an
/// OpenTelemetry span are a list: a value recorded twice is exported twice).
pub fn describe(span: &tracing::Span, decision: &Decision) {
    if span.is_disabled() {
        return;
    }
    describe_otel(&span.context().span(), decision, None);
}

/// Sets the attributes of `decision` (and its id, when recorded) on an OpenTelemetry span, in
/// one call: recording them one by one through `tracing` costs a dispatch, a span lookup and
/// two locks each, on every decision (docs/tracing.md, "Overhead").
fn describe_otel(span: &SpanRef<'_>, decision: &Decision, id: Option<&str>) {
    if !span.is_recording() {
        return;
    }
    let s = &decision.subject;
    let mut attributes = Vec::with_capacity(16);
    attributes.extend([
        KeyValue::new("tenantplane.decision.outcome", decision.outcome.as_str()),
        KeyValue::new("tenantplane.decision.action", decision.action.as_str()),
        KeyValue::new("tenantplane.decision.reason", decision.reason.clone()),
        KeyValue::new(
            "tenantplane.mapping.version",
            decision.mapping_version.clone(),
        ),
    ]);
    if !s.uid.is_empty() {
        attributes.push(KeyValue::new("tenantplane.subject.uid", s.uid.clone()));
    }
    if let Some(id) = id {
        attributes.push(KeyValue::new("tenantplane.decision.id", id.to_string()));
    }
    if let Some(t) = &decision.target {
        attributes.extend([
            KeyValue::new("tenantplane.host.namespace", t.namespace.clone()),
            KeyValue::new("tenantplane.host.name", t.name.clone()),
        ]);
    }
    if let Some(p) = &decision.policy {
        let rule = p.rule.clone().unwrap_or_else(|| "(default)".to_string());
        attributes.extend([
            KeyValue::new("tenantplane.policy.name", p.name.clone()),
            KeyValue::new("tenantplane.policy.revision", p.revision.clone()),
            KeyValue::new("tenantplane.policy.rule", rule),
        ]);
    }
    if let Some(p) = &decision.profile {
        attributes.extend([
            KeyValue::new("tenantplane.profile.name", p.name.clone()),
            KeyValue::new("tenantplane.profile.generation", p.generation),
            KeyValue::new("tenantplane.profile.field", p.field_path.clone()),
        ]);
    }
    span.set_attributes(attributes);
    if decision.outcome == tenantplane_core::decision::Outcome::Failed {
        span.set_status(Status::error(decision.reason.clone()));
    }
}

/// Names `span` a decision span: the decision is recorded. `previous` is the span of the last
/// decision about the same tenant object, linked so that an object's journey can be followed
/// from decision to decision. Returns the span's context, the link of the next decision.
pub fn mark_decision(
    span: &tracing::Span,
    decision: &Decision,
    previous: Option<SpanContext>,
) -> Option<SpanContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    describe_otel(&span_ref, decision, Some(&decision.id));
    if let Some(previous) = previous {
        span_ref.add_link(previous, Vec::new());
    }
    // The OpenTelemetry span is already started (its context went to the planner), so its name
    // is changed on the span itself.
    span_ref.update_name(DECISION_SPAN);
    let span_context = span_ref.span_context().clone();
    span_context.is_valid().then_some(span_context)
}
