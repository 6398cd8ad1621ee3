//! The watches that re-reconcile a Tenant when one of its compiled isolation objects in the host
//! changes: someone may have edited it (drift, corrected by the Tenant's isolation step). One
//! label-selected watch per compiled kind, for all the Tenants of a replica.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tenantplane_api::{Tenant, provenance};

/// `controller`, also reconciling a Tenant when one of its compiled objects changes.
pub(super) fn watch_compiled_objects(
    controller: Controller<Tenant>,
    host: &Client,
) -> Controller<Tenant> {
    controller
        .watches(
            compiled::<NetworkPolicy>(host),
            compiled_objects(),
            tenant_of,
        )
        .watches(
            compiled::<ResourceQuota>(host),
            compiled_objects(),
            tenant_of,
        )
        .watches(compiled::<LimitRange>(host), compiled_objects(), tenant_of)
        .watches(compiled::<Namespace>(host), compiled_objects(), tenant_of)
        .watches(
            compiled::<ValidatingAdmissionPolicy>(host),
            compiled_objects(),
            tenant_of,
        )
        .watches(
            compiled::<ValidatingAdmissionPolicyBinding>(host),
            compiled_objects(),
            tenant_of,
        )
}

/// The host API of a kind the isolation compiler produces, across namespaces.
fn compiled<K>(host: &Client) -> Api<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Api::all(host.clone())
}

/// The compiled isolation objects of every Tenant: managed by tenantplane and synced from no
/// tenant object.
fn compiled_objects() -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{}=true,!{}",
        provenance::MANAGED,
        provenance::SOURCE_UID
    ))
}

/// The Tenant a compiled object belongs to.
fn tenant_of<K: kube::Resource>(object: K) -> Option<ObjectRef<Tenant>> {
    object
        .labels()
        .get(provenance::TENANT)
        .map(|tenant| ObjectRef::new(tenant))
}
