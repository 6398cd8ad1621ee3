//! tokens: the service account tokens of the tenant's synced pods. A host pod created with API
//! access mounts its token Secret (`<host pod>.sa-token`, [`PodWorld`]); this keeps that Secret
//! filled with tokens of the pod's own tenant ServiceAccount from the TENANT API server's
//! TokenRequest, bound to the tenant pod (name and uid), one per token its projections ask for,
//! and refreshes them at 80% of their life, waking the pod's key then. Every issue and refresh is
//! a recorded decision (subject: the pod; target: the Secret; each token's ServiceAccount,
//! audiences, expiry and key), then the Secret's write; the Secret is owned by the host pod and
//! goes with it. A token is never logged, recorded, traced, put in an Event or kept in the
//! stores (the host store keeps a Secret's metadata only); a failed TokenRequest's error is the
//! tenant API server's Status, which holds none.
//!
//! [`PodWorld`]: tenantplane_core::pod_world::PodWorld

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest as K8sTokenRequest, TokenRequestSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_core::TenantObject;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_core::mapping::{self, token_secret_name};
use tenantplane_core::pod_world::{MintedToken, TokenRequest, TokenUpkeep, token_secret};
use tracing::Instrument as _;

use super::caches::OwnWrite;
use super::{Key, Worker};
use crate::reconcile;
use crate::record::{COMPONENT, reference_of};
use crate::trace;
use crate::writer::{Write, WriteError};

/// What the tenant runtime keeps about its pods' token Secrets.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    /// When each pod's key is next woken to refresh its tokens: one timer per pod.
    wakes: Mutex<HashMap<Key, Timestamp>>,
    /// Token Secret writes the host store does not show yet, by Secret name.
    written: Mutex<HashMap<String, OwnWrite>>,
}

impl Worker {
    /// Keeps the token Secret of the tenant pod `pod` (key `key`), once its host pod is ours and
    /// mounts it: issues its tokens when the Secret is missing or another incarnation's,
    /// refreshes them when due, and wakes the key again when the next refresh is due.
    pub(super) async fn keep_tokens(&self, key: &Key, pod: &TenantObject) {
        let Some(host_pod) = self.caches.host_of(key, pod) else {
            return;
        };
        let meta = |k: &str| host_pod.pointer(&format!("/metadata/{k}"));
        let ours = meta("labels")
            .and_then(|l| l.get(provenance::SOURCE_UID))
            .and_then(Value::as_str)
            == Some(pod.identity.uid.as_str());
        let (Some(host_name), Some(host_uid)) = (
            meta("name").and_then(Value::as_str),
            meta("uid").and_then(Value::as_str),
        ) else {
            return;
        };
        let secret_name = token_secret_name(host_name);
        if !ours || meta("deletionTimestamp").is_some() || !mounts(&host_pod, &secret_name) {
            return;
        }
        let requests = TokenRequest::of_pod(&pod.object);
        if requests.is_empty() {
            return;
        }
        if self.tokens_behind(&secret_name) {
            self.queue
                .push_after(key.clone(), super::caches::OWN_WRITE_PATIENCE);
            return;
        }
        let secret = self.caches.host_object_of("", "Secret", &secret_name);
        let now = Timestamp::now();
        let tenant = &self.caches.placement;
        let upkeep = TokenUpkeep::of(
            secret.as_ref(),
            &tenant.tenant,
            pod,
            host_uid,
            &requests,
            now,
        );
        let service_account = service_account_of(pod);
        let span = trace::evaluation_span(
            &tenant.tenant,
            &pod.identity.api_version,
            &pod.identity.kind,
            &pod.identity.namespace,
            &pod.identity.name,
        );
        let k = format!("{}#token", self.caches.key_string(key));
        let started = Instant::now();
        match &upkeep {
            TokenUpkeep::Current(at) => {
                self.wake_at(key, *at);
                return;
            }
            TokenUpkeep::Foreign(why) => {
                let d = reconcile::tokens::refused(
                    tenant,
                    pod,
                    &secret_name,
                    Outcome::Conflict,
                    "HostObjectNotManaged",
                    format!(
                        "host Secret {}/{secret_name} is not this pod's token Secret ({why}); \
                         refused and left untouched: the pod gets no token",
                        tenant.host_namespace
                    ),
                    trace::stamp_in(&span, COMPONENT),
                );
                let content = reconcile::observed_digest(&pod.object);
                let _ = self
                    .recorder
                    .record_if_news(&k, &d, &content, false, &pod.object, started)
                    .instrument(span)
                    .await;
                return;
            }
            TokenUpkeep::Issue | TokenUpkeep::Replace(_) | TokenUpkeep::Refresh => {}
        }
        async {
            let minted = match self.mint(pod, &service_account, &requests).await {
                Ok(minted) => minted,
                Err(e) => {
                    let d = reconcile::tokens::refused(
                        tenant,
                        pod,
                        &secret_name,
                        Outcome::Failed,
                        "TokenRequestFailed",
                        format!(
                            "the tenant API server did not issue a token of ServiceAccount \
                             {service_account} for the pod: {e}; retried with backoff"
                        ),
                        trace::stamp_in(&tracing::Span::current(), COMPONENT),
                    );
                    let content = reconcile::observed_digest(&pod.object);
                    let _ = self
                        .recorder
                        .record_if_news(&k, &d, &content, false, &pod.object, started)
                        .await;
                    self.backoff(key);
                    return;
                }
            };
            let decision = reconcile::tokens::issued(
                tenant,
                pod,
                &secret_name,
                &upkeep,
                &minted,
                &service_account,
                trace::stamp_in(&tracing::Span::current(), COMPONENT),
            );
            let content = reconcile::observed_digest(&pod.object);
            let recorded = self
                .recorder
                .record(
                    &k,
                    &decision,
                    &content,
                    Some(reference_of(&pod.object)),
                    started,
                )
                .await;
            let Some(recorded) = self.recorded_or_retried(key, recorded, "written") else {
                return;
            };
            let placement = mapping::place(tenant, pod);
            let mut body = token_secret(
                &placement,
                host_uid,
                &service_account,
                &minted,
                &self.pods.ca_bundle,
            );
            body["metadata"]["annotations"][provenance::DECISION_ID] = json!(decision.id);
            if let Some(rv) = secret
                .as_ref()
                .and_then(|s| s.pointer("/metadata/resourceVersion"))
            {
                body["metadata"]["resourceVersion"] = rv.clone();
            }
            match self
                .write_token_secret(&secret_name, decision.action, body)
                .await
            {
                Ok(()) => {
                    self.recorder.carried_out(recorded);
                    let next = minted
                        .iter()
                        .map(|t| tenantplane_core::pod_world::refresh_at(t.issued, t.expires))
                        .min();
                    if let Some(next) = next {
                        self.wake_at(key, next);
                    }
                }
                Err(e) => {
                    let span = trace::follow_up_span(&decision);
                    let failed = reconcile::failure::unapplied(
                        &decision,
                        &e,
                        trace::stamp_in(&span, COMPONENT),
                    );
                    let _ = self
                        .recorder
                        .record(
                            &k,
                            &failed,
                            &content,
                            Some(reference_of(&pod.object)),
                            started,
                        )
                        .instrument(span)
                        .await;
                    self.backoff(key);
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One token per request, from the tenant API server's TokenRequest of the pod's own
    /// ServiceAccount, bound to the tenant pod.
    async fn mint(
        &self,
        pod: &TenantObject,
        service_account: &str,
        requests: &[TokenRequest],
    ) -> Result<Vec<MintedToken>, kube::Error> {
        let id = &pod.identity;
        let name = service_account
            .split_once('/')
            .map_or(service_account, |(_, name)| name);
        let api: Api<ServiceAccount> = Api::namespaced(self.tenant_client.clone(), &id.namespace);
        let mut minted = Vec::with_capacity(requests.len());
        for request in requests {
            self.tenant_limiter.acquire().await;
            let asked = K8sTokenRequest {
                spec: TokenRequestSpec {
                    audiences: request.audience.iter().cloned().collect(),
                    expiration_seconds: Some(request.expiration_seconds),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(id.name.clone()),
                        uid: Some(id.uid.clone()),
                    }),
                },
                ..Default::default()
            };
            let issued = Timestamp::now();
            let answer = api
                .create_token_request(name, &PostParams::default(), &asked)
                .await?;
            let Some(status) = answer.status else {
                return Err(kube::Error::Api(Box::new(kube::core::Status::failure(
                    "the TokenRequest's answer has no status",
                    "InternalError",
                ))));
            };
            minted.push(MintedToken {
                request: request.clone(),
                token: status.token,
                issued,
                expires: status.expiration_timestamp.0,
            });
        }
        Ok(minted)
    }

    /// Creates (`Create`) or server-side applies (with the resourceVersion seen as precondition)
    /// the token Secret `name`, remembering the write until the host store shows it.
    async fn write_token_secret(
        &self,
        name: &str,
        action: HostAction,
        body: Value,
    ) -> Result<(), WriteError> {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let host_namespace = &self.caches.placement.host_namespace;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.shared.host.clone(), host_namespace, &ar);
        let write = if action == HostAction::Create {
            Write::Create(body)
        } else {
            Write::Apply(body)
        };
        let written = self
            .shared
            .host_writer
            .write(&api, "Secret", host_namespace, &write)
            .await?;
        if let Some(w) = written {
            self.tokens
                .written
                .lock()
                .expect("token writes lock")
                .insert(name.to_string(), OwnWrite::written(w));
        }
        Ok(())
    }

    /// Whether the host store has not shown this syncer's last write of a token Secret yet.
    fn tokens_behind(&self, name: &str) -> bool {
        let mut written = self.tokens.written.lock().expect("token writes lock");
        let Some(w) = written.get(name) else {
            return false;
        };
        let cached = self.caches.host_object_of("", "Secret", name);
        if w.waits_for(cached.as_ref()) {
            return true;
        }
        written.remove(name);
        false
    }

    /// Wakes the pod's key at `at` (when its tokens are due), unless a wake is already set then.
    fn wake_at(&self, key: &Key, at: Timestamp) {
        let mut wakes = self.tokens.wakes.lock().expect("token wakes lock");
        if wakes.get(key) == Some(&at) {
            return;
        }
        wakes.insert(key.clone(), at);
        let delay = at.duration_since(Timestamp::now());
        let delay = std::time::Duration::try_from(delay).unwrap_or_default();
        self.queue.push_after(key.clone(), delay);
    }
}

/// `namespace/name` of a tenant pod's ServiceAccount.
fn service_account_of(pod: &TenantObject) -> String {
    let name = pod
        .object
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("default");
    format!("{}/{name}", pod.identity.namespace)
}

/// Whether a host pod (as the host store keeps it: its projected volumes) mounts the Secret.
fn mounts(host_pod: &Value, secret: &str) -> bool {
    host_pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .any(|s| s.pointer("/secret/name").and_then(Value::as_str) == Some(secret))
}
