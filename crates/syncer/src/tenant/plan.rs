//! plan: one planner call for a batch of tenant objects. Each object's evaluation span opens
//! here, before the call, so that the planner's span of each object is its child; the call has a
//! span of its own (`tenantplane.sync.plan_batch`), linked to them. No plan means nothing is
//! guessed: a planner that cannot be had defers every object of the batch (a Deferred decision,
//! recorded when it is news) and each is retried with backoff.

use std::time::Instant;

use opentelemetry::trace::TraceContextExt as _;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::{Plan, TenantObject};
use tenantplane_telemetry::propagation;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{Key, Worker};
use crate::planner::PlanRequest;
use crate::reconcile;
use crate::record::COMPONENT;
use crate::trace;

/// A tenant object and its plan, to be decided in its evaluation span.
pub(super) struct Planned {
    pub(super) key: Key,
    pub(super) object: TenantObject,
    pub(super) plan: Plan,
    pub(super) span: tracing::Span,
}

impl Worker {
    /// Plans `objects` (of `keys`, in the same order) in one call; nothing when the batch could
    /// not be planned (its objects are retried with backoff).
    pub(super) async fn plan(
        &self,
        keys: Vec<Key>,
        objects: Vec<TenantObject>,
        started: Instant,
    ) -> Vec<Planned> {
        let tenant = &self.caches.placement.tenant;
        let spans: Vec<tracing::Span> = objects
            .iter()
            .map(|o| {
                let id = &o.identity;
                trace::evaluation_span(tenant, &id.api_version, &id.kind, &id.namespace, &id.name)
            })
            .collect();
        let trace_contexts: Vec<String> = spans
            .iter()
            .map(|span| propagation::traceparent(span).unwrap_or_default())
            .collect();
        let trace_contexts = if trace_contexts.iter().all(String::is_empty) {
            Vec::new()
        } else {
            trace_contexts
        };
        let batch_span = tracing::info_span!(
            parent: None,
            "tenantplane.sync.plan_batch",
            otel.kind = "client",
            tenantplane.tenant = %tenant,
            tenantplane.batch.size = objects.len(),
        );
        for span in &spans {
            batch_span.add_link(span.context().span().span_context().clone());
        }
        let host: Vec<HostObjectMeta> = keys
            .iter()
            .zip(&objects)
            .filter_map(|(key, o)| {
                self.caches
                    .host_of(key, o)
                    .and_then(|v| reconcile::host_meta(&v))
            })
            .collect();
        let plans = self
            .shared
            .planner
            .plan(PlanRequest {
                tenant: &self.tenant,
                policy: self.policy.as_deref(),
                profile: self.profile.as_deref(),
                objects: &objects,
                host: &host,
                trace_contexts: &trace_contexts,
            })
            .instrument(batch_span)
            .await;
        match plans {
            Ok(plans) if plans.len() == objects.len() => keys
                .into_iter()
                .zip(objects)
                .zip(plans)
                .zip(spans)
                .map(|(((key, object), plan), span)| Planned {
                    key,
                    object,
                    plan,
                    span,
                })
                .collect(),
            Ok(plans) => {
                tracing::error!(
                    asked = objects.len(),
                    got = plans.len(),
                    "planner answered a different number of plans"
                );
                for key in &keys {
                    self.backoff(key);
                }
                Vec::new()
            }
            Err(e) => {
                for ((key, o), span) in keys.iter().zip(&objects).zip(spans) {
                    let d = reconcile::deferred::unplanned(
                        &self.caches.placement,
                        o,
                        &e,
                        trace::stamp_in(&span, COMPONENT),
                    );
                    let k = self.caches.key_string(key);
                    let content = reconcile::observed_digest(&o.object);
                    let _ = self
                        .recorder
                        .record_if_news(&k, &d, &content, false, &o.object, started)
                        .instrument(span)
                        .await;
                    self.backoff(key);
                }
                Vec::new()
            }
        }
    }
}
