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
}

/// Where the tenant control plane's kubeconfig lives in the host cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// Secret holding a kubeconfig for the tenant control plane.
    pub kubeconfig_secret: SecretKeyRef,
    /// Context of that kubeconfig to use; its current context when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
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

    /// The Tenant's name (empty for an unnamed object, which the API server never stores).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}
