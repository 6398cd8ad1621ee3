//! The watch that reconciles a Tenant again when one of its admission objects in its tenant
//! control plane is changed or deleted by another hand than this syncer's: drift, which the
//! Tenant's reconcile finds, records and corrects ([`super::reconcile`], as a
//! [`crate::compiled_set::CompiledSet`]). One label-selected watch per admission kind, for the
//! Tenant's objects only; this syncer's own writes wake nothing.

use futures::StreamExt as _;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use tenantplane_api::Tenant;

use crate::writer::FIELD_MANAGER;

/// Watches the admission objects of the Tenant `tenant` in its control plane (`client`) and
/// sends the Tenant to `wake` at each change or delete that is not this syncer's; runs until
/// aborted (with the Tenant's runtime) or `wake` is closed.
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

/// The events of a watch of `api`: whether each is a change or delete by another hand than this
/// syncer's (the objects listed when the watch starts are what the reconcile that started it
/// has just seen).
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
                watcher::Event::Apply(o) => !written_last_by_this_syncer(o.meta()),
                watcher::Event::Delete(_) => true,
                watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
                    false
                }
            })
        })
        .boxed()
}

/// Whether the last write of an object, as its managedFields say, was this syncer's.
fn written_last_by_this_syncer(meta: &ObjectMeta) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .max_by_key(|e| e.time.as_ref().map(|t| t.0))
        .is_some_and(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    fn entry(manager: &str, time: &str) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            time: Some(Time(time.parse().unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn an_object_last_written_by_another_manager_wakes_the_tenant() {
        let meta = |entries| ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        };
        let ours = entry(FIELD_MANAGER, "2026-12-04T10:00:00Z");
        let edit = entry("kubectl-edit", "2026-12-04T10:05:00Z");
        assert!(written_last_by_this_syncer(&meta(vec![ours.clone()])));
        assert!(!written_last_by_this_syncer(&meta(vec![
            ours.clone(),
            edit.clone()
        ])));
        let corrected = entry(FIELD_MANAGER, "2026-12-04T10:06:00Z");
        assert!(written_last_by_this_syncer(&meta(vec![edit, corrected])));
    }
}
