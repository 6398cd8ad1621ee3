//! Which tenant objects the syncer watches, and what becomes of those it does not.
//!
//! The syncer watches a kind when three things hold: the kind is namespaced (tenantplane syncs
//! namespaced kinds only), the API server lists and watches it, and a Sync rule of the Tenant's
//! SyncPolicy names it (a wildcard rule leaves out the control plane's own bookkeeping,
//! [`WILDCARD_EXCLUDED`]). An object of any other kind is never seen, so no decision is ever
//! recorded about it: no Skipped, no Rejected, nothing. `explain-sync` and `why --tenant` answer
//! for such an object with an [`UnrecordedFate`], from the rule the syncer's discovery applies
//! ([`names_kind`], [`is_watchable`]), so that the prediction cannot drift from the syncer.

use kube::core::ApiResource;
use kube::core::discovery::{ApiCapabilities, Scope as ApiScope, verbs};
use serde::{Deserialize, Serialize};

use crate::decision::Subject;
use crate::object::{ObjectError, TenantObject};
use crate::policy::{CompiledPolicy, Verdict};
use crate::scope::{KindScope, KindScopes, Scope, ScopeSource, Served};

/// Kinds never synced through a wildcard rule: they describe the control plane itself.
pub const WILDCARD_EXCLUDED: [(&str, &str); 5] = [
    ("", "Event"),
    ("events.k8s.io", "Event"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("apps", "ControllerRevision"),
];

/// Whether the (group, kind) pairs of a policy's Sync rules ([`CompiledPolicy::synced_kinds`])
/// name `group`/`kind`: by name, or by a wildcard unless the kind is [`WILDCARD_EXCLUDED`].
pub fn names_kind(synced: &[(String, String)], group: &str, kind: &str) -> bool {
    let exact = synced.iter().any(|(g, k)| g == group && k == kind);
    exact || (wildcard_names(synced, group, kind) && !is_wildcard_excluded(group, kind))
}

/// Whether a wildcard entry (`*` group or kind) covers `group`/`kind`.
fn wildcard_names(synced: &[(String, String)], group: &str, kind: &str) -> bool {
    synced.iter().any(|(g, k)| {
        (g == "*" || g == group) && (k == "*" || k == kind) && !(g == group && k == kind)
    })
}

fn is_wildcard_excluded(group: &str, kind: &str) -> bool {
    WILDCARD_EXCLUDED.contains(&(group, kind))
}

/// Whether the syncer can watch a discovered resource: namespaced, listable and watchable, not
/// a subresource.
pub fn is_watchable(ar: &ApiResource, caps: &ApiCapabilities) -> bool {
    caps.scope == ApiScope::Namespaced
        && caps.supports_operation(verbs::WATCH)
        && caps.supports_operation(verbs::LIST)
        && !ar.plural.contains('/')
}

/// What a discovered resource tells of its kind's scope.
pub fn discovered_scope(caps: &ApiCapabilities) -> KindScope {
    KindScope {
        scope: match caps.scope {
            ApiScope::Namespaced => Scope::Namespaced,
            ApiScope::Cluster => Scope::Cluster,
        },
        served: if caps.supports_operation(verbs::WATCH) && caps.supports_operation(verbs::LIST) {
            Served::ListWatch
        } else {
            Served::CreateOnly
        },
        source: ScopeSource::Discovery,
    }
}

/// Why the syncer records nothing about an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Fate {
    /// Its kind is cluster-scoped: tenantplane syncs namespaced kinds only.
    ClusterScoped,
    /// Its kind is served create-only (reviews, bindings): nothing to list or watch.
    CreateOnly,
    /// No Sync rule of the policy names its kind.
    KindNotSynced,
    /// Only wildcard Sync rules name its kind, and they leave out [`WILDCARD_EXCLUDED`].
    ExcludedFromWildcards,
    /// Its kind's scope is unknown: watched if the tenant control plane serves it namespaced,
    /// never if cluster-scoped. A prediction cannot say which.
    UnknownScope,
}

impl Fate {
    /// `NotWatched`, or `UnknownScope` when it cannot be told.
    pub fn outcome(self) -> &'static str {
        match self {
            Fate::UnknownScope => "UnknownScope",
            _ => "NotWatched",
        }
    }

    /// The machine reason: the variant's name.
    pub fn reason(self) -> &'static str {
        match self {
            Fate::ClusterScoped => "ClusterScoped",
            Fate::CreateOnly => "CreateOnly",
            Fate::KindNotSynced => "KindNotSynced",
            Fate::ExcludedFromWildcards => "ExcludedFromWildcards",
            Fate::UnknownScope => "UnknownScope",
        }
    }
}

/// What becomes of a tenant object the syncer records no decision about, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnrecordedFate {
    /// The tenant object (namespace empty when its kind is cluster-scoped).
    pub subject: Subject,
    /// Why nothing is recorded.
    pub fate: Fate,
    /// What is known of the kind's scope; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<KindScope>,
    /// What the policy in force says of the object by first match (its name, revision and the
    /// rule or default that matches), which the syncer never gets to apply.
    pub verdict: Verdict,
    /// Human message.
    pub message: String,
}

/// A policy's watches: the kinds the syncer watches under it, with what is known of scopes.
#[derive(Debug)]
pub struct Watches<'p> {
    policy: &'p CompiledPolicy,
    synced: Vec<(String, String)>,
    scopes: KindScopes,
}

impl<'p> Watches<'p> {
    /// The watches of `policy`, the kinds' scopes taken from `scopes`.
    pub fn new(policy: &'p CompiledPolicy, scopes: KindScopes) -> Self {
        Watches {
            policy,
            synced: policy.synced_kinds(),
            scopes,
        }
    }

    /// What becomes of `object` when the syncer does not watch its kind; `None` when it does
    /// (the object is then planned, and its decision recorded).
    pub fn unrecorded(&self, object: &TenantObject) -> Option<UnrecordedFate> {
        let id = &object.identity;
        let (group, kind) = (id.group(), id.kind.as_str());
        let scope = self.scopes.get(group, kind);
        let fate = self.fate(group, kind, scope)?;
        let verdict = if fate == Fate::ClusterScoped {
            // Rules matching on namespaces do not match an object that has none.
            let mut unplaced = object.clone();
            unplaced.identity.namespace.clear();
            self.policy.evaluate(&unplaced)
        } else {
            self.policy.evaluate(object)
        };
        let message = message(fate, group, kind, scope, &verdict);
        Some(UnrecordedFate {
            subject: Subject {
                api_version: id.api_version.clone(),
                kind: id.kind.clone(),
                namespace: if fate == Fate::ClusterScoped {
                    String::new()
                } else {
                    id.namespace.clone()
                },
                name: id.name.clone(),
                uid: id.uid.clone(),
                resource_version: object.resource_version.clone().unwrap_or_default(),
            },
            fate,
            scope,
            verdict,
            message,
        })
    }
}

impl Watches<'_> {
    /// Whether the syncer watches `group`/`kind` (its objects are planned).
    pub fn watches(&self, group: &str, kind: &str) -> bool {
        self.fate(group, kind, self.scopes.get(group, kind))
            .is_none()
    }

    /// Why the syncer does not watch `group`/`kind`, whose scope is `scope`; `None` when it does.
    fn fate(&self, group: &str, kind: &str, scope: Option<KindScope>) -> Option<Fate> {
        match scope {
            Some(s) if s.scope == Scope::Cluster => Some(Fate::ClusterScoped),
            Some(s) if s.served == Served::CreateOnly => Some(Fate::CreateOnly),
            _ if !names_kind(&self.synced, group, kind) => {
                if wildcard_names(&self.synced, group, kind) {
                    Some(Fate::ExcludedFromWildcards)
                } else {
                    Some(Fate::KindNotSynced)
                }
            }
            None => Some(Fate::UnknownScope),
            Some(_) => None,
        }
    }

    /// What becomes of the object of `api_version` `kind` named `namespace`/`name` (namespace
    /// empty for a cluster-scoped one), known by its identity alone, as `tenantplane why
    /// --tenant` knows it: the policy's verdict is then that of the first rule matching its
    /// group, kind and namespace with no labels and no content. `None` when the syncer watches
    /// the kind.
    pub fn unrecorded_identity(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<UnrecordedFate>, ObjectError> {
        let mut metadata = serde_json::json!({"name": name});
        if !namespace.is_empty() {
            metadata["namespace"] = namespace.into();
        }
        let object = TenantObject::from_value(
            serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": metadata}),
        )?;
        Ok(self.unrecorded(&object))
    }
}

/// `Deployment.apps`, `Namespace` for the core group: the kind as kubectl reads it.
pub fn kind_name(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

fn message(
    fate: Fate,
    group: &str,
    kind: &str,
    scope: Option<KindScope>,
    verdict: &Verdict,
) -> String {
    let named = kind_name(group, kind);
    let known_from = match scope.map(|s| s.source) {
        Some(ScopeSource::Builtin) => "a built-in Kubernetes kind",
        Some(ScopeSource::CustomResourceDefinition) => "from its CustomResourceDefinition",
        Some(ScopeSource::Discovery) => "from the cluster's discovery",
        None => "",
    };
    let why = match fate {
        Fate::ClusterScoped => format!(
            "{named} is cluster-scoped ({known_from}) and tenantplane syncs namespaced kinds \
             only, so the syncer does not watch it and records no decision about it"
        ),
        Fate::CreateOnly => format!(
            "{named} is served create-only ({known_from}): there is nothing to list or watch, so \
             the syncer records no decision about it"
        ),
        Fate::KindNotSynced => format!(
            "no Sync rule of SyncPolicy {} names {named}, so the syncer does not watch it and \
             records no decision about it",
            verdict.policy
        ),
        Fate::ExcludedFromWildcards => format!(
            "only wildcard Sync rules of SyncPolicy {} name {named}, and a wildcard leaves out \
             the control plane's own bookkeeping (Events, Leases, EndpointSlices, \
             ControllerRevisions), so the syncer does not watch it and records no decision about \
             it; a rule naming the kind would sync it",
            verdict.policy
        ),
        Fate::UnknownScope => format!(
            "the scope of {named} is unknown (not a built-in kind; no CustomResourceDefinition \
             among the inputs, no discovery): the syncer watches it if the tenant control plane \
             serves it namespaced, and never if cluster-scoped"
        ),
    };
    let rule = match &verdict.rule {
        Some(rule) => format!("rule {rule}"),
        None => "its default".to_string(),
    };
    format!(
        "{why}. By first match, SyncPolicy {} at revision {} {} it by {rule}: {:?} ({})",
        verdict.policy,
        verdict.policy_revision,
        if fate == Fate::UnknownScope {
            "decides"
        } else {
            "would decide"
        },
        verdict.action,
        verdict.reason
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tenantplane_api::SyncAction;

    use super::*;

    fn wanted(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(g, k)| (g.to_string(), k.to_string()))
            .collect()
    }

    fn object(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> TenantObject {
        let mut metadata = json!({"name": name});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        TenantObject::from_value(
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata}),
        )
        .unwrap()
    }

    #[test]
    fn a_wildcard_leaves_out_control_plane_bookkeeping_but_a_named_kind_does_not() {
        let all = wanted(&[("*", "*")]);
        assert!(names_kind(&all, "", "ConfigMap"));
        assert!(!names_kind(&all, "coordination.k8s.io", "Lease"));
        assert!(!names_kind(&all, "", "Event"));
        let named = wanted(&[("coordination.k8s.io", "Lease")]);
        assert!(names_kind(&named, "coordination.k8s.io", "Lease"));
        assert!(!names_kind(&named, "", "ConfigMap"));
    }

    #[test]
    fn cluster_scoped_objects_are_not_watched_and_have_no_namespace() {
        let policy = CompiledPolicy::builtin_default();
        let watches = Watches::new(&policy, KindScopes::new());
        for (api_version, kind) in [
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("v1", "Namespace"),
            ("v1", "PersistentVolume"),
        ] {
            let fate = watches
                .unrecorded(&object(api_version, kind, None, "x"))
                .unwrap_or_else(|| panic!("{kind} is not watched"));
            assert_eq!(fate.fate, Fate::ClusterScoped, "{kind}");
            assert_eq!(fate.subject.namespace, "", "{kind} has no namespace");
            assert_eq!(fate.verdict.policy, "tenantplane-default");
            assert_eq!(
                fate.verdict.rule, None,
                "the default matches by first match"
            );
            assert!(fate.message.contains("cluster-scoped"), "{}", fate.message);
            assert!(fate.message.contains(policy.revision()), "{}", fate.message);
        }
    }

    #[test]
    fn a_kind_no_sync_rule_names_is_not_watched_with_the_rule_that_would_decide() {
        let policy = CompiledPolicy::builtin_default();
        let watches = Watches::new(&policy, KindScopes::new());
        let fate = watches
            .unrecorded(&object("apps/v1", "Deployment", Some("shop"), "web"))
            .unwrap();
        assert_eq!(fate.fate, Fate::KindNotSynced);
        assert_eq!(fate.fate.outcome(), "NotWatched");
        assert_eq!(fate.subject.namespace, "shop");
        assert_eq!(fate.verdict.action, SyncAction::Skip);
        assert_eq!(fate.verdict.reason, "NotSyncedByPolicy");
        assert!(fate.message.contains("Deployment.apps"), "{}", fate.message);
        assert!(
            watches
                .unrecorded(&object("v1", "ConfigMap", Some("shop"), "cfg"))
                .is_none(),
            "a synced kind is watched, and planned"
        );
    }

    #[test]
    fn custom_kinds_take_their_scope_from_what_is_learned_or_are_unknown() {
        let policy = CompiledPolicy::from_yaml(
            "metadata: {name: all}\nspec:\n  rules:\n  - {name: everything, match: {}, action: Sync, reason: All}\n  default: {action: Skip, reason: D}\n",
        )
        .unwrap();
        let mut scopes = KindScopes::new();
        let widget = object("example.com/v1", "Widget", Some("lab"), "w");
        assert_eq!(
            Watches::new(&policy, scopes.clone())
                .unrecorded(&widget)
                .unwrap()
                .fate,
            Fate::UnknownScope
        );
        scopes
            .learn_crd(
                &json!({"spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget"}}}),
            )
            .unwrap();
        scopes
            .learn_crd(&json!({"spec": {"group": "example.com", "scope": "Cluster",
                "names": {"kind": "Gadget"}}}))
            .unwrap();
        let watches = Watches::new(&policy, scopes);
        assert!(
            watches.unrecorded(&widget).is_none(),
            "namespaced and synced"
        );
        let gadget = watches
            .unrecorded(&object("example.com/v1", "Gadget", None, "g"))
            .unwrap();
        assert_eq!(gadget.fate, Fate::ClusterScoped);
        assert!(
            gadget.message.contains("CustomResourceDefinition"),
            "{}",
            gadget.message
        );
        let lease = watches
            .unrecorded(&object("coordination.k8s.io/v1", "Lease", Some("lab"), "l"))
            .unwrap();
        assert_eq!(lease.fate, Fate::ExcludedFromWildcards);
        let review = watches
            .unrecorded(&object(
                "authorization.k8s.io/v1",
                "LocalSubjectAccessReview",
                Some("lab"),
                "r",
            ))
            .unwrap();
        assert_eq!(review.fate, Fate::CreateOnly);
    }
}
