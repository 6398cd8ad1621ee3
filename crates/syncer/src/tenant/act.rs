//! act: a decision's host write. The create, server-side apply or delete, with the precondition
//! on the host object the decision saw (create: nothing at the name; apply: its
//! resourceVersion; delete: its uid), under the host rate limit, in a `tenantplane.host.write`
//! span. Its outcome goes back where it belongs: the write to the own-write rules of the caches
//! until the host watch shows it, the recorded action confirmed carried out; or, when it failed,
//! a decision of its own (Superseded on a 409, refused for its content, else Failed) and a retry.

use std::time::Instant;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::Value;
use tracing::Instrument as _;

use super::caches::{Kind, OwnWrite};
use super::{FIELD_MANAGER, Key, Worker};
use crate::reconcile::{self, HostWrite, Step};
use crate::record::{COMPONENT, Recorded, reference_of};
use crate::trace;

impl Worker {
    /// Performs the step's host write; confirms its recorded action carried out, or records
    /// why it was not. Returns false when the key was requeued.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn act(
        &self,
        key: &Key,
        k: &str,
        step: &Step,
        recorded: Recorded,
        content: &str,
        tenant_object: Option<&Value>,
        started: Instant,
    ) -> bool {
        let Some(write) = &step.write else {
            return true;
        };
        let kind = self.caches.kind(key.kind);
        let (verb, name) = match write {
            HostWrite::Create(o) => ("POST", o["metadata"]["name"].as_str().unwrap_or_default()),
            HostWrite::Apply(o) => ("PATCH", o["metadata"]["name"].as_str().unwrap_or_default()),
            HostWrite::Delete { name, .. } => ("DELETE", name.as_str()),
        };
        let span = trace::kube_call_span(
            "tenantplane.host.write",
            verb,
            &kind.ar.kind,
            &self.caches.placement.host_namespace,
            name,
        );
        let at = self.caches.write_started(key.kind, name);
        // The span lasts from here until it is dropped after the call. It is never entered:
        // nothing in the write opens a span or logs, and entering it on every poll of the HTTP
        // call would cost each decision CPU for nothing (docs/tracing.md, "Overhead").
        let result = self.host_write(kind, write).await;
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            if let kube::Error::Api(s) = e {
                span.record("http.response.status_code", s.code);
            }
        }
        drop(span);
        match result {
            Ok(written) => {
                self.caches.write_done(at, written);
                self.recorder.carried_out(recorded);
                true
            }
            Err(e) => {
                self.caches.write_done(at, None);
                // A decision of its own (Failed), in a span of its own under the one it failed:
                // the log says the decision was not applied. A 409 means the host object changed
                // since the decision (someone wrote at the name): decided again on fresh state.
                let span = trace::follow_up_span(&step.decision);
                let stamp = trace::stamp_in(&span, COMPONENT);
                let refused = reconcile::refused_for_content(&e);
                let failed = match &e {
                    kube::Error::Api(s) if s.code == 409 => {
                        reconcile::superseded(&step.decision, &e.to_string(), stamp)
                    }
                    _ if refused => {
                        reconcile::refused_by_host(&step.decision, &e.to_string(), stamp)
                    }
                    _ => reconcile::failed(&step.decision, &e.to_string(), stamp),
                };
                let _ = self
                    .recorder
                    .record(
                        k,
                        &failed,
                        content,
                        tenant_object.map(reference_of),
                        started,
                    )
                    .instrument(span)
                    .await;
                if refused {
                    // The same content is refused again: looked at again when it changes
                    // (its watch event) and at the resync, not in a backoff loop.
                    self.succeeded(key);
                } else {
                    self.backoff(key);
                }
                false
            }
        }
    }

    /// The host API call of a write; what it wrote, for [`OwnWrite`].
    async fn host_write(
        &self,
        kind: &Kind,
        write: &HostWrite,
    ) -> Result<Option<OwnWrite>, kube::Error> {
        self.shared.host_limiter.acquire().await;
        match write {
            HostWrite::Create(object) => {
                let obj: DynamicObject =
                    serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
                kind.host_api
                    .create(
                        &PostParams {
                            dry_run: false,
                            field_manager: Some(FIELD_MANAGER.into()),
                        },
                        &obj,
                    )
                    .await
                    .map(OwnWrite::written)
            }
            HostWrite::Apply(object) => {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                kind.host_api
                    .patch(
                        name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(object),
                    )
                    .await
                    .map(OwnWrite::written)
            }
            HostWrite::Delete { name, uid } => {
                let params = DeleteParams {
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let deleted = uid.clone().map(OwnWrite::deleted);
                match kind.host_api.delete(name, &params).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(deleted),
                    other => other.map(|_| deleted),
                }
            }
        }
    }
}
