//! Decisions about a compiled set of objects ([`crate::compiled_set`]): the compilation itself,
//! and each object applied or pruned. The subject is what the set was compiled from (the
//! Tenant's IsolationProfile, or its SyncPolicy for its control plane's admission), the target
//! the object, and the decision names what produced the object: a rule of the SyncPolicy, the
//! profile's fields.

use tenantplane_core::MappingVersion;
use tenantplane_core::decision::{
    Decision, HostAction, HostTarget, Outcome, PolicyRef, ProfileRef, Stamp, Subject,
};
use tenantplane_isolation::ObjectRef;

/// What a compiled set was compiled from: the subject of every decision about it.
#[derive(Debug, Clone)]
pub struct Source {
    /// The Tenant.
    pub tenant: String,
    /// The resource compiled (an IsolationProfile, a SyncPolicy).
    pub subject: Subject,
    /// The SyncPolicy that decided, for a set compiled from one (each decision adds the rule).
    pub policy: Option<PolicyRef>,
    /// `sha256:` of what was compiled: each decision's input digest.
    pub input_digest: String,
    /// The Tenant's mapping scheme, recorded in the decisions.
    pub mapping: MappingVersion,
    /// The prefix of the ledger keys of the decisions about the set (`isolation`,
    /// `tenant-admission`).
    pub ledger_prefix: &'static str,
}

/// What produced one object of a set: a rule of the SyncPolicy, or fields of the
/// IsolationProfile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The SyncPolicy rule.
    pub rule: Option<String>,
    /// The IsolationProfile, with the fields that produced the object.
    pub profile: Option<ProfileRef>,
}

/// What a decision about a compiled set, or one of its objects, says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Outcome.
    pub outcome: Outcome,
    /// The write it leads to.
    pub action: HostAction,
    /// Machine reason.
    pub reason: &'static str,
    /// Human message.
    pub message: String,
}

impl Verdict {
    /// The set was compiled and some of its objects are to be written (each a decision of its
    /// own).
    pub fn compiled(reason: &'static str, message: String) -> Verdict {
        Verdict {
            outcome: Outcome::Synced,
            action: HostAction::None,
            reason,
            message,
        }
    }

    /// Applying a compiled object: an update of the one at its name when `exists`, a create
    /// otherwise.
    pub fn applied(exists: bool, reason: &'static str, message: String) -> Verdict {
        Verdict {
            outcome: Outcome::Synced,
            action: if exists {
                HostAction::Update
            } else {
                HostAction::Create
            },
            reason,
            message,
        }
    }

    /// Deleting an object its source no longer compiles.
    pub fn pruned(message: String) -> Verdict {
        Verdict {
            outcome: Outcome::Deleted,
            action: HostAction::Delete,
            reason: "NoLongerCompiled",
            message,
        }
    }
}

impl Source {
    /// The ledger key of the decision about the compilation.
    pub fn key(&self) -> String {
        format!(
            "{}:{}/{}",
            self.ledger_prefix, self.subject.kind, self.subject.name
        )
    }

    /// The ledger key of the decisions about the object `target`.
    pub fn key_of(&self, target: &ObjectRef) -> String {
        format!("{}:{target}", self.ledger_prefix)
    }

    /// The decision about `target` (an object of the set), produced by `origin`; or about the
    /// compilation as a whole when `target` is `None`.
    pub fn decision(
        &self,
        target: Option<&ObjectRef>,
        origin: &Origin,
        verdict: &Verdict,
        stamp: Stamp,
    ) -> Decision {
        Decision {
            id: stamp.id,
            time: stamp.time,
            tenant: self.tenant.clone(),
            subject: self.subject.clone(),
            target: target.map(|t| HostTarget {
                api_version: t.api_version.clone(),
                kind: t.kind.clone(),
                namespace: t.namespace.clone().unwrap_or_default(),
                name: t.name.clone(),
            }),
            outcome: verdict.outcome,
            action: verdict.action,
            policy: self.policy.clone().map(|p| PolicyRef {
                rule: origin.rule.clone(),
                ..p
            }),
            profile: origin.profile.clone(),
            reason: verdict.reason.into(),
            message: verdict.message.clone(),
            field_path: None,
            stripped_keys: Vec::new(),
            input_digest: self.input_digest.clone(),
            mapping_version: self.mapping.to_string(),
            component: stamp.component,
            component_version: stamp.component_version,
            trace_id: stamp.trace_id,
            span_id: stamp.span_id,
            closes: None,
            tokens: Vec::new(),
            drift: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(policy: Option<PolicyRef>) -> Source {
        Source {
            tenant: "acme".into(),
            subject: Subject {
                api_version: "tenantplane.io/v1alpha1".into(),
                kind: "SyncPolicy".into(),
                namespace: String::new(),
                name: "acme-sync".into(),
                uid: "u".into(),
                resource_version: "7".into(),
            },
            policy,
            input_digest: "sha256:in".into(),
            mapping: MappingVersion::V2,
            ledger_prefix: "tenant-admission",
        }
    }

    #[test]
    fn a_decision_about_an_object_names_what_produced_it() {
        let policy = PolicyRef {
            name: "acme-sync".into(),
            revision: "r1".into(),
            rule: None,
        };
        let s = source(Some(policy));
        let target = ObjectRef {
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingAdmissionPolicy".into(),
            namespace: None,
            name: "tenantplane-acme-no-host-network".into(),
        };
        let origin = Origin {
            rule: Some("no-host-network".into()),
            profile: None,
        };
        let d = s.decision(
            Some(&target),
            &origin,
            &Verdict::applied(false, "CompiledFromSyncPolicy", "m".into()),
            Stamp::now("tenantplane-syncer"),
        );
        assert_eq!((d.outcome, d.action), (Outcome::Synced, HostAction::Create));
        assert_eq!(
            d.policy.and_then(|p| p.rule).as_deref(),
            Some("no-host-network")
        );
        assert_eq!(d.target.map(|t| t.namespace), Some(String::new()));
        assert_eq!(d.input_digest, "sha256:in");
        assert_eq!(
            s.key_of(&target),
            "tenant-admission:ValidatingAdmissionPolicy/tenantplane-acme-no-host-network"
        );
        assert_eq!(s.key(), "tenant-admission:SyncPolicy/acme-sync");

        let without_policy = source(None).decision(
            None,
            &origin,
            &Verdict::pruned("gone".into()),
            Stamp::now("tenantplane-syncer"),
        );
        assert_eq!(without_policy.policy, None);
        assert_eq!(without_policy.reason, "NoLongerCompiled");
    }
}
