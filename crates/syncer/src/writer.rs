//! The writer: every create, server-side apply, replace, merge patch and delete the syncer makes to an
//! object it keeps, whoever decided it: a tenant object's host object ([`crate::tenant`]), a
//! compiled object ([`crate::compiled_set`]: isolation objects in the host, admission objects
//! and namespace labels in a tenant control plane), a pod's token Secret, a Tenant's cleanup.
//!
//! ```text
//!  decision ──Write──▶ Writer::write ── rate limit ── POST / apply PATCH / PUT / merge PATCH / DELETE ──▶ cluster
//!                        │                 field manager tenantplane-syncer, preconditions
//!                        ├─ Ok(Written): uid, resourceVersion, managedFields of what it wrote
//!                        └─ Err(WriteError): the answer, and its WriteFailure (Refused, Changed, Failed)
//! ```
//!
//! Every write carries a precondition on the object its decision saw: a create fails when
//! anything is at the name (never an overwrite), an apply or a replace carries the
//! resourceVersion its object names, a delete the uid it was given; a delete that finds nothing has nothing left to do.
//! Each write has a span (`tenantplane.host.write` or `tenantplane.tenant.write`, a child of the
//! current span, never entered). The writer decides nothing: what a failure means for the
//! decision that led to it is [`crate::reconcile`]'s, from the [`WriteFailure`] given here.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::Value;

use crate::ratelimit::RateLimiter;
use crate::trace;

/// Field manager of every write.
pub use tenantplane_core::drift::FIELD_MANAGER;

/// A write to one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Create this object (fails if anything is at its name: never overwrite).
    Create(Value),
    /// Server-side apply this object, forcing tenantplane's fields; a `metadata.resourceVersion`
    /// in it is the precondition (an object replaced meanwhile is not touched).
    Apply(Value),
    /// Replace the object with this one (a PUT), its `metadata.resourceVersion` the
    /// precondition: a drift correction, which also removes what another manager added to
    /// content that is the tenant's (a key in a ConfigMap's data).
    Replace(Value),
    /// JSON merge patch of the object `name`, which must exist (it is never created this way).
    Merge {
        /// Object name.
        name: String,
        /// The patch.
        patch: Value,
    },
    /// Delete the object `name`, with `uid` as precondition when given.
    Delete {
        /// Object name.
        name: String,
        /// Its uid, as a delete precondition.
        uid: Option<String>,
    },
}

impl Write {
    /// The name of the object written.
    pub fn name(&self) -> &str {
        match self {
            Write::Create(o) | Write::Apply(o) | Write::Replace(o) => {
                o["metadata"]["name"].as_str().unwrap_or_default()
            }
            Write::Merge { name, .. } | Write::Delete { name, .. } => name,
        }
    }

    /// The HTTP method it is sent with.
    pub fn verb(&self) -> &'static str {
        match self {
            Write::Create(_) => "POST",
            Write::Apply(_) | Write::Merge { .. } => "PATCH",
            Write::Replace(_) => "PUT",
            Write::Delete { .. } => "DELETE",
        }
    }
}

/// What a create, apply or merge patch wrote, as the API server answered it: what the caller
/// waits to see in its watch, and what tenantplane last set on the object.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The object's uid.
    pub uid: String,
    /// The resourceVersion of the write.
    pub resource_version: String,
    /// Who owns which fields of the object after the write.
    pub managed_fields: Vec<ManagedFieldsEntry>,
}

impl Written {
    fn of(object: DynamicObject) -> Option<Written> {
        Some(Written {
            uid: object.uid()?,
            resource_version: object.resource_version()?,
            managed_fields: object.metadata.managed_fields.unwrap_or_default(),
        })
    }
}

/// What a failed write means for its decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteFailure {
    /// The API server refused it for what it writes: admission (403) or validation (422). The
    /// same content would be refused again.
    Refused,
    /// Its precondition failed (409): the object changed since the decision saw it.
    Changed,
    /// Anything else (the server unreachable, overloaded, ...): it may pass when tried again.
    Failed,
}

/// A failed write: the API server's answer, and what it means.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct WriteError {
    /// What the failure means for the decision.
    pub failure: WriteFailure,
    /// The answer.
    #[source]
    pub error: kube::Error,
}

impl From<kube::Error> for WriteError {
    fn from(error: kube::Error) -> Self {
        WriteError {
            failure: failure_of(&error),
            error,
        }
    }
}

/// What a failed write means. The ServiceAccount admission plugin's refusal of a pod whose
/// service account is not on the host yet is no refusal of the content: the syncer is about to
/// create it, so the write may pass when tried again.
fn failure_of(error: &kube::Error) -> WriteFailure {
    match error {
        kube::Error::Api(s) if s.code == 409 => WriteFailure::Changed,
        kube::Error::Api(s) if s.code == 403 => {
            if s.message.contains("error looking up service account") {
                WriteFailure::Failed
            } else {
                WriteFailure::Refused
            }
        }
        kube::Error::Api(s) if s.code == 422 => WriteFailure::Refused,
        _ => WriteFailure::Failed,
    }
}

/// Writes to one cluster: the host (`tenantplane.host.write` spans, under the host rate limit)
/// or a tenant control plane (`tenantplane.tenant.write`). The client is the [`Api`] given to
/// each write.
#[derive(Debug, Clone)]
pub struct Writer {
    span: &'static str,
    limiter: Arc<RateLimiter>,
}

impl Writer {
    /// The writer of the host cluster, whose requests `limiter` bounds (all tenants together).
    pub fn host(limiter: Arc<RateLimiter>) -> Writer {
        Writer {
            span: "tenantplane.host.write",
            limiter,
        }
    }

    /// The writer of a tenant control plane's objects that the Tenant controller keeps (its
    /// admission objects and namespace labels, a few per reconcile): no rate limit.
    pub fn tenant_control_plane() -> Writer {
        Writer {
            span: "tenantplane.tenant.write",
            limiter: Arc::new(RateLimiter::new(0.0, 1)),
        }
    }

    /// Makes `write` through `api`, to an object of `kind` in `namespace` (empty for a
    /// cluster-scoped one; both name it in the write's span). Returns what was written, `None`
    /// for a delete.
    pub async fn write(
        &self,
        api: &Api<DynamicObject>,
        kind: &str,
        namespace: &str,
        write: &Write,
    ) -> Result<Option<Written>, WriteError> {
        let span = trace::kube_call_span(self.span, write.verb(), kind, namespace, write.name());
        // The span lasts until it is dropped after the call. It is never entered: nothing in the
        // write opens a span or logs, and entering it on every poll of the HTTP call would cost
        // each decision CPU for nothing (docs/tracing.md, "Overhead").
        self.limiter.acquire().await;
        let result = send(api, write).await;
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            if let kube::Error::Api(s) = e {
                span.record("http.response.status_code", s.code);
            }
        }
        drop(span);
        Ok(result?.and_then(Written::of))
    }
}

/// The API call of a write; the object the server answered with, `None` for a delete.
async fn send(
    api: &Api<DynamicObject>,
    write: &Write,
) -> Result<Option<DynamicObject>, kube::Error> {
    match write {
        Write::Create(object) => {
            let object: DynamicObject =
                serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
            let params = PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.into()),
            };
            api.create(&params, &object).await.map(Some)
        }
        Write::Apply(object) => api
            .patch(
                write.name(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .map(Some),
        Write::Replace(object) => {
            let object: DynamicObject =
                serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
            let params = PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.into()),
            };
            api.replace(write.name(), &params, &object).await.map(Some)
        }
        Write::Merge { name, patch } => {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            api.patch(name, &params, &Patch::Merge(patch))
                .await
                .map(Some)
        }
        Write::Delete { name, uid } => {
            let params = DeleteParams {
                preconditions: uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => Ok(None),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn a_content_refusal_waits_for_a_change_but_a_missing_service_account_is_retried() {
        assert_eq!(
            failure_of(&answer(403, "violates PodSecurity")),
            WriteFailure::Refused
        );
        assert_eq!(failure_of(&answer(422, "invalid")), WriteFailure::Refused);
        let service_account_not_yet_there = answer(
            403,
            "pods \"web-x-shop\" is forbidden: error looking up service account \
             tenant-acme/web-x-shop: serviceaccount \"web-x-shop\" not found",
        );
        assert_eq!(
            failure_of(&service_account_not_yet_there),
            WriteFailure::Failed
        );
        assert_eq!(failure_of(&answer(409, "conflict")), WriteFailure::Changed);
        assert_eq!(failure_of(&answer(500, "")), WriteFailure::Failed);
        assert_eq!(failure_of(&answer(429, "")), WriteFailure::Failed);
    }

    #[test]
    fn a_write_is_named_by_its_object() {
        let object = serde_json::json!({"metadata": {"name": "cfg-x-web"}});
        assert_eq!(Write::Create(object.clone()).name(), "cfg-x-web");
        assert_eq!(Write::Apply(object).verb(), "PATCH");
        let delete = Write::Delete {
            name: "p-x-web".into(),
            uid: None,
        };
        assert_eq!((delete.name(), delete.verb()), ("p-x-web", "DELETE"));
    }
}
