//! `Tenant`: one tenant control plane and how its objects reach the host cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A tenant: a Kubernetes control plane of its own whose objects tenantplane syncs into one host
/// namespace, under a SyncPolicy and fenced by an IsolationProfile.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "Tenant",
    shortname = "tnt",
    category = "tenantplane",
    status = "TenantStatus",
    printcolumn = r#"{"name":"Host Namespace","type":"string","jsonPath":".status.hostNamespace"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.syncPolicyRef"}"#,
    printcolumn = r#"{"name":"Profile","type":"string","jsonPath":".spec.isolationProfileRef"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.counts.synced"}"#,
    printcolumn = r#"{"name":"Rejected","type":"integer","jsonPath":".status.counts.rejected"}"#,
    printcolumn = r#"{"name":"Conflict","type":"integer","jsonPath":".status.counts.conflict"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("has(self.spec.hostNamespace) || size(self.metadata.name) <= 56").message("a Tenant name longer than 56 characters needs an explicit spec.hostNamespace (the default 'tenant-<name>' must fit a 63-character namespace name)").field_path(".spec.hostNamespace"),
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63").message("a Tenant name must be a DNS-1123 label: it is written as a label value on every host object")
)]
#[x_kube(validation = Rule::new("!has(oldSelf.mappingVersion) || has(self.mappingVersion)").message("spec.mappingVersion cannot be removed once set: the tenant's host objects are named by it").field_path(".mappingVersion"))]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Host namespace that receives this tenant's objects and isolation objects.
    /// Defaults to `tenant-<name>`. Immutable: moving a tenant would orphan its host objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.hostNamespace is immutable"))]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub host_namespace: Option<String>,

    /// How the syncer reaches the tenant's control plane.
    pub control_plane: ControlPlane,

    /// Name of the SyncPolicy deciding which tenant objects are synced.
    /// When absent, the built-in default policy applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy_ref: Option<String>,

    /// Name of the IsolationProfile compiled into the host namespace.
    /// When absent, no isolation objects are compiled (and the IsolationApplied condition says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_profile_ref: Option<String>,

    /// The mapping scheme that names this tenant's host objects: `v1` or `v2` (injective).
    /// Immutable once set: changing it would rename every host object. When absent, the syncer
    /// sets it: `v2` for a new Tenant, `v1` for one an earlier syncer already served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.mappingVersion is immutable: changing it would rename every host object of the tenant"))]
    pub mapping_version: Option<MappingVersion>,

    /// What the tenant's pods on the host resolve names with. When absent: the tenant's
    /// `kube-system/kube-dns` Service, in the cluster domain `cluster.local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<TenantDns>,

    /// What the syncer does when a host object it manages is edited or deleted on the host by
    /// someone else (drift): `Revert` (the default) records the drift and then corrects it (the
    /// fields tenantplane sets re-applied, a deleted object re-created), each a decision;
    /// `Record`, for break-glass estates, records it and leaves the host object as edited, with
    /// the `Drifted` condition True until the object holds what tenantplane sets again.
    #[serde(default)]
    pub drift: DriftPolicy,
}

/// What the syncer does about drift of a host object it manages.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum DriftPolicy {
    /// Record the drift, then correct it.
    #[default]
    Revert,
    /// Record the drift and leave the host object as it is.
    Record,
}

/// What the tenant's pods on the host resolve names with.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TenantDns {
    /// `Tenant` (the default): the tenant's DNS Service, synced like any Service, is the
    /// nameserver of every synced pod whose `dnsPolicy` is `ClusterFirst`, with the tenant's
    /// search domains, so `backend` resolves to the tenant's `backend` Service. `Host`: pods keep
    /// the host cluster's resolver (and resolve host names).
    #[serde(default)]
    pub policy: DnsPolicy,
    /// The tenant's DNS Service. Default: `kube-system/kube-dns` (CoreDNS in kubeadm, k3s, kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// The tenant cluster's DNS domain. Default: `cluster.local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub cluster_domain: Option<String>,
}

/// Whose resolver the tenant's pods on the host use.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum DnsPolicy {
    /// The tenant's DNS Service.
    #[default]
    Tenant,
    /// The host cluster's resolver.
    Host,
}

/// A Service in the tenant control plane.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    /// Namespace of the Service.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the Service.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// A version of the mapping scheme from tenant objects to host names, recorded on every host
/// object (`tenantplane.io/mapping-version`).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default,
)]
pub enum MappingVersion {
    /// `<name>-x-<namespace>` wherever that is a valid name; two objects can share a host name
    /// (`c/a-x-b` and `b-x-c/a`), which the syncer refuses as a Conflict.
    #[serde(rename = "v1")]
    V1,
    /// Injective: the readable form only where it splits back uniquely, otherwise a hashed form
    /// that can never equal a readable name.
    #[default]
    #[serde(rename = "v2")]
    V2,
}

impl MappingVersion {
    /// The version as written on host objects and in decisions.
    pub fn as_str(self) -> &'static str {
        match self {
            MappingVersion::V1 => "v1",
            MappingVersion::V2 => "v2",
        }
    }

    /// Reads a version as written on host objects (`v1`, `v2`).
    pub fn parse(text: &str) -> Option<MappingVersion> {
        match text {
            "v1" => Some(MappingVersion::V1),
            "v2" => Some(MappingVersion::V2),
            _ => None,
        }
    }
}

impl std::fmt::Display for MappingVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The finalizer the syncer puts on every Tenant it serves (its host objects are removed before
/// the Tenant goes).
pub const FINALIZER: &str = "tenantplane.io/cleanup";

/// Where the tenant control plane's kubeconfig lives in the host cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// Secret holding a kubeconfig for the tenant control plane.
    pub kubeconfig_secret: SecretKeyRef,
    /// Context of that kubeconfig to use; its current context when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// `host:port` at which pods on the host reach the tenant API server: an address of the
    /// host's pod network, such as the tenant API server's Service in the host
    /// (`10.96.12.7:443`, `acme-api.tenant-acme.svc:443`; an IPv6 address in brackets). Synced
    /// pods get it as `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` and, when it is an
    /// IP address, as the address of `kubernetes.default.svc` in their hosts file. Default: the
    /// host and port of the kubeconfig's server; a loopback address there is used as it is, and
    /// the `PodAPIAccess` condition says that pods on a real host cannot reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 3, max = 261),
        regex(
            pattern = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$"
        )
    )]
    pub pod_endpoint: Option<String>,
}

/// A key of a Secret in the host cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret's data holding the kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "config".to_string()
}

/// Observed state of a Tenant, written by the syncer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// Generation of the Tenant this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, ControlPlaneReachable, IsolationApplied, Synced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The host namespace in effect (the default resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_namespace: Option<String>,
    /// Decisions recorded for this tenant, by outcome, over the Tenant's life (a restarted syncer continues from these counts).
    #[serde(default)]
    pub counts: DecisionCounts,
    /// The most recent decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<DecisionSummary>,
}

/// Number of decisions per outcome recorded for the tenant. The syncer writes them at most once
/// per status interval and, when it starts serving the tenant, continues from what the status
/// shows: decisions recorded in the last interval before a crash can be missing.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::kubernetes_integer_formats)]
pub struct DecisionCounts {
    /// Host object created or updated.
    pub synced: u64,
    /// Host object already as wanted; nothing written.
    pub unchanged: u64,
    /// Not synced, by a Skip rule or the policy default.
    pub skipped: u64,
    /// Refused by a Reject rule of the SyncPolicy.
    pub rejected: u64,
    /// Refused because the host object at the target name belongs to another source.
    pub conflict: u64,
    /// Host object removed because its source is gone.
    pub deleted: u64,
    /// The host action failed; retried.
    pub failed: u64,
    /// Postponed because a dependency (planner, host API) was unavailable; retried.
    pub deferred: u64,
    /// The host object was edited or deleted on the host by someone else.
    #[serde(default)]
    pub drifted: u64,
}

/// The last decision taken for a tenant, as shown in its status.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DecisionSummary {
    /// Decision id (as in the decision log and the `tenantplane.io/decision-id` annotation).
    pub id: String,
    /// Outcome, e.g. Synced or Conflict.
    pub outcome: String,
    /// `Kind/namespace/name` of the tenant object.
    pub subject: String,
    /// When the decision was taken.
    pub time: Time,
}

impl Tenant {
    /// The host namespace this tenant's objects land in: `spec.hostNamespace`, or `tenant-<name>`.
    pub fn host_namespace(&self) -> String {
        match &self.spec.host_namespace {
            Some(ns) => ns.clone(),
            None => format!(
                "tenant-{}",
                self.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }

    /// The mapping scheme of this tenant's host objects: `spec.mappingVersion`; when absent, `v1`
    /// for a Tenant a syncer already served (it carries the [`FINALIZER`]: its host objects
    /// were named by v1, the only scheme before v2) and `v2` for a new one.
    pub fn mapping_version(&self) -> MappingVersion {
        match self.spec.mapping_version {
            Some(v) => v,
            None if self
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER) =>
            {
                MappingVersion::V1
            }
            None => MappingVersion::V2,
        }
    }

    /// The Tenant's name (empty for an unnamed object, which the API server never stores).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}
