//! The resource table: which kinds the server serves, under which group,
//! version and plural, and whether they are namespaced or have a status
//! subresource. A static table of built-ins is extended at run time by
//! CustomResourceDefinitions. The table drives storage, routing, discovery and
//! OpenAPI (the HTTP layer's `discovery` and `openapi` render it).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::storage::apply::ListShape;

/// How objects of a resource are stored: group and plural, version-independent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageKey {
    pub group: String,
    pub plural: String,
}

/// One served resource at one group/version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub has_status: bool,
    /// Served by a CustomResourceDefinition (JSON-only patches, no strategic merge).
    pub custom: bool,
    /// The CRD version's `openAPIV3Schema` (list keys for server-side apply).
    pub schema: Option<Arc<Value>>,
}

impl ResourceType {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// How server-side apply finds the keys of this kind's lists.
    pub fn list_shape(&self) -> ListShape<'_> {
        if self.custom {
            ListShape::Schema(self.schema.as_deref())
        } else {
            ListShape::Builtin
        }
    }

    /// Whether the resource is one of the two Event APIs (core/v1 and events.k8s.io/v1), which
    /// serve one store (see `events`).
    pub fn is_event(&self) -> bool {
        !self.custom
            && self.kind == "Event"
            && (self.group.is_empty() || self.group == EVENTS_GROUP)
    }

    /// The key objects are stored under, shared by every served version
    /// (and by both Event APIs, which serve one store: see `events`).
    pub fn storage_key(&self) -> StorageKey {
        if self.is_event() {
            return StorageKey {
                group: String::new(),
                plural: "events".into(),
            };
        }
        StorageKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether objects of this resource are answered, not stored (the authorization and
    /// authentication reviews).
    pub fn is_review(&self) -> bool {
        [REVIEW_GROUP, AUTHENTICATION_GROUP].contains(&self.group.as_str()) && !self.custom
    }

    /// Whether this is core/v1 ServiceAccounts, whose `token` subresource issues tokens.
    pub fn issues_tokens(&self) -> bool {
        self.group.is_empty() && self.plural == "serviceaccounts"
    }
}

/// (group, version, plural, singular, kind, namespaced, short names, status subresource)
type BuiltinRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
);

const BUILTINS: &[BuiltinRow] = &[
    (
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        &["ns"],
        true,
    ),
    ("", "v1", "pods", "pod", "Pod", true, &["po"], true),
    (
        "",
        "v1",
        "services",
        "service",
        "Service",
        true,
        &["svc"],
        true,
    ),
    (
        "",
        "v1",
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        false,
    ),
    (
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        false,
    ),
    ("", "v1", "secrets", "secret", "Secret", true, &[], false),
    (
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
    ),
    (
        "",
        "v1",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        &["sa"],
        false,
    ),
    ("", "v1", "events", "event", "Event", true, &["ev"], false),
    (
        "",
        "v1",
        "resourcequotas",
        "resourcequota",
        "ResourceQuota",
        true,
        &["quota"],
        true,
    ),
    (
        "",
        "v1",
        "limitranges",
        "limitrange",
        "LimitRange",
        true,
        &["limits"],
        false,
    ),
    (
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        false,
    ),
    (
        "networking.k8s.io",
        "v1",
        "ingresses",
        "ingress",
        "Ingress",
        true,
        &["ing"],
        true,
    ),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        true,
        &["netpol"],
        false,
    ),
    (
        "node.k8s.io",
        "v1",
        "runtimeclasses",
        "runtimeclass",
        "RuntimeClass",
        false,
        &[],
        false,
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        "ValidatingAdmissionPolicy",
        false,
        &[],
        true,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        "ValidatingAdmissionPolicyBinding",
        false,
        &[],
        false,
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        "apiservice",
        "APIService",
        false,
        &[],
        true,
    ),
    (
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        true,
        &["deploy"],
        true,
    ),
    (
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        true,
        &["sts"],
        true,
    ),
    (
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        true,
        &["ds"],
        true,
    ),
    (
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        true,
        &["rs"],
        true,
    ),
    (
        "apps",
        "v1",
        "controllerrevisions",
        "controllerrevision",
        "ControllerRevision",
        true,
        &[],
        false,
    ),
    ("batch", "v1", "jobs", "job", "Job", true, &[], true),
    (
        "batch",
        "v1",
        "cronjobs",
        "cronjob",
        "CronJob",
        true,
        &["cj"],
        true,
    ),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "role",
        "Role",
        true,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    (
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        true,
        &["hpa"],
        true,
    ),
    (
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
        &[],
        false,
    ),
    // Create-only reviews, answered and never stored (http/reviews.rs).
    (
        REVIEW_GROUP,
        "v1",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        false,
        &[],
        false,
    ),
    (
        REVIEW_GROUP,
        "v1",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
        false,
        &[],
        false,
    ),
    (
        REVIEW_GROUP,
        "v1",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        false,
        &[],
        false,
    ),
    (
        REVIEW_GROUP,
        "v1",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        "LocalSubjectAccessReview",
        true,
        &[],
        false,
    ),
    // Create-only authentication reviews, answered and never stored (http/authentication.rs).
    (
        AUTHENTICATION_GROUP,
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        false,
        &[],
        false,
    ),
    (
        AUTHENTICATION_GROUP,
        "v1",
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
        false,
        &[],
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    ),
];

/// The group of the access reviews (SelfSubjectAccessReview, ...).
pub const REVIEW_GROUP: &str = "authorization.k8s.io";

/// The group of TokenRequest, TokenReview and SelfSubjectReview.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// The events.k8s.io API group (its Events share the core/v1 Events' store).
pub const EVENTS_GROUP: &str = "events.k8s.io";

/// Group and plural of the CustomResourceDefinition resource itself.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
pub const CRD_PLURAL: &str = "customresourcedefinitions";

/// All served resources: the built-ins plus those CRDs add.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
    /// Group versions of APIServices whose aggregated API server does not answer
    /// (`aggregation`): listed in discovery, answered 503.
    unavailable: BTreeSet<(String, String)>,
    /// Changes whenever `types` does (a CRD registered or removed): what the OpenAPI documents
    /// built from the table are cached under.
    revision: u64,
}

impl Default for Registry {
    fn default() -> Self {
        let types = BUILTINS
            .iter()
            .map(
                |&(group, version, plural, singular, kind, namespaced, short, has_status)| {
                    ResourceType {
                        group: group.into(),
                        version: version.into(),
                        plural: plural.into(),
                        singular: singular.into(),
                        kind: kind.into(),
                        namespaced,
                        short_names: short.iter().map(|s| s.to_string()).collect(),
                        has_status,
                        custom: false,
                        schema: None,
                    }
                },
            )
            .collect();
        Self {
            types,
            unavailable: BTreeSet::new(),
            revision: 0,
        }
    }
}

impl Registry {
    /// Every served resource.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// A number that changes whenever the served types do.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The resource served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// Whether a group/version is served at all.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.version == version)
    }

    /// Every namespaced stored resource (namespace deletion empties them all).
    pub fn namespaced_storage_keys(&self) -> Vec<StorageKey> {
        let mut keys: Vec<StorageKey> = self
            .types
            .iter()
            .filter(|t| t.namespaced)
            .map(ResourceType::storage_key)
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Adds the resources a CRD serves, replacing any earlier registration of
    /// the same group and plural. Returns an error message for an invalid CRD.
    pub fn register_crd(&mut self, crd: &Value) -> Result<(), String> {
        let types = crd_resource_types(crd)?;
        for t in &types {
            if let Some(existing) = self
                .types
                .iter()
                .find(|e| !e.custom && e.group == t.group && e.plural == t.plural)
            {
                return Err(format!(
                    "{}.{} is a built-in resource",
                    existing.plural, existing.group
                ));
            }
        }
        if let Some(first) = types.first() {
            let key = first.storage_key();
            self.types.retain(|t| !(t.custom && t.storage_key() == key));
        }
        self.types.extend(types);
        self.revision += 1;
        Ok(())
    }

    /// Removes the resources a CRD served.
    pub fn unregister_crd(&mut self, key: &StorageKey) {
        self.types
            .retain(|t| !(t.custom && t.storage_key() == *key));
        self.revision += 1;
    }

    /// Sets the group versions whose aggregated API server does not answer.
    pub fn set_unavailable(&mut self, unavailable: BTreeSet<(String, String)>) {
        self.unavailable = unavailable;
    }

    /// Whether `group`/`version` belongs to an aggregated API server that does not answer (and
    /// is not also served here).
    pub fn is_unavailable(&self, group: &str, version: &str) -> bool {
        self.unavailable
            .contains(&(group.to_string(), version.to_string()))
            && !self.serves_group_version(group, version)
    }

    /// The group versions of APIServices whose aggregated API server does not answer.
    pub fn unavailable(&self) -> &BTreeSet<(String, String)> {
        &self.unavailable
    }
}

/// The resource types a CRD object serves, one per served version.
fn crd_resource_types(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let text = |v: Option<&Value>, field: &str| -> Result<String, String> {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or(format!("{field}: Required value"))
    };
    let group = text(spec.get("group"), "spec.group")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let plural = text(names.get("plural"), "spec.names.plural")?;
    let kind = text(names.get("kind"), "spec.names.kind")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let short_names: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope: Unsupported value: must be Namespaced or Cluster".into()),
    };
    let metadata_name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if metadata_name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: \"{metadata_name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or("spec.versions: Required value")?;
    let mut types = Vec::new();
    for version in versions {
        let name = text(version.get("name"), "spec.versions[].name")?;
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        types.push(ResourceType {
            group: group.clone(),
            version: name,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: short_names.clone(),
            has_status: version.pointer("/subresources/status").is_some(),
            custom: true,
            schema: version
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .map(Arc::new),
        });
    }
    Ok(types)
}
