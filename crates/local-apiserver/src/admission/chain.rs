//! kube-apiserver's handling of a write between decoding and storage, as the store's
//! [`WritePolicy`]: each kind's validation and defaults, then the admission plugins in
//! kube-apiserver's order.
//!
//! | step | create | update |
//! | --- | --- | --- |
//! | validation | names (`storage::names`), Events | Pod updates ([`pods`]), Events, a CRD's schema |
//! | defaults | [`defaults`]; a CRD's schema validated ([`crate::crd::validation`]) | |
//! | admission | ServiceAccount ([`service_accounts`], Pods), Pod Security ([`pod_security`]), ValidatingAdmissionPolicies ([`validating_policy`]) | Pod Security, ValidatingAdmissionPolicies |

use serde_json::Value;

use crate::admission::request::Request;
use crate::admission::{defaults, pod_security, pods, service_accounts, validating_policy};
use crate::crd::validation as crd_validation;
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::events;
use crate::storage::names;
use crate::storage::resources::{CRD_GROUP, CRD_PLURAL, ResourceType, StorageKey};
use crate::storage::store::{ClusterIps, Objects, Operation, Write, WritePolicy};

/// The write policy of the local API server: kube-apiserver's, for the kinds it serves.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chain;

fn is_core(rt: &ResourceType, kind: &str) -> bool {
    rt.group.is_empty() && rt.kind == kind
}

impl WritePolicy for Chain {
    fn validate_create(
        &self,
        rt: &ResourceType,
        name: &str,
        generate_name: Option<&str>,
        object: &Value,
    ) -> ApiResult<()> {
        let name_causes = names::create_causes(rt, name, generate_name);
        if rt.is_event() {
            events::check_micro_times(rt, object)?;
            let causes = events::create_causes(rt, object, name_causes);
            if !causes.is_empty() {
                // Both APIs validate the internal (core) Event.
                return Err(ApiError::invalid_causes("", &rt.kind, name, causes));
            }
        } else if !name_causes.is_empty() {
            return Err(ApiError::invalid_causes(
                &rt.group,
                &rt.kind,
                name,
                name_causes,
            ));
        }
        Ok(())
    }

    fn default_create(
        &self,
        rt: &ResourceType,
        object: &mut Value,
        cluster_ips: &mut ClusterIps<'_>,
    ) -> ApiResult<()> {
        match (rt.group.as_str(), rt.kind.as_str()) {
            ("", "Pod") => defaults::pod(object),
            ("", "Service") => defaults::service(object, cluster_ips),
            (CRD_GROUP, "CustomResourceDefinition") => crd_validation::validate(object, None),
            _ => {
                defaults::apply(rt, object);
                Ok(())
            }
        }
    }

    fn validate_update(
        &self,
        rt: &ResourceType,
        name: &str,
        new: &Value,
        old: &Value,
    ) -> ApiResult<()> {
        if !rt.custom && is_core(rt, "Pod") {
            let causes = pods::update_causes(old, new);
            if !causes.is_empty() {
                return Err(ApiError::invalid_causes("", &rt.kind, name, causes));
            }
        }
        if rt.is_event() {
            events::check_micro_times(rt, new)?;
            // Compared with the old one in the form of the API written to.
            let new = events::view(rt, new.clone());
            let causes = events::update_causes(rt, &new, old);
            if !causes.is_empty() {
                return Err(ApiError::invalid_causes("", &rt.kind, name, causes));
            }
        }
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL {
            crd_validation::validate(new, Some(old))?;
        }
        Ok(())
    }

    fn admit(&self, objects: Objects<'_>, write: &Write<'_>, object: &mut Value) -> ApiResult<()> {
        let rt = write.rt;
        if write.operation == Operation::Create && is_core(rt, "Pod") {
            let service_accounts = StorageKey {
                group: String::new(),
                plural: "serviceaccounts".into(),
            };
            service_accounts::admit(object, write.namespace, write.error_name, |sa| {
                objects.get(&service_accounts, write.namespace, sa)
            })?;
        }
        let request = Request {
            rt,
            operation: write.operation.as_str(),
            namespace: write.namespace,
            name: write.name,
            object,
            old: write.old,
            namespace_object: objects.namespace(write.namespace),
            dry_run: write.dry_run,
        };
        pod_security::admit(&request)?;
        let bucket = |plural: &str| StorageKey {
            group: validating_policy::GROUP.into(),
            plural: plural.into(),
        };
        validating_policy::admit(
            objects.all(&bucket(validating_policy::POLICIES)),
            objects.all(&bucket(validating_policy::BINDINGS)),
            &request,
        )
    }
}
