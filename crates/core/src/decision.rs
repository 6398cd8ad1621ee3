//! The decision record: one per sync decision, success or refusal.
//!
//! The same record is printed by `tenantplane explain-sync`, returned by the planner service,
//! emitted as a Kubernetes Event and a span by the syncer, and appended to the decision log.
//! Its fields follow OPA decision logs (id, input digest, policy revision, result, trace ids),
//! Kubernetes audit events (subject, acting component) and wgpolicyk8s.io PolicyReport results
//! (policy, rule, result, message). The hash chain that makes the log tamper-evident is added by
//! the decision log when the record is appended, since it depends on the order of appends.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What happened to a tenant object. The set is closed: auditors and tooling match on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Outcome {
    /// The host object was created or updated (predicted: will be).
    Synced,
    /// The host object already matched; nothing was written.
    Unchanged,
    /// Not synced: a Skip rule or the policy default.
    Skipped,
    /// Refused by a Reject rule of the SyncPolicy.
    Rejected,
    /// Refused because the host object at the target name belongs to another source.
    Conflict,
    /// The host object was deleted because its source is gone.
    Deleted,
    /// The host action failed; it is retried.
    Failed,
    /// Postponed because a dependency was unavailable; retried with backoff, nothing guessed.
    Deferred,
    /// The host object no longer holds what tenantplane set: someone else edited or deleted it
    /// on the host ([`crate::drift`]). Its correction, when the Tenant reverts drift, is a
    /// decision of its own.
    Drifted,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 9] = [
        Outcome::Synced,
        Outcome::Unchanged,
        Outcome::Skipped,
        Outcome::Rejected,
        Outcome::Conflict,
        Outcome::Deleted,
        Outcome::Failed,
        Outcome::Deferred,
        Outcome::Drifted,
    ];

    /// The outcome's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Synced => "Synced",
            Outcome::Unchanged => "Unchanged",
            Outcome::Skipped => "Skipped",
            Outcome::Rejected => "Rejected",
            Outcome::Conflict => "Conflict",
            Outcome::Deleted => "Deleted",
            Outcome::Failed => "Failed",
            Outcome::Deferred => "Deferred",
            Outcome::Drifted => "Drifted",
        }
    }

    /// Somebody should look (Event type Warning): the object was not placed (a refusal, a
    /// failure), or the host object was changed behind tenantplane's back (drift).
    pub fn warns(self) -> bool {
        matches!(
            self,
            Outcome::Rejected | Outcome::Conflict | Outcome::Failed | Outcome::Drifted
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
                format!(
                    "unknown outcome {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What the decision does to the host object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostAction {
    /// Create the host object.
    Create,
    /// Update our own host object.
    Update,
    /// Delete our own host object.
    Delete,
    /// Touch nothing.
    None,
}

impl HostAction {
    /// Lowercase name, as printed by explain-sync.
    pub fn as_str(self) -> &'static str {
        match self {
            HostAction::Create => "create",
            HostAction::Update => "update",
            HostAction::Delete => "delete",
            HostAction::None => "none",
        }
    }
}

/// The tenant object a decision is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace in the tenant control plane.
    pub namespace: String,
    /// Name in the tenant control plane.
    pub name: String,
    /// uid in the tenant control plane (empty when read from a file).
    #[serde(default)]
    pub uid: String,
    /// resourceVersion the decision saw (empty when read from a file).
    #[serde(default)]
    pub resource_version: String,
}

/// The host object a decision targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostTarget {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Host namespace.
    pub namespace: String,
    /// Host name.
    pub name: String,
}

/// The SyncPolicy rule (or default) that decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// SyncPolicy name.
    pub name: String,
    /// Content revision of the policy.
    pub revision: String,
    /// Rule name; absent when the policy default decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// The IsolationProfile that decided: for its compiled objects, the fields that produced each;
/// for a tenant object the host would refuse under it, the fields and the rule that refuse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileRef {
    /// IsolationProfile name.
    pub name: String,
    /// Its metadata.generation.
    pub generation: i64,
    /// Profile fields that produced the object, or its refusal, comma-separated (e.g.
    /// `spec.network.allowDns`, `spec.level`).
    pub field_path: String,
    /// For a refusal: the profile's rule that refuses, `PodSecurity/<check>` (a check of the Pod
    /// Security Standards, by its Kubernetes id) or `ValidatingAdmissionPolicy/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// A service account token a decision issued to a synced pod, as an auditor needs it: which
/// identity, for whom, until when, and where it is kept; never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedToken {
    // Fields in the order of their JSON keys: the decision log's canonical record writes them
    // as declared.
    /// Its audiences; empty: the tenant API server's own.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// When it expires, as the tenant API server said.
    pub expires: Timestamp,
    /// The key of the host Secret (the decision's target) that holds it.
    pub key: String,
    /// `namespace/name` of the tenant ServiceAccount it authenticates as.
    pub service_account: String,
}

/// One sync decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Unique id (UUIDv7: sorts by time). Written on the host object it leads to.
    pub id: String,
    /// When the decision was taken.
    pub time: Timestamp,
    /// Tenant name.
    pub tenant: String,
    /// The tenant object decided about.
    pub subject: Subject,
    /// The host object it maps to (absent when the object has no placement, e.g. unparseable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<HostTarget>,
    /// Closed-set outcome.
    pub outcome: Outcome,
    /// What is done to the host object.
    pub action: HostAction,
    /// Policy and rule that decided, with the policy revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef>,
    /// Profile field that decided (isolation objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileRef>,
    /// Machine reason, UpperCamelCase.
    pub reason: String,
    /// Human message.
    pub message: String,
    /// Offending field of the tenant object, for refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
    /// Reserved `tenantplane.io/` keys of the tenant object that were not passed through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripped_keys: Vec<String>,
    /// `sha256:` of the tenant object as seen (canonical JSON).
    pub input_digest: String,
    /// Mapping scheme version.
    pub mapping_version: String,
    /// Acting component (`tenantplane-syncer`, `tenantplane explain-sync`, ...).
    pub component: String,
    /// Its version.
    pub component_version: String,
    /// W3C trace id of the decision span, when traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Span id of the decision span, when traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// The decision this one closes: a recorded host action (create, update, delete) that was
    /// not carried out (its write failed or was refused, or the syncer stopped before making
    /// it). The closing decision says why in its reason ([`NOT_CARRIED_OUT_REASONS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes: Option<String>,
    /// The service account tokens the decision issued (a synced pod's token Secret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<IssuedToken>,
    /// For a Drifted decision, how the host object drifted and who did it; for the decision
    /// that corrects it, the same with the Drifted decision's id in `corrects`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::drift::Drift>,
}

/// The reasons of decisions that close a recorded host action that was not carried out: the
/// write failed (it is retried), changed host state refused its precondition (decided again),
/// the host API server refused it for its content, or the syncer stopped between recording the
/// decision and making the write (found at the next start).
pub const NOT_CARRIED_OUT_REASONS: [&str; 4] = [
    "HostWriteFailed",
    "HostObjectChanged",
    "HostRefused",
    "NotCarriedOut",
];

impl Decision {
    /// Whether the decision records a host action (create, update or delete) to be carried
    /// out: one that is open until its write is confirmed or a later decision closes it.
    pub fn opens_action(&self) -> bool {
        self.action != HostAction::None && self.closes.is_none()
    }
}

/// Who takes a decision, when, and under which trace: what the pure plan does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Decision id.
    pub id: String,
    /// Decision time.
    pub time: Timestamp,
    /// Acting component.
    pub component: String,
    /// Its version.
    pub component_version: String,
    /// Trace id, when traced.
    pub trace_id: Option<String>,
    /// Span id, when traced.
    pub span_id: Option<String>,
}

impl Stamp {
    /// A fresh stamp for `component`: a new UUIDv7 id, the current time, no trace.
    pub fn now(component: &str) -> Stamp {
        Stamp {
            id: new_decision_id(),
            time: Timestamp::now(),
            component: component.to_string(),
            component_version: crate::ENGINE_VERSION.to_string(),
            trace_id: None,
            span_id: None,
        }
    }
}

/// A new decision id: a UUIDv7, so ids sort by creation time.
pub fn new_decision_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
