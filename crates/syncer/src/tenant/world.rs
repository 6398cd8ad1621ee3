//! The world of the tenant's pods as the caches show it: the tenant's Services with their host
//! addresses ([`TenantServices`], for a pod's DNS and service links), the world of one pod
//! before it is decided on, and the Tenant's `TenantDNS` condition from what it finds.

use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use tenantplane_api::conditions;
use tenantplane_core::pod_world::{HostAddress, PodWorld, TenantService, TenantServices};
use tenantplane_core::{Planner, TenantObject};

use super::caches::{Caches, to_value};
use super::{Key, Worker};

/// The tenant's Services in the caches: each tenant Service with its host Service's address, and
/// whether the SyncPolicy syncs it (a Service it does not sync never gets one).
struct ServicesInCaches<'a> {
    caches: &'a Caches,
    planner: &'a Planner,
}

impl ServicesInCaches<'_> {
    fn view(&self, index: usize, tenant_service: &Value) -> TenantService {
        let namespace = tenant_service
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = tenant_service
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let host_name = self
            .caches
            .placement
            .host_name("", "Service", namespace, name);
        let host = self.caches.host_cached(index, &host_name);
        let host_ip = host
            .as_ref()
            .and_then(|h| h.pointer("/spec/clusterIP"))
            .and_then(Value::as_str);
        TenantService::placed(tenant_service, host_ip, self.planner.policy())
    }
}

impl TenantServices for ServicesInCaches<'_> {
    fn service(&self, namespace: &str, name: &str) -> Option<TenantService> {
        let index = self.caches.service_kind?;
        let kind = self.caches.kind(index);
        match kind
            .tenant
            .get(&ObjectRef::new_with(name, kind.ar.clone()).within(namespace))
        {
            Some(found) => Some(self.view(index, &to_value(&found))),
            // Deleted by this syncer to be created again with its host Service's cluster IPs
            // (docs/syncer.md, "Status back up"): it is about to be back, at that address.
            None => {
                let key = Key {
                    kind: index,
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                };
                self.caches.recreated_from(&key).map(|_| TenantService {
                    name: name.to_string(),
                    address: HostAddress::Awaited,
                    ports: Vec::new(),
                })
            }
        }
    }

    fn services_in(&self, namespace: &str) -> Vec<TenantService> {
        let Some(index) = self.caches.service_kind else {
            return Vec::new();
        };
        self.caches
            .tenant_objects_in(index, namespace)
            .iter()
            .map(|s| self.view(index, s))
            .collect()
    }

    fn known(&self) -> Result<(), String> {
        match self.caches.service_kind {
            Some(_) => Ok(()),
            None => Err("the SyncPolicy syncs no Services".into()),
        }
    }
}

impl Worker {
    /// The world of the tenant pod `pod` as the caches show it now; what it found of the
    /// tenant's DNS becomes the Tenant's `TenantDNS` condition.
    pub(super) fn pod_world(&self, pod: &TenantObject) -> PodWorld {
        let id = &pod.identity;
        let host_pod = self
            .caches
            .placement
            .host_name("", "Pod", &id.namespace, &id.name);
        let services = ServicesInCaches {
            caches: &self.caches,
            planner: &self.planner,
        };
        let world = PodWorld::of(&self.pods.world, pod, &host_pod, &services);
        if let Some((status, reason, message)) = world.dns_condition() {
            self.recorder
                .ledger()
                .set_condition(conditions::TENANT_DNS, status, reason, &message);
        }
        world
    }
}
