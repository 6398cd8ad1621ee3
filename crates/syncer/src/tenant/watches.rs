//! Queueing: the watches of one Tenant fill its caches, and each event queues the key it
//! concerns. A tenant object's event queues its own key (a Service's also queues its Endpoints,
//! whose syncing it decides; under mapping v1, the other objects at its host name are queued
//! too); a host object's event queues the key of the tenant object it was synced from (for the
//! host Endpoints of our host Service, the tenant Endpoints they flow up into), after the caches
//! have noted what another hand than this syncer's changed or deleted (the drift check; for a
//! pod's token Secret, [`super::tokens`] notes it, its tokens withheld, and the pod is queued).
//! The watches of the referenceable kinds that are not synced fill their stores, and queue the
//! pod of a token Secret the same way. The resync queues every key the caches know of.

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use tokio::task::JoinHandle;

use super::caches::{trim_host_object, trim_tenant_object, type_meta};
use super::{Key, Worker};
use crate::host_watches::{HostEvents, Subscription};

/// The host namespace's share of the replica's watch of one host kind, while subscribed.
pub(super) type HostShare = (Subscription, HostEvents);

/// The watches of one synced kind, by its index: in the tenant control plane and in the host
/// namespace, each with the writer of its store.
pub(super) struct KindWatches {
    pub(super) index: usize,
    pub(super) tenant: (Api<DynamicObject>, Writer<DynamicObject>),
    pub(super) host: (HostShare, Writer<DynamicObject>),
}

/// The host watch of a referenceable kind that is not synced, with the writer of its store.
pub(super) type ReferenceWatch = (ApiResource, HostShare, Writer<DynamicObject>);

/// Starts the watches; their tasks run until aborted.
pub(super) fn spawn(
    worker: &Arc<Worker>,
    kinds: Vec<KindWatches>,
    references: Vec<ReferenceWatch>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for KindWatches {
        index,
        tenant: (tenant_api, tenant_writer),
        host: ((subscription, host_events), host_writer),
    } in kinds
    {
        let w = worker.clone();
        let types = type_meta(&w.caches.kind(index).ar);
        tasks.push(tokio::spawn(async move {
            let watch = watcher(tenant_api, watcher::Config::default()).default_backoff();
            let mut events = stored(watch, tenant_writer, move |obj| {
                trim_tenant_object(&types, obj)
            });
            while let Some(event) = events.next().await {
                match event {
                    Ok(Touched::Applied(obj) | Touched::Deleted(obj)) => {
                        w.tenant_event(index, &obj)
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %w.caches.placement.tenant, error = %e, "tenant watch")
                    }
                }
            }
        }));
        let w = worker.clone();
        let noting = worker.clone();
        let ar = w.caches.kind(index).ar.clone();
        let types = type_meta(&ar);
        tasks.push(tokio::spawn(async move {
            let _subscribed = subscription;
            let mut events = stored(host_events.map(Ok), host_writer, move |obj| {
                obj.types.get_or_insert_with(|| types.clone());
                if !noting.note_token_secret(&ar, obj) {
                    noting.caches.note_host_object(index, obj);
                }
                trim_host_object(&types, obj)
            });
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(Touched::Applied(obj)) => obj,
                    Ok(Touched::Deleted(obj)) => {
                        let ar = &w.caches.kind(index).ar;
                        if !w.note_token_secret_deleted(ar, &obj) {
                            w.caches.note_host_deleted(index, &obj);
                        }
                        obj
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %w.caches.placement.tenant, error = %e, "host watch");
                        continue;
                    }
                };
                if let Some(key) = w.caches.key_of_host_event(index, &obj) {
                    w.queue.push(key);
                }
            }
        }));
    }
    for (ar, (subscription, events), writer) in references {
        let w = worker.clone();
        let (noting, noted) = (worker.clone(), ar.clone());
        let types = type_meta(&ar);
        tasks.push(tokio::spawn(async move {
            let _subscribed = subscription;
            let mut events = stored(events.map(Ok), writer, move |obj| {
                obj.types.get_or_insert_with(|| types.clone());
                noting.note_token_secret(&noted, obj);
                trim_host_object(&types, obj)
            });
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(Touched::Applied(obj)) => obj,
                    Ok(Touched::Deleted(obj)) => {
                        w.note_token_secret_deleted(&ar, &obj);
                        obj
                    }
                    Err(e) => {
                        let tenant = &w.caches.placement.tenant;
                        tracing::warn!(tenant = %tenant, error = %e, "host watch of a referenced kind");
                        continue;
                    }
                };
                if let Some(key) = w.caches.pod_of_token_secret(&ar, &obj) {
                    w.queue.push(key);
                }
            }
        }));
    }
    tasks
}

/// An object a watch touched, once its store shows it.
enum Touched {
    /// Created or changed (or listed).
    Applied(DynamicObject),
    /// Deleted. (A store's relist after a broken watch drops the objects deleted meanwhile
    /// without such an event.)
    Deleted(DynamicObject),
}

/// The objects the watch events `watch` touch, each `trim`med and then kept in the store of
/// `writer`. (The store is swapped in whole when a list completes: until then, a listed object
/// is not in it, which is why a delete is told by its event, never by the store's absence.)
fn stored(
    watch: impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static,
    writer: Writer<DynamicObject>,
    trim: impl FnMut(&mut DynamicObject) + Send + 'static,
) -> BoxStream<'static, Result<Touched, watcher::Error>> {
    watch
        .modify(trim)
        .reflect(writer)
        .filter_map(|event| {
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    Some(Ok(Touched::Applied(o)))
                }
                Ok(watcher::Event::Delete(o)) => Some(Ok(Touched::Deleted(o))),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            })
        })
        .boxed()
}

impl Worker {
    /// Queues what a tenant object's event concerns.
    fn tenant_event(&self, index: usize, obj: &DynamicObject) {
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        self.caches
            .share_host_name(index, &namespace, &name, |key| self.queue.push(key));
        // A Service decides whether its Endpoints are synced: look at them again.
        if let Some(endpoints) = self
            .caches
            .endpoints_kind
            .filter(|_| Some(index) == self.caches.service_kind)
        {
            self.queue.push(Key {
                kind: endpoints,
                namespace: namespace.clone(),
                name: name.clone(),
            });
        }
        self.queue.push(Key {
            kind: index,
            namespace,
            name,
        });
    }

    /// Queues every key the caches know of (the first pass, and each resync).
    pub(super) fn enqueue_all(&self) {
        self.caches.each_key(|key| self.queue.push(key));
    }
}
