//! The runtime table: which Tenants this replica serves, the runtime running for each and the
//! books kept about it outside its runtime (its ledger, flushed to its status, and the recorder
//! of the controller's own decisions); started on first reconcile, stopped when the Tenant is
//! deleted, lost to another replica, or at shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tenantplane_api::Tenant;
use tokio::sync::Mutex;

use super::Context;
use crate::isolation::IsolationService;
use crate::record::DecisionRecorder;
use crate::shard::Shard;
use crate::tenant::{Shared, TenantRuntime};
use crate::tenant_status::{TenantLedger, flush_loop};

/// A Tenant's running runtime and the fingerprint of what it was started with (kubeconfig,
/// spec, policy, profile, kinds): a different fingerprint restarts it.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) fingerprint: String,
    pub(super) runtime: TenantRuntime,
}

/// The Tenants to reconcile again at once, sent by the runtimes' watches of the tenant control
/// planes (a Tenant's admission objects edited there: drift), for the controller's trigger.
#[derive(Debug)]
pub(super) struct Wakes {
    pub(super) send: UnboundedSender<ObjectRef<Tenant>>,
    receive: std::sync::Mutex<Option<UnboundedReceiver<ObjectRef<Tenant>>>>,
}

impl Default for Wakes {
    fn default() -> Self {
        let (send, receive) = futures::channel::mpsc::unbounded();
        Wakes {
            send,
            receive: std::sync::Mutex::new(Some(receive)),
        }
    }
}

impl Wakes {
    /// The stream of Tenants to reconcile, for the one controller that runs.
    pub(super) fn take(&self) -> UnboundedReceiver<ObjectRef<Tenant>> {
        self.receive
            .lock()
            .expect("wakes lock")
            .take()
            .expect("one Tenant controller per context")
    }
}

/// What is recorded about one Tenant outside its tenant runtime: the ledger (flushed to its
/// status by `flusher`) and the recorder of the decisions the Tenant controller takes itself
/// (isolation, unavailable API groups), which have no tenant object to send Events to.
#[derive(Debug)]
pub(super) struct Books {
    ledger: TenantLedger,
    host_side: DecisionRecorder,
    flusher: tokio::task::JoinHandle<()>,
}

impl Context {
    /// A context with nothing running yet.
    pub fn new(
        shared: Arc<Shared>,
        isolation: Arc<dyn IsolationService>,
        resync: Duration,
        status_interval: Duration,
        shard: Option<Arc<Shard>>,
    ) -> Arc<Self> {
        Arc::new(Context {
            shared,
            isolation,
            resync,
            status_interval,
            shard,
            running: Mutex::new(HashMap::new()),
            books: Mutex::new(HashMap::new()),
            failures: std::sync::Mutex::new(HashMap::new()),
            wakes: Wakes::default(),
        })
    }

    /// Whether every running tenant has listed its watches once.
    pub async fn all_ready(&self) -> bool {
        self.running
            .lock()
            .await
            .values()
            .all(|r| *r.runtime.ready.borrow())
    }

    /// Whether this replica serves the Tenant `name` (always, unless sharded); `running`: it
    /// already does.
    pub(super) fn serves(&self, name: &str, running: bool) -> bool {
        self.shard
            .as_ref()
            .is_none_or(|shard| shard.serves(name, running))
    }

    /// Stops serving the Tenant `name`: its runtime and the writing of its status.
    pub(super) async fn stop_serving(&self, name: &str) {
        let stopped = self.running.lock().await.remove(name).is_some();
        if let Some(books) = self.books.lock().await.remove(name) {
            books.flusher.abort();
        }
        self.shared.metrics.serving(name, false);
        if stopped {
            tracing::info!(tenant = %name, "tenant runtime stopped");
        }
    }

    /// Stops the runtimes and status writers of the Tenants this replica no longer serves.
    pub(super) async fn stop_unserved(&self) {
        let mut names: Vec<String> = self.running.lock().await.keys().cloned().collect();
        names.extend(self.books.lock().await.keys().cloned());
        names.sort();
        names.dedup();
        for name in names {
            if !self.serves(&name, true) {
                self.stop_serving(&name).await;
            }
        }
    }

    /// Stops every tenant runtime and status writer (shutdown).
    pub async fn stop_all(&self) {
        let names: Vec<String> = self.books.lock().await.keys().cloned().collect();
        for name in names {
            self.stop_serving(&name).await;
        }
        self.running.lock().await.clear();
    }

    /// The Tenant's ledger and the recorder of its controller's decisions (isolation, discovery),
    /// started on first use. The ledger continues from the counts the Tenant's status already
    /// shows (see [`TenantLedger::continuing`]).
    pub(super) async fn books(&self, tenant: &Tenant) -> (TenantLedger, DecisionRecorder) {
        let mut books = self.books.lock().await;
        let name = tenant.name().to_string();
        if let Some(b) = books.get(&name) {
            return (b.ledger.clone(), b.host_side.clone());
        }
        let ledger = TenantLedger::continuing(tenant.status.as_ref());
        let flusher = tokio::spawn(flush_loop(
            self.shared.host.clone(),
            name.clone(),
            tenant.uid(),
            ledger.clone(),
            self.status_interval,
        ));
        let host_side = DecisionRecorder::host_side(
            ledger.clone(),
            self.shared.log.clone(),
            self.shared.metrics.clone(),
        );
        books.insert(
            name,
            Books {
                ledger: ledger.clone(),
                host_side: host_side.clone(),
                flusher,
            },
        );
        (ledger, host_side)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Ok(books) = self.books.try_lock() {
            for b in books.values() {
                b.flusher.abort();
            }
        }
    }
}
