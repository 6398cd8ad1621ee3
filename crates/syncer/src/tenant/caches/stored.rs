//! What the stores keep of an object: trimmed on arrival to what decisions read, with the
//! apiVersion and kind a list's items lack, and read back as JSON.

use kube::api::DynamicObject;
use kube::core::{ApiResource, TypeMeta};
use serde_json::Value;

/// An object of a store as JSON.
pub(in crate::tenant) fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).expect("a DynamicObject always serializes")
}

/// The apiVersion and kind of the objects of `ar`.
pub(in crate::tenant) fn type_meta(ar: &ApiResource) -> TypeMeta {
    TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    }
}

/// A tenant object as its store keeps it: everything but the field sets of its managedFields
/// (only who wrote it is read, by the Endpoints up-sync; the field sets are most of the
/// metadata of a small object), with its apiVersion and kind: a real API server sends them on
/// the objects of a watch event but not on the items of a list.
pub(in crate::tenant) fn trim_tenant_object(types: &TypeMeta, obj: &mut DynamicObject) {
    obj.types.get_or_insert_with(|| types.clone());
    for entry in obj.metadata.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

/// A host object as its store keeps it: what decisions read of it and nothing else. Its metadata
/// (provenance, the recorded digest, uid and resourceVersion) without managedFields, its status
/// (flowing up), a Service's spec (its cluster IPs flow up), a Pod's projected volumes (whether
/// it mounts its token Secret) and an Endpoints' subsets; the rest (the rest of a Pod's spec, a
/// ConfigMap's or Secret's data) is what the syncer wrote from the tenant object and is compared
/// by digest only. Like a tenant object, it gets the apiVersion and kind that a list's items lack.
pub(in crate::tenant) fn trim_host_object(types: &TypeMeta, obj: &mut DynamicObject) {
    obj.types.get_or_insert_with(|| types.clone());
    obj.metadata.managed_fields = None;
    let core = types.api_version == "v1";
    let (service, pod) = (core && types.kind == "Service", core && types.kind == "Pod");
    let Some(body) = obj.data.as_object_mut() else {
        return;
    };
    body.retain(|field, _| match field.as_str() {
        "status" | "subsets" => true,
        "spec" => service || pod,
        _ => false,
    });
    if pod && let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        spec.retain(|field, _| field == "volumes");
        if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
            volumes.retain(|v| v.get("projected").is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile;
    use crate::writer::FIELD_MANAGER;
    use serde_json::json;
    use tenantplane_core::TenantObject;

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("a valid object")
    }

    fn types(kind: &str) -> TypeMeta {
        TypeMeta {
            api_version: "v1".into(),
            kind: kind.into(),
        }
    }

    /// A real API server's list items have no apiVersion and kind (the List has them); the
    /// stores give them back, so that a tenant object that existed before the syncer started is
    /// readable like one that arrived in a watch event.
    #[test]
    fn a_listed_item_gets_the_apiversion_and_kind_of_its_list() {
        let item = || {
            dynamic(
                json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                "resourceVersion": "3"}, "data": {"k": "v"}}),
            )
        };
        assert!(
            TenantObject::from_value(to_value(&item())).is_err(),
            "as listed, the item is not a tenant object"
        );
        let mut listed = item();
        trim_tenant_object(&types("ConfigMap"), &mut listed);
        let object = TenantObject::from_value(to_value(&listed)).expect("a tenant object");
        assert_eq!(object.identity.api_version, "v1");
        assert_eq!(object.identity.kind, "ConfigMap");

        let mut host = item();
        trim_host_object(&types("ConfigMap"), &mut host);
        assert_eq!(to_value(&host)["kind"], "ConfigMap");

        let mut event = dynamic(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web"}}));
        trim_tenant_object(&types("Secret"), &mut event);
        assert_eq!(
            to_value(&event)["kind"],
            "ConfigMap",
            "what the server sent is kept"
        );
    }

    fn managed_fields(manager: &str) -> Value {
        json!([{"manager": manager, "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}])
    }

    #[test]
    fn the_host_store_keeps_what_decisions_read_and_drops_the_rest() {
        let meta = json!({"name": "cfg-x-web", "namespace": "tenant-acme", "uid": "h1",
            "resourceVersion": "7", "labels": {"tenantplane.io/tenant": "acme"},
            "annotations": {"tenantplane.io/digest": "d"},
            "managedFields": managed_fields("tenantplane-syncer")});
        let mut cm = dynamic(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"k": "a large value"}}),
        );
        trim_host_object(&types("ConfigMap"), &mut cm);
        let kept = to_value(&cm);
        assert_eq!(kept["metadata"]["labels"], meta["labels"]);
        assert_eq!(kept["metadata"]["annotations"], meta["annotations"]);
        assert_eq!(kept["metadata"]["resourceVersion"], "7");
        assert_eq!(kept.pointer("/metadata/managedFields"), None);
        assert_eq!(kept.get("data"), None);

        let mut svc = dynamic(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "10.0.0.7"}, "status": {"loadBalancer": {}}}),
        );
        trim_host_object(&types("Service"), &mut svc);
        let kept = to_value(&svc);
        assert_eq!(kept["spec"]["clusterIP"], "10.0.0.7", "cluster IPs flow up");
        assert_eq!(
            kept["status"],
            json!({"loadBalancer": {}}),
            "status flows up"
        );

        let token = json!({"name": "kube-api-access", "projected": {"sources": [
            {"secret": {"name": "p-x-web.sa-token", "items": [{"key": "token", "path": "token"}]}}]}});
        let mut pod = dynamic(json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "a", "image": "x"}],
                     "volumes": [{"name": "c", "configMap": {"name": "cfg-x-web"}}, token]},
            "status": {"phase": "Running"}}));
        trim_host_object(&types("Pod"), &mut pod);
        let kept = to_value(&pod);
        assert_eq!(
            kept["spec"],
            json!({"volumes": [token]}),
            "a pod keeps its projected volumes only: whether it mounts its token Secret"
        );
        assert_eq!(kept["status"]["phase"], "Running");
    }

    #[test]
    fn the_tenant_store_still_tells_who_wrote_an_object() {
        let endpoints = |manager: &str| {
            let mut e = dynamic(json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "web", "namespace": "shop",
                    "managedFields": managed_fields(manager)},
                "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}]}));
            trim_tenant_object(&types("Endpoints"), &mut e);
            to_value(&e)
        };
        let theirs = endpoints("endpoint-controller");
        assert!(reconcile::written_by_another_manager(
            &theirs,
            FIELD_MANAGER
        ));
        assert!(!reconcile::written_by_another_manager(
            &endpoints(FIELD_MANAGER),
            FIELD_MANAGER
        ));
        assert_eq!(theirs.pointer("/metadata/managedFields/0/fieldsV1"), None);
        assert_eq!(theirs["subsets"][0]["addresses"][0]["ip"], "10.0.0.9");
    }
}
