//! SyncPolicy evaluation: ordered rules, the first match wins, then the policy's default.
//!
//! A rule matches on API group, kind, tenant namespace, a label selector, and CEL conditions over
//! `object` (the tenant object), in the CEL dialect of ValidatingAdmissionPolicy including the
//! Kubernetes extension library. A condition that fails to evaluate (say, a field of the wrong
//! type) rejects the object with reason `PolicyEvaluationError`: the policy fails closed.

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};
use kube_cel::KubeCelExt;
use kube_cel::cel::{Context, Program, Value as CelValue};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tenantplane_api::SyncAction;
use tenantplane_api::sync_policy::{
    DefaultVerdict, RuleMatch, SyncPolicy, SyncPolicySpec, SyncRule,
};

use crate::object::TenantObject;

mod admission;
mod direct;
pub mod validating;

pub use admission::{
    AtApply, EXEMPT_NAMESPACES, RuleAdmission, TenantAdmission, TenantIsolation, TenantPolicy,
};

/// The policy tenantplane ships: rejects the host-escape classics and syncs the usual kinds.
pub const DEFAULT_POLICY_YAML: &str = include_str!("policy/default.yaml");

/// The outcome of evaluating a SyncPolicy against one tenant object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Name of the SyncPolicy.
    pub policy: String,
    /// Content revision of the policy (`sha256:` of its spec, 12 hex digits).
    pub policy_revision: String,
    /// Rule that decided; `None` when the policy default applied.
    pub rule: Option<String>,
    /// What to do.
    pub action: SyncAction,
    /// Machine reason.
    pub reason: String,
    /// Human message.
    pub message: String,
    /// For a rejection: the offending field of the tenant object.
    pub field_path: Option<String>,
}

/// Why a SyncPolicy cannot be used. Every variant names the field.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// A CEL expression does not parse.
    #[error("{field}: CEL expression does not compile: {problem}")]
    Cel {
        /// Path of the expression in the policy, e.g. `spec.rules[2].match.conditions[0].expression`.
        field: String,
        /// The parser's message.
        problem: String,
    },
    /// A label selector is malformed.
    #[error("{field}: invalid label selector: {problem}")]
    Selector {
        /// Path of the selector.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// Two rules share a name.
    #[error("{field}: rule name {name:?} is used twice; rule names must be unique")]
    DuplicateRule {
        /// Path of the second rule's name.
        field: String,
        /// The name.
        name: String,
    },
    /// A Reject rule without a fieldPath.
    #[error("{field}: a Reject rule must name the offending field")]
    RejectWithoutField {
        /// Path of the missing fieldPath.
        field: String,
    },
    /// The document is not a SyncPolicy.
    #[error("{field}: {problem}")]
    Malformed {
        /// Path of the field.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

impl PolicyError {
    /// Path of the offending field in the SyncPolicy.
    pub fn field(&self) -> &str {
        match self {
            PolicyError::Cel { field, .. }
            | PolicyError::Selector { field, .. }
            | PolicyError::DuplicateRule { field, .. }
            | PolicyError::RejectWithoutField { field }
            | PolicyError::Malformed { field, .. } => field,
        }
    }
}

/// A SyncPolicy ready to evaluate: selectors parsed, CEL compiled, revision computed.
#[derive(Debug)]
pub struct CompiledPolicy {
    name: String,
    revision: String,
    rules: Vec<CompiledRule>,
    default: DefaultVerdict,
}

#[derive(Debug)]
struct CompiledRule {
    rule: SyncRule,
    selector: Option<Selector>,
    conditions: Vec<(String, Program)>,
}

impl CompiledPolicy {
    /// Compiles a SyncPolicy, failing on the first invalid field.
    pub fn compile(policy: &SyncPolicy) -> Result<Self, PolicyError> {
        let spec = &policy.spec;
        let mut rules = Vec::with_capacity(spec.rules.len());
        for (i, rule) in spec.rules.iter().enumerate() {
            let at = format!("spec.rules[{i}]");
            if spec.rules[..i].iter().any(|r| r.name == rule.name) {
                return Err(PolicyError::DuplicateRule {
                    field: format!("{at}.name"),
                    name: rule.name.clone(),
                });
            }
            if rule.action == SyncAction::Reject && rule.field_path.is_none() {
                return Err(PolicyError::RejectWithoutField {
                    field: format!("{at}.fieldPath"),
                });
            }
            if rule.action != SyncAction::Reject && rule.admission.is_some() {
                return Err(PolicyError::Malformed {
                    field: format!("{at}.admission"),
                    problem: format!(
                        "only a Reject rule is enforced at admission, and rule {} is a {}",
                        rule.name,
                        rule.action.as_str()
                    ),
                });
            }
            let selector = rule
                .matches
                .label_selector
                .clone()
                .map(Selector::try_from)
                .transpose()
                .map_err(|e| PolicyError::Selector {
                    field: format!("{at}.match.labelSelector"),
                    problem: e.to_string(),
                })?;
            let conditions = rule
                .matches
                .conditions
                .iter()
                .enumerate()
                .map(|(j, c)| {
                    Program::compile(&c.expression)
                        .map(|p| (c.name.clone(), p))
                        .map_err(|e| PolicyError::Cel {
                            field: format!("{at}.match.conditions[{j}].expression"),
                            problem: e.to_string(),
                        })
                })
                .collect::<Result<_, _>>()?;
            rules.push(CompiledRule {
                rule: rule.clone(),
                selector,
                conditions,
            });
        }
        Ok(CompiledPolicy {
            name: policy.metadata.name.clone().unwrap_or_default(),
            revision: revision(spec),
            rules,
            default: spec.default.clone(),
        })
    }

    /// Parses and compiles a SyncPolicy from YAML or JSON.
    pub fn from_yaml(text: &str) -> Result<Self, PolicyError> {
        let policy: SyncPolicy =
            serde_norway::from_str(text).map_err(|e| PolicyError::Malformed {
                field: e
                    .location()
                    .map_or_else(|| "spec".to_string(), |l| format!("line {}", l.line())),
                problem: e.to_string(),
            })?;
        Self::compile(&policy)
    }

    /// The built-in default policy.
    pub fn builtin_default() -> Self {
        Self::from_yaml(DEFAULT_POLICY_YAML).expect("the shipped default policy compiles (tested)")
    }

    /// Policy name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Content revision recorded in verdicts.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// Number of rules.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Evaluates the policy against a tenant object.
    pub fn evaluate(&self, object: &TenantObject) -> Verdict {
        if is_control_plane_object(object) {
            return self.control_plane_verdict(object);
        }
        with_cel(|functions| {
            // The object is converted to CEL and bound once, on the first rule with conditions,
            // and shared by every later rule.
            let mut scope = None;
            // The labels are collected for the first rule with a selector, if any.
            let mut labels: Option<BTreeMap<String, String>> = None;
            for compiled in &self.rules {
                if !matches_identity(&compiled.rule.matches, object) {
                    continue;
                }
                if let Some(selector) = &compiled.selector
                    && !selector.matches(labels.get_or_insert_with(|| {
                        object
                            .labels()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect()
                    }))
                {
                    continue;
                }
                match compiled.conditions_hold(object, functions, &mut scope) {
                    Ok(true) => return self.verdict_of(&compiled.rule),
                    Ok(false) => continue,
                    Err(problem) => {
                        return Verdict {
                            policy: self.name.clone(),
                            policy_revision: self.revision.clone(),
                            rule: Some(compiled.rule.name.clone()),
                            action: SyncAction::Reject,
                            reason: "PolicyEvaluationError".into(),
                            message: format!(
                                "rule {} could not be evaluated, so the object is refused: {problem}",
                                compiled.rule.name
                            ),
                            field_path: compiled.rule.field_path.clone(),
                        };
                    }
                }
            }
            let default = &self.default;
            Verdict {
                policy: self.name.clone(),
                policy_revision: self.revision.clone(),
                rule: None,
                action: default.action,
                reason: default.reason.clone(),
                message: default.message.clone().unwrap_or_else(|| {
                    format!(
                        "no rule of SyncPolicy {} matches; the policy default applies",
                        self.name
                    )
                }),
                field_path: None,
            }
        })
    }

    /// The verdict on one of the tenant control plane's own objects, whatever the rules say.
    fn control_plane_verdict(&self, object: &TenantObject) -> Verdict {
        let id = &object.identity;
        Verdict {
            policy: self.name.clone(),
            policy_revision: self.revision.clone(),
            rule: None,
            action: SyncAction::Skip,
            reason: "TenantControlPlaneObject".into(),
            message: format!(
                "{} {}/{} belongs to the tenant control plane itself (its API server keeps it, \
                 with the tenant's own cluster IP and endpoints), so it is never synced, \
                 whatever the SyncPolicy says",
                id.kind, id.namespace, id.name
            ),
            field_path: None,
        }
    }

    fn verdict_of(&self, rule: &SyncRule) -> Verdict {
        Verdict {
            policy: self.name.clone(),
            policy_revision: self.revision.clone(),
            rule: Some(rule.name.clone()),
            action: rule.action,
            reason: rule.reason.clone(),
            message: rule
                .message
                .clone()
                .unwrap_or_else(|| format!("rule {} of SyncPolicy {}", rule.name, self.name)),
            field_path: rule.field_path.clone(),
        }
    }

    /// The tenant namespaces some Sync rule can sync objects of, in order, each once; `None`:
    /// every namespace (a Sync rule names none, or `*`).
    pub fn synced_namespaces(&self) -> Option<Vec<String>> {
        let mut namespaces: Vec<String> = Vec::new();
        for r in self
            .rules
            .iter()
            .filter(|r| r.rule.action == SyncAction::Sync)
        {
            let listed = &r.rule.matches.namespaces;
            if listed.is_empty() || listed.iter().any(|n| n == "*") {
                return None;
            }
            for n in listed {
                if !namespaces.contains(n) {
                    namespaces.push(n.clone());
                }
            }
        }
        Some(namespaces)
    }

    /// Every (group, kind) some rule can sync, for the syncer's choice of watches. `*` entries
    /// are returned as-is.
    pub fn synced_kinds(&self) -> Vec<(String, String)> {
        let mut kinds: Vec<(String, String)> = self
            .rules
            .iter()
            .filter(|r| r.rule.action == SyncAction::Sync)
            .flat_map(|r| {
                let groups = if r.rule.matches.groups.is_empty() {
                    vec!["*".to_string()]
                } else {
                    r.rule.matches.groups.clone()
                };
                let kinds = if r.rule.matches.kinds.is_empty() {
                    vec!["*".to_string()]
                } else {
                    r.rule.matches.kinds.clone()
                };
                groups
                    .into_iter()
                    .flat_map(move |g| kinds.clone().into_iter().map(move |k| (g.clone(), k)))
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

impl CompiledRule {
    fn conditions_hold<'f>(
        &self,
        object: &TenantObject,
        functions: &'f Context<'static>,
        scope: &mut Option<Context<'f>>,
    ) -> Result<bool, String> {
        for (name, program) in &self.conditions {
            match holds(program, &object.object, functions, scope) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(Unevaluable::NotBool(other)) => {
                    return Err(format!("condition {name} returned {other}, not a bool"));
                }
                Err(Unevaluable::Failed(e)) => return Err(format!("condition {name}: {e}")),
            }
        }
        Ok(true)
    }
}

/// Why a CEL expression over an object has no boolean value.
#[derive(Debug)]
pub(crate) enum Unevaluable {
    /// It evaluated to this value (debug-printed), which is not a bool.
    NotBool(String),
    /// Its evaluation failed with this error.
    Failed(String),
}

/// Evaluates a boolean CEL expression over `object` (bound as `object`). Most guards are decided
/// on the JSON directly; the interpreter decides (and words the errors of) the rest, with the
/// object converted once into `scope` and shared by the later expressions over it.
pub(crate) fn holds<'f>(
    program: &Program,
    object: &serde_json::Value,
    functions: &'f Context<'static>,
    scope: &mut Option<Context<'f>>,
) -> Result<bool, Unevaluable> {
    if let Some(verdict) = direct::evaluate(program.expression(), object) {
        return Ok(verdict);
    }
    let ctx = match scope {
        Some(ctx) => ctx,
        None => {
            let value =
                kube_cel::cel::to_value(object).map_err(|e| Unevaluable::Failed(e.to_string()))?;
            let mut ctx = functions.new_inner_scope();
            ctx.add_variable_from_value("object", value);
            scope.insert(ctx)
        }
    };
    match program.execute(ctx) {
        Ok(CelValue::Bool(b)) => Ok(b),
        Ok(other) => Err(Unevaluable::NotBool(format!("{other:?}"))),
        Err(e) => Err(Unevaluable::Failed(e.to_string())),
    }
}

/// Runs `f` with the CEL function libraries of this thread.
pub(crate) fn with_cel<T>(f: impl FnOnce(&Context<'static>) -> T) -> T {
    CEL_FUNCTIONS.with(f)
}

thread_local! {
    /// The CEL standard and Kubernetes function libraries, registered once per thread
    /// (a registry is not `Sync`, and building one per evaluation would dominate the cost).
    static CEL_FUNCTIONS: Context<'static> = Context::default().with_all();
}

/// The objects a Kubernetes API server keeps about itself in every cluster: the `kubernetes`
/// Service in `default` through which pods reach the API, and its Endpoints and EndpointSlice.
/// Synced to the host, the Service would get a host cluster IP, which would flow back up and
/// replace the tenant's own.
const CONTROL_PLANE_OBJECTS: [(&str, &str, &str, &str); 3] = [
    ("", "Service", "default", "kubernetes"),
    ("", "Endpoints", "default", "kubernetes"),
    ("discovery.k8s.io", "EndpointSlice", "default", "kubernetes"),
];

/// Whether `object` is one of [`CONTROL_PLANE_OBJECTS`].
pub fn is_control_plane_object(object: &TenantObject) -> bool {
    let id = &object.identity;
    CONTROL_PLANE_OBJECTS
        .iter()
        .any(|(group, kind, namespace, name)| {
            id.group() == *group
                && id.kind == *kind
                && id.namespace == *namespace
                && id.name == *name
        })
}

fn matches_identity(m: &RuleMatch, object: &TenantObject) -> bool {
    let id = &object.identity;
    listed(&m.groups, id.group())
        && listed(&m.kinds, &id.kind)
        && listed(&m.namespaces, &id.namespace)
}

fn listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|item| item == "*" || item == value)
}

/// `sha256:` and the first 12 hex digits of the SHA-256 of the spec's canonical JSON.
fn revision(spec: &SyncPolicySpec) -> String {
    let json = serde_json::to_vec(spec).expect("a policy spec always serializes");
    format!("sha256:{}", &hex::encode(Sha256::digest(json))[..12])
}
