//! `IsolationProfile`: a named isolation level plus explicit overrides, compiled into host objects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// An explicit security boundary: a named level whose objects are documented one by one, and
/// fields that override the level. The isolation compiler turns it into NetworkPolicies,
/// a ResourceQuota, a LimitRange, Pod Security labels and ValidatingAdmissionPolicies in the
/// tenant's host namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "IsolationProfile",
    shortname = "ip",
    category = "tenantplane",
    status = "IsolationProfileStatus",
    printcolumn = r#"{"name":"Level","type":"string","jsonPath":".spec.level"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.services) && has(self.services.denyNodePorts) && self.services.denyNodePorts && has(self.resourceQuota) && has(self.resourceQuota.hard) && 'services.nodeports' in self.resourceQuota.hard && string(self.resourceQuota.hard['services.nodeports']) != '0')").message("services.denyNodePorts refuses every node port that resourceQuota.hard['services.nodeports'] grants: set the quota to 0 or stop denying node ports").field_path(".services.denyNodePorts"))]
pub struct IsolationProfileSpec {
    /// The named level the overrides start from.
    #[serde(default)]
    pub level: IsolationLevel,
    /// Network isolation overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkIsolation>,
    /// ResourceQuota overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_quota: Option<ResourceQuotaIsolation>,
    /// LimitRange overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_range: Option<LimitRangeIsolation>,
    /// Pod Security Admission overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityIsolation>,
    /// RuntimeClass requirement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<RuntimeClassIsolation>,
    /// Image pull policy requirement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicyIsolation>,
    /// Service exposure requirement (node ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<ServiceIsolation>,
}

/// Named isolation levels, from least to most restrictive.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Default,
    PartialOrd,
    Ord,
)]
pub enum IsolationLevel {
    /// Pod Security `baseline` enforced, ingress from other namespaces denied, egress open,
    /// object-count quota (no node ports, no load balancers).
    #[serde(rename = "baseline")]
    Baseline,
    /// Pod Security `restricted` enforced, default-deny ingress and egress (DNS and traffic inside
    /// the tenant allowed), compute and object quotas, container limits, `imagePullPolicy: Always`,
    /// node-port Services refused at admission: the level for shared clusters.
    #[default]
    #[serde(rename = "restricted")]
    Restricted,
    /// Restricted plus a sandboxed runtime class (`gvisor`) and tighter quotas and limits.
    #[serde(rename = "strict")]
    Strict,
}

/// Network overrides; an absent field keeps the level's value.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.defaultDenyEgress) || self.defaultDenyEgress || (!has(self.allowedEgressCidrs) && !has(self.allowedEgressNamespaces))").message("allowedEgressCidrs and allowedEgressNamespaces only take effect with defaultDenyEgress: egress is already open when it is false").field_path(".defaultDenyEgress"))]
pub struct NetworkIsolation {
    /// Deny all ingress not explicitly allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_deny_ingress: Option<bool>,
    /// Deny all egress not explicitly allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_deny_egress: Option<bool>,
    /// Allow DNS (UDP/TCP 53) to kube-system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_dns: Option<bool>,
    /// Allow traffic between the tenant's own pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_intra_tenant: Option<bool>,
    /// CIDRs the tenant's pods may reach (network addresses, host bits zero), in addition to DNS
    /// and the tenant itself. Only meaningful with default-deny egress. Each is at most 43
    /// characters (the longest IPv6 CIDR): the bound keeps the CEL rule within the API server's
    /// cost budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(c, isCIDR(c))").message("every allowed egress CIDR must be a CIDR such as 10.0.0.0/8"))]
    #[schemars(length(max = 64), inner(length(max = 43)))]
    pub allowed_egress_cidrs: Vec<String>,
    /// Host namespaces whose pods the tenant's pods may reach. Only meaningful with default-deny
    /// egress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub allowed_egress_namespaces: Vec<String>,
}

/// ResourceQuota overrides: entries replace the level's entries of the same name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuotaIsolation {
    /// Hard limits, e.g. `requests.cpu`, `count/pods`, `services.nodeports`.
    #[serde(default)]
    pub hard: BTreeMap<String, Quantity>,
}

/// LimitRange overrides for containers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LimitRangeIsolation {
    /// Default limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub default: BTreeMap<String, Quantity>,
    /// Default requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub default_request: BTreeMap<String, Quantity>,
    /// Maximum per container.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max: BTreeMap<String, Quantity>,
}

/// Pod Security Admission levels for the host namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityIsolation {
    /// `pod-security.kubernetes.io/enforce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<PodSecurityLevel>,
    /// `pod-security.kubernetes.io/audit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<PodSecurityLevel>,
    /// `pod-security.kubernetes.io/warn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn: Option<PodSecurityLevel>,
    /// Version of the Pod Security Standards (`latest` or `v1.34`), for all three modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(latest|v1\.[0-9]+)$"))]
    pub version: Option<String>,
}

/// The Pod Security Standards levels.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum PodSecurityLevel {
    /// No restriction.
    #[serde(rename = "privileged")]
    Privileged,
    /// Known privilege escalations blocked.
    #[serde(rename = "baseline")]
    Baseline,
    /// Current pod hardening best practice.
    #[serde(rename = "restricted")]
    Restricted,
}

/// RuntimeClass requirement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeClassIsolation {
    /// Every pod in the host namespace must use this runtimeClassName (a RuntimeClass the cluster
    /// has, e.g. `gvisor` or `kata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub required: Option<String>,
}

/// Image pull policy requirement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullPolicyIsolation {
    /// Every container must use `imagePullPolicy: Always` (so a node's cached private image is
    /// not reused by another tenant without credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_always: Option<bool>,
}

/// Service exposure requirement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceIsolation {
    /// Refuse Services of type NodePort and LoadBalancer (which opens node ports too) at
    /// admission, so a tenant cannot open a port on every node of the host cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_node_ports: Option<bool>,
}

/// Observed state of an IsolationProfile.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IsolationProfileStatus {
    /// Generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Accepted: the profile compiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
