//! kube-apiserver's `ServiceAccount` admission plugin on Pod create
//! (`plugin/pkg/admission/serviceaccount/admission.go`): the pod runs as
//! `spec.serviceAccountName` (`default` when unset, or the deprecated `spec.serviceAccount`
//! alias), which must exist; unless `automountServiceAccountToken` is false on the pod (or,
//! unset there, on the ServiceAccount), every container and init container that does not
//! already mount something at [`MOUNT_PATH`] gets a read-only mount of a projected
//! `kube-api-access-<random>` volume (the kubelet's token, the cluster CA, the namespace);
//! and a pod without `imagePullSecrets` gets the ServiceAccount's.
//!
//! The projected volume names the `kube-root-ca.crt` ConfigMap that kube-controller-manager
//! publishes in every namespace; this server serves plain HTTP, has no CA, and publishes no
//! such ConfigMap. Mirror pods (created by kubelets, of which there are none here) are not
//! told apart.

use serde_json::{Map, Value, json};

use crate::admission::tokens::KUBELET_EXPIRATION_SECONDS;
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::names;

/// Where the kubelet mounts the service account's token, CA and namespace.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the projected volume's name.
const VOLUME_PREFIX: &str = "kube-api-access-";

/// Admits the Pod `pod` created in `namespace`: `name` is how kube-apiserver names it in
/// errors (its name, or its `generateName` before one is generated), `service_account`
/// finds a ServiceAccount of the namespace by name.
pub fn admit<'a>(
    pod: &mut Value,
    namespace: &str,
    name: &str,
    service_account: impl FnOnce(&str) -> Option<&'a Value>,
) -> ApiResult<()> {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let text = |spec: &Map<String, Value>, field: &str| {
        spec.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let sa_name = text(spec, "serviceAccountName")
        .or_else(|| text(spec, "serviceAccount"))
        .unwrap_or_else(|| "default".to_string());
    // Served in v1 under both names, the deprecated one an alias of the other.
    spec.insert("serviceAccountName".into(), json!(sa_name));
    spec.insert("serviceAccount".into(), json!(sa_name));
    let Some(sa) = service_account(&sa_name) else {
        return Err(ApiError::forbidden_object(
            "",
            "pods",
            name,
            &format!(
                "error looking up service account {namespace}/{sa_name}: serviceaccount {sa_name:?} not found"
            ),
        ));
    };
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            sa.get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        mount_token(spec);
    }
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let sa_pull_secrets: Vec<Value> = sa
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| json!({"name": s.get("name").cloned().unwrap_or(json!(""))}))
        .collect();
    if !has_pull_secrets && !sa_pull_secrets.is_empty() {
        spec.insert("imagePullSecrets".into(), json!(sa_pull_secrets));
    }
    Ok(())
}

/// Mounts the projected token volume in every init container and container that has nothing
/// at [`MOUNT_PATH`], and adds the volume when one does (reusing a `kube-api-access-*`
/// volume the pod already has).
fn mount_token(spec: &mut Map<String, Value>) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|name| name.starts_with(VOLUME_PREFIX))
        .map(str::to_string);
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| names::generate(VOLUME_PREFIX));
    let mut mounted = false;
    for field in ["initContainers", "containers"] {
        let Some(Value::Array(containers)) = spec.get_mut(field) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
            if !mounts.is_array() {
                *mounts = json!([]);
            }
            let Value::Array(mounts) = mounts else {
                continue;
            };
            if mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH))
            {
                continue;
            }
            mounts.push(json!({"name": volume_name, "readOnly": true, "mountPath": MOUNT_PATH}));
            mounted = true;
        }
    }
    if existing.is_none() && mounted {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Value::Array(volumes) = volumes {
            volumes.push(json!({
                "name": volume_name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": KUBELET_EXPIRATION_SECONDS, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                },
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(pod: Value, sa: Option<Value>) -> ApiResult<Value> {
        let mut pod = pod;
        admit(&mut pod, "ns", "web", |_| sa.as_ref())?;
        Ok(pod)
    }

    #[test]
    fn an_existing_mount_at_the_path_is_kept_and_others_get_the_volume() {
        let pod = admitted(
            json!({"spec": {
                "initContainers": [{"name": "init"}],
                "containers": [
                    {"name": "own", "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]},
                    {"name": "app"},
                ],
            }}),
            Some(json!({"imagePullSecrets": [{"name": "registry"}]})),
        )
        .unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        let volume = spec["volumes"][0]["name"].as_str().unwrap();
        assert!(volume.starts_with(VOLUME_PREFIX) && volume.len() == VOLUME_PREFIX.len() + 5);
        let mount = json!([{"name": volume, "readOnly": true, "mountPath": MOUNT_PATH}]);
        assert_eq!(spec["initContainers"][0]["volumeMounts"], mount);
        assert_eq!(spec["containers"][1]["volumeMounts"], mount);
        assert_eq!(
            spec["containers"][0]["volumeMounts"],
            json!([{"name": "mine", "mountPath": MOUNT_PATH}])
        );
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
    }

    #[test]
    fn nothing_is_mounted_when_every_container_mounts_the_path_or_automount_is_off() {
        let own = json!({"spec": {"containers": [{"name": "a", "volumeMounts": [{"name": "x", "mountPath": MOUNT_PATH}]}]}});
        assert!(admitted(own, Some(json!({}))).unwrap()["spec"]["volumes"].is_null());
        let sa_off = json!({"automountServiceAccountToken": false});
        let pod = json!({"spec": {"serviceAccount": "builder", "containers": [{"name": "a"}]}});
        let pod = admitted(pod, Some(sa_off.clone())).unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "builder");
        assert!(pod["spec"]["volumes"].is_null());
        let pod_on =
            json!({"spec": {"automountServiceAccountToken": true, "containers": [{"name": "a"}]}});
        assert!(admitted(pod_on, Some(sa_off)).unwrap()["spec"]["volumes"].is_array());
    }

    #[test]
    fn a_missing_service_account_is_forbidden() {
        let err = admitted(
            json!({"spec": {"serviceAccountName": "ghost", "containers": []}}),
            None,
        )
        .unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods \"web\" is forbidden: error looking up service account ns/ghost: serviceaccount \"ghost\" not found"
        );
    }
}
