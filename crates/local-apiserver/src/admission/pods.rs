//! Pod updates as kube-apiserver's `ValidatePodUpdate` limits them: a Pod's
//! spec is immutable except container and init container images,
//! `activeDeadlineSeconds`, tolerations, scheduling gates and
//! `terminationGracePeriodSeconds` (from a negative value to 1); containers
//! cannot be added or removed. Fields this server defaults on create and a
//! write leaves out count as unchanged (the real server defaults them again
//! before validating).

use serde_json::{Map, Value};

use crate::storage::error::Cause;

const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Spec fields this server defaults on create (see the store's defaults and `sa_admission`).
const DEFAULTED: [&str; 7] = [
    "restartPolicy",
    "dnsPolicy",
    "schedulerName",
    "terminationGracePeriodSeconds",
    "serviceAccountName",
    "serviceAccount",
    "securityContext",
];

fn forbidden(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".to_string(),
        message: format!("Forbidden: {detail}"),
        field: field.to_string(),
    }
}

fn containers<'a>(spec: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The causes that refuse changing the Pod `old` into `new` (main resource
/// writes; the status subresource is not limited).
pub fn update_causes(old: &Value, new: &Value) -> Vec<Cause> {
    let empty = Map::new();
    let old_spec = old.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let new_spec = new.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    for field in ["containers", "initContainers"] {
        if containers(new_spec, field).len() != containers(old_spec, field).len() {
            return vec![forbidden(
                &format!("spec.{field}"),
                "pod updates may not add or remove containers",
            )];
        }
    }
    let mut munged = new_spec.clone();
    for field in ["containers", "initContainers"] {
        let old_containers = containers(old_spec, field);
        if let Some(Value::Array(list)) = munged.get_mut(field) {
            for (container, old_container) in list.iter_mut().zip(old_containers) {
                if let Value::Object(c) = container {
                    match old_container.get("image") {
                        Some(image) => c.insert("image".into(), image.clone()),
                        None => c.remove("image"),
                    };
                    // Defaulted on create: absent means unchanged.
                    if let (Some(Value::Array(ports)), Some(Value::Array(old_ports))) =
                        (c.get_mut("ports"), old_container.get("ports"))
                    {
                        for (port, old_port) in ports.iter_mut().zip(old_ports) {
                            if let (Value::Object(p), Some(protocol)) =
                                (port, old_port.get("protocol"))
                            {
                                p.entry("protocol").or_insert(protocol.clone());
                            }
                        }
                    }
                }
            }
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        match old_spec.get(field) {
            Some(value) => munged.insert(field.into(), value.clone()),
            None => munged.remove(field),
        };
    }
    let old_grace = old_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    let new_grace = munged
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0) && new_grace == Some(1) {
        munged.insert(
            "terminationGracePeriodSeconds".into(),
            old_spec["terminationGracePeriodSeconds"].clone(),
        );
    }
    for field in DEFAULTED {
        if let Some(value) = old_spec.get(field) {
            munged.entry(field).or_insert(value.clone());
        }
    }
    if munged == *old_spec {
        return Vec::new();
    }
    vec![forbidden(
        "spec",
        &format!("pod updates may not change fields other than {UPDATABLE}"),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(image: &str, env: Value) -> Value {
        json!({"spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "app", "image": image, "env": env, "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
        }})
    }

    #[test]
    fn images_change_other_fields_do_not() {
        let old = pod("app:1", json!([]));
        assert!(update_causes(&old, &pod("app:2", json!([]))).is_empty());
        let mut minimal = pod("app:2", json!([]));
        minimal["spec"]
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy");
        minimal["spec"]["containers"][0]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("protocol");
        assert!(
            update_causes(&old, &minimal).is_empty(),
            "defaults are kept"
        );
        let causes = update_causes(&old, &pod("app:1", json!([{"name": "B"}])));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        assert!(
            causes[0]
                .message
                .starts_with("Forbidden: pod updates may not change fields other than")
        );
        let mut more = pod("app:1", json!([]));
        more["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "b", "image": "b"}));
        assert_eq!(update_causes(&old, &more)[0].field, "spec.containers");
    }
}
