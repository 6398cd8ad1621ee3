//! Defaults kube-apiserver fills into workload objects on create (from
//! `pkg/apis/{apps,batch,autoscaling,core}/*/defaults.go`): the fields a client may read
//! back, such as a Deployment's `spec.replicas` and rolling-update strategy, a Job's
//! generated selector, and the pod template's restart and pull policies; a Pod's and a
//! Service's own, with the Service's cluster IP. Nothing acts on these objects: there are no
//! controllers, so `status` stays empty (a Pod stays `Pending`).

use serde_json::{Map, Value, json};

use crate::storage::error::{ApiError, ApiResult};
use crate::storage::resources::ResourceType;
use crate::storage::store::ClusterIps;

/// Fills in the defaults of a new Pod.
pub fn pod(body: &mut Value) -> ApiResult<()> {
    let spec = body
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApiError::invalid("", "Pod", "", "spec.containers", "Required value"))?;
    for field in ["containers", "initContainers"] {
        let Some(Value::Array(containers)) = spec.get_mut(field) else {
            continue;
        };
        for container in containers.iter_mut() {
            if let Some(Value::Array(ports)) = container.get_mut("ports") {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    port.entry("protocol").or_insert(json!("TCP"));
                }
            }
        }
    }
    for (field, value) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
    ] {
        spec.entry(field).or_insert(value);
    }
    body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
    // What admission reads: pull policies, a host-network pod's host ports, the
    // AppArmor annotations copied into fields.
    tenantplane_core::boundary::complete_pod(body, true);
    Ok(())
}

/// Fills in the defaults of a new Service, a cluster IP from `cluster_ips` included unless it
/// asks for one, is headless or is an ExternalName.
pub fn service(body: &mut Value, cluster_ips: &mut ClusterIps<'_>) -> ApiResult<()> {
    let spec = body
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApiError::invalid("", "Service", "", "spec.ports", "Required value"))?;
    spec.entry("type").or_insert(json!("ClusterIP"));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    // A requested address is kept, as a real API server keeps a valid one.
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .is_some_and(|ip| !ip.is_empty());
    if requested && !spec.contains_key("clusterIPs") {
        let ip = spec["clusterIP"].clone();
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    if !headless && !requested && spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        let ip = cluster_ips.allocate();
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
            if let Some(p) = port.get("port").cloned() {
                port.entry("targetPort").or_insert(p);
            }
        }
    }
    body["status"] = json!({"loadBalancer": {}});
    Ok(())
}

/// Fills in the defaults of a new object of a built-in workload kind.
pub fn apply(rt: &ResourceType, body: &mut Value) {
    if rt.custom {
        return;
    }
    let uid = body
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(object) = body.as_object_mut() else {
        return;
    };
    let workload = matches!(
        (rt.group.as_str(), rt.kind.as_str()),
        (
            "apps",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
        ) | ("batch", "Job" | "CronJob")
            | ("autoscaling", "HorizontalPodAutoscaler")
            | ("policy", "PodDisruptionBudget")
    );
    if !workload {
        return;
    }
    object.entry("status").or_insert_with(|| json!({}));
    let mut metadata = match object.remove("metadata") {
        Some(Value::Object(metadata)) => metadata,
        _ => Map::new(),
    };
    if let Some(Value::Object(spec)) = object.get_mut("spec") {
        spec_defaults(rt, &mut metadata, spec, &uid, &name);
    } else {
        let mut spec = Map::new();
        spec_defaults(rt, &mut metadata, &mut spec, &uid, &name);
        object.insert("spec".into(), Value::Object(spec));
    }
    object.insert("metadata".into(), Value::Object(metadata));
}

fn spec_defaults(
    rt: &ResourceType,
    metadata: &mut Map<String, Value>,
    spec: &mut Map<String, Value>,
    uid: &str,
    name: &str,
) {
    let template = match rt.kind.as_str() {
        "CronJob" => spec
            .get_mut("jobTemplate")
            .and_then(|t| t.get_mut("spec"))
            .and_then(|s| s.get_mut("template")),
        _ => spec.get_mut("template"),
    };
    if let Some(pod_spec) = template
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_template(pod_spec);
    }
    match rt.kind.as_str() {
        "Deployment" => {
            defaults(spec, [("replicas", json!(1))]);
            let strategy = object_entry(spec, "strategy");
            defaults(strategy, [("type", json!("RollingUpdate"))]);
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                defaults(
                    object_entry(strategy, "rollingUpdate"),
                    [("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))],
                );
            }
            defaults(
                spec,
                [
                    ("revisionHistoryLimit", json!(10)),
                    ("progressDeadlineSeconds", json!(600)),
                ],
            );
        }
        "StatefulSet" => {
            defaults(
                spec,
                [
                    ("replicas", json!(1)),
                    ("podManagementPolicy", json!("OrderedReady")),
                    ("revisionHistoryLimit", json!(10)),
                ],
            );
            let strategy = object_entry(spec, "updateStrategy");
            defaults(strategy, [("type", json!("RollingUpdate"))]);
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                defaults(
                    object_entry(strategy, "rollingUpdate"),
                    [("partition", json!(0))],
                );
            }
            defaults(
                object_entry(spec, "persistentVolumeClaimRetentionPolicy"),
                [
                    ("whenDeleted", json!("Retain")),
                    ("whenScaled", json!("Retain")),
                ],
            );
        }
        "DaemonSet" => {
            let strategy = object_entry(spec, "updateStrategy");
            defaults(strategy, [("type", json!("RollingUpdate"))]);
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                defaults(
                    object_entry(strategy, "rollingUpdate"),
                    [("maxUnavailable", json!(1)), ("maxSurge", json!(0))],
                );
            }
            defaults(spec, [("revisionHistoryLimit", json!(10))]);
        }
        "ReplicaSet" => defaults(spec, [("replicas", json!(1))]),
        "Job" => job(metadata, spec, uid, name),
        "CronJob" => defaults(
            spec,
            [
                ("concurrencyPolicy", json!("Allow")),
                ("suspend", json!(false)),
                ("successfulJobsHistoryLimit", json!(3)),
                ("failedJobsHistoryLimit", json!(1)),
            ],
        ),
        "HorizontalPodAutoscaler" if rt.version == "v2" => {
            defaults(spec, [("minReplicas", json!(1))]);
            if spec
                .get("metrics")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec.insert(
                    "metrics".into(),
                    json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
                );
            }
        }
        _ => {}
    }
}

/// The defaults of a pod template's spec and its containers.
fn pod_template(spec: &mut Map<String, Value>) {
    defaults(
        spec,
        [
            ("restartPolicy", json!("Always")),
            ("dnsPolicy", json!("ClusterFirst")),
            ("schedulerName", json!("default-scheduler")),
            ("securityContext", json!({})),
            ("terminationGracePeriodSeconds", json!(30)),
        ],
    );
    for field in ["initContainers", "containers"] {
        let Some(Value::Array(containers)) = spec.get_mut(field) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let image = container
                .get("image")
                .and_then(Value::as_str)
                .unwrap_or_default();
            defaults(
                container,
                [
                    ("imagePullPolicy", json!(image_pull_policy(image))),
                    ("terminationMessagePath", json!("/dev/termination-log")),
                    ("terminationMessagePolicy", json!("File")),
                ],
            );
            if let Some(Value::Array(ports)) = container.get_mut("ports") {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    defaults(port, [("protocol", json!("TCP"))]);
                }
            }
        }
    }
}

/// `Always` for an image without a tag or tagged `latest`, else `IfNotPresent`.
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// Job defaults, and the selector and labels kube-apiserver generates unless
/// `spec.manualSelector` is true.
fn job(metadata: &mut Map<String, Value>, spec: &mut Map<String, Value>, uid: &str, name: &str) {
    if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    defaults(
        spec,
        [
            ("parallelism", json!(1)),
            ("backoffLimit", json!(6)),
            ("completionMode", json!("NonIndexed")),
            ("suspend", json!(false)),
            ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ],
    );
    if spec.get("manualSelector") == Some(&json!(true)) || uid.is_empty() {
        return;
    }
    spec.insert("manualSelector".into(), json!(false));
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    });
    defaults(
        spec,
        [(
            "selector",
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        )],
    );
    let template_metadata = object_entry(object_entry(spec, "template"), "metadata");
    let template_labels = object_entry(template_metadata, "labels");
    if let Value::Object(labels) = labels {
        for (key, value) in labels {
            template_labels.entry(key).or_insert(value);
        }
    }
    let template_labels = template_labels.clone();
    let job_labels = object_entry(metadata, "labels");
    if job_labels.is_empty() {
        *job_labels = template_labels;
    }
}

/// Inserts each field that is absent (or null).
fn defaults<const N: usize>(object: &mut Map<String, Value>, fields: [(&str, Value); N]) {
    for (field, value) in fields {
        match object.get(field) {
            Some(existing) if !existing.is_null() => {}
            _ => {
                object.insert(field.to_string(), value);
            }
        }
    }
}

/// The object under `field`, created when absent (or not an object).
fn object_entry<'a>(object: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    let entry = object.entry(field).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    match entry {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}
