//! Up-sync: what flows from the host up into one tenant control plane, through one entry point,
//! [`UpSync::up`]. A tenant object's status (from its host object, when they differ); a tenant
//! Service's cluster IPs (the Service is recreated with its host Service's); and the Endpoints
//! the host's endpoints controller keeps for the host Service of a tenant Service with a
//! selector (into the tenant Endpoints of that Service, addresses pointing at the tenant pods).
//! Each is written to the tenant control plane under its rate limit; a failed write is retried
//! by the next host event, and none of them is a decision.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tenantplane_core::TenantObject;
use tenantplane_core::translate;
use tracing::Instrument as _;

use super::Key;
use super::caches::{Caches, to_value};
use crate::ratelimit::RateLimiter;
use crate::reconcile;
use crate::trace;
use crate::writer::FIELD_MANAGER;

/// What flows up for one key.
pub(super) enum Up<'a> {
    /// The tenant Endpoints of a Service with a selector (`current`, if any): the addresses of
    /// the host Endpoints of its host Service.
    Endpoints(Option<&'a DynamicObject>),
    /// A tenant object still in place since its last decision: its status and, for a Service,
    /// its cluster IPs, from its host object.
    InPlace(&'a TenantObject),
    /// A tenant object just decided on: the status its decision brings up, and the cluster IPs
    /// of its host object when that object is ours (`host`).
    Decided {
        object: &'a TenantObject,
        status: Option<Value>,
        host: Option<&'a Value>,
    },
}

/// The up-sync of one tenant.
pub(super) struct UpSync {
    tenant_client: Client,
    tenant_limiter: Arc<RateLimiter>,
    /// Tenant Services whose control plane refused the host's cluster IPs: not tried again.
    cluster_ips_refused: Mutex<HashSet<Key>>,
}

impl UpSync {
    pub(super) fn new(tenant_client: Client, tenant_limiter: Arc<RateLimiter>) -> UpSync {
        UpSync {
            tenant_client,
            tenant_limiter,
            cluster_ips_refused: Mutex::new(HashSet::new()),
        }
    }

    /// Brings up what flows up for `key`, reading the host side from `caches`.
    pub(super) async fn up(&self, caches: &Caches, key: &Key, up: Up<'_>) {
        match up {
            Up::Endpoints(current) => self.endpoints_up(caches, key, current).await,
            Up::InPlace(o) => {
                let Some(host) = caches.host_of(key, o) else {
                    return;
                };
                let status = translate::status_to_tenant(&o.object, &host);
                self.object_up(caches, key, o, status, Some(&host)).await;
            }
            Up::Decided {
                object,
                status,
                host,
            } => self.object_up(caches, key, object, status, host).await,
        }
    }

    async fn object_up(
        &self,
        caches: &Caches,
        key: &Key,
        o: &TenantObject,
        status: Option<Value>,
        host: Option<&Value>,
    ) {
        if let Some(status) = status
            && caches.kind(key.kind).has_status
        {
            self.patch_status(caches, key, o, status).await;
        }
        if let Some(host) = host {
            self.cluster_ips_up(caches, key, o, host).await;
        }
    }

    async fn patch_status(&self, caches: &Caches, key: &Key, o: &TenantObject, status: Value) {
        let kind = caches.kind(key.kind);
        // A child of the decision span it belongs to; a status-only pass has none.
        let span = if tracing::Span::current().is_none() {
            tracing::Span::none()
        } else {
            trace::kube_call_span(
                "tenantplane.tenant.status_up",
                "PATCH",
                &kind.ar.kind,
                &o.identity.namespace,
                &o.identity.name,
            )
        };
        async {
            self.tenant_limiter.acquire().await;
            let api = Api::<DynamicObject>::namespaced_with(
                self.tenant_client.clone(),
                &o.identity.namespace,
                &kind.ar,
            );
            if let Err(e) = api
                .patch_status(
                    &o.identity.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
            {
                tracing::Span::current().record("otel.status_code", "ERROR");
                tracing::debug!(error = %e, "status up-sync failed; the next host event retries");
            }
        }
        .instrument(span)
        .await
    }

    /// Brings the Endpoints the host's endpoints controller keeps for the host Service of a
    /// tenant Service with a selector up into the tenant Endpoints of that Service (`current`),
    /// addresses pointing at the tenant pods. Written by server-side apply only when the addresses
    /// differ, and never once another field manager (the tenant's own endpoints controller) has
    /// written the tenant Endpoints: that controller then keeps them, from the pod IPs that flow
    /// up, and the two never take turns.
    async fn endpoints_up(&self, caches: &Caches, key: &Key, current: Option<&DynamicObject>) {
        let Some(service_kind) = caches.service_kind else {
            return;
        };
        let service_key = Key {
            kind: service_kind,
            ..key.clone()
        };
        let host_name = caches.host_name_of(&service_key);
        if caches.source_of_host(service_kind, &host_name) != Some(service_key) {
            return;
        }
        let Some(host_endpoints) = caches.host_cached(key.kind, &host_name) else {
            return;
        };
        let subsets =
            translate::endpoints_to_tenant(&host_endpoints, |pod| tenant_pod_ref(caches, key, pod));
        if let Some(current) = current.map(to_value) {
            let unchanged = current.get("subsets").unwrap_or(&json!([])) == &subsets;
            if unchanged || reconcile::written_by_another_manager(&current, FIELD_MANAGER) {
                return;
            }
        }
        let kind = caches.kind(key.kind);
        self.tenant_limiter.acquire().await;
        let api = Api::<DynamicObject>::namespaced_with(
            self.tenant_client.clone(),
            &key.namespace,
            &kind.ar,
        );
        let endpoints = json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": key.name, "namespace": key.namespace},
            "subsets": subsets,
        });
        if let Err(e) = api
            .patch(
                &key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&endpoints),
            )
            .await
        {
            tracing::debug!(error = %e, "endpoints up-sync failed; the next host event retries");
        }
    }

    /// Recreates the tenant Service `o` with the cluster IPs of its host Service `host` when they
    /// differ (`translate::service_with_host_cluster_ips`): deleted with its uid and
    /// resourceVersion as preconditions (a change made meanwhile wins, and is looked at again),
    /// then created with the host's addresses. A tenant control plane that refuses them (an
    /// address outside its service range) gets the Service back with an address of its own, and
    /// it is not tried again for this Service.
    async fn cluster_ips_up(&self, caches: &Caches, key: &Key, o: &TenantObject, host: &Value) {
        if Some(key.kind) != caches.service_kind
            || self
                .cluster_ips_refused
                .lock()
                .expect("refused lock")
                .contains(key)
        {
            return;
        }
        let Some(recreated) = translate::service_with_host_cluster_ips(&o.object, host) else {
            return;
        };
        let kind = caches.kind(key.kind);
        let api = Api::<DynamicObject>::namespaced_with(
            self.tenant_client.clone(),
            &o.identity.namespace,
            &kind.ar,
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(o.identity.uid.clone()),
                resource_version: o.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        caches.recreation_started(key, &o.identity.uid);
        self.tenant_limiter.acquire().await;
        if let Err(e) = api.delete(&o.identity.name, &params).await {
            caches.recreation_abandoned(key);
            tracing::debug!(error = %e, "tenant Service not recreated; the next event retries");
            return;
        }
        let post = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        let host_ip = host.pointer("/spec/clusterIP").cloned();
        let create = |object: Value| async {
            let object: DynamicObject =
                serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
            self.tenant_limiter.acquire().await;
            api.create(&post, &object).await
        };
        let created = match create(recreated.clone()).await {
            Ok(c) if c.data.pointer("/spec/clusterIP") == host_ip.as_ref() => Ok(c),
            Ok(c) => Err((
                c,
                "the tenant control plane gave it another address".to_string(),
            )),
            Err(e) => {
                let mut own = recreated;
                for field in ["clusterIP", "clusterIPs", "ipFamilies"] {
                    match o.object.pointer(&format!("/spec/{field}")) {
                        Some(v) if field == "ipFamilies" => own["spec"][field] = v.clone(),
                        _ => {
                            if let Some(spec) = own["spec"].as_object_mut() {
                                spec.remove(field);
                            }
                        }
                    }
                }
                match create(own).await {
                    Ok(c) => Err((c, e.to_string())),
                    Err(again) => {
                        tracing::error!(
                            error = %again, refused = %e, tenant = %caches.placement.tenant,
                            namespace = %o.identity.namespace, service = %o.identity.name,
                            "the tenant Service could not be created again after it was deleted \
                             to carry the host's cluster IPs"
                        );
                        return;
                    }
                }
            }
        };
        let new_uid = match created {
            Ok(c) => c.uid(),
            Err((c, why)) => {
                tracing::warn!(
                    tenant = %caches.placement.tenant, namespace = %o.identity.namespace,
                    service = %o.identity.name, reason = %why,
                    "the tenant control plane refused the host Service's cluster IPs; the \
                     tenant Service keeps an address of its own"
                );
                self.cluster_ips_refused
                    .lock()
                    .expect("refused lock")
                    .insert(key.clone());
                c.uid()
            }
        };
        caches.recreated(key, new_uid);
    }
}

/// The tenant `targetRef` of a host Pod of this tenant whose source is in the namespace of `key`
/// (an Endpoints key), or `None`.
fn tenant_pod_ref(caches: &Caches, key: &Key, host_pod: &str) -> Option<Value> {
    let source = caches.source_of_host(caches.pod_kind?, host_pod)?;
    if source.namespace != key.namespace {
        return None;
    }
    let pod = caches.tenant_object(&source)?;
    Some(json!({
        "kind": "Pod",
        "namespace": source.namespace,
        "name": source.name,
        "uid": pod.uid(),
    }))
}
