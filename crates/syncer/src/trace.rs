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

use opentelemetry::trace::TraceContextExt as _;
use tenantplane_core::decision::{Decision, Stamp};
use tracing::field::Empty;
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

/// The span of a host write of an isolation decision (a child of the current span).
pub fn host_write_span(verb: &str, target: &crate::isolation::IsolationRef) -> tracing::Span {
    tracing::info_span!(
        "tenantplane.kube.call",
        otel.name = "tenantplane.host.write",
        otel.kind = "client",
        http.request.method = %verb,
        k8s.object.kind = %target.kind,
        k8s.namespace.name = target.namespace.as_deref().unwrap_or(""),
        k8s.object.name = %target.name,
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
    tracing::info_span!(
        parent: parent,
        "tenantplane.sync.decision",
        otel.name = REEVALUATION_SPAN,
        tenantplane.tenant = %tenant,
        tenantplane.subject.api_version = %api_version,
        tenantplane.subject.kind = %kind,
        tenantplane.subject.namespace = %namespace,
        tenantplane.subject.name = %name,
        tenantplane.subject.uid = Empty,
        tenantplane.host.namespace = Empty,
        tenantplane.host.name = Empty,
        tenantplane.decision.id = Empty,
        tenantplane.decision.outcome = Empty,
        tenantplane.decision.action = Empty,
        tenantplane.decision.reason = Empty,
        tenantplane.policy.name = Empty,
        tenantplane.policy.revision = Empty,
        tenantplane.policy.rule = Empty,
        tenantplane.profile.name = Empty,
        tenantplane.profile.generation = Empty,
        tenantplane.profile.field = Empty,
        tenantplane.mapping.version = Empty,
        otel.status_code = Empty,
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
    let s = &decision.subject;
    if !s.uid.is_empty() {
        span.record("tenantplane.subject.uid", s.uid.as_str());
    }
    if let Some(t) = &decision.target {
        span.record("tenantplane.host.namespace", t.namespace.as_str());
        span.record("tenantplane.host.name", t.name.as_str());
    }
    span.record("tenantplane.decision.outcome", decision.outcome.as_str());
    span.record("tenantplane.decision.action", decision.action.as_str());
    span.record("tenantplane.decision.reason", decision.reason.as_str());
    if let Some(p) = &decision.policy {
        span.record("tenantplane.policy.name", p.name.as_str());
        span.record("tenantplane.policy.revision", p.revision.as_str());
        span.record(
            "tenantplane.policy.rule",
            p.rule.as_deref().unwrap_or("(default)"),
        );
    }
    if let Some(p) = &decision.profile {
        span.record("tenantplane.profile.name", p.name.as_str());
        span.record("tenantplane.profile.generation", p.generation);
        span.record("tenantplane.profile.field", p.field_path.as_str());
    }
    span.record(
        "tenantplane.mapping.version",
        decision.mapping_version.as_str(),
    );
    if decision.outcome == tenantplane_core::decision::Outcome::Failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// Names `span` a decision span: the decision is recorded. `previous` is the span of the last
/// decision about the same tenant object, linked so that an object's journey can be followed
/// from decision to decision. Returns the span's context, the link of the next decision.
pub fn mark_decision(
    span: &tracing::Span,
    decision: &Decision,
    previous: Option<opentelemetry::trace::SpanContext>,
) -> Option<opentelemetry::trace::SpanContext> {
    describe(span, decision);
    span.record("tenantplane.decision.id", decision.id.as_str());
    if let Some(previous) = previous {
        span.add_link(previous);
    }
    let context = span.context();
    let span_ref = context.span();
    // The OpenTelemetry span is already started (its context went to the planner), so its name
    // is changed on the span itself.
    span_ref.update_name(DECISION_SPAN);
    let span_context = span_ref.span_context().clone();
    span_context.is_valid().then_some(span_context)
}
