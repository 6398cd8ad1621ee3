//! `SyncPolicy`: ordered rules deciding which tenant objects reach the host cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Ordered rules evaluated against every tenant object: the first rule that matches decides,
/// and objects no rule matches get the policy's default.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "SyncPolicy",
    shortname = "sp",
    category = "tenantplane",
    status = "SyncPolicyStatus",
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.rules"}"#,
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".spec.default.action"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.rules) || self.rules.all(r, self.rules.exists_one(o, o.name == r.name))").message("rule names must be unique within a SyncPolicy").field_path(".rules"))]
pub struct SyncPolicySpec {
    /// Rules in evaluation order; the first match wins.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub rules: Vec<SyncRule>,
    /// What happens to an object no rule matches.
    pub default: DefaultVerdict,
}

/// One rule: a match and the action it takes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.action != 'Reject' || has(self.fieldPath)").message("a Reject rule names the offending field in fieldPath").field_path(".fieldPath"))]
#[x_kube(validation = Rule::new("self.action == 'Reject' || !has(self.admission)").message("only a Reject rule is enforced at admission; remove admission or make the rule a Reject").field_path(".admission"))]
pub struct SyncRule {
    /// Unique name within the policy; recorded in every decision the rule takes.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Which tenant objects the rule applies to. Every given criterion must hold.
    #[serde(rename = "match", default)]
    pub matches: RuleMatch,
    /// What to do with a matching object.
    pub action: SyncAction,
    /// Machine-readable reason, UpperCamelCase (e.g. `HostNetworkForbidden`).
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub reason: String,
    /// Human-readable explanation shown to tenants and auditors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a Reject rule: the field of the tenant object that offends (e.g. `spec.hostNetwork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
    /// For a Reject rule: what the tenant control plane's admission does with an object the rule
    /// refuses (the ValidatingAdmissionPolicyBinding's validationActions). Deny when absent. The
    /// host-side refusal applies whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionAction>,
}

/// What a Reject rule does at admission in the tenant control plane.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default,
)]
pub enum AdmissionAction {
    /// The tenant's create or update fails with the rule's name, reason and message.
    #[default]
    Deny,
    /// The create or update succeeds with a warning carrying the rule's message.
    Warn,
    /// The create or update succeeds; the tenant control plane's audit log records the failure.
    Audit,
}

impl AdmissionAction {
    /// The action's name as written in YAML and in validationActions.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionAction::Deny => "Deny",
            AdmissionAction::Warn => "Warn",
            AdmissionAction::Audit => "Audit",
        }
    }
}

/// Match criteria; an empty list means "any".
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuleMatch {
    /// API groups (`""` is the core group, `*` any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Kinds (`Pod`, `Service`, `*` any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Tenant namespaces (`*` any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Labels of the tenant object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// CEL expressions over `object` (the tenant object), in the language of
    /// ValidatingAdmissionPolicy matchConditions; all must evaluate to true.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub conditions: Vec<MatchCondition>,
}

/// A named CEL expression that must evaluate to a boolean.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    /// Name, for error messages and decision records.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// CEL expression over `object`; must return bool.
    #[schemars(length(min = 1, max = 10240))]
    pub expression: String,
}

/// The verdict for objects no rule matches.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefaultVerdict {
    /// Action for unmatched objects (Skip is the cautious choice).
    pub action: SyncAction,
    /// Machine-readable reason, UpperCamelCase.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub reason: String,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a SyncPolicy decides for a tenant object.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncAction {
    /// Place the object in the host cluster.
    Sync,
    /// Leave the object in the tenant control plane only (not an error).
    Skip,
    /// Refuse the object: a recorded refusal, surfaced to the tenant as a warning Event.
    Reject,
}

impl SyncAction {
    /// The action's name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncAction::Sync => "Sync",
            SyncAction::Skip => "Skip",
            SyncAction::Reject => "Reject",
        }
    }
}

/// Observed state of a SyncPolicy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::kubernetes_integer_formats)]
pub struct SyncPolicyStatus {
    /// Generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Accepted: every CEL condition compiled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Content revision of the spec, as recorded in decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Number of rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<u32>,
}
