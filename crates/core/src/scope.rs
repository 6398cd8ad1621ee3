//! The scope of the kinds a tenant can create: namespaced, cluster-scoped, or unknown.
//!
//! tenantplane syncs namespaced kinds only, so a kind's scope decides whether the syncer can
//! watch it at all (see [`crate::watch`]). The scopes of the built-in Kubernetes kinds are known:
//! [`BUILTIN_KINDS`], the Kubernetes 1.36 API. A custom resource's scope is learned from its
//! CustomResourceDefinition or from a cluster's discovery ([`KindScopes::learn`]). A kind known
//! neither way has an unknown scope, which is reported as such, never guessed: the `namespace`
//! an object carries says nothing (a cluster-scoped object with one is accepted by the API
//! server, which ignores it), and its absence means `default` for a namespaced kind.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the objects of a kind live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// In a namespace: what tenantplane syncs.
    Namespaced,
    /// Cluster-wide: never synced (a tenant owns no part of the host cluster outside its host
    /// namespace).
    Cluster,
}

/// How the API server serves a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Served {
    /// Stored objects that can be listed and watched.
    ListWatch,
    /// Create-only requests that store nothing (reviews, bindings): nothing to watch.
    CreateOnly,
}

/// Where what is known about a kind comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScopeSource {
    /// The built-in Kubernetes API ([`BUILTIN_KINDS`]).
    Builtin,
    /// A CustomResourceDefinition (among the inputs of explain-sync).
    CustomResourceDefinition,
    /// A cluster's discovery.
    Discovery,
}

/// What is known about a kind: its scope, how it is served, and where that comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindScope {
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Listable and watchable, or create-only.
    pub served: Served,
    /// Where this is known from.
    pub source: ScopeSource,
}

/// A built-in Kubernetes kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltinKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// The version a 1.36 API server prefers (the newest stable one, else the newest beta,
    /// else the newest alpha).
    pub version: &'static str,
    /// Resource name (`deployments`).
    pub plural: &'static str,
    /// Scope.
    pub scope: Scope,
    /// How it is served.
    pub served: Served,
}

const fn builtin(
    group: &'static str,
    kind: &'static str,
    version: &'static str,
    plural: &'static str,
    scope: Scope,
    served: Served,
) -> BuiltinKind {
    BuiltinKind {
        group,
        kind,
        version,
        plural,
        scope,
        served,
    }
}

/// Every kind of the Kubernetes 1.36 API (kube-apiserver and kube-aggregator, beta and alpha
/// groups included; the OpenAPI of k8s-openapi's `v1_36`), the core group first. Subresources
/// (status, scale, eviction, token) are not kinds a tenant creates.
pub const BUILTIN_KINDS: &[BuiltinKind] = &[
    builtin(
        "",
        "Binding",
        "v1",
        "bindings",
        Scope::Namespaced,
        Served::CreateOnly,
    ),
    builtin(
        "",
        "ComponentStatus",
        "v1",
        "componentstatuses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "",
        "ConfigMap",
        "v1",
        "configmaps",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Endpoints",
        "v1",
        "endpoints",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Event",
        "v1",
        "events",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "LimitRange",
        "v1",
        "limitranges",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Namespace",
        "v1",
        "namespaces",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin("", "Node", "v1", "nodes", Scope::Cluster, Served::ListWatch),
    builtin(
        "",
        "PersistentVolume",
        "v1",
        "persistentvolumes",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "",
        "PersistentVolumeClaim",
        "v1",
        "persistentvolumeclaims",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Pod",
        "v1",
        "pods",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "PodTemplate",
        "v1",
        "podtemplates",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "ReplicationController",
        "v1",
        "replicationcontrollers",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "ResourceQuota",
        "v1",
        "resourcequotas",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Secret",
        "v1",
        "secrets",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "Service",
        "v1",
        "services",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "",
        "ServiceAccount",
        "v1",
        "serviceaccounts",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicy",
        "v1",
        "mutatingadmissionpolicies",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
        "v1",
        "mutatingadmissionpolicybindings",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "v1",
        "mutatingwebhookconfigurations",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "v1",
        "validatingadmissionpolicies",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        "v1",
        "validatingadmissionpolicybindings",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "v1",
        "validatingwebhookconfigurations",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "v1",
        "customresourcedefinitions",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "apiregistration.k8s.io",
        "APIService",
        "v1",
        "apiservices",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "apps",
        "ControllerRevision",
        "v1",
        "controllerrevisions",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "apps",
        "DaemonSet",
        "v1",
        "daemonsets",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "apps",
        "Deployment",
        "v1",
        "deployments",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "apps",
        "ReplicaSet",
        "v1",
        "replicasets",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "apps",
        "StatefulSet",
        "v1",
        "statefulsets",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "v1",
        "selfsubjectreviews",
        Scope::Cluster,
        Served::CreateOnly,
    ),
    builtin(
        "authentication.k8s.io",
        "TokenReview",
        "v1",
        "tokenreviews",
        Scope::Cluster,
        Served::CreateOnly,
    ),
    builtin(
        "authorization.k8s.io",
        "LocalSubjectAccessReview",
        "v1",
        "localsubjectaccessreviews",
        Scope::Namespaced,
        Served::CreateOnly,
    ),
    builtin(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "v1",
        "selfsubjectaccessreviews",
        Scope::Cluster,
        Served::CreateOnly,
    ),
    builtin(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "v1",
        "selfsubjectrulesreviews",
        Scope::Cluster,
        Served::CreateOnly,
    ),
    builtin(
        "authorization.k8s.io",
        "SubjectAccessReview",
        "v1",
        "subjectaccessreviews",
        Scope::Cluster,
        Served::CreateOnly,
    ),
    builtin(
        "autoscaling",
        "HorizontalPodAutoscaler",
        "v2",
        "horizontalpodautoscalers",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "batch",
        "CronJob",
        "v1",
        "cronjobs",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "batch",
        "Job",
        "v1",
        "jobs",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "certificates.k8s.io",
        "CertificateSigningRequest",
        "v1",
        "certificatesigningrequests",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "certificates.k8s.io",
        "ClusterTrustBundle",
        "v1beta1",
        "clustertrustbundles",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "certificates.k8s.io",
        "PodCertificateRequest",
        "v1beta1",
        "podcertificaterequests",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "coordination.k8s.io",
        "Lease",
        "v1",
        "leases",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "coordination.k8s.io",
        "LeaseCandidate",
        "v1beta1",
        "leasecandidates",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "discovery.k8s.io",
        "EndpointSlice",
        "v1",
        "endpointslices",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "events.k8s.io",
        "Event",
        "v1",
        "events",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "flowcontrol.apiserver.k8s.io",
        "FlowSchema",
        "v1",
        "flowschemas",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        "v1",
        "prioritylevelconfigurations",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "internal.apiserver.k8s.io",
        "StorageVersion",
        "v1alpha1",
        "storageversions",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "networking.k8s.io",
        "IPAddress",
        "v1",
        "ipaddresses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "networking.k8s.io",
        "Ingress",
        "v1",
        "ingresses",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "networking.k8s.io",
        "IngressClass",
        "v1",
        "ingressclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "networking.k8s.io",
        "NetworkPolicy",
        "v1",
        "networkpolicies",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "networking.k8s.io",
        "ServiceCIDR",
        "v1",
        "servicecidrs",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "node.k8s.io",
        "RuntimeClass",
        "v1",
        "runtimeclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "policy",
        "PodDisruptionBudget",
        "v1",
        "poddisruptionbudgets",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "v1",
        "clusterroles",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "v1",
        "clusterrolebindings",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "Role",
        "v1",
        "roles",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "v1",
        "rolebindings",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "DeviceClass",
        "v1",
        "deviceclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "DeviceTaintRule",
        "v1beta2",
        "devicetaintrules",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "ResourceClaim",
        "v1",
        "resourceclaims",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "ResourceClaimTemplate",
        "v1",
        "resourceclaimtemplates",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "ResourcePoolStatusRequest",
        "v1alpha3",
        "resourcepoolstatusrequests",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "resource.k8s.io",
        "ResourceSlice",
        "v1",
        "resourceslices",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "scheduling.k8s.io",
        "PodGroup",
        "v1alpha2",
        "podgroups",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "scheduling.k8s.io",
        "PriorityClass",
        "v1",
        "priorityclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "scheduling.k8s.io",
        "Workload",
        "v1alpha2",
        "workloads",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "CSIDriver",
        "v1",
        "csidrivers",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "CSINode",
        "v1",
        "csinodes",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "CSIStorageCapacity",
        "v1",
        "csistoragecapacities",
        Scope::Namespaced,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "StorageClass",
        "v1",
        "storageclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "VolumeAttachment",
        "v1",
        "volumeattachments",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "storage.k8s.io",
        "VolumeAttributesClass",
        "v1",
        "volumeattributesclasses",
        Scope::Cluster,
        Served::ListWatch,
    ),
    builtin(
        "storagemigration.k8s.io",
        "StorageVersionMigration",
        "v1beta1",
        "storageversionmigrations",
        Scope::Cluster,
        Served::ListWatch,
    ),
];

impl BuiltinKind {
    /// The built-in kind `group`/`kind`.
    pub fn get(group: &str, kind: &str) -> Option<&'static BuiltinKind> {
        BUILTIN_KINDS
            .iter()
            .find(|b| b.group == group && b.kind == kind)
    }

    /// The built-in kind a person typed, as kubectl reads it: the kind or its plural, in any
    /// case, optionally followed by `.group` (`Deployment`, `deployments`, `deployments.apps`).
    /// Where two groups share a kind name (`Event`), the core group's wins, as in kubectl.
    pub fn typed(typed: &str) -> Option<&'static BuiltinKind> {
        let (name, group) = match typed.split_once('.') {
            Some((name, group)) => (name, Some(group)),
            None => (typed, None),
        };
        BUILTIN_KINDS.iter().find(|b| {
            group.is_none_or(|g| g == b.group)
                && (b.kind.eq_ignore_ascii_case(name) || b.plural.eq_ignore_ascii_case(name))
        })
    }

    /// `apps/v1`, `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn scope(&self) -> KindScope {
        KindScope {
            scope: self.scope,
            served: self.served,
            source: ScopeSource::Builtin,
        }
    }
}

/// What is known of the scopes of kinds: the built-in ones, and those learned from
/// CustomResourceDefinitions or discovery.
#[derive(Clone, Debug, Default)]
pub struct KindScopes {
    learned: HashMap<(String, String), KindScope>,
}

impl KindScopes {
    /// The built-in kinds only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what a CRD or discovery says of `group`/`kind`; it overrides what was known.
    pub fn learn(&mut self, group: &str, kind: &str, scope: KindScope) {
        self.learned
            .insert((group.to_string(), kind.to_string()), scope);
    }

    /// Learns the kind a CustomResourceDefinition defines. Returns the kind's (group, kind), or
    /// the field of the CRD that is missing or invalid, as `(field, problem)`.
    pub fn learn_crd(&mut self, crd: &Value) -> Result<(String, String), (String, String)> {
        let text = |pointer: &str, field: &str| {
            crd.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| (field.to_string(), format!("{field} is required")))
        };
        let group = text("/spec/group", "spec.group")?;
        let kind = text("/spec/names/kind", "spec.names.kind")?;
        let scope = match text("/spec/scope", "spec.scope")? {
            "Namespaced" => Scope::Namespaced,
            "Cluster" => Scope::Cluster,
            other => {
                return Err((
                    "spec.scope".into(),
                    format!("spec.scope is {other:?}; it must be Namespaced or Cluster"),
                ));
            }
        };
        self.learn(
            group,
            kind,
            KindScope {
                scope,
                served: Served::ListWatch,
                source: ScopeSource::CustomResourceDefinition,
            },
        );
        Ok((group.to_string(), kind.to_string()))
    }

    /// What is known of `group`/`kind`: learned first, then built-in; `None`: unknown.
    pub fn get(&self, group: &str, kind: &str) -> Option<KindScope> {
        self.learned
            .get(&(group.to_string(), kind.to_string()))
            .copied()
            .or_else(|| BuiltinKind::get(group, kind).map(BuiltinKind::scope))
    }
}

/// Whether a document is a CustomResourceDefinition.
pub fn is_crd(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
        && value
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cluster_scoped_kinds_a_tenant_could_try_are_known() {
        let scopes = KindScopes::new();
        for (group, kind) in [
            ("", "Namespace"),
            ("", "PersistentVolume"),
            ("", "Node"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            ("storage.k8s.io", "StorageClass"),
            (
                "admissionregistration.k8s.io",
                "MutatingAdmissionPolicyBinding",
            ),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("resource.k8s.io", "DeviceClass"),
        ] {
            let s = scopes
                .get(group, kind)
                .unwrap_or_else(|| panic!("{group}/{kind}"));
            assert_eq!(s.scope, Scope::Cluster, "{group}/{kind}");
            assert_eq!(s.source, ScopeSource::Builtin);
        }
        assert_eq!(
            scopes.get("apps", "Deployment").unwrap().scope,
            Scope::Namespaced
        );
        assert_eq!(
            scopes
                .get("authorization.k8s.io", "LocalSubjectAccessReview")
                .unwrap()
                .served,
            Served::CreateOnly
        );
        assert_eq!(scopes.get("example.com", "Widget"), None);
        assert_eq!(
            scopes.get("", "Deployment"),
            None,
            "the group is part of the kind"
        );
    }

    #[test]
    fn a_crd_teaches_its_kind_and_a_bad_one_names_the_field() {
        let mut scopes = KindScopes::new();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Gadget", "plural": "gadgets"}}});
        assert!(is_crd(&crd));
        assert_eq!(
            scopes.learn_crd(&crd),
            Ok(("example.com".into(), "Gadget".into()))
        );
        let learned = scopes.get("example.com", "Gadget").unwrap();
        assert_eq!(learned.scope, Scope::Cluster);
        assert_eq!(learned.source, ScopeSource::CustomResourceDefinition);
        let mut bad = crd.clone();
        bad["spec"]["scope"] = json!("Global");
        let (field, problem) = scopes.learn_crd(&bad).unwrap_err();
        assert_eq!(field, "spec.scope");
        assert!(problem.contains("Namespaced or Cluster"), "{problem}");
        let mut bad = crd;
        bad["spec"]["names"] = json!({});
        assert_eq!(scopes.learn_crd(&bad).unwrap_err().0, "spec.names.kind");
    }

    #[test]
    fn a_typed_kind_is_read_as_kubectl_reads_it() {
        assert_eq!(
            BuiltinKind::typed("deployments.apps").unwrap().kind,
            "Deployment"
        );
        assert_eq!(
            BuiltinKind::typed("clusterrolebinding").unwrap().group,
            "rbac.authorization.k8s.io"
        );
        assert_eq!(BuiltinKind::typed("Event").unwrap().group, "");
        assert_eq!(
            BuiltinKind::typed("events.events.k8s.io").unwrap().group,
            "events.k8s.io"
        );
        assert_eq!(BuiltinKind::typed("widgets"), None);
    }
}
