//! The host watches the tenant runtimes of a replica share: one watch per host kind, across
//! namespaces, whose events each go to the runtimes whose host namespace holds the object. The
//! host serves one watch stream per kind and encodes each event once, whatever the number of
//! Tenants; a runtime gets the events of its host namespace as if it watched it alone.
//!
//! ```text
//!  host ──watch kind k, all namespaces──▶ hub of k ──route by namespace──▶ runtime of tenant-a (its store of k)
//!                                                   └────────────────────▶ runtime of tenant-b
//! ```
//!
//! A runtime that subscribes gets the objects of its namespace from the next list of the kind:
//! the hub lists again (a new watch) once the list under way is done, waiting a moment so that
//! runtimes starting together share one list, and at most once a second. Until then, and between lists, a subscriber gets
//! nothing; from that list on it gets a list of its own namespace (`Init`, its objects,
//! `InitDone`) each time the kind is listed again, and every change in between. Objects of
//! namespaces no runtime serves are dropped on arrival.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use tokio::sync::Notify;

/// How long a hub waits, once a runtime subscribed, for others before it lists again.
const GATHER_SUBSCRIBERS: Duration = Duration::from_millis(250);
/// The shortest time between the starts of two lists of a kind: runtimes starting one after
/// another (a replica's start) share lists rather than each costing the host one.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// The events of one host namespace, for the runtime that serves it.
pub type HostEvents = UnboundedReceiver<watcher::Event<DynamicObject>>;

/// The shared host watches of a replica, one hub per kind, started by the first subscriber.
pub struct HostWatches {
    host: Client,
    hubs: Mutex<HashMap<(String, String, String), Arc<Hub>>>,
}

impl std::fmt::Debug for HostWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self
            .hubs
            .lock()
            .expect("hubs lock")
            .keys()
            .map(|(group, version, kind)| format!("{group}/{version}/{kind}"))
            .collect();
        f.debug_struct("HostWatches")
            .field("kinds", &kinds)
            .finish()
    }
}

impl HostWatches {
    /// No watch yet.
    pub fn new(host: Client) -> Self {
        HostWatches {
            host,
            hubs: Mutex::new(HashMap::new()),
        }
    }

    /// The events of the host objects of kind `ar` in `namespace`, until the subscription is
    /// dropped.
    pub fn subscribe(&self, ar: &ApiResource, namespace: &str) -> (Subscription, HostEvents) {
        let key = (ar.group.clone(), ar.version.clone(), ar.kind.clone());
        let hub = {
            let mut hubs = self.hubs.lock().expect("hubs lock");
            hubs.entry(key)
                .or_insert_with(|| {
                    let hub = Arc::new(Hub::default());
                    let api = Api::<DynamicObject>::all_with(self.host.clone(), ar);
                    tokio::spawn(run(hub.clone(), api, ar.kind.clone()));
                    hub
                })
                .clone()
        };
        let (send, events) = unbounded();
        let id = hub.join(namespace, send);
        (
            Subscription {
                hub,
                namespace: namespace.to_string(),
                id,
            },
            events,
        )
    }
}

/// A runtime's subscription to the host objects of one kind in its namespace; dropping it
/// ends it.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    namespace: String,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.leave(&self.namespace, self.id);
    }
}

/// One kind's watch and its subscribers by namespace.
#[derive(Debug, Default)]
struct Hub {
    subscribers: Mutex<HashMap<String, Vec<Subscriber>>>,
    /// Subscriptions so far (counted under the subscribers' lock): the hub lists again while
    /// some came after its last list began.
    joins: AtomicU64,
    joined: Notify,
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    send: UnboundedSender<watcher::Event<DynamicObject>>,
    /// It got the start of the list under way (or done): its store follows this watch.
    listed: bool,
}

impl Hub {
    fn join(&self, namespace: &str, send: UnboundedSender<watcher::Event<DynamicObject>>) -> u64 {
        let mut subscribers = self.subscribers.lock().expect("subscribers lock");
        let id = self.joins.fetch_add(1, Ordering::SeqCst) + 1;
        subscribers
            .entry(namespace.to_string())
            .or_default()
            .push(Subscriber {
                id,
                send,
                listed: false,
            });
        drop(subscribers);
        self.joined.notify_one();
        id
    }

    fn leave(&self, namespace: &str, id: u64) {
        let mut subscribers = self.subscribers.lock().expect("subscribers lock");
        if let Some(list) = subscribers.get_mut(namespace) {
            list.retain(|s| s.id != id);
            if list.is_empty() {
                subscribers.remove(namespace);
            }
        }
    }

    /// A list begins: every subscriber gets its start and follows the watch from now on. The
    /// subscriptions counted so far.
    fn list_begins(&self) -> u64 {
        let mut subscribers = self.subscribers.lock().expect("subscribers lock");
        for s in subscribers.values_mut().flatten() {
            s.listed = true;
            let _ = s.send.unbounded_send(watcher::Event::Init);
        }
        self.joins.load(Ordering::SeqCst)
    }

    /// Sends one event of the watch to the subscribers it concerns: a list's end to every
    /// listed subscriber, an object to the listed subscribers of its namespace.
    fn route(&self, event: watcher::Event<DynamicObject>) {
        let subscribers = self.subscribers.lock().expect("subscribers lock");
        let namespace = match &event {
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                o.namespace()
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        let listed = |list: &Vec<Subscriber>| -> Vec<UnboundedSender<_>> {
            list.iter()
                .filter(|s| s.listed)
                .map(|s| s.send.clone())
                .collect()
        };
        let senders = match namespace {
            Some(ns) => subscribers.get(&ns).map(listed).unwrap_or_default(),
            None if matches!(event, watcher::Event::InitDone) => {
                subscribers.values().flat_map(listed).collect()
            }
            // A cluster-scoped object: in no host namespace.
            None => Vec::new(),
        };
        drop(subscribers);
        if let Some((last, others)) = senders.split_last() {
            for s in others {
                let _ = s.unbounded_send(event.clone());
            }
            let _ = last.unbounded_send(event);
        }
    }
}

/// The watch of one kind (`api`, across namespaces), its events routed by `hub`; a new watch
/// (a new list) once the list under way is done when runtimes subscribed since it began.
async fn run(hub: Arc<Hub>, api: Api<DynamicObject>, kind: String) {
    loop {
        let started = tokio::time::Instant::now();
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let (mut listing, mut listed_joins, mut pending) = (true, 0, false);
        loop {
            if pending && !listing {
                let gathered = tokio::time::Instant::now() + GATHER_SUBSCRIBERS;
                tokio::time::sleep_until(gathered.max(started + LIST_INTERVAL)).await;
                break;
            }
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Init)) => {
                        listing = true;
                        listed_joins = hub.list_begins();
                        pending = false;
                    }
                    Some(Ok(event)) => {
                        if matches!(event, watcher::Event::InitDone) {
                            listing = false;
                        }
                        hub.route(event);
                    }
                    Some(Err(e)) => tracing::warn!(kind = %kind, error = %e, "shared host watch"),
                    None => break,
                },
                () = hub.joined.notified() => {
                    pending = hub.joins.load(Ordering::SeqCst) > listed_joins;
                }
            }
        }
    }
}
