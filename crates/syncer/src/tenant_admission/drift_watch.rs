//! The watch that reconciles a Tenant again when one of its admission objects in its tenant
//! control plane is changed or deleted: by another hand than this syncer's, that is drift, which
//! the Tenant's reconcile finds, records and corrects ([`super::reconcile`], as a
//! [`crate::compiled_set::CompiledSet`]). One label-selected watch per admission kind, for the
//! Tenant's objects only. This syncer's own writes wake the Tenant too, and its reconcile finds
//! them in place: managedFields times have a second's precision, too coarse to tell an edit from
//! the write just before it.

use futures::StreamExt as _;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use tenantplane_api::Tenant;

/// Watches the admission objects of the Tenant `tenant` in its control plane (`client`) and
/// sends the Tenant to `wake` at each change or delete; runs until aborted (with the Tenant's
/// runtime) or `wake` is closed.
pub async fn watch_admission_objects(
    client: Client,
    tenant: String,
    wake: UnboundedSender<ObjectRef<Tenant>>,
) {
    let config = watcher::Config::default().labels(&super::selector(&tenant));
    let policies = touched(
        Api::<ValidatingAdmissionPolicy>::all(client.clone()),
        &config,
    );
    let bindings = touched(
        Api::<ValidatingAdmissionPolicyBinding>::all(client),
        &config,
    );
    let mut events = futures::stream::select(policies, bindings);
    while let Some(event) = events.next().await {
        match event {
            Ok(true) => {
                if wake.unbounded_send(ObjectRef::new(&tenant)).is_err() {
                    return;
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(tenant = %tenant, error = %e, "watching the Tenant's admission objects in its control plane");
            }
        }
    }
}

/// The events of a watch of `api`: whether each is a change or delete (the objects listed when
/// the watch starts are what the reconcile that started it has just seen).
fn touched<K>(
    api: Api<K>,
    config: &watcher::Config,
) -> futures::stream::BoxStream<'static, Result<bool, watcher::Error>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config.clone())
        .default_backoff()
        .map(|event| {
            event.map(|e| match e {
                watcher::Event::Apply(_) | watcher::Event::Delete(_) => true,
                watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
                    false
                }
            })
        })
        .boxed()
}
