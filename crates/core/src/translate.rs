//! Translation between a tenant object and its host object, both ways, as pure functions.
//!
//! Up: [`status_to_tenant`], [`service_with_host_cluster_ips`] (the tenant Service recreated with
//! the host's addresses) and [`endpoints_to_tenant`] (the host Endpoints of a selector Service,
//! pointing at tenant pods).
//!
//! Down ([`to_host`]): the desired host object of a tenant object that the SyncPolicy syncs.
//!
//! * metadata comes from the [`Placement`] (host namespace and name, the tenant's labels and
//!   annotations minus reserved keys, provenance), plus [`DESIRED_DIGEST`]; nothing else of the
//!   tenant's metadata crosses (no uid, resourceVersion, ownerReferences, finalizers, ...);
//! * `status` never crosses: the host owns it, and [`status_to_tenant`] brings it back up;
//! * references to other tenant objects are rewritten through the tenant's mapping, so a Pod's
//!   ConfigMap reference lands on exactly the host ConfigMap the ConfigMap itself maps to; each
//!   is listed as a [`Reference`] with the field that names it, for [`crate::reference::check`]
//!   (a reference may only resolve to a host object synced from the object it names);
//! * fields the host must own are dropped (a Service's clusterIP and node ports, a Pod's
//!   nodeName, a PVC's volumeName);
//! * what would let a tenant reach host credentials or host-scoped objects, or cannot be mapped,
//!   is refused with an [`Untranslatable`] naming the field and a reason, which the syncer records
//!   as a Rejected decision.
//!
//! The [`DESIRED_DIGEST`] annotation is the SHA-256 of the desired object itself (without the
//! decision id): when the live host object carries the same digest, nothing tenantplane sets has
//! changed and the syncer writes nothing, whatever the host's defaulting or admission added.
//!
//! Kinds without a dedicated rule (custom resources, or any namespaced kind a policy syncs) cross
//! with their body unchanged apart from `metadata` and `status`.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tenantplane_api::provenance;

use crate::mapping::{NameSyntax, Placement, TenantPlacement};
use crate::object::TenantObject;
use crate::reference::{REFERENCEABLE_KINDS, Reference};

/// Annotation on every host object: digest of the desired object tenantplane last wrote.
pub const DESIRED_DIGEST: &str = "tenantplane.io/desired-digest";

/// The host object a tenant object should become.
#[derive(Clone, Debug, PartialEq)]
pub struct HostDesired {
    /// The desired host object (apiVersion, kind, metadata, body), decision id not yet set.
    pub object: Value,
    /// `sha256:` of the desired object, also in its [`DESIRED_DIGEST`] annotation.
    pub digest: String,
    /// What the translation changed that a reader of the decision should know (e.g. a dropped
    /// service account token projection).
    pub notes: Vec<String>,
    /// The other tenant objects it names, each with its host name.
    pub references: Vec<Reference>,
}

/// A tenant object that cannot be placed on the host safely.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field_path}: {message}")]
pub struct Untranslatable {
    /// Machine reason, UpperCamelCase.
    pub reason: &'static str,
    /// The offending field of the tenant object.
    pub field_path: String,
    /// Human explanation.
    pub message: String,
}

fn refuse(
    reason: &'static str,
    field_path: impl Into<String>,
    message: impl Into<String>,
) -> Untranslatable {
    Untranslatable {
        reason,
        field_path: field_path.into(),
        message: message.into(),
    }
}

/// Rewrites names of tenant objects in one tenant namespace to their host names, and lists them.
struct Refs<'a> {
    tenant: &'a TenantPlacement,
    namespace: &'a str,
    found: Vec<Reference>,
}

impl Refs<'_> {
    /// The host name of the `kind` object `name` in namespace `namespace`, named at `field_path`.
    fn named_in(
        &mut self,
        field_path: String,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> String {
        let host_name = self.tenant.host_name(group, kind, namespace, name);
        self.found.push(Reference {
            field_path,
            group: group.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            host_name: host_name.clone(),
        });
        host_name
    }

    /// The host name of the `kind` object `name` of the referencing object's namespace.
    fn named(&mut self, field_path: String, group: &str, kind: &str, name: &str) -> String {
        let namespace = self.namespace;
        self.named_in(field_path, group, kind, namespace, name)
    }

    /// Rewrites the string at `obj[field]` (when present) to the host name of a `kind` object;
    /// `at` is the field path of `obj`.
    fn rewrite(&mut self, obj: &mut Value, at: &str, field: &str, group: &str, kind: &str) {
        if let Some(Value::String(name)) = obj.get_mut(field) {
            *name = self.named(format!("{at}.{field}"), group, kind, name);
        }
    }

    /// Rewrites a TypedLocalObjectReference (`apiGroup`, `kind`, `name`) at `at`: only kinds whose
    /// host objects can be checked may be named.
    fn rewrite_typed(&mut self, reference: &mut Value, at: &str) -> Result<(), Untranslatable> {
        let field = |key: &str| {
            reference
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (group, kind) = (field("apiGroup"), field("kind"));
        if !REFERENCEABLE_KINDS.contains(&(group.as_str(), kind.as_str())) {
            let what = if group.is_empty() {
                kind
            } else {
                format!("{kind}.{group}")
            };
            return Err(refuse(
                "ReferenceKindNotCheckable",
                format!("{at}.kind"),
                format!(
                    "a reference to a {what} cannot be checked against the host object it \
                     resolves to (only ConfigMaps, Secrets, ServiceAccounts, \
                     PersistentVolumeClaims, Services and Pods can be named)"
                ),
            ));
        }
        self.rewrite(reference, at, "name", &group, &kind);
        Ok(())
    }
}

/// Whether objects of this kind name other objects (whose translation lists [`Reference`]s).
pub fn names_other_objects(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "Pod" | "Endpoints" | "PersistentVolumeClaim" | "ServiceAccount"
        ) | ("networking.k8s.io", "Ingress")
    )
}

/// What translating a tenant object says besides the host object: what it changed on the way
/// and the objects it names.
#[derive(Clone, Debug, PartialEq)]
pub struct Findings {
    /// As [`HostDesired::notes`].
    pub notes: Vec<String>,
    /// As [`HostDesired::references`].
    pub references: Vec<Reference>,
}

/// What translating `object` at `placement` in `tenant` refuses, notes and names, without
/// building the host object: the part of [`to_host`] a plan needs (the syncer, which writes the
/// object, asks [`to_host`]).
pub fn examine(
    tenant: &TenantPlacement,
    object: &TenantObject,
    placement: &Placement,
) -> Result<Findings, Untranslatable> {
    let id = &object.identity;
    let refuses_or_names = names_other_objects(id.group(), &id.kind)
        || (id.group(), id.kind.as_str()) == ("", "Secret");
    // The other kinds' translation changes nothing the plan shows: no body to rewrite.
    let mut body = if refuses_or_names {
        body_of(object)
    } else {
        Value::Null
    };
    rewrite(tenant, object, placement, &mut body)
}

/// The part of the tenant object the host object takes as it is: all but apiVersion, kind,
/// metadata and status.
fn body_of(object: &TenantObject) -> Value {
    Value::Object(match &object.object {
        Value::Object(map) => map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        _ => Map::new(),
    })
}

/// Rewrites `body`, the body of `object`'s host object, for the host; returns what it noted and
/// the objects it named, or the refusal.
fn rewrite(
    tenant: &TenantPlacement,
    object: &TenantObject,
    placement: &Placement,
    body: &mut Value,
) -> Result<Findings, Untranslatable> {
    let mut refs = Refs {
        tenant,
        namespace: &object.identity.namespace,
        found: Vec::new(),
    };
    let mut notes = Vec::new();
    match (object.identity.group(), object.identity.kind.as_str()) {
        ("", "Pod") => pod(&mut refs, object, body, &mut notes)?,
        ("", "Service") => service(&refs, body),
        ("", "Endpoints") => endpoints(&mut refs, object, placement, body)?,
        ("", "Secret") => secret(body)?,
        ("", "PersistentVolumeClaim") => pvc(&mut refs, body, &mut notes)?,
        ("", "ServiceAccount") => service_account(&mut refs, body, &mut notes),
        ("networking.k8s.io", "Ingress") => ingress(&mut refs, body)?,
        _ => {}
    }
    Ok(Findings {
        notes,
        references: refs.found,
    })
}

/// The desired host object for `object` placed at `placement` in `tenant`.
pub fn to_host(
    tenant: &TenantPlacement,
    object: &TenantObject,
    placement: &Placement,
) -> Result<HostDesired, Untranslatable> {
    let mut body = body_of(object);
    let Findings { notes, references } = rewrite(tenant, object, placement, &mut body)?;

    let labels: Map<String, Value> = placement
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut annotations: Map<String, Value> = placement
        .annotations
        .iter()
        .filter(|(k, _)| *k != provenance::DECISION_ID && *k != DESIRED_DIGEST)
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let Value::Object(mut out) = json!({
        "apiVersion": placement.api_version,
        "kind": placement.kind,
        "metadata": {
            "name": placement.name,
            "namespace": placement.namespace,
            "labels": labels,
            "annotations": annotations.clone(),
        },
    }) else {
        unreachable!("a json! object literal is an object")
    };
    if let Value::Object(body) = body {
        for (k, v) in body {
            out.insert(k, v);
        }
    }
    let digest = digest(&Value::Object(out.clone()));
    annotations.insert(DESIRED_DIGEST.into(), json!(digest));
    out["metadata"]["annotations"] = Value::Object(annotations);
    Ok(HostDesired {
        object: Value::Object(out),
        digest,
        notes,
        references,
    })
}

/// What an update of a host pod carries: its metadata and the fields of its spec that
/// Kubernetes lets a pod change (container and init container images, `activeDeadlineSeconds`).
/// The rest of a pod's spec is fixed when it is created, on the host as in the tenant, and so is
/// what its world added to it ([`crate::pod_world::PodWorld::furnish`]), which a full apply of
/// the desired pod would try to take away.
pub fn pod_update(desired: &Value) -> Value {
    let mut spec = Map::new();
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = desired.pointer(&format!("/spec/{list}")) {
            let images: Vec<Value> = containers
                .iter()
                .map(|c| json!({"name": c.get("name"), "image": c.get("image")}))
                .collect();
            spec.insert(list.into(), Value::Array(images));
        }
    }
    if let Some(deadline) = desired.pointer("/spec/activeDeadlineSeconds") {
        spec.insert("activeDeadlineSeconds".into(), deadline.clone());
    }
    json!({
        "apiVersion": desired.get("apiVersion"),
        "kind": desired.get("kind"),
        "metadata": desired.get("metadata"),
        "spec": spec,
    })
}

/// `sha256:` of a JSON value (serde_json keeps object keys sorted, so the encoding is canonical).
pub fn digest(value: &Value) -> String {
    let json = serde_json::to_vec(value).expect("a JSON value always serializes");
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

/// The digest a live host object records, if any.
pub fn recorded_digest(host: &Value) -> Option<&str> {
    host.pointer("/metadata/annotations")
        .and_then(|a| a.get(DESIRED_DIGEST))
        .and_then(Value::as_str)
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Downward API field paths that would show the host object's identity, and the host metadata
/// that carries the tenant's value instead (written by the mapping on every host object).
fn downward_field(path: &str) -> Option<String> {
    match path {
        "metadata.name" => Some(format!(
            "metadata.annotations['{}']",
            provenance::SOURCE_NAME
        )),
        "metadata.namespace" => Some(format!(
            "metadata.labels['{}']",
            provenance::SOURCE_NAMESPACE
        )),
        "metadata.uid" => Some(format!("metadata.labels['{}']", provenance::SOURCE_UID)),
        _ => None,
    }
}

fn rewrite_field_ref(field_ref: &mut Value) {
    if let Some(Value::String(path)) = field_ref.get_mut("fieldPath")
        && let Some(host) = downward_field(path)
    {
        *path = host;
    }
}

/// The taints of the host's control-plane nodes (and their name before Kubernetes 1.24).
const CONTROL_PLANE_TAINTS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// Whether a toleration tolerates a control-plane taint: by its key, or an `Exists` toleration
/// without a key, which tolerates every taint.
fn tolerates_control_plane(toleration: &Value) -> bool {
    match toleration.get("key").and_then(Value::as_str).unwrap_or("") {
        "" => toleration.get("operator").and_then(Value::as_str) == Some("Exists"),
        key => CONTROL_PLANE_TAINTS.contains(&key),
    }
}

fn pod(
    refs: &mut Refs<'_>,
    object: &TenantObject,
    body: &mut Value,
    notes: &mut Vec<String>,
) -> Result<(), Untranslatable> {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(refuse("PodSpecMissing", "spec", "a Pod needs a spec"));
    };
    // The host schedules the pod; a tenant-chosen node or deprecated alias does not cross.
    if spec.remove("nodeName").is_some() {
        notes.push("spec.nodeName dropped: the host's scheduler places the pod".into());
    }
    spec.remove("serviceAccount");
    if let Some(Value::Array(tolerations)) = spec.get_mut("tolerations") {
        let before = tolerations.len();
        tolerations.retain(|t| !tolerates_control_plane(t));
        if tolerations.len() < before {
            notes.push(format!(
                "{} of spec.tolerations dropped: they tolerate the host's control-plane taints",
                before - tolerations.len()
            ));
        }
    }
    if object
        .object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
    {
        notes.push(
            "metadata.finalizers not carried: only the host's own controllers finalize a host pod"
                .into(),
        );
    }
    if let Some(Value::String(class)) = spec.get("priorityClassName")
        && class.starts_with("system-")
    {
        return Err(refuse(
            "SystemPriorityClassForbidden",
            "spec.priorityClassName",
            format!("priority class {class} is reserved for the host's system components"),
        ));
    }
    if spec.get("resourceClaims").is_some_and(|v| !v.is_null()) {
        return Err(refuse(
            "ResourceClaimsNotSupported",
            "spec.resourceClaims",
            "dynamic resource claims are not synced, so a claim cannot be mapped to the host",
        ));
    }
    // Service account: the tenant's, mapped; the host never mounts a host token into the pod.
    let sa = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    spec.insert(
        "serviceAccountName".into(),
        json!(refs.named("spec.serviceAccountName".into(), "", "ServiceAccount", &sa)),
    );
    spec.insert("automountServiceAccountToken".into(), json!(false));
    // The pod's hostname is the tenant's name for it, not the host name.
    if !spec.contains_key("hostname") && NameSyntax::Dns1035Label.is_valid(&object.identity.name) {
        spec.insert("hostname".into(), json!(object.identity.name));
    }
    if let Some(Value::String(subdomain)) = spec.get_mut("subdomain") {
        *subdomain = refs.named("spec.subdomain".into(), "", "Service", subdomain);
    }
    if let Some(Value::Array(secrets)) = spec.get_mut("imagePullSecrets") {
        for (i, s) in secrets.iter_mut().enumerate() {
            refs.rewrite(
                s,
                &format!("spec.imagePullSecrets[{i}]"),
                "name",
                "",
                "Secret",
            );
        }
    }
    for list in CONTAINER_LISTS {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for (i, c) in containers.iter_mut().enumerate() {
            if let Some(Value::Array(env)) = c.get_mut("env") {
                for (j, e) in env.iter_mut().enumerate() {
                    let Some(from) = e.get_mut("valueFrom") else {
                        continue;
                    };
                    let at = format!("spec.{list}[{i}].env[{j}].valueFrom");
                    if let Some(r) = from.get_mut("configMapKeyRef") {
                        refs.rewrite(r, &format!("{at}.configMapKeyRef"), "name", "", "ConfigMap");
                    }
                    if let Some(r) = from.get_mut("secretKeyRef") {
                        refs.rewrite(r, &format!("{at}.secretKeyRef"), "name", "", "Secret");
                    }
                    if let Some(r) = from.get_mut("fieldRef") {
                        rewrite_field_ref(r);
                    }
                }
            }
            if let Some(Value::Array(env_from)) = c.get_mut("envFrom") {
                for (j, e) in env_from.iter_mut().enumerate() {
                    let at = format!("spec.{list}[{i}].envFrom[{j}]");
                    if let Some(r) = e.get_mut("configMapRef") {
                        refs.rewrite(r, &format!("{at}.configMapRef"), "name", "", "ConfigMap");
                    }
                    if let Some(r) = e.get_mut("secretRef") {
                        refs.rewrite(r, &format!("{at}.secretRef"), "name", "", "Secret");
                    }
                }
            }
        }
    }
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        for (i, v) in volumes.iter_mut().enumerate() {
            volume(refs, i, v, notes)?;
        }
    }
    Ok(())
}

/// Volume sources that name a Secret in a field the mapping does not rewrite (legacy in-tree
/// drivers): refused rather than pointed at a host Secret of the same name.
const LEGACY_SECRET_VOLUMES: [&str; 8] = [
    "azureFile",
    "cephfs",
    "cinder",
    "flexVolume",
    "iscsi",
    "rbd",
    "scaleIO",
    "storageos",
];

fn volume(
    refs: &mut Refs<'_>,
    i: usize,
    v: &mut Value,
    notes: &mut Vec<String>,
) -> Result<(), Untranslatable> {
    let at = format!("spec.volumes[{i}]");
    if let Some(cm) = v.get_mut("configMap") {
        refs.rewrite(cm, &format!("{at}.configMap"), "name", "", "ConfigMap");
    }
    if let Some(s) = v.get_mut("secret") {
        refs.rewrite(s, &format!("{at}.secret"), "secretName", "", "Secret");
    }
    if let Some(c) = v.get_mut("persistentVolumeClaim") {
        refs.rewrite(
            c,
            &format!("{at}.persistentVolumeClaim"),
            "claimName",
            "",
            "PersistentVolumeClaim",
        );
    }
    if let Some(csi) = v.get_mut("csi")
        && let Some(r) = csi.get_mut("nodePublishSecretRef")
    {
        refs.rewrite(
            r,
            &format!("{at}.csi.nodePublishSecretRef"),
            "name",
            "",
            "Secret",
        );
    }
    for legacy in LEGACY_SECRET_VOLUMES {
        if let Some(source) = v.get(legacy)
            && (source.get("secretRef").is_some() || source.get("secretName").is_some())
        {
            return Err(refuse(
                "VolumeSecretNotMappable",
                format!("{at}.{legacy}"),
                format!("the {legacy} volume's Secret reference cannot be mapped to the host"),
            ));
        }
    }
    if let Some(items) = v
        .get_mut("downwardAPI")
        .and_then(|d| d.get_mut("items"))
        .and_then(Value::as_array_mut)
    {
        for item in items {
            if let Some(r) = item.get_mut("fieldRef") {
                rewrite_field_ref(r);
            }
        }
    }
    let Some(Value::Array(sources)) = v.get_mut("projected").and_then(|p| p.get_mut("sources"))
    else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(sources.len());
    for (j, mut s) in std::mem::take(sources).into_iter().enumerate() {
        if s.get("serviceAccountToken").is_some() {
            // A projected token would be minted by the host for the host service account: it
            // must never reach a tenant pod. The pod's world serves it from the tenant's
            // TokenRequest instead when the host pod is created (`PodWorld::furnish`).
            notes.push(format!(
                "{at}.projected.sources[{j}].serviceAccountToken: never a host token; served \
                 from the tenant's TokenRequest when the pod has API access"
            ));
            continue;
        }
        if s.get("clusterTrustBundle").is_some() {
            return Err(refuse(
                "ClusterTrustBundleNotMappable",
                format!("{at}.projected.sources[{j}].clusterTrustBundle"),
                "cluster trust bundles are host-scoped objects a tenant cannot name",
            ));
        }
        let source_at = format!("{at}.projected.sources[{j}]");
        if let Some(cm) = s.get_mut("configMap") {
            refs.rewrite(
                cm,
                &format!("{source_at}.configMap"),
                "name",
                "",
                "ConfigMap",
            );
        }
        if let Some(secret) = s.get_mut("secret") {
            refs.rewrite(secret, &format!("{source_at}.secret"), "name", "", "Secret");
        }
        if let Some(items) = s
            .get_mut("downwardAPI")
            .and_then(|d| d.get_mut("items"))
            .and_then(Value::as_array_mut)
        {
            for item in items {
                if let Some(r) = item.get_mut("fieldRef") {
                    rewrite_field_ref(r);
                }
            }
        }
        kept.push(s);
    }
    *sources = kept;
    Ok(())
}

fn service(refs: &Refs<'_>, body: &mut Value) {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // The host allocates addresses and node ports; "None" (headless) is a request, not an address.
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    spec.remove("clusterIPs");
    spec.remove("healthCheckNodePort");
    if !headless {
        spec.remove("clusterIP");
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
    // Every tenant namespace shares the host namespace: the selector must also pin the tenant
    // namespace, which the mapping writes as a label on every host pod.
    if let Some(Value::Object(selector)) = spec.get_mut("selector") {
        selector.retain(|k, _| !provenance::is_reserved(k));
        selector.insert(provenance::SOURCE_NAMESPACE.into(), json!(refs.namespace));
    }
}

fn endpoints(
    refs: &mut Refs<'_>,
    object: &TenantObject,
    placement: &Placement,
    body: &mut Value,
) -> Result<(), Untranslatable> {
    // An Endpoints object belongs to the Service of the same name, on the host too.
    let tenant = refs.tenant;
    let service = tenant.host_name("", "Service", refs.namespace, &object.identity.name);
    if service != placement.name {
        return Err(refuse(
            "EndpointsNameNotMappable",
            "metadata.name",
            format!(
                "the host Service of this Endpoints is {service} but the Endpoints maps to {}; \
                 a name this long cannot be kept paired on the host",
                placement.name
            ),
        ));
    }
    let Some(Value::Array(subsets)) = body.get_mut("subsets") else {
        return Ok(());
    };
    for (i, subset) in subsets.iter_mut().enumerate() {
        for list in ["addresses", "notReadyAddresses"] {
            let Some(Value::Array(addresses)) = subset.get_mut(list) else {
                continue;
            };
            for (j, a) in addresses.iter_mut().enumerate() {
                let Some(target) = a.get_mut("targetRef").and_then(Value::as_object_mut) else {
                    continue;
                };
                let kind = target.get("kind").and_then(Value::as_str).unwrap_or("");
                let name = target.get("name").and_then(Value::as_str).unwrap_or("");
                let ns = target
                    .get("namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(refs.namespace);
                let at = format!("subsets[{i}].{list}[{j}].targetRef.name");
                let host = refs.named_in(at, "", kind, ns, name);
                target.insert("name".into(), json!(host));
                target.insert("namespace".into(), json!(tenant.host_namespace));
                target.remove("uid");
                target.remove("resourceVersion");
            }
        }
    }
    Ok(())
}

fn secret(body: &mut Value) -> Result<(), Untranslatable> {
    if body.get("type").and_then(Value::as_str) == Some("kubernetes.io/service-account-token") {
        // The host's token controller would fill it with a token of a host service account.
        return Err(refuse(
            "ServiceAccountTokenSecretForbidden",
            "type",
            "a service-account-token Secret would be filled by the host with a host credential",
        ));
    }
    // stringData is write-only: fold it into data as the API server does.
    if let Some(Value::Object(string_data)) =
        body.as_object_mut().and_then(|b| b.remove("stringData"))
    {
        use data_encoding::BASE64;
        let data = body
            .as_object_mut()
            .expect("body is an object")
            .entry("data")
            .or_insert_with(|| json!({}));
        if let Value::Object(data) = data {
            for (k, v) in string_data {
                if let Value::String(s) = v {
                    data.insert(k, json!(BASE64.encode(s.as_bytes())));
                }
            }
        }
    }
    Ok(())
}

fn pvc(
    refs: &mut Refs<'_>,
    body: &mut Value,
    notes: &mut Vec<String>,
) -> Result<(), Untranslatable> {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if spec.remove("volumeName").is_some() {
        notes.push(
            "spec.volumeName dropped: a tenant claim cannot bind a chosen host volume".to_string(),
        );
    }
    for field in ["dataSource", "dataSourceRef"] {
        if let Some(source) = spec.get_mut(field) {
            if source.get("namespace").is_some_and(|ns| !ns.is_null()) {
                return Err(refuse(
                    "CrossNamespaceDataSourceNotMappable",
                    format!("spec.{field}.namespace"),
                    "a data source in another namespace cannot be mapped to the host",
                ));
            }
            refs.rewrite_typed(source, &format!("spec.{field}"))?;
        }
    }
    Ok(())
}

fn service_account(refs: &mut Refs<'_>, body: &mut Value, notes: &mut Vec<String>) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    if obj.remove("secrets").is_some() {
        notes.push(
            "secrets dropped: token Secrets of a tenant service account stay in the tenant".into(),
        );
    }
    obj.insert("automountServiceAccountToken".into(), json!(false));
    if let Some(Value::Array(secrets)) = obj.get_mut("imagePullSecrets") {
        for (i, s) in secrets.iter_mut().enumerate() {
            refs.rewrite(s, &format!("imagePullSecrets[{i}]"), "name", "", "Secret");
        }
    }
}

fn ingress_backend(
    refs: &mut Refs<'_>,
    backend: &mut Value,
    at: &str,
) -> Result<(), Untranslatable> {
    if let Some(service) = backend.get_mut("service") {
        refs.rewrite(service, &format!("{at}.service"), "name", "", "Service");
    }
    if let Some(resource) = backend.get_mut("resource") {
        refs.rewrite_typed(resource, &format!("{at}.resource"))?;
    }
    Ok(())
}

fn ingress(refs: &mut Refs<'_>, body: &mut Value) -> Result<(), Untranslatable> {
    let Some(spec) = body.get_mut("spec") else {
        return Ok(());
    };
    if let Some(backend) = spec.get_mut("defaultBackend") {
        ingress_backend(refs, backend, "spec.defaultBackend")?;
    }
    if let Some(Value::Array(tls)) = spec.get_mut("tls") {
        for (i, t) in tls.iter_mut().enumerate() {
            refs.rewrite(t, &format!("spec.tls[{i}]"), "secretName", "", "Secret");
        }
    }
    if let Some(Value::Array(rules)) = spec.get_mut("rules") {
        for (i, rule) in rules.iter_mut().enumerate() {
            if let Some(Value::Array(paths)) = rule.get_mut("http").and_then(|h| h.get_mut("paths"))
            {
                for (j, path) in paths.iter_mut().enumerate() {
                    if let Some(backend) = path.get_mut("backend") {
                        let at = format!("spec.rules[{i}].http.paths[{j}].backend");
                        ingress_backend(refs, backend, &at)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Kinds whose host status flows back up to the tenant object.
pub fn status_flows_up(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Pod")
            | ("", "Service")
            | ("", "PersistentVolumeClaim")
            | ("networking.k8s.io", "Ingress")
    )
}

/// The status the tenant object should carry given its host object, when it differs from the
/// tenant object's current status (`None`: nothing to write).
///
/// The host status crosses as is: addresses, phases and conditions are what the tenant's users
/// need to see their workloads run. A Pod's `nominatedNodeName` and the host's QoS class are
/// facts about the host and cross too; nothing in a status names a host object.
pub fn status_to_tenant(tenant_object: &Value, host_object: &Value) -> Option<Value> {
    let id = TenantObject::from_value(tenant_object.clone()).ok()?;
    if !status_flows_up(id.identity.group(), &id.identity.kind) {
        return None;
    }
    let host_status = host_object.get("status")?;
    if host_status.is_null() || host_status.as_object().is_some_and(Map::is_empty) {
        return None;
    }
    let current = tenant_object.get("status").unwrap_or(&Value::Null);
    (current != host_status).then(|| host_status.clone())
}

/// The tenant Service as it must be recreated to carry the host Service's cluster IPs, when they
/// differ (`None`: nothing to do).
///
/// A Service's `spec.clusterIP(s)` cannot change once set, and the tenant's pods run on the host,
/// where only the host Service's address routes; the tenant's DNS answers with the tenant
/// Service's address. So the tenant Service is recreated with the host's address, as vcluster
/// does: the object returned is the tenant Service with the host's `clusterIP`, `clusterIPs` and
/// `ipFamilies`, without server-maintained metadata and status. Headless and ExternalName
/// Services have no address to carry; a Service with finalizers is left as it is (its deletion
/// would wait on them).
pub fn service_with_host_cluster_ips(
    tenant_service: &Value,
    host_service: &Value,
) -> Option<Value> {
    let ip_of = |s: &Value| {
        s.pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let host_ip = ip_of(host_service).filter(|ip| !ip.is_empty() && ip != "None")?;
    let tenant_ip = ip_of(tenant_service);
    let external =
        |s: &Value| s.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    // A Service with finalizers would not be gone when deleted: it is not recreated.
    let finalized = tenant_service
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    if tenant_ip.as_deref() == Some("None")
        || external(tenant_service)
        || external(host_service)
        || finalized
    {
        return None;
    }
    let host_ips = host_service
        .pointer("/spec/clusterIPs")
        .cloned()
        .unwrap_or_else(|| json!([host_ip]));
    if tenant_ip.as_deref() == Some(host_ip.as_str())
        && tenant_service
            .pointer("/spec/clusterIPs")
            .is_none_or(|ips| ips == &host_ips)
    {
        return None;
    }
    let mut recreated = tenant_service.clone();
    if let Some(map) = recreated.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = recreated.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    let spec = recreated.get_mut("spec").and_then(Value::as_object_mut)?;
    spec.insert("clusterIP".into(), json!(host_ip));
    spec.insert("clusterIPs".into(), host_ips);
    match host_service.pointer("/spec/ipFamilies") {
        Some(families) => spec.insert("ipFamilies".into(), families.clone()),
        None => spec.remove("ipFamilies"),
    };
    Some(recreated)
}

/// The `subsets` of a tenant Endpoints object, from the host Endpoints the host's endpoints
/// controller keeps for the host Service of a tenant Service with a selector.
///
/// Every address must point at a host Pod that `tenant_pod` maps back to its tenant Pod (by the
/// host Pod's provenance): `tenant_pod` gets the host Pod's name and answers the tenant
/// `targetRef` (kind, namespace, name, uid), or `None` for a host Pod that is not one of the
/// Service's tenant pods, whose address is then left out. Nothing that names a host object
/// crosses: `nodeName` (a host Node) is dropped. Addresses are sorted by IP and empty subsets
/// dropped, so that the same host state always gives the same value.
pub fn endpoints_to_tenant(
    host_endpoints: &Value,
    tenant_pod: impl Fn(&str) -> Option<Value>,
) -> Value {
    let mut subsets = Vec::new();
    let host_subsets = host_endpoints.get("subsets").and_then(Value::as_array);
    for subset in host_subsets.into_iter().flatten() {
        let mut out = Map::new();
        for list in ["addresses", "notReadyAddresses"] {
            let mut addresses: Vec<Value> = subset
                .get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|a| {
                    let target = a.get("targetRef")?;
                    if target.get("kind").and_then(Value::as_str) != Some("Pod") {
                        return None;
                    }
                    let tenant_ref = tenant_pod(target.get("name")?.as_str()?)?;
                    let mut a = a.as_object()?.clone();
                    a.remove("nodeName");
                    a.insert("targetRef".into(), tenant_ref);
                    Some(Value::Object(a))
                })
                .collect();
            addresses.sort_by(|a, b| a["ip"].as_str().cmp(&b["ip"].as_str()));
            if !addresses.is_empty() {
                out.insert(list.into(), Value::Array(addresses));
            }
        }
        if out.is_empty() {
            continue;
        }
        if let Some(ports) = subset.get("ports") {
            out.insert("ports".into(), ports.clone());
        }
        subsets.push(Value::Object(out));
    }
    Value::Array(subsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::place;
    use pretty_assertions::assert_eq;

    fn tenant() -> TenantPlacement {
        TenantPlacement {
            tenant: "acme".into(),
            host_namespace: "tenant-acme".into(),
            mapping: crate::mapping::MappingVersion::V1,
        }
    }

    fn translate(v: Value) -> Result<HostDesired, Untranslatable> {
        let o = TenantObject::from_value(v).unwrap();
        let p = place(&tenant(), &o);
        to_host(&tenant(), &o, &p)
    }

    #[test]
    fn metadata_comes_from_the_placement_and_status_stays_behind() {
        let d = translate(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "web", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web", "tenantplane.io/tenant": "victim"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "y"}],
                "finalizers": ["x/y"]},
            "data": {"k": "v"}}))
        .unwrap();
        let m = &d.object["metadata"];
        assert_eq!(m["name"], "cfg-x-web");
        assert_eq!(m["namespace"], "tenant-acme");
        assert_eq!(m["labels"]["tenantplane.io/tenant"], "acme");
        assert_eq!(m["labels"]["app"], "web");
        assert_eq!(m["annotations"][DESIRED_DIGEST], json!(d.digest));
        assert!(m.get("uid").is_none() && m.get("ownerReferences").is_none());
        assert!(m.get("finalizers").is_none() && m.get("resourceVersion").is_none());
        assert_eq!(d.object["data"]["k"], "v");
        assert_eq!(recorded_digest(&d.object), Some(d.digest.as_str()));
    }

    #[test]
    fn the_digest_ignores_tenant_metadata_that_does_not_cross_and_follows_what_does() {
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "web", "uid": "u1", "resourceVersion": "7"},
            "data": {"k": "v"}});
        let mut bumped = base.clone();
        bumped["metadata"]["resourceVersion"] = json!("8");
        assert_eq!(
            translate(base.clone()).unwrap().digest,
            translate(bumped).unwrap().digest
        );
        let mut changed = base.clone();
        changed["data"]["k"] = json!("w");
        assert_ne!(
            translate(base).unwrap().digest,
            translate(changed).unwrap().digest
        );
    }

    #[test]
    fn pod_references_follow_the_mapping() {
        let d = translate(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {
                "nodeName": "node-1",
                "serviceAccountName": "builder",
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{"name": "app", "image": "nginx",
                    "env": [
                        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "b"}}},
                        {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec"}}]}],
                "volumes": [
                    {"name": "c", "configMap": {"name": "cfg"}},
                    {"name": "s", "secret": {"secretName": "sec"}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "kube-api-access", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]}}))
        .unwrap();
        let spec = &d.object["spec"];
        assert!(spec.get("nodeName").is_none());
        assert_eq!(spec["serviceAccountName"], "builder-x-prod");
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["hostname"], "web");
        assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred-x-prod");
        let c = &spec["containers"][0];
        assert_eq!(
            c["env"][0]["valueFrom"]["configMapKeyRef"]["name"],
            "cfg-x-prod"
        );
        assert_eq!(
            c["env"][1]["valueFrom"]["secretKeyRef"]["name"],
            "sec-x-prod"
        );
        assert_eq!(
            c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['tenantplane.io/source-name']"
        );
        assert_eq!(
            c["env"][3]["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP"
        );
        assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "cfg-x-prod");
        assert_eq!(c["envFrom"][1]["secretRef"]["name"], "sec-x-prod");
        let v = &spec["volumes"];
        assert_eq!(v[0]["configMap"]["name"], "cfg-x-prod");
        assert_eq!(v[1]["secret"]["secretName"], "sec-x-prod");
        assert_eq!(v[2]["persistentVolumeClaim"]["claimName"], "data-x-prod");
        let sources = v[3]["projected"]["sources"].as_array().unwrap();
        assert_eq!(sources.len(), 2, "the token projection is dropped");
        assert_eq!(sources[0]["configMap"]["name"], "kube-root-ca.crt-x-prod");
        assert_eq!(
            sources[1]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
            "metadata.labels['tenantplane.io/source-namespace']"
        );
        assert_eq!(d.notes.len(), 2, "nodeName and the token: {:?}", d.notes);
    }

    #[test]
    fn a_reference_maps_exactly_like_the_object_it_names() {
        let long = "c".repeat(250);
        let d = translate(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"containers": [{"name": "a", "image": "x"}],
                     "volumes": [{"name": "c", "configMap": {"name": long}}]}}))
        .unwrap();
        let cm = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": long, "namespace": "prod"}}))
        .unwrap();
        assert_eq!(
            d.object["spec"]["volumes"][0]["configMap"]["name"],
            json!(place(&tenant(), &cm).name)
        );
    }

    #[test]
    fn unsafe_pods_and_secrets_are_refused_with_the_field() {
        let e = translate(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"priorityClassName": "system-node-critical", "containers": []}}))
        .unwrap_err();
        assert_eq!(e.reason, "SystemPriorityClassForbidden");
        assert_eq!(e.field_path, "spec.priorityClassName");
        let e = translate(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [], "volumes": [{"name": "r", "rbd": {"secretRef": {"name": "s"}}}]}}))
        .unwrap_err();
        assert_eq!(e.field_path, "spec.volumes[0].rbd");
        let e = translate(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "t", "namespace": "n",
              "annotations": {"kubernetes.io/service-account.name": "default"}},
            "type": "kubernetes.io/service-account-token"}))
        .unwrap_err();
        assert_eq!(e.reason, "ServiceAccountTokenSecretForbidden");
    }

    #[test]
    fn service_selector_is_pinned_to_the_tenant_namespace_and_addresses_are_the_hosts() {
        let d = translate(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"selector": {"app": "web", "tenantplane.io/tenant": "other"},
                     "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                     "ports": [{"port": 80, "nodePort": 30080}]},
            "status": {"loadBalancer": {}}}))
        .unwrap();
        let spec = &d.object["spec"];
        assert_eq!(
            spec["selector"],
            json!({"app": "web", "tenantplane.io/source-namespace": "prod"})
        );
        assert!(spec.get("clusterIP").is_none() && spec.get("clusterIPs").is_none());
        assert!(spec["ports"][0].get("nodePort").is_none());
        assert!(d.object.get("status").is_none());
        let headless = translate(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": "prod"},
            "spec": {"clusterIP": "None", "ports": [{"port": 5432}]}}))
        .unwrap();
        assert_eq!(headless.object["spec"]["clusterIP"], "None");
    }

    #[test]
    fn ingress_backends_and_tls_secrets_follow_the_mapping() {
        let d = translate(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
                     "tls": [{"hosts": ["a.example"], "secretName": "tls"}],
                     "rules": [{"host": "a.example", "http": {"paths": [
                        {"path": "/", "pathType": "Prefix",
                         "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
        )
        .unwrap();
        let spec = &d.object["spec"];
        assert_eq!(spec["defaultBackend"]["service"]["name"], "fallback-x-prod");
        assert_eq!(spec["tls"][0]["secretName"], "tls-x-prod");
        assert_eq!(
            spec["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
            "web-x-prod"
        );
    }

    #[test]
    fn endpoints_targets_pvc_and_service_account() {
        let d = translate(json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "ext", "namespace": "prod"},
            "subsets": [{"addresses": [{"ip": "10.1.2.3",
                "targetRef": {"kind": "Pod", "name": "db-0", "namespace": "prod", "uid": "u"}}],
                "ports": [{"port": 5432}]}]}))
        .unwrap();
        let t = &d.object["subsets"][0]["addresses"][0]["targetRef"];
        assert_eq!(t["name"], "db-0-x-prod");
        assert_eq!(t["namespace"], "tenant-acme");
        assert!(t.get("uid").is_none());

        let d = translate(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "prod"},
            "spec": {"volumeName": "pv-host-1", "accessModes": ["ReadWriteOnce"],
                     "dataSource": {"kind": "PersistentVolumeClaim", "name": "seed"}}}))
        .unwrap();
        assert!(d.object["spec"].get("volumeName").is_none());
        assert_eq!(d.object["spec"]["dataSource"]["name"], "seed-x-prod");

        let d = translate(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": "prod"},
            "secrets": [{"name": "builder-token"}], "imagePullSecrets": [{"name": "reg"}]}))
        .unwrap();
        assert!(d.object.get("secrets").is_none());
        assert_eq!(d.object["automountServiceAccountToken"], false);
        assert_eq!(d.object["imagePullSecrets"][0]["name"], "reg-x-prod");
    }

    #[test]
    fn custom_resources_cross_with_their_body() {
        let d = translate(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "prod"}, "spec": {"size": 3},
            "status": {"ready": true}}))
        .unwrap();
        assert_eq!(d.object["spec"], json!({"size": 3}));
        assert_eq!(d.object["metadata"]["name"], "w-x-prod");
        assert!(d.object.get("status").is_none());
    }

    #[test]
    fn status_flows_up_only_when_it_differs() {
        let tenant_pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n"}, "status": {"phase": "Pending"}});
        let host_pod = json!({"status": {"phase": "Running", "podIP": "10.1.0.5"}});
        assert_eq!(
            status_to_tenant(&tenant_pod, &host_pod),
            Some(json!({"phase": "Running", "podIP": "10.1.0.5"}))
        );
        let mut same = tenant_pod.clone();
        same["status"] = host_pod["status"].clone();
        assert_eq!(status_to_tenant(&same, &host_pod), None);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(status_to_tenant(&cm, &host_pod), None);
    }

    #[test]
    fn a_tenant_service_is_recreated_with_the_host_cluster_ips_only_when_they_differ() {
        let tenant_svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "n", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "web"}},
            "spec": {"clusterIP": "10.43.0.9", "clusterIPs": ["10.43.0.9"], "ipFamilies": ["IPv4"],
                     "selector": {"app": "web"}, "ports": [{"port": 80}]},
            "status": {"loadBalancer": {}}});
        let host_svc = json!({"spec": {"clusterIP": "10.96.3.4", "clusterIPs": ["10.96.3.4"],
                                       "ipFamilies": ["IPv4"]}});
        let recreated = service_with_host_cluster_ips(&tenant_svc, &host_svc).unwrap();
        assert_eq!(recreated["spec"]["clusterIP"], "10.96.3.4");
        assert_eq!(recreated["spec"]["clusterIPs"], json!(["10.96.3.4"]));
        assert_eq!(recreated["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(recreated["metadata"]["labels"], json!({"app": "web"}));
        assert!(recreated["metadata"].get("uid").is_none());
        assert!(recreated["metadata"].get("resourceVersion").is_none());
        assert!(recreated.get("status").is_none());
        assert_eq!(service_with_host_cluster_ips(&recreated, &host_svc), None);

        let mut finalized = tenant_svc.clone();
        finalized["metadata"]["finalizers"] =
            json!(["service.kubernetes.io/load-balancer-cleanup"]);
        assert_eq!(service_with_host_cluster_ips(&finalized, &host_svc), None);

        let mut headless = tenant_svc.clone();
        headless["spec"]["clusterIP"] = json!("None");
        assert_eq!(service_with_host_cluster_ips(&headless, &host_svc), None);
        assert_eq!(
            service_with_host_cluster_ips(&tenant_svc, &json!({"spec": {}})),
            None,
            "a host Service without an address yet"
        );
    }

    #[test]
    fn host_endpoints_flow_up_pointing_at_tenant_pods_only() {
        let host = json!({"subsets": [
            {"addresses": [
                {"ip": "10.244.0.9", "nodeName": "host-node-1",
                 "targetRef": {"kind": "Pod", "namespace": "tenant-acme", "name": "b-x-web", "uid": "h2"}},
                {"ip": "10.244.0.5", "nodeName": "host-node-1",
                 "targetRef": {"kind": "Pod", "namespace": "tenant-acme", "name": "a-x-web", "uid": "h1"}},
                {"ip": "10.244.0.7",
                 "targetRef": {"kind": "Pod", "namespace": "tenant-acme", "name": "host-only", "uid": "h3"}},
                {"ip": "10.244.0.8"}],
             "notReadyAddresses": [
                {"ip": "10.244.0.6",
                 "targetRef": {"kind": "Pod", "namespace": "tenant-acme", "name": "c-x-web"}}],
             "ports": [{"port": 8080, "protocol": "TCP"}]},
            {"addresses": [{"ip": "10.244.0.7",
                 "targetRef": {"kind": "Pod", "namespace": "tenant-acme", "name": "host-only"}}],
             "ports": [{"port": 9090}]}]});
        let tenant_pod = |host: &str| {
            let name = host.strip_suffix("-x-web")?;
            Some(
                json!({"kind": "Pod", "namespace": "web", "name": name, "uid": format!("t-{name}")}),
            )
        };
        assert_eq!(
            endpoints_to_tenant(&host, tenant_pod),
            json!([{
                "addresses": [
                    {"ip": "10.244.0.5", "targetRef": {"kind": "Pod", "namespace": "web", "name": "a", "uid": "t-a"}},
                    {"ip": "10.244.0.9", "targetRef": {"kind": "Pod", "namespace": "web", "name": "b", "uid": "t-b"}}],
                "notReadyAddresses": [
                    {"ip": "10.244.0.6", "targetRef": {"kind": "Pod", "namespace": "web", "name": "c", "uid": "t-c"}}],
                "ports": [{"port": 8080, "protocol": "TCP"}]}])
        );
        assert_eq!(endpoints_to_tenant(&json!({}), tenant_pod), json!([]));
    }
}
