//! The object store and what every write does whatever its kind means: generic JSON objects
//! keyed by (group, plural, namespace, name), one global resourceVersion counter, a bounded
//! event history for watch resume (older resourceVersions get 410 Gone), and the behaviour of
//! a real control plane that clients observe: optimistic concurrency, generation, finalizers
//! and deletionTimestamp, namespace termination, ownerReference garbage collection and CRDs
//! that start serving their resources. Controllers that run asynchronously in a real cluster
//! (namespace cleanup, garbage collection) run synchronously right after the write that
//! triggers them.
//!
//! What a write means for its kind (validation, defaults, admission) is the [`WritePolicy`]
//! the store is made with, called under the store's lock at the points kube-apiserver's
//! registry calls its strategy and admission:
//!
//! ```text
//! create: metadata ─ validate_create ─ namespace, exists ─ status cleared, store's own
//!         defaults (Namespace, Secret, APIService) or default_create ─ CRD registered ─ admit ─ put
//! update: preconditions, metadata, finalizers, managedFields ─ validate_update ─ no-op?
//!         ─ generation ─ CRD registered ─ admit ─ put
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::body::Bytes;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, broadcast};

use crate::storage::aggregation;
use crate::storage::apply::{Writer, record_update, server_side_apply};
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::events;
use crate::storage::names;
use crate::storage::patch::{PatchKind, apply_patch};
use crate::storage::resources::{
    CRD_GROUP, CRD_PLURAL, EVENTS_GROUP, Registry, ResourceType, StorageKey,
};
use crate::storage::selectors::{FieldSelector, LabelSelector};

/// The finalizer that holds an owner deleted in the foreground until its
/// blocking dependents are gone.
const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Namespace and name of an object within one resource.
type ObjectName = (String, String);

/// One object anywhere in the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct ObjectRef {
    key: StorageKey,
    namespace: String,
    name: String,
}

/// What the layers above storage decide about a write to a kind: validation, defaults and
/// admission (`crate::admission::chain` is kube-apiserver's). Called under the store's lock.
pub trait WritePolicy: Send + Sync + std::fmt::Debug {
    /// Refuses a new object whose name (or `generateName`), or anything else its kind checks
    /// before defaults, is invalid. `name` is the name it gets, generated or not.
    fn validate_create(
        &self,
        rt: &ResourceType,
        name: &str,
        generate_name: Option<&str>,
        object: &Value,
    ) -> ApiResult<()>;

    /// Fills in the defaults of a new object of every kind but those the store fills itself
    /// (Namespaces, Secrets, APIServices), its `status` already cleared when the kind has a
    /// status subresource; refuses a CustomResourceDefinition kube-apiserver would refuse.
    fn default_create(
        &self,
        rt: &ResourceType,
        object: &mut Value,
        cluster_ips: &mut ClusterIps<'_>,
    ) -> ApiResult<()>;

    /// Refuses an update of `old` into `new` (not through the status subresource), before the
    /// store looks at whether it changes anything.
    fn validate_update(
        &self,
        rt: &ResourceType,
        name: &str,
        new: &Value,
        old: &Value,
    ) -> ApiResult<()>;

    /// Admits a create or update (not through the status subresource) about to be stored, with
    /// the stored objects to look at: may change a created `object` or refuse the write.
    fn admit(&self, objects: Objects<'_>, write: &Write<'_>, object: &mut Value) -> ApiResult<()>;
}

/// A create or an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

impl Operation {
    /// `CREATE` or `UPDATE`, as admission names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
        }
    }
}

/// A create or update about to be stored, as [`WritePolicy::admit`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The resource written to.
    pub rt: &'a ResourceType,
    pub operation: Operation,
    /// The object's namespace (empty for cluster-scoped kinds).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// How errors name the object: its `generateName` until a name is generated.
    pub error_name: &'a str,
    /// The stored object, for an update.
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

/// The stored objects, read-only, as the [`WritePolicy`] sees them during a write.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a> {
    state: &'a State,
}

impl<'a> Objects<'a> {
    /// One object.
    pub fn get(self, key: &StorageKey, namespace: &str, name: &str) -> Option<&'a Value> {
        self.state.lookup(key, namespace, name)
    }

    /// Every object stored under `key`, by namespace and name.
    pub fn all(self, key: &StorageKey) -> impl Iterator<Item = &'a Value> + Clone + use<'a> {
        self.state
            .bucket(key)
            .into_iter()
            .flat_map(BTreeMap::values)
    }

    /// The Namespace object `name`.
    pub fn namespace(self, name: &str) -> Option<&'a Value> {
        self.state.namespace_object(name)
    }
}

/// Service cluster IPs, from 10.96.0.1 on; a dry run takes none.
#[derive(Debug)]
pub struct ClusterIps<'a> {
    next: &'a mut u32,
    dry_run: bool,
}

impl ClusterIps<'_> {
    /// The next free address.
    pub fn allocate(&mut self) -> String {
        let n = *self.next;
        if !self.dry_run {
            *self.next += 1;
        }
        format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
    }
}

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// A change, as kept in the history and fanned out to watchers.
#[derive(Debug)]
pub struct Change {
    pub resource_version: u64,
    pub key: StorageKey,
    pub namespace: String,
    pub event: EventType,
    pub object: Value,
    /// The object before a modification (selectors turn it into ADDED/DELETED).
    pub previous: Option<Value>,
    /// The watch-event line for this change as stored, encoded once and
    /// shared by every watcher that sends it unchanged.
    pub encoded: OnceLock<Bytes>,
}

/// Who writes, for managedFields and dry runs.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    pub manager: String,
    pub dry_run: bool,
    pub force: bool,
}

/// The result of a PATCH.
#[derive(Debug)]
pub struct Patched {
    pub object: Value,
    /// Server-side apply created the object (201 instead of 200).
    pub created: bool,
}

/// The stored object a write replaces, and where it lives.
#[derive(Debug, Clone, Copy)]
struct Existing<'a> {
    rt: &'a ResourceType,
    namespace: &'a str,
    name: &'a str,
    old: &'a Value,
}

/// Whether a write still has to record its field manager in managedFields
/// (server-side apply has already done so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ownership {
    Record,
    AlreadyRecorded,
}

/// Propagation of a deletion to dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// `DeleteOptions` as sent in the query or body of a DELETE.
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

/// Filters and paging of a list.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

/// Where a watch starts.
#[derive(Debug)]
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for current state, or replay).
    pub initial: Vec<Arc<Change>>,
    /// Live changes; those at or below `after` are already in `initial`.
    pub live: broadcast::Receiver<Arc<Change>>,
    pub after: u64,
}

/// On-disk snapshot for optional persistence.
#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    resource_version: u64,
    objects: Vec<StoredObject>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredObject {
    group: String,
    resource: String,
    object: Value,
}

#[derive(Debug)]
struct State {
    registry: Registry,
    objects: BTreeMap<StorageKey, BTreeMap<ObjectName, Value>>,
    resource_version: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Highest resourceVersion whose change is no longer in `history`.
    compacted: u64,
    /// owner uid -> objects naming it in ownerReferences.
    dependents: HashMap<String, BTreeSet<ObjectRef>>,
    /// uid -> object, for owner lookups.
    uids: HashMap<String, ObjectRef>,
    next_cluster_ip: u32,
}

/// The shared store behind the HTTP layer.
#[derive(Debug)]
pub struct Store {
    state: Mutex<State>,
    /// What writes mean beyond storage.
    policy: Arc<dyn WritePolicy>,
    changes: broadcast::Sender<Arc<Change>>,
    /// Signalled on every committed change (persistence writes on it).
    pub changed: Notify,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// Refuses a body whose `apiVersion` or `kind`, when given, is not the one expected.
pub fn check_type_meta(body: &Value, api_version: &str, kind: &str) -> ApiResult<()> {
    match body.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        _ => {}
    }
    match body.get("kind").and_then(Value::as_str) {
        Some(k) if k != kind => Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({kind})"
        ))),
        _ => Ok(()),
    }
}

fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn owner_uids(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Everything but metadata and (with a status subresource) status: changes
/// here bump `metadata.generation`.
fn generation_relevant(object: &Value, has_status: bool) -> Value {
    let mut copy = object.clone();
    if let Value::Object(map) = &mut copy {
        map.remove("metadata");
        if has_status {
            map.remove("status");
        }
    }
    copy
}

/// The object as compared for no-op detection: ignores the resourceVersion
/// and managedFields timestamps, so a write that changes nothing (not even
/// field ownership) is not a new revision.
fn comparable(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(Value::Object(meta)) = copy.get_mut("metadata") {
        meta.remove("resourceVersion");
        if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
    }
    copy
}

/// The objects of one namespace in a bucket (a range scan, not a filter).
fn in_namespace<'a>(
    bucket: &'a BTreeMap<ObjectName, Value>,
    namespace: &'a str,
) -> impl Iterator<Item = &'a ObjectName> + 'a {
    bucket
        .range((namespace.to_string(), String::new())..)
        .map(|(key, _)| key)
        .take_while(move |(ns, _)| ns == namespace)
}

impl State {
    /// Allocates Service cluster IPs.
    fn cluster_ips(&mut self, dry_run: bool) -> ClusterIps<'_> {
        ClusterIps {
            next: &mut self.next_cluster_ip,
            dry_run,
        }
    }

    fn bucket(&self, key: &StorageKey) -> Option<&BTreeMap<ObjectName, Value>> {
        self.objects.get(key)
    }

    fn lookup(&self, key: &StorageKey, namespace: &str, name: &str) -> Option<&Value> {
        self.bucket(key)?
            .get(&(namespace.to_string(), name.to_string()))
    }

    fn namespace_object(&self, namespace: &str) -> Option<&Value> {
        self.lookup(
            &StorageKey {
                group: String::new(),
                plural: "namespaces".into(),
            },
            "",
            namespace,
        )
    }

    fn record(&mut self, change: Change, sender: &broadcast::Sender<Arc<Change>>) {
        if change.key.group == aggregation::GROUP && change.key.plural == aggregation::PLURAL {
            self.refresh_aggregation();
        }
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = sender.send(change);
    }

    /// Tells the registry which group versions the stored APIServices leave unavailable.
    fn refresh_aggregation(&mut self) {
        let key = StorageKey {
            group: aggregation::GROUP.into(),
            plural: aggregation::PLURAL.into(),
        };
        let unavailable =
            aggregation::unavailable(self.bucket(&key).into_iter().flat_map(|b| b.values()));
        self.registry.set_unavailable(unavailable);
    }

    fn index(&mut self, object: &Value, target: &ObjectRef, add: bool) {
        let uid = meta_str(object, "uid").unwrap_or_default().to_string();
        for owner in owner_uids(object) {
            let entry = self.dependents.entry(owner.clone()).or_default();
            if add {
                entry.insert(target.clone());
            } else {
                entry.remove(target);
                if entry.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
        if add {
            self.uids.insert(uid, target.clone());
        } else {
            self.uids.remove(&uid);
        }
    }

    /// Stores an object with a fresh resourceVersion and records the change.
    fn put(
        &mut self,
        target: &ObjectRef,
        mut object: Value,
        event: EventType,
        sender: &broadcast::Sender<Arc<Change>>,
    ) -> Value {
        if target.key.group.is_empty() && target.key.plural == "events" {
            object = events::to_storage(&object);
        }
        self.resource_version += 1;
        let rv = self.resource_version;
        meta_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        let name = (target.namespace.clone(), target.name.clone());
        let previous = self
            .objects
            .entry(target.key.clone())
            .or_default()
            .insert(name, object.clone());
        if let Some(previous) = &previous {
            self.index(previous, target, false);
        }
        self.index(&object, target, true);
        self.record(
            Change {
                resource_version: rv,
                key: target.key.clone(),
                namespace: target.namespace.clone(),
                event,
                object: object.clone(),
                previous,
                encoded: OnceLock::new(),
            },
            sender,
        );
        object
    }

    /// Removes an object and records its deletion.
    fn take(
        &mut self,
        target: &ObjectRef,
        sender: &broadcast::Sender<Arc<Change>>,
    ) -> Option<Value> {
        let mut object = self
            .objects
            .get_mut(&target.key)?
            .remove(&(target.namespace.clone(), target.name.clone()))?;
        self.index(&object, target, false);
        self.resource_version += 1;
        let rv = self.resource_version;
        meta_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        self.record(
            Change {
                resource_version: rv,
                key: target.key.clone(),
                namespace: target.namespace.clone(),
                event: EventType::Deleted,
                object: object.clone(),
                previous: None,
                encoded: OnceLock::new(),
            },
            sender,
        );
        Some(object)
    }
}

impl Store {
    /// An empty store keeping `history_limit` changes for watch resume, its writes decided by
    /// `policy`.
    pub fn new(history_limit: usize, policy: Arc<dyn WritePolicy>) -> Self {
        let (changes, _) = broadcast::channel(65_536);
        Self {
            state: Mutex::new(State {
                registry: Registry::default(),
                objects: BTreeMap::new(),
                resource_version: 0,
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted: 0,
                dependents: HashMap::new(),
                uids: HashMap::new(),
                next_cluster_ip: 1,
            }),
            policy,
            changes,
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (writes are
        // applied whole), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the namespaces every cluster has.
    pub fn create_default_namespaces(&self) -> ApiResult<()> {
        let namespaces = self.resource("", "v1", "namespaces")?;
        let opts = WriteOptions {
            manager: "tenantplane-local-apiserver".into(),
            dry_run: false,
            force: false,
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if self.get(&namespaces, "", name).is_err() {
                self.create(&namespaces, "", json!({"metadata": {"name": name}}), &opts)?;
            }
        }
        Ok(())
    }

    /// Loads a persisted snapshot (objects, resourceVersion, CRD resources).
    /// Watch history starts empty: older resourceVersions answer 410 Gone.
    pub fn load_snapshot(&self, bytes: &[u8]) -> anyhow::Result<()> {
        let snapshot: Snapshot = serde_json::from_slice(bytes)?;
        let mut state = self.lock();
        for mut stored in snapshot.objects {
            if stored.group == EVENTS_GROUP && stored.resource == "events" {
                // Snapshots from before the two Event APIs shared one store.
                stored.group = String::new();
                stored.object = events::to_storage(&stored.object);
            }
            let key = StorageKey {
                group: stored.group,
                plural: stored.resource,
            };
            if key.group == CRD_GROUP && key.plural == CRD_PLURAL {
                state
                    .registry
                    .register_crd(&stored.object)
                    .map_err(anyhow::Error::msg)?;
            }
            let target = ObjectRef {
                key: key.clone(),
                namespace: meta_str(&stored.object, "namespace")
                    .unwrap_or_default()
                    .to_string(),
                name: meta_str(&stored.object, "name")
                    .unwrap_or_default()
                    .to_string(),
            };
            state.index(&stored.object, &target, true);
            state
                .objects
                .entry(key)
                .or_default()
                .insert((target.namespace, target.name), stored.object);
        }
        state.resource_version = snapshot.resource_version;
        state.compacted = snapshot.resource_version;
        state.next_cluster_ip = Self::next_free_cluster_ip(&state);
        state.refresh_aggregation();
        Ok(())
    }

    /// The allocation counter after the highest clusterIP persisted services hold.
    fn next_free_cluster_ip(state: &State) -> u32 {
        let services = StorageKey {
            group: String::new(),
            plural: "services".into(),
        };
        state
            .bucket(&services)
            .into_iter()
            .flat_map(|bucket| bucket.values())
            .filter_map(|svc| svc.pointer("/spec/clusterIP").and_then(Value::as_str))
            .filter_map(|ip| {
                let mut octets = ip.strip_prefix("10.96.")?.split('.');
                let high: u32 = octets.next()?.parse().ok()?;
                let low: u32 = octets.next()?.parse().ok()?;
                Some((high << 8 | low) + 1)
            })
            .max()
            .unwrap_or(1)
    }

    /// Serializes every object for persistence.
    pub fn snapshot(&self) -> Vec<u8> {
        let state = self.lock();
        let objects = state
            .objects
            .iter()
            .flat_map(|(key, bucket)| {
                bucket.values().map(|object| StoredObject {
                    group: key.group.clone(),
                    resource: key.plural.clone(),
                    object: object.clone(),
                })
            })
            .collect();
        let snapshot = Snapshot {
            resource_version: state.resource_version,
            objects,
        };
        drop(state);
        serde_json::to_vec(&snapshot).unwrap_or_default()
    }

    /// The resource served at group/version/plural, or 404.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> ApiResult<ResourceType> {
        let state = self.lock();
        state
            .registry
            .find(group, version, plural)
            .cloned()
            .ok_or_else(|| {
                let path = if group.is_empty() {
                    format!("/api/{version}/{plural}")
                } else {
                    format!("/apis/{group}/{version}/{plural}")
                };
                ApiError::unknown_path(&path)
            })
    }

    /// Runs a read-only closure over the resource table (discovery).
    pub fn with_registry<T>(&self, f: impl FnOnce(&Registry) -> T) -> T {
        f(&self.lock().registry)
    }

    /// Current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    fn served(rt: &ResourceType, object: Value) -> Value {
        let mut object = events::view(rt, object);
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
        object
    }

    /// GET one object.
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Value> {
        let state = self.lock();
        state
            .lookup(&rt.storage_key(), namespace, name)
            .cloned()
            .map(|o| Self::served(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// LIST objects (all namespaces when `namespace` is None).
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> ApiResult<ListPage> {
        let state = self.lock();
        let start: Option<ObjectName> = match &options.continue_token {
            Some(token) => {
                let mut parts = token.splitn(3, '|');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(_rv), Some(ns), Some(name)) => Some((ns.to_string(), name.to_string())),
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "continue key is not valid: {token}"
                        )));
                    }
                }
            }
            None => None,
        };
        let mut items = Vec::new();
        let mut continue_token = None;
        if let Some(bucket) = state.bucket(&rt.storage_key()) {
            let lower = match &start {
                Some(after) => Bound::Excluded(after.clone()),
                None => Bound::Included((namespace.unwrap_or_default().to_string(), String::new())),
            };
            let candidates = bucket
                .range((lower, Bound::Unbounded))
                .take_while(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns));
            for (_, object) in candidates {
                if !options.labels.matches(object) || !options.fields.matches(object) {
                    continue;
                }
                if options.limit.is_some_and(|limit| items.len() >= limit) {
                    let (last_ns, last_name) = items
                        .last()
                        .map(|o: &Value| {
                            (
                                meta_str(o, "namespace").unwrap_or_default().to_string(),
                                meta_str(o, "name").unwrap_or_default().to_string(),
                            )
                        })
                        .unwrap_or_default();
                    continue_token =
                        Some(format!("{}|{last_ns}|{last_name}", state.resource_version));
                    break;
                }
                items.push(Self::served(rt, object.clone()));
            }
        }
        Ok(ListPage {
            items,
            resource_version: state.resource_version,
            continue_token,
        })
    }

    /// Starts a watch: `from` is the resourceVersion to resume after (None or
    /// 0: synthetic ADDED events for the current state first).
    pub fn watch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> ApiResult<WatchStart> {
        let state = self.lock();
        let live = self.changes.subscribe();
        let key = rt.storage_key();
        let initial: Vec<Arc<Change>> = match from {
            None | Some(0) => state
                .bucket(&key)
                .into_iter()
                .flat_map(|b| b.iter())
                .filter(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns))
                .map(|((ns, _), object)| {
                    Arc::new(Change {
                        resource_version: state.resource_version,
                        key: key.clone(),
                        namespace: ns.clone(),
                        event: EventType::Added,
                        object: object.clone(),
                        previous: None,
                        encoded: OnceLock::new(),
                    })
                })
                .collect(),
            Some(rv) if rv < state.compacted => {
                return Err(ApiError::gone(format!(
                    "too old resource version: {rv} ({})",
                    state.compacted + 1
                )));
            }
            Some(rv) => state
                .history
                .iter()
                .filter(|c| c.resource_version > rv && c.key == key)
                .cloned()
                .collect(),
        };
        Ok(WatchStart {
            initial,
            live,
            after: state.resource_version,
        })
    }

    /// Whether a list request at an exact resourceVersion can still be served.
    pub fn check_not_compacted(&self, rv: u64) -> ApiResult<()> {
        let state = self.lock();
        if rv != 0 && rv < state.compacted {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                state.compacted + 1
            )));
        }
        Ok(())
    }

    fn check_body_type(rt: &ResourceType, body: &mut Value) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        check_type_meta(body, &rt.api_version(), &rt.kind)?;
        body["apiVersion"] = json!(rt.api_version());
        body["kind"] = json!(rt.kind);
        Ok(())
    }

    /// POST: creates an object.
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: &str,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        Self::check_body_type(rt, &mut body)?;
        let writer_time = now();
        let writer = Writer {
            manager: &opts.manager,
            api_version: &rt.api_version(),
            time: &writer_time,
        };
        record_update(None, &mut body, &writer, rt.list_shape(), false);
        let mut state = self.lock();
        let created = self.insert_new(&mut state, rt, namespace, body, opts.dry_run)?;
        drop(state);
        self.changed.notify_one();
        Ok(Self::served(rt, created))
    }

    fn insert_new(
        &self,
        state: &mut State,
        rt: &ResourceType,
        namespace: &str,
        mut body: Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let meta = meta_mut(&mut body);
        let generate_name = meta
            .get("generateName")
            .and_then(Value::as_str)
            .map(str::to_string);
        let requested_name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = match requested_name.as_str() {
            n if !n.is_empty() => n.to_string(),
            _ => match generate_name.as_deref() {
                Some(prefix) if !prefix.is_empty() => names::generate(prefix),
                _ => String::new(),
            },
        };
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if rt.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != namespace => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.insert("generation".into(), json!(1));
        for server_owned in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(server_owned);
        }
        // Admission names an object by its generateName until a name is generated.
        let admission_name = match generate_name.as_deref() {
            Some(prefix) if requested_name.is_empty() => prefix,
            _ => name.as_str(),
        };
        self.policy
            .validate_create(rt, &name, generate_name.as_deref(), &body)?;
        let key = rt.storage_key();
        let ns_key = if rt.namespaced { namespace } else { "" };
        if rt.namespaced {
            match state.namespace_object(namespace) {
                None => return Err(ApiError::not_found("", "namespaces", namespace)),
                Some(ns) if ns.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden_object(
                        &rt.group,
                        &rt.plural,
                        admission_name,
                        &format!(
                            "unable to create new content in namespace {namespace} because it is being terminated"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if state.lookup(&key, ns_key, &name).is_some() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        self.apply_defaults(state, rt, &mut body, dry_run)?;
        let write = Write {
            rt,
            operation: Operation::Create,
            namespace: ns_key,
            name: &name,
            error_name: admission_name,
            old: None,
            dry_run,
        };
        self.policy
            .admit(Objects { state: &*state }, &write, &mut body)?;
        if dry_run {
            return Ok(body);
        }
        let target = ObjectRef {
            key,
            namespace: ns_key.to_string(),
            name: name.clone(),
        };
        let created = state.put(&target, body, EventType::Added, &self.changes);
        if rt.plural == "namespaces" && rt.group.is_empty() {
            let sa = json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default"},
            });
            let sa_type = state
                .registry
                .find("", "v1", "serviceaccounts")
                .cloned()
                .ok_or_else(|| ApiError::internal("serviceaccounts are not registered"))?;
            self.insert_new(state, &sa_type, &name, sa, false)?;
        }
        Ok(created)
    }

    /// What a real control plane fills in on create: the store's own (a Namespace's
    /// finalizer and phase, a Secret's type and `data`, an APIService's status, a CRD's
    /// registration and status) or the policy's defaults.
    fn apply_defaults(
        &self,
        state: &mut State,
        rt: &ResourceType,
        body: &mut Value,
        dry_run: bool,
    ) -> ApiResult<()> {
        if rt.has_status
            && let Value::Object(map) = body
        {
            map.remove("status");
        }
        match (rt.group.as_str(), rt.kind.as_str()) {
            ("", "Namespace") => {
                let name = meta_str(body, "name").unwrap_or_default().to_string();
                let labels = meta_mut(body).entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = json!(name);
                body["spec"] = json!({"finalizers": ["kubernetes"]});
                body["status"] = json!({"phase": "Active"});
            }
            (aggregation::GROUP, "APIService") => {
                body["status"] = aggregation::status(body);
            }
            ("", "Secret") => {
                if body.get("type").is_none() {
                    body["type"] = json!("Opaque");
                }
                Self::fold_string_data(body);
            }
            (CRD_GROUP, "CustomResourceDefinition") => {
                self.policy
                    .default_create(rt, body, &mut state.cluster_ips(dry_run))?;
                let mut registry = state.registry.clone();
                registry.register_crd(body).map_err(|message| {
                    ApiError::invalid(
                        CRD_GROUP,
                        "CustomResourceDefinition",
                        meta_str(body, "name").unwrap_or_default(),
                        "spec",
                        &message,
                    )
                })?;
                if !dry_run {
                    state.registry = registry;
                }
                body["status"] = Self::crd_status(body);
            }
            _ => self
                .policy
                .default_create(rt, body, &mut state.cluster_ips(dry_run))?,
        }
        Ok(())
    }

    /// Secrets: `stringData` is write-only and lands base64-encoded in `data`.
    fn fold_string_data(body: &mut Value) {
        let Some(Value::Object(string_data)) =
            body.as_object_mut().and_then(|m| m.remove("stringData"))
        else {
            return;
        };
        if !body.get("data").is_some_and(Value::is_object) {
            body["data"] = json!({});
        }
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default();
            body["data"][k] = json!(data_encoding::BASE64.encode(text.as_bytes()));
        }
    }

    fn crd_status(crd: &Value) -> Value {
        let time = now();
        let stored: Vec<&Value> = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                    .filter_map(|v| v.get("name"))
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
            "storedVersions": stored,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": time},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": time},
            ],
        })
    }

    /// PUT: replaces an object (or its status when `status_only`).
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut body: Value,
        status_only: bool,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        Self::check_body_type(rt, &mut body)?;
        let mut state = self.lock();
        let key = rt.storage_key();
        let old = state
            .lookup(&key, namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        match meta_str(&body, "resourceVersion") {
            Some(rv) if !rv.is_empty() => {}
            _ if rt.custom => {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                ));
            }
            _ => {
                let rv = meta_str(&old, "resourceVersion")
                    .unwrap_or_default()
                    .to_string();
                meta_mut(&mut body).insert("resourceVersion".into(), json!(rv));
            }
        }
        let existing = Existing {
            rt,
            namespace,
            name,
            old: &old,
        };
        let updated = self.replace(
            &mut state,
            existing,
            body,
            status_only,
            opts,
            Ownership::Record,
        )?;
        drop(state);
        self.changed.notify_one();
        Ok(Self::served(rt, updated))
    }

    /// PATCH: applies a patch (or server-side apply, which may create the
    /// object) to an object.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch: &Value,
        status_only: bool,
        opts: &WriteOptions,
    ) -> ApiResult<Patched> {
        let mut state = self.lock();
        let key = rt.storage_key();
        let old = state.lookup(&key, namespace, name).cloned();
        let created = old.is_none();
        let api_version = rt.api_version();
        let time = now();
        let writer = Writer {
            manager: &opts.manager,
            api_version: &api_version,
            time: &time,
        };
        let result = match (kind, old) {
            (PatchKind::Apply, old) => {
                let mut applied = patch.clone();
                Self::check_applied(name, &mut applied)?;
                match old {
                    None if status_only => {
                        return Err(ApiError::not_found(&rt.group, &rt.plural, name));
                    }
                    None => {
                        let mut created = server_side_apply(
                            None,
                            &applied,
                            &writer,
                            rt.list_shape(),
                            opts.force,
                        )?;
                        Self::check_body_type(rt, &mut created)?;
                        self.insert_new(&mut state, rt, namespace, created, opts.dry_run)?
                    }
                    Some(old) if status_only => {
                        let mut merged = Self::served(rt, old.clone());
                        if let Some(status) = applied.get("status") {
                            let mut status_value =
                                merged.get("status").cloned().unwrap_or(json!({}));
                            json_patch::merge(&mut status_value, status);
                            merged["status"] = status_value;
                        }
                        let existing = Existing {
                            rt,
                            namespace,
                            name,
                            old: &old,
                        };
                        self.replace(&mut state, existing, merged, true, opts, Ownership::Record)?
                    }
                    Some(old) => {
                        let served_old = Self::served(rt, old.clone());
                        let merged = server_side_apply(
                            Some(&served_old),
                            &applied,
                            &writer,
                            rt.list_shape(),
                            opts.force,
                        )?;
                        let existing = Existing {
                            rt,
                            namespace,
                            name,
                            old: &old,
                        };
                        self.replace(
                            &mut state,
                            existing,
                            merged,
                            false,
                            opts,
                            Ownership::AlreadyRecorded,
                        )?
                    }
                }
            }
            (_, None) => return Err(ApiError::not_found(&rt.group, &rt.plural, name)),
            (kind, Some(old)) => {
                let mut patched = Self::served(rt, old.clone());
                apply_patch(kind, &mut patched, patch, rt.custom)?;
                Self::check_body_type(rt, &mut patched)?;
                let existing = Existing {
                    rt,
                    namespace,
                    name,
                    old: &old,
                };
                self.replace(
                    &mut state,
                    existing,
                    patched,
                    status_only,
                    opts,
                    Ownership::Record,
                )?
            }
        };
        drop(state);
        self.changed.notify_one();
        Ok(Patched {
            object: Self::served(rt, result),
            created,
        })
    }

    fn check_applied(name: &str, applied: &mut Value) -> ApiResult<()> {
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the apply configuration must be an object",
            ));
        }
        for field in ["apiVersion", "kind"] {
            if applied
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(format!(
                    "{field} must be set in an apply configuration"
                )));
            }
        }
        match meta_str(applied, "name") {
            Some(n) if n == name => Ok(()),
            Some(n) => Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            ))),
            None => {
                meta_mut(applied).insert("name".into(), json!(name));
                Ok(())
            }
        }
    }

    /// The shared tail of update, patch and apply: preconditions, server-owned
    /// metadata, generation, managedFields, finalizer rules, commit.
    fn replace(
        &self,
        state: &mut State,
        existing: Existing<'_>,
        mut body: Value,
        status_only: bool,
        opts: &WriteOptions,
        ownership: Ownership,
    ) -> ApiResult<Value> {
        let Existing {
            rt,
            namespace,
            name,
            old,
        } = existing;
        // Events are compared and validated in the form of the API written to.
        let old_view;
        let old = if rt.is_event() {
            old_view = Self::served(rt, old.clone());
            &old_view
        } else {
            old
        };
        let old_rv = meta_str(old, "resourceVersion").unwrap_or_default();
        if let Some(rv) = meta_str(&body, "resourceVersion").filter(|rv| !rv.is_empty())
            && rv != old_rv
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(body_name) = meta_str(&body, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced
            && let Some(ns) = meta_str(&body, "namespace").filter(|ns| *ns != namespace)
        {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object ({ns}) does not match the namespace on the URL ({namespace})"
            )));
        }
        let mut new = if status_only {
            let mut new = old.clone();
            match body.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Value::Object(m) = &mut new {
                        m.remove("status");
                    }
                }
            }
            new
        } else {
            if rt.has_status {
                match old.get("status") {
                    Some(status) => body["status"] = status.clone(),
                    None => {
                        if let Value::Object(m) = &mut body {
                            m.remove("status");
                        }
                    }
                }
            }
            let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
            let meta = meta_mut(&mut body);
            for preserved in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(preserved) {
                    Some(v) => meta.insert(preserved.into(), v.clone()),
                    None => meta.remove(preserved),
                };
            }
            if !meta.contains_key("managedFields")
                && let Some(mf) = old_meta.get("managedFields")
            {
                meta.insert("managedFields".into(), mf.clone());
            }
            body
        };
        if rt.group.is_empty() && rt.kind == "Secret" {
            Self::fold_string_data(&mut new);
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let before = finalizers(old);
            if let Some(added) = finalizers(&new).iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    "metadata.finalizers",
                    &format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                    ),
                ));
            }
        }
        if ownership == Ownership::Record {
            let api_version = rt.api_version();
            let time = now();
            let writer = Writer {
                manager: &opts.manager,
                api_version: &api_version,
                time: &time,
            };
            let served_old = Self::served(rt, old.clone());
            record_update(
                Some(&served_old),
                &mut new,
                &writer,
                rt.list_shape(),
                status_only,
            );
        }
        if !status_only {
            self.policy.validate_update(rt, name, &new, old)?;
        }
        if rt.is_event() {
            // Compared with the old one in the form of the API written to.
            new = Self::served(rt, new);
        }
        if comparable(&new) == comparable(old) {
            return Ok(old.clone());
        }
        if generation_relevant(&new, rt.has_status) != generation_relevant(old, rt.has_status) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL && !status_only {
            let mut registry = state.registry.clone();
            registry.register_crd(&new).map_err(|message| {
                ApiError::invalid(CRD_GROUP, &rt.kind, name, "spec", &message)
            })?;
            if !opts.dry_run {
                state.registry = registry;
            }
        }
        if !status_only {
            let write = Write {
                rt,
                operation: Operation::Update,
                namespace,
                name,
                error_name: name,
                old: Some(old),
                dry_run: opts.dry_run,
            };
            self.policy
                .admit(Objects { state: &*state }, &write, &mut new)?;
        }
        if opts.dry_run {
            return Ok(new);
        }
        let target = ObjectRef {
            key: rt.storage_key(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        if new.pointer("/metadata/deletionTimestamp").is_some() && finalizers(&new).is_empty() {
            let stored = state.put(&target, new, EventType::Modified, &self.changes);
            self.remove_now(state, &target, Propagation::Background);
            return Ok(stored);
        }
        Ok(state.put(&target, new, EventType::Modified, &self.changes))
    }

    /// DELETE one object.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let target = ObjectRef {
            key: rt.storage_key(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let old = state
            .lookup(&target.key, namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if let Some(uid) = &options.precondition_uid {
            let actual = meta_str(&old, "uid").unwrap_or_default();
            if uid != actual {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                ));
            }
        }
        if let Some(rv) = &options.precondition_resource_version {
            let actual = meta_str(&old, "resourceVersion").unwrap_or_default();
            if rv != actual {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                ));
            }
        }
        if options.dry_run {
            return Ok(Self::served(rt, old));
        }
        let result = self.delete_locked(&mut state, &target, old, options.propagation);
        drop(state);
        self.changed.notify_one();
        Ok(Self::served(rt, result))
    }

    /// DELETE on a collection: deletes every matching object.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        list: &ListOptions,
        options: &DeleteOptions,
    ) -> ApiResult<ListPage> {
        let page = self.list(rt, namespace, list)?;
        if options.dry_run {
            return Ok(page);
        }
        let mut state = self.lock();
        let mut items = Vec::new();
        for object in page.items {
            let target = ObjectRef {
                key: rt.storage_key(),
                namespace: meta_str(&object, "namespace")
                    .unwrap_or_default()
                    .to_string(),
                name: meta_str(&object, "name").unwrap_or_default().to_string(),
            };
            let Some(current) = state
                .lookup(&target.key, &target.namespace, &target.name)
                .cloned()
            else {
                continue;
            };
            items.push(Self::served(
                rt,
                self.delete_locked(&mut state, &target, current, options.propagation),
            ));
        }
        let resource_version = state.resource_version;
        drop(state);
        self.changed.notify_one();
        Ok(ListPage {
            items,
            resource_version,
            continue_token: None,
        })
    }

    /// Deletion semantics: finalizers defer it (deletionTimestamp), namespaces
    /// terminate, propagation decides what happens to dependents.
    fn delete_locked(
        &self,
        state: &mut State,
        target: &ObjectRef,
        old: Value,
        propagation: Propagation,
    ) -> Value {
        let is_namespace = target.key.group.is_empty() && target.key.plural == "namespaces";
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return old;
        }
        let uid = meta_str(&old, "uid").unwrap_or_default().to_string();
        if propagation == Propagation::Orphan {
            self.orphan_dependents(state, &uid);
        }
        if is_namespace {
            let mut terminating = old;
            let meta = meta_mut(&mut terminating);
            meta.insert("deletionTimestamp".into(), json!(now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            terminating["status"]["phase"] = json!("Terminating");
            let stored = state.put(target, terminating, EventType::Modified, &self.changes);
            self.empty_namespace(state, &target.name);
            return stored;
        }
        let foreground = propagation == Propagation::Foreground
            && state.dependents.get(&uid).is_some_and(|d| !d.is_empty());
        if foreground || !finalizers(&old).is_empty() {
            let mut marked = old;
            let generation = marked
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let mut held = finalizers(&marked);
            if foreground && !held.iter().any(|f| f == FOREGROUND_FINALIZER) {
                held.push(FOREGROUND_FINALIZER.to_string());
            }
            let meta = meta_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), json!(now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.insert("generation".into(), json!(generation + 1));
            meta.insert("finalizers".into(), json!(held));
            let stored = state.put(target, marked, EventType::Modified, &self.changes);
            if foreground {
                let dependents = state.dependents.get(&uid).cloned().unwrap_or_default();
                for dependent in dependents {
                    if let Some(object) = state
                        .lookup(&dependent.key, &dependent.namespace, &dependent.name)
                        .cloned()
                    {
                        self.delete_locked(state, &dependent, object, Propagation::Foreground);
                    }
                }
                self.release_foreground_owner(state, &uid);
            }
            return stored;
        }
        self.remove_now(state, target, propagation).unwrap_or(old)
    }

    /// Foreground deletion: once no dependent with `blockOwnerDeletion`
    /// remains, the owner loses its `foregroundDeletion` finalizer (and goes
    /// if that was the last one).
    fn release_foreground_owner(&self, state: &mut State, owner_uid: &str) {
        let Some(owner_ref) = state.uids.get(owner_uid).cloned() else {
            return;
        };
        let Some(owner) = state
            .lookup(&owner_ref.key, &owner_ref.namespace, &owner_ref.name)
            .cloned()
        else {
            return;
        };
        let mut held = finalizers(&owner);
        if !held.iter().any(|f| f == FOREGROUND_FINALIZER) {
            return;
        }
        let blocked = state.dependents.get(owner_uid).is_some_and(|dependents| {
            dependents.iter().any(|d| {
                state
                    .lookup(&d.key, &d.namespace, &d.name)
                    .and_then(|o| o.pointer("/metadata/ownerReferences"))
                    .and_then(Value::as_array)
                    .is_some_and(|refs| {
                        refs.iter().any(|r| {
                            r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                                && r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                    == Some(true)
                        })
                    })
            })
        });
        if blocked {
            return;
        }
        held.retain(|f| f != FOREGROUND_FINALIZER);
        let mut released = owner;
        let done = held.is_empty();
        meta_mut(&mut released).insert("finalizers".into(), json!(held));
        if done {
            meta_mut(&mut released).remove("finalizers");
        }
        state.put(&owner_ref, released, EventType::Modified, &self.changes);
        if done {
            self.remove_now(state, &owner_ref, Propagation::Background);
        }
    }

    /// Removes an object for good and runs the controllers that react to it.
    fn remove_now(
        &self,
        state: &mut State,
        target: &ObjectRef,
        propagation: Propagation,
    ) -> Option<Value> {
        let removed = state.take(target, &self.changes)?;
        if target.key.group == CRD_GROUP && target.key.plural == CRD_PLURAL {
            self.drop_custom_resources(state, &removed);
        }
        let uid = meta_str(&removed, "uid").unwrap_or_default().to_string();
        if propagation != Propagation::Orphan {
            self.collect_dependents(state, &uid);
        }
        for owner in owner_uids(&removed) {
            self.release_foreground_owner(state, &owner);
        }
        if target.key.group.is_empty() && target.key.plural == "namespaces" {
            return Some(removed);
        }
        if !target.namespace.is_empty() {
            self.finish_namespace_if_empty(state, &target.namespace);
        }
        Some(removed)
    }

    /// Garbage collection: dependents whose owners are all gone are deleted;
    /// dependents with a remaining owner lose the reference to this one.
    fn collect_dependents(&self, state: &mut State, owner_uid: &str) {
        let Some(dependents) = state.dependents.get(owner_uid).cloned() else {
            return;
        };
        for dependent in dependents {
            let Some(object) = state
                .lookup(&dependent.key, &dependent.namespace, &dependent.name)
                .cloned()
            else {
                continue;
            };
            let remaining = owner_uids(&object)
                .into_iter()
                .filter(|uid| uid != owner_uid && state.uids.contains_key(uid))
                .count();
            if remaining == 0 {
                self.delete_locked(state, &dependent, object, Propagation::Background);
            } else {
                let pruned = Self::without_owner(object, owner_uid);
                state.put(&dependent, pruned, EventType::Modified, &self.changes);
            }
        }
    }

    fn without_owner(mut object: Value, owner_uid: &str) -> Value {
        if let Some(Value::Array(refs)) = object.pointer_mut("/metadata/ownerReferences") {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            if refs.is_empty() {
                meta_mut(&mut object).remove("ownerReferences");
            }
        }
        object
    }

    fn orphan_dependents(&self, state: &mut State, owner_uid: &str) {
        let Some(dependents) = state.dependents.get(owner_uid).cloned() else {
            return;
        };
        for dependent in dependents {
            if let Some(object) = state
                .lookup(&dependent.key, &dependent.namespace, &dependent.name)
                .cloned()
            {
                let pruned = Self::without_owner(object, owner_uid);
                state.put(&dependent, pruned, EventType::Modified, &self.changes);
            }
        }
    }

    /// Namespace controller: deletes everything in a terminating namespace.
    fn empty_namespace(&self, state: &mut State, namespace: &str) {
        for key in state.registry.namespaced_storage_keys() {
            let names: Vec<ObjectName> = state
                .bucket(&key)
                .map(|b| in_namespace(b, namespace).cloned().collect())
                .unwrap_or_default();
            for (ns, name) in names {
                let target = ObjectRef {
                    key: key.clone(),
                    namespace: ns,
                    name,
                };
                if let Some(object) = state.lookup(&key, &target.namespace, &target.name).cloned() {
                    self.delete_locked(state, &target, object, Propagation::Background);
                }
            }
        }
        self.finish_namespace_if_empty(state, namespace);
    }

    /// Removes a terminating namespace once nothing is left in it.
    fn finish_namespace_if_empty(&self, state: &mut State, namespace: &str) {
        let Some(ns) = state.namespace_object(namespace).cloned() else {
            return;
        };
        if ns.pointer("/metadata/deletionTimestamp").is_none() || !finalizers(&ns).is_empty() {
            return;
        }
        let occupied = state.objects.iter().any(|(key, bucket)| {
            !(key.group.is_empty() && key.plural == "namespaces")
                && in_namespace(bucket, namespace).next().is_some()
        });
        if occupied {
            return;
        }
        let target = ObjectRef {
            key: StorageKey {
                group: String::new(),
                plural: "namespaces".into(),
            },
            namespace: String::new(),
            name: namespace.to_string(),
        };
        self.remove_now(state, &target, Propagation::Background);
    }

    /// A deleted CRD takes its custom resources and their API with it.
    fn drop_custom_resources(&self, state: &mut State, crd: &Value) {
        let Some(group) = crd.pointer("/spec/group").and_then(Value::as_str) else {
            return;
        };
        let Some(plural) = crd.pointer("/spec/names/plural").and_then(Value::as_str) else {
            return;
        };
        let key = StorageKey {
            group: group.to_string(),
            plural: plural.to_string(),
        };
        let names: Vec<ObjectName> = state
            .bucket(&key)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        for (namespace, name) in names {
            let target = ObjectRef {
                key: key.clone(),
                namespace,
                name,
            };
            self.remove_now(state, &target, Propagation::Background);
        }
        state.objects.remove(&key);
        state.registry.unregister_crd(&key);
    }
}
