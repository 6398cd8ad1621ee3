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
//! Drift: a token Secret another hand than this syncer's changed or deleted on the host is kept
//! (its tokens withheld) until the pod's next upkeep, which finds what differs and who did it
//! ([`token_secret_drift`]: what tenantplane does not keep, the tokens, is drift when another
//! field manager owns it). That is a Drifted decision about the pod, then under `Revert` new
//! tokens, issued by a decision that names it: the Secret re-created, or replaced with every
//! field tenantplane sets; under `Record` the edit stays until the next refresh, and a deleted
//! Secret stays deleted. A tug of war backs off as for every host object
//! ([`super::drift`]).
//!
//! [`PodWorld`]: tenantplane_core::pod_world::PodWorld

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest as K8sTokenRequest, TokenRequestSpec,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tenantplane_api::provenance;
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_core::TenantObject;
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_core::drift::{self, Drift};
use tenantplane_core::mapping::{self, token_secret_name};
use tenantplane_core::pod_world::{
    MintedToken, TokenRequest, TokenUpkeep, token_secret, token_secret_drift, withhold_tokens,
};
use tracing::Instrument as _;

use super::caches::{Changed, OwnWrite, Vanished, to_value};
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
    /// What the host showed of each pod's token Secret when another hand than this syncer's
    /// changed (its tokens withheld) or deleted it, by pod key, until the pod's next upkeep.
    changes: Mutex<HashMap<Key, Changed>>,
}

/// What a drift of a pod's token Secret leaves to its upkeep.
enum Verdict {
    /// Nothing now: left deleted (`Record`), the correction held back, or the drift not
    /// recorded (retried).
    Hold,
    /// Left as edited (`Record`): its tokens are kept as usual, so refreshed when due.
    Leave,
    /// Correct it now.
    Correct(Correction),
}

/// The correction of a drifted token Secret: new tokens, issued by a decision naming the
/// Drifted one, in a span of its own.
struct Correction {
    /// The drift, as the Drifted decision recorded it.
    drift: Drift,
    /// The Drifted decision's id.
    drift_id: String,
    /// The Secret as the host showed it edited (its tokens withheld); `None` when deleted.
    live: Option<Value>,
    span: tracing::Span,
}

impl Worker {
    /// Keeps the token Secret of the tenant pod `pod` (key `key`), once its host pod is ours and
    /// mounts it: issues its tokens when the Secret is missing or another incarnation's,
    /// refreshes them when due, and wakes the key again when the next refresh is due.
    pub(super) async fn keep_tokens(&self, key: &Key, pod: &TenantObject) {
        let change = self
            .tokens
            .changes
            .lock()
            .expect("token changes lock")
            .remove(key)
            .unwrap_or(Changed::Nothing);
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
            self.keep_token_change(key, change);
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
        let k = token_key(&self.caches, key);
        let started = Instant::now();
        let drift = self
            .token_drift(
                &change,
                secret.as_ref(),
                pod,
                (host_name, host_uid),
                &service_account,
                &requests,
            )
            .await;
        let correcting = match drift {
            None => None,
            Some(drift) => {
                let verdict = self
                    .drifted_tokens(key, &k, pod, &secret_name, drift, change, started)
                    .instrument(span.clone())
                    .await;
                match verdict {
                    Verdict::Hold => return,
                    Verdict::Leave if matches!(upkeep, TokenUpkeep::Foreign(_)) => return,
                    Verdict::Leave => None,
                    Verdict::Correct(correction) => Some(correction),
                }
            }
        };
        let upkeep = match &correcting {
            Some(Correction { live: None, .. }) => TokenUpkeep::Issue,
            Some(_) => TokenUpkeep::Replace("it was edited on the host".into()),
            None => upkeep,
        };
        let span = correcting.as_ref().map_or(span, |c| c.span.clone());
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
                Err(e) if pod_gone(&e) => {
                    // The tenant pod went (or came back as another) since it was read: its key,
                    // looked at again, decides that, and no token is due to this one.
                    tracing::debug!(error = %e, "a token was asked for a tenant pod that is gone");
                    self.queue
                        .push_after(key.clone(), self.shared.tuning.backoff_base);
                    return;
                }
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
            let mut decision = reconcile::tokens::issued(
                tenant,
                pod,
                &secret_name,
                &upkeep,
                &minted,
                &service_account,
                trace::stamp_in(&tracing::Span::current(), COMPONENT),
            );
            if let Some(c) = &correcting {
                decision = reconcile::tokens::correcting(decision, &c.drift, &c.drift_id);
            }
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
            let write = match (&correcting, decision.action) {
                // The edit replaced: what tenantplane sets put back over the Secret as the host
                // showed it (its resourceVersion the precondition), what others added kept,
                // the keys added to its data removed.
                (
                    Some(Correction {
                        live: Some(live), ..
                    }),
                    _,
                ) => Write::Replace(drift::corrected(&body, live)),
                (_, HostAction::Create) => Write::Create(body),
                _ => Write::Apply(body),
            };
            match self.write_token_secret(&secret_name, write).await {
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

    /// Writes the token Secret `name` (created, server-side applied or replaced, with the
    /// resourceVersion seen as precondition), remembering the write until the host store shows
    /// it.
    async fn write_token_secret(&self, name: &str, write: Write) -> Result<(), WriteError> {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let host_namespace = &self.caches.placement.host_namespace;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.shared.host.clone(), host_namespace, &ar);
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

    /// Notes a host object of kind `ar` as its watch event brings it, before the store trims
    /// it; whether it is the token Secret of one of the tenant's pods. Unless it is this
    /// syncer's own write, it is kept, its tokens withheld, for the drift check of the pod's
    /// next upkeep.
    pub(super) fn note_token_secret(&self, ar: &ApiResource, obj: &DynamicObject) -> bool {
        let Some(pod) = self.caches.pod_of_token_secret(ar, obj) else {
            return false;
        };
        let own = self
            .tokens
            .written
            .lock()
            .expect("token writes lock")
            .get(&obj.name_any())
            .is_some_and(|w| w.wrote(obj.resource_version().as_deref()));
        if !own {
            let mut seen = to_value(obj);
            withhold_tokens(&mut seen);
            self.keep_token_change(&pod, Changed::Written(seen));
        }
        true
    }

    /// A host object of kind `ar` was deleted (its watch event); whether it is the token
    /// Secret of one of the tenant's pods. Its delete is kept for the drift check while the host
    /// pod that owned it is still there and not going (else it went with its pod).
    pub(super) fn note_token_secret_deleted(&self, ar: &ApiResource, obj: &DynamicObject) -> bool {
        let Some(pod) = self.caches.pod_of_token_secret(ar, obj) else {
            return false;
        };
        let vanished = Vanished::of(obj);
        let owner_stays = self.caches.pod_kind.is_some_and(|kind| {
            self.caches
                .host_cached(kind, &self.caches.host_name_of(&pod))
                .is_some_and(|p| {
                    p.pointer("/metadata/uid").and_then(Value::as_str) == vanished.owner.as_deref()
                        && p.pointer("/metadata/deletionTimestamp").is_none()
                })
        });
        if owner_stays {
            self.keep_token_change(&pod, Changed::Deleted(vanished));
        }
        true
    }

    /// Forgets the tokens of the pod `key`, gone with its host pod: when they were due, what
    /// the host showed of its token Secret, its drifts.
    pub(super) fn forget_tokens(&self, key: &Key) {
        if Some(key.kind) != self.caches.pod_kind {
            return;
        }
        self.tokens
            .wakes
            .lock()
            .expect("token wakes lock")
            .remove(key);
        self.tokens
            .changes
            .lock()
            .expect("token changes lock")
            .remove(key);
        self.recorder.ledger().forget(&token_key(&self.caches, key));
    }

    /// Keeps what the host showed of the token Secret of the pod `key` for its next upkeep.
    fn keep_token_change(&self, key: &Key, change: Changed) {
        if matches!(change, Changed::Nothing) {
            return;
        }
        self.tokens
            .changes
            .lock()
            .expect("token changes lock")
            .insert(key.clone(), change);
    }

    /// The drift `change` shows of the token Secret of `pod` (the store showing it as `secret`),
    /// mounted by the host pod (name, uid) `host_pod`: an edit the store still shows, or a
    /// delete while the host pod stays.
    async fn token_drift(
        &self,
        change: &Changed,
        secret: Option<&Value>,
        pod: &TenantObject,
        (host_pod, host_uid): (&str, &str),
        service_account: &str,
        requests: &[TokenRequest],
    ) -> Option<Drift> {
        match change {
            Changed::Nothing => None,
            Changed::Written(live) => {
                let version = |v: &Value| v.pointer("/metadata/resourceVersion").cloned();
                if secret.and_then(version) != version(live) {
                    // Written over since: by this syncer, or shown again by a newer event.
                    return None;
                }
                token_secret_drift(
                    live,
                    &mapping::place(&self.caches.placement, pod),
                    host_uid,
                    service_account,
                    requests,
                    &self.pods.ca_bundle,
                )
            }
            Changed::Deleted(vanished) => {
                let ours = secret.is_none() && vanished.owner.as_deref() == Some(host_uid);
                (ours && self.host_pod_stays(host_pod, host_uid).await).then(Drift::deleted)
            }
        }
    }

    /// Whether the host pod `name` (uid `uid`) is there and not going, as the host says now: a
    /// token Secret deleted with its pod, whose delete the pod's watch has not shown yet, is no
    /// drift.
    async fn host_pod_stays(&self, name: &str, uid: &str) -> bool {
        let pods: Api<Pod> = Api::namespaced(
            self.shared.host.clone(),
            &self.caches.placement.host_namespace,
        );
        match pods.get_opt(name).await {
            Ok(pod) => pod.is_some_and(|p| {
                p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()
            }),
            Err(e) => {
                tracing::warn!(error = %e, pod = name, "reading a host pod whose token Secret was deleted");
                false
            }
        }
    }

    /// A drift of the token Secret `secret` of `pod` (key `key`, ledger key `k`), shown by
    /// `change`: the Drifted decision recorded, and what is done about it under the Tenant's
    /// drift policy.
    #[allow(clippy::too_many_arguments)]
    async fn drifted_tokens(
        &self,
        key: &Key,
        k: &str,
        pod: &TenantObject,
        secret: &str,
        drift: Drift,
        change: Changed,
        started: Instant,
    ) -> Verdict {
        let version = super::drift::version_of(&change);
        let seen = self.recorder.ledger().drift_seen(k, version.as_deref());
        let policy = self.tenant.spec.drift;
        let mut drifted = reconcile::tokens::drifted(
            &self.caches.placement,
            pod,
            secret,
            drift,
            seen.times,
            policy,
            trace::stamp_in(&tracing::Span::current(), COMPONENT),
        );
        let seen = self.recorder.count_on(k, &mut drifted, seen, policy).await;
        let content = reconcile::observed_digest(&pod.object);
        let regarding = Some(reference_of(&pod.object));
        let uid = super::drift::uid_of(&change);
        let recorded = self
            .record_drifted(key, k, &drifted, &content, regarding, uid, &seen, started)
            .await;
        let Some(drift_id) = recorded else {
            self.keep_token_change(key, change);
            return Verdict::Hold;
        };
        let times = drifted.drift.as_ref().map_or(1, |d| d.times);
        if policy == DriftPolicy::Record {
            let ledger = self.recorder.ledger();
            ledger.drifted(k, times, version.as_deref(), None, &drift_id);
            let deleted = matches!(change, Changed::Deleted(_));
            self.keep_token_change(key, change);
            return if deleted {
                Verdict::Hold
            } else {
                Verdict::Leave
            };
        }
        let wait = self.correction_wait(k, times, version.as_deref(), &seen, &drift_id);
        if !wait.is_zero() {
            self.keep_token_change(key, change);
            self.queue.push_after(key.clone(), wait);
            return Verdict::Hold;
        }
        Verdict::Correct(Correction {
            span: trace::follow_up_span(&drifted),
            drift: drifted.drift.expect("a Drifted decision carries its drift"),
            drift_id,
            live: match change {
                Changed::Written(live) => Some(live),
                _ => None,
            },
        })
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

/// The ledger's key of the token Secret of the pod `key`.
fn token_key(caches: &super::caches::Caches, key: &Key) -> String {
    format!("{}#token", caches.key_string(key))
}

/// Whether the tenant API server refused a TokenRequest because the pod it binds to is gone:
/// not found (404 about pods), or another pod now at its name (409, its uid differs).
fn pod_gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => {
            status.code == 409
                || (status.code == 404 && status.details.as_ref().is_some_and(|d| d.kind == "pods"))
        }
        _ => false,
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
