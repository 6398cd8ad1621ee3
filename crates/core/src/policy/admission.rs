//! A SyncPolicy's Reject rules compiled into ValidatingAdmissionPolicies for the tenant control
//! plane, so that a tenant's `kubectl apply` of an object the host would refuse fails at once,
//! with the rule's name, reason and message.
//!
//! Each Reject rule becomes one policy (`tenantplane-<tenant>-<rule>`, labelled with the Tenant, so
//! that Tenants sharing a control plane keep apart) and its binding, with the rule's meaning
//! carried over exactly:
//!
//! | SyncPolicy rule            | ValidatingAdmissionPolicy                                          |
//! |----------------------------|--------------------------------------------------------------------|
//! | `groups`                   | `matchConstraints.resourceRules[].apiGroups`                       |
//! | `kinds`                    | matchCondition `tenantplane.io/kinds` on `request.kind.kind`        |
//! | `namespaces`               | matchCondition `tenantplane.io/namespaces` on `request.namespace`   |
//! | `labelSelector`            | `matchConstraints.objectSelector`                                  |
//! | first match wins           | a matchCondition per earlier rule that could match the same object: |
//! |                            | `earlier-rule.tenantplane.io/<rule>` is the negation of its match   |
//! | `conditions`               | one validation: `!(c1 && c2 ...)`, failing closed like the host     |
//! | `reason`, `message`, `fieldPath` | the validation's message: `<reason>: <message> (SyncPolicy <p>, rule <r>, field <f>)` |
//! | `admission`                | the binding's `validationActions` (Deny, Warn or Audit)            |
//!
//! A rule whose conditions read `object.status` (written by the tenant's controllers after
//! admission) or a variable other than `object` is enforced on the host side only, and so is a
//! rule an earlier rule always pre-empts; [`TenantAdmission::rules`] says which and why, and
//! every compiled policy carries the list in its `tenantplane.io/host-side-only` annotation.

use std::collections::BTreeMap;

use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::parser::Expression;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenantplane_api::sync_policy::{AdmissionAction, RuleMatch, SyncRule};
use tenantplane_api::{SyncAction, admission, provenance};

use super::{CompiledPolicy, CompiledRule};
use crate::boundary::{Boundary, complete_pod};
use crate::decision::Outcome;
use crate::object::TenantObject;
use crate::planner::Plan;
use crate::pod_security::LevelVersion;

/// At most this many matchConditions per policy (the API server's limit).
const MAX_MATCH_CONDITIONS: usize = 64;

/// What a SyncPolicy becomes in a tenant control plane's admission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantAdmission {
    /// SyncPolicy name.
    pub policy: String,
    /// Its content revision (the one recorded in verdicts).
    pub revision: String,
    /// A ValidatingAdmissionPolicy and its binding per enforced rule, in rule order, ready to
    /// apply (provenance labels and annotations included).
    pub objects: Vec<Value>,
    /// Every Reject rule, in order, and how the tenant control plane enforces it.
    pub rules: Vec<RuleAdmission>,
    /// The Tenant's IsolationProfile in its control plane, when it has one
    /// ([`TenantAdmission::with_isolation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<TenantIsolation>,
}

/// The namespaces of a tenant control plane that keep no Pod Security labels and no profile
/// admission policy: its own system namespaces (kube-system runs the tenant's CoreDNS and other
/// system pods, which the host side judges when they are synced).
pub const EXEMPT_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

impl TenantIsolation {
    /// Whether the tenant namespace `namespace` carries the profile's labels and policies.
    pub fn covers(&self, namespace: &str) -> bool {
        !EXEMPT_NAMESPACES.contains(&namespace)
            && self
                .namespaces
                .as_ref()
                .is_none_or(|listed| listed.iter().any(|n| n == namespace))
    }
}

/// What a Tenant's IsolationProfile puts in its control plane, besides the admission policies
/// among [`TenantAdmission::objects`]: the Pod Security labels of its namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantIsolation {
    /// IsolationProfile name.
    pub profile: String,
    /// Its generation.
    pub generation: i64,
    /// The labels `pod-security.kubernetes.io/{enforce,audit,warn}` and their `-version` every
    /// namespace but [`EXEMPT_NAMESPACES`] carries: the host namespace's.
    pub pod_security_labels: BTreeMap<String, String>,
    /// The profile fields that set them.
    pub pod_security_fields: String,
    /// The Pod Security level and version enforced (`restricted:v1.34`), if any.
    pub pod_security: Option<String>,
    /// The namespaces that carry the labels and the policies: those the SyncPolicy syncs objects
    /// of, but [`EXEMPT_NAMESPACES`]; `None`: every namespace but those.
    pub namespaces: Option<Vec<String>>,
    /// Each admission policy of the host namespace and its copy in the tenant control plane.
    pub policies: Vec<TenantPolicy>,
}

/// One of the profile's admission policies, on the host and in the tenant control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantPolicy {
    /// Its name on the host.
    pub host: String,
    /// Its name in the tenant control plane.
    pub tenant: String,
}

/// How one Reject rule is enforced in the tenant control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleAdmission {
    /// Rule name.
    pub rule: String,
    /// The ValidatingAdmissionPolicy (and binding) that enforces it; `None`: host side only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission_policy: Option<String>,
    /// The binding's validation action.
    pub action: AdmissionAction,
    /// Why the rule is enforced on the host side only, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_side_only: Option<String>,
}

/// What the tenant control plane does, at apply time, with an object the host refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "atApply",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum AtApply {
    /// The create or update fails.
    Refused {
        /// The ValidatingAdmissionPolicy that refuses it.
        admission_policy: String,
    },
    /// It succeeds with a warning (validationActions Warn).
    Warned {
        /// The ValidatingAdmissionPolicy that warns.
        admission_policy: String,
    },
    /// It fails: its namespace enforces Pod Security at this level and version.
    PodSecurity {
        /// `restricted:v1.34`.
        enforced: String,
    },
    /// It succeeds and the failure is in the tenant's audit log (validationActions Audit).
    Audited {
        /// The ValidatingAdmissionPolicy that audits.
        admission_policy: String,
    },
    /// It succeeds: the refusal is the host's alone.
    Admitted {
        /// Why.
        why: String,
    },
}

impl std::fmt::Display for AtApply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtApply::Refused { admission_policy } => {
                write!(
                    f,
                    "refused at apply time (ValidatingAdmissionPolicy {admission_policy})"
                )
            }
            AtApply::Warned { admission_policy } => write!(
                f,
                "admitted with a warning at apply time (ValidatingAdmissionPolicy {admission_policy})"
            ),
            AtApply::Audited { admission_policy } => write!(
                f,
                "admitted at apply time, audited (ValidatingAdmissionPolicy {admission_policy})"
            ),
            AtApply::PodSecurity { enforced } => write!(
                f,
                "refused at apply time (Pod Security {enforced}, the namespace's label)"
            ),
            AtApply::Admitted { why } => write!(f, "admitted at apply time: {why}"),
        }
    }
}

impl TenantAdmission {
    /// What the tenant control plane does, at apply time, with `object`, which `plan` says the
    /// host refuses (`None` when it does not): the Pod Security label of its namespace first,
    /// as kube-apiserver runs Pod Security before any ValidatingAdmissionPolicy, then the policy
    /// of the rule (or the profile's rule) that refuses it.
    pub fn at_apply(&self, object: &TenantObject, plan: &Plan) -> Option<AtApply> {
        if plan.outcome != Outcome::Rejected {
            return None;
        }
        let namespace = &object.identity.namespace;
        let refused_by_pod_security = self
            .isolation
            .as_ref()
            .filter(|i| i.covers(namespace))
            .filter(|_| object.identity.group().is_empty() && object.identity.kind == "Pod")
            .and_then(|i| {
                let enforced = LevelVersion::enforced_by_labels(&i.pod_security_labels);
                let mut pod = object.object.clone();
                complete_pod(&mut pod, true);
                (!enforced.evaluate(&pod).is_empty()).then(|| enforced.to_string())
            });
        if let Some(enforced) = refused_by_pod_security {
            return Some(AtApply::PodSecurity { enforced });
        }
        Some(
            match plan.profile.as_ref().and_then(|p| p.rule.as_deref()) {
                Some(rule) if rule.starts_with("PodSecurity/") => AtApply::Admitted {
                    why: "the pod meets Pod Security as the tenant control plane has it; its host \
                      copy does not"
                        .into(),
                },
                Some(rule) => self.refused_by_profile(namespace, rule),
                None => self.refused_by(plan.verdict.rule.as_deref()),
            },
        )
    }

    /// What the tenant control plane does, at apply time, with an object the host refuses by
    /// `rule` (`None`: the policy default): the rule's ValidatingAdmissionPolicy acts on it (an
    /// evaluation error included, as its failurePolicy is Fail), unless the rule is enforced on
    /// the host side only.
    pub fn refused_by(&self, rule: Option<&str>) -> AtApply {
        let Some(rule) = rule else {
            return AtApply::Admitted {
                why: "the policy default refuses it, and defaults are enforced on the host side"
                    .into(),
            };
        };
        let Some(compiled) = self.rules.iter().find(|r| r.rule == rule) else {
            return AtApply::Admitted {
                why: format!("rule {rule} is not a Reject rule, so the host side alone refuses"),
            };
        };
        let Some(admission_policy) = compiled.admission_policy.clone() else {
            let why = compiled.host_side_only.clone().unwrap_or_default();
            return AtApply::Admitted {
                why: format!("rule {rule} is enforced on the host side only ({why})"),
            };
        };
        match compiled.action {
            AdmissionAction::Deny => AtApply::Refused { admission_policy },
            AdmissionAction::Warn => AtApply::Warned { admission_policy },
            AdmissionAction::Audit => AtApply::Audited { admission_policy },
        }
    }

    /// What the tenant control plane does, at apply time, with an object of `namespace` the host
    /// refuses under the Tenant's IsolationProfile by `rule` (`PodSecurity/<check>` or
    /// `ValidatingAdmissionPolicy/<host name>`, a decision's `profile.rule`).
    pub fn refused_by_profile(&self, namespace: &str, rule: &str) -> AtApply {
        let Some(isolation) = &self.isolation else {
            return AtApply::Admitted {
                why: "the tenant control plane does not enforce the IsolationProfile".into(),
            };
        };
        if !isolation.covers(namespace) {
            return AtApply::Admitted {
                why: format!(
                    "namespace {namespace} of the tenant control plane is left to the host side"
                ),
            };
        }
        match rule.split_once('/') {
            Some(("PodSecurity", _)) => match &isolation.pod_security {
                Some(enforced) => AtApply::PodSecurity {
                    enforced: enforced.clone(),
                },
                None => AtApply::Admitted {
                    why: "the namespace enforces no Pod Security level".into(),
                },
            },
            Some((_, host)) => match isolation.policies.iter().find(|p| p.host == host) {
                Some(p) => AtApply::Refused {
                    admission_policy: p.tenant.clone(),
                },
                None => AtApply::Admitted {
                    why: format!("{host} is enforced on the host side only"),
                },
            },
            None => AtApply::Admitted {
                why: format!("{rule} is enforced on the host side only"),
            },
        }
    }

    /// This compilation joined by what `boundary`, the Tenant's compiled IsolationProfile, puts in
    /// its control plane: each of its admission policies as a policy of the tenant control plane
    /// (`tenantplane-<tenant>-profile-<purpose>`, `Deny`), and the Pod Security labels its
    /// namespaces carry ([`TenantAdmission::isolation`]); both in `namespaces` (those the
    /// SyncPolicy syncs objects of, [`CompiledPolicy::synced_namespaces`]; `None`: every one) but
    /// [`EXEMPT_NAMESPACES`].
    pub fn with_isolation(
        mut self,
        tenant: &str,
        boundary: &Boundary,
        namespaces: Option<Vec<String>>,
    ) -> TenantAdmission {
        let selector = match &namespaces {
            Some(listed) => json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": listed.iter().filter(|n| !EXEMPT_NAMESPACES.contains(&n.as_str())).collect::<Vec<_>>()}]}),
            None => json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "NotIn", "values": EXEMPT_NAMESPACES}]}),
        };
        let profile = boundary.profile();
        let host_prefix = format!("tenantplane-{tenant}-");
        let mut policies = Vec::new();
        for ([policy, binding], fields) in boundary.admission_policies() {
            let host = policy["metadata"]["name"].as_str().unwrap_or_default();
            let name = format!(
                "{host_prefix}profile-{}",
                host.strip_prefix(&host_prefix).unwrap_or(host)
            );
            let metadata = json!({
                "name": name,
                "labels": { provenance::MANAGED: "true", provenance::TENANT: tenant },
                "annotations": {
                    provenance::SYNC_POLICY: self.policy,
                    provenance::SYNC_POLICY_REVISION: self.revision,
                    provenance::ISOLATION_PROFILE: profile.name,
                    provenance::ISOLATION_PROFILE_GENERATION: profile.generation.to_string(),
                    provenance::ISOLATION_FIELD: fields,
                    provenance::ADMISSION_ACTIONS: AdmissionAction::Deny.as_str(),
                },
            });
            self.objects.push(json!({
                "apiVersion": admission::API_VERSION,
                "kind": admission::POLICY_KIND,
                "metadata": metadata,
                "spec": policy["spec"],
            }));
            let mut spec = binding["spec"].clone();
            spec["policyName"] = json!(name);
            spec["matchResources"] = json!({"namespaceSelector": selector});
            self.objects.push(json!({
                "apiVersion": admission::API_VERSION,
                "kind": admission::BINDING_KIND,
                "metadata": metadata,
                "spec": spec,
            }));
            policies.push(TenantPolicy {
                host: host.to_string(),
                tenant: name,
            });
        }
        let (pod_security_labels, pod_security_fields) = boundary.pod_security_labels();
        self.isolation = Some(TenantIsolation {
            profile: profile.name,
            generation: profile.generation,
            pod_security_labels,
            pod_security_fields: pod_security_fields.to_string(),
            pod_security: boundary.pod_security().map(|e| e.to_string()),
            namespaces,
            policies,
        });
        self
    }

    /// The objects as a multi-document YAML stream.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for object in &self.objects {
            out.push_str("---\n");
            out.push_str(&serde_norway::to_string(object).expect("JSON always serializes"));
        }
        out
    }
}

impl CompiledPolicy {
    /// This policy's Reject rules as ValidatingAdmissionPolicies and bindings for the control
    /// plane of the Tenant `tenant`. Pure and deterministic.
    pub fn tenant_admission(&self, tenant: &str) -> TenantAdmission {
        let mut rules = Vec::new();
        let mut drafts = Vec::new();
        for (i, compiled) in self.rules.iter().enumerate() {
            let rule = &compiled.rule;
            if rule.action != SyncAction::Reject {
                continue;
            }
            let action = rule.admission.unwrap_or_default();
            match self.admission_policy(tenant, i) {
                Ok(draft) => {
                    rules.push(RuleAdmission {
                        rule: rule.name.clone(),
                        admission_policy: Some(draft.name.clone()),
                        action,
                        host_side_only: None,
                    });
                    drafts.push((draft, action));
                }
                Err(why) => rules.push(RuleAdmission {
                    rule: rule.name.clone(),
                    admission_policy: None,
                    action,
                    host_side_only: Some(why),
                }),
            }
        }
        let host_side_only: Vec<String> = rules
            .iter()
            .filter_map(|r| Some(format!("{}: {}", r.rule, r.host_side_only.as_ref()?)))
            .collect();
        let mut objects = Vec::new();
        for (draft, action) in drafts {
            let mut annotations = BTreeMap::from([
                (provenance::SYNC_POLICY, self.name.clone()),
                (provenance::SYNC_POLICY_REVISION, self.revision.clone()),
                (provenance::SYNC_POLICY_RULE, draft.rule.clone()),
                (provenance::ADMISSION_ACTIONS, action.as_str().to_string()),
            ]);
            let metadata = |annotations: &BTreeMap<&str, String>| {
                json!({
                    "name": draft.name,
                    "labels": { provenance::MANAGED: "true", provenance::TENANT: tenant },
                    "annotations": annotations,
                })
            };
            let binding = json!({
                "apiVersion": admission::API_VERSION,
                "kind": admission::BINDING_KIND,
                "metadata": metadata(&annotations),
                "spec": admission::binding_spec(&draft.name, &[action.as_str()], None),
            });
            if !host_side_only.is_empty() {
                annotations.insert(provenance::HOST_SIDE_ONLY, host_side_only.join("\n"));
            }
            objects.push(json!({
                "apiVersion": admission::API_VERSION,
                "kind": admission::POLICY_KIND,
                "metadata": metadata(&annotations),
                "spec": draft.spec,
            }));
            objects.push(binding);
        }
        TenantAdmission {
            policy: self.name.clone(),
            revision: self.revision.clone(),
            objects,
            rules,
            isolation: None,
        }
    }

    /// The policy of the Reject rule at `index`, or why it is enforced on the host side only.
    fn admission_policy(&self, tenant: &str, index: usize) -> Result<Draft, String> {
        let compiled = &self.rules[index];
        let rule = &compiled.rule;
        for (name, program) in &compiled.conditions {
            host_side_only_reason(name, program.expression())?;
        }
        let m = &rule.matches;
        let mut conditions = Vec::new();
        if let Some(kinds) = restricted(&m.kinds) {
            conditions.push((
                "tenantplane.io/kinds".to_string(),
                format!("request.kind.kind in {}", cel_list(kinds)),
            ));
        }
        if let Some(namespaces) = restricted(&m.namespaces) {
            conditions.push((
                "tenantplane.io/namespaces".to_string(),
                format!("request.namespace in {}", cel_list(namespaces)),
            ));
        }
        let mut earlier = Vec::new();
        for before in &self.rules[..index] {
            if !could_overlap(&before.rule.matches, m) {
                continue;
            }
            for (name, program) in &before.conditions {
                host_side_only_reason(name, program.expression()).map_err(|why| {
                    format!(
                        "the earlier rule {} decides first where it matches, and {why}",
                        before.rule.name
                    )
                })?;
            }
            let Some(matched) = match_expression(before, m) else {
                return Err(format!(
                    "never decides: the earlier rule {} matches every object it matches",
                    before.rule.name
                ));
            };
            earlier.push((before.rule.name.clone(), format!("!({matched})")));
        }
        if conditions.len() + earlier.len() > MAX_MATCH_CONDITIONS {
            let all: Vec<String> = earlier.into_iter().map(|(_, e)| e).collect();
            conditions.push(("tenantplane.io/earlier-rules".into(), all.join(" && ")));
        } else {
            conditions.extend(
                earlier
                    .into_iter()
                    .map(|(name, e)| (format!("earlier-rule.tenantplane.io/{name}"), e)),
            );
        }
        let mut constraints = json!({
            "resourceRules": [{
                "apiGroups": restricted(&m.groups).map_or_else(|| vec!["*".to_string()], <[String]>::to_vec),
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["*"],
            }],
        });
        if let Some(selector) = &m.label_selector {
            constraints["objectSelector"] = json!(selector);
        }
        let expression = if compiled.conditions.is_empty() {
            "false".to_string()
        } else {
            format!("!({})", conjunction(rule))
        };
        let message = format!(
            "{}: {} (SyncPolicy {}, rule {}{})",
            rule.reason,
            rule.message
                .as_deref()
                .unwrap_or("the SyncPolicy refuses this object")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            self.name,
            rule.name,
            rule.field_path
                .as_deref()
                .map(|p| format!(", field {p}"))
                .unwrap_or_default(),
        );
        let validation = admission::Validation {
            expression,
            message,
            reason: "Forbidden",
        };
        Ok(Draft {
            name: format!("tenantplane-{tenant}-{}", rule.name),
            rule: rule.name.clone(),
            spec: admission::policy_spec(constraints, &conditions, &[validation]),
        })
    }
}

/// A compiled policy before its metadata.
struct Draft {
    name: String,
    rule: String,
    spec: Value,
}

/// The list, unless it means "any" (empty, or containing `*`).
fn restricted(list: &[String]) -> Option<&[String]> {
    (!list.is_empty() && !list.iter().any(|i| i == "*")).then_some(list)
}

/// Whether an object could match both `a` and `b` as far as groups, kinds and namespaces tell.
fn could_overlap(a: &RuleMatch, b: &RuleMatch) -> bool {
    let meet = |x: &[String], y: &[String]| match (restricted(x), restricted(y)) {
        (Some(x), Some(y)) => x.iter().any(|i| y.contains(i)),
        _ => true,
    };
    meet(&a.groups, &b.groups) && meet(&a.kinds, &b.kinds) && meet(&a.namespaces, &b.namespaces)
}

/// CEL that holds when `earlier` matches a request that `within` already matches; `None` when
/// it always does.
fn match_expression(earlier: &CompiledRule, within: &RuleMatch) -> Option<String> {
    let m = &earlier.rule.matches;
    // A criterion of the earlier rule the later rule's own criterion implies needs no check.
    let implied = |mine: &[String], theirs: &[String]| match (restricted(mine), restricted(theirs))
    {
        (None, _) => true,
        (Some(mine), Some(theirs)) => theirs.iter().all(|t| mine.contains(t)),
        (Some(_), None) => false,
    };
    let mut parts = Vec::new();
    if !implied(&m.groups, &within.groups) {
        parts.push(format!("request.kind.group in {}", cel_list(&m.groups)));
    }
    if !implied(&m.kinds, &within.kinds) {
        parts.push(format!("request.kind.kind in {}", cel_list(&m.kinds)));
    }
    if !implied(&m.namespaces, &within.namespaces) {
        parts.push(format!("request.namespace in {}", cel_list(&m.namespaces)));
    }
    if let Some(selector) = &m.label_selector
        && Some(selector) != within.label_selector.as_ref()
    {
        parts.extend(selector_expressions(selector));
    }
    if !earlier.conditions.is_empty() {
        parts.push(conjunction(&earlier.rule));
    }
    (!parts.is_empty()).then(|| parts.join(" && "))
}

/// The CEL of a label selector over `object.metadata.labels`, one term per requirement (the
/// operators were checked when the policy compiled).
fn selector_expressions(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Vec<String> {
    let has = |key: &str| format!("has(object.metadata.labels) && {key} in object.metadata.labels");
    let mut out: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| {
            let key = cel_string(k);
            format!(
                "({} && object.metadata.labels[{key}] == {})",
                has(&key),
                cel_string(v)
            )
        })
        .collect();
    for r in selector.match_expressions.iter().flatten() {
        let key = cel_string(&r.key);
        let values = cel_list(r.values.as_deref().unwrap_or_default());
        let one_of = format!("{} && object.metadata.labels[{key}] in {values}", has(&key));
        out.push(match r.operator.as_str() {
            "In" => format!("({one_of})"),
            "NotIn" => format!("!({one_of})"),
            "Exists" => format!("({})", has(&key)),
            _ => format!("!({})", has(&key)),
        });
    }
    out
}

/// The rule's conditions as one CEL expression, each as written in the SyncPolicy.
fn conjunction(rule: &SyncRule) -> String {
    rule.matches
        .conditions
        .iter()
        .map(|c| format!("({})", c.expression))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Why a condition cannot be enforced at admission, if it cannot.
fn host_side_only_reason(name: &str, expression: &Expression) -> Result<(), String> {
    let mut status = false;
    walk(&expression.expr, &mut |expr| {
        status |= matches!(expr, Expr::Select(s)
            if s.field == "status" && is_ident(&s.operand.expr, "object"));
    });
    if status {
        return Err(format!(
            "its condition {name} reads object.status, which the tenant's controllers write \
             after admission"
        ));
    }
    match admission_variable(expression) {
        Some(id) => Err(format!(
            "its condition {name} reads {id}, which the host side does not have"
        )),
        None => Ok(()),
    }
}

/// The first admission variable other than `object` that an expression reads (`oldObject`,
/// `request`, `params`, `namespaceObject`, `authorizer`, `variables`), if any.
pub(crate) fn admission_variable(expression: &Expression) -> Option<String> {
    let mut found = None;
    walk(&expression.expr, &mut |expr| {
        if let Expr::Ident(id) = expr
            && found.is_none()
            && [
                "oldObject",
                "request",
                "params",
                "namespaceObject",
                "authorizer",
                "variables",
            ]
            .contains(&id.as_str())
        {
            found = Some(id.to_string());
        }
    });
    found
}

fn is_ident(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Ident(id) if id == name)
}

/// Calls `visit` on `expr` and every expression inside it.
fn walk(expr: &Expr, visit: &mut impl FnMut(&Expr)) {
    visit(expr);
    match expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(&target.expr, visit);
            }
            for arg in &call.args {
                walk(&arg.expr, visit);
            }
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                walk(&e.expr, visit);
            }
        }
        Expr::List(list) => {
            for e in &list.elements {
                walk(&e.expr, visit);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                walk_entry(&entry.expr, visit);
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                walk_entry(&entry.expr, visit);
            }
        }
        Expr::Select(s) => walk(&s.operand.expr, visit),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn walk_entry(entry: &EntryExpr, visit: &mut impl FnMut(&Expr)) {
    match entry {
        EntryExpr::StructField(f) => walk(&f.value.expr, visit),
        EntryExpr::MapEntry(e) => {
            walk(&e.key.expr, visit);
            walk(&e.value.expr, visit);
        }
    }
}

/// A CEL string literal.
fn cel_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

/// A CEL list of string literals.
fn cel_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|i| cel_string(i))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::object::TenantObject;

    fn policy(rules: Value) -> CompiledPolicy {
        let policy = json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
            "metadata": {"name": "p"},
            "spec": {"rules": rules, "default": {"action": "Skip", "reason": "NotSynced"}},
        });
        CompiledPolicy::from_yaml(&policy.to_string()).expect("a valid policy")
    }

    fn find<'a>(a: &'a TenantAdmission, kind: &str, name: &str) -> &'a Value {
        a.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} is compiled: {}", a.to_yaml()))
    }

    #[test]
    fn every_reject_rule_of_the_default_policy_becomes_a_policy_and_binding_with_provenance() {
        let compiled = CompiledPolicy::builtin_default();
        let a = compiled.tenant_admission("acme");
        assert_eq!(a.rules.len(), 13);
        assert!(a.rules.iter().all(|r| r.admission_policy.is_some()));
        assert_eq!(a.objects.len(), 26);
        let vap = find(
            &a,
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-no-host-network",
        );
        assert_eq!(vap["metadata"]["labels"][provenance::MANAGED], "true");
        let annotations = &vap["metadata"]["annotations"];
        assert_eq!(annotations[provenance::SYNC_POLICY], "tenantplane-default");
        assert_eq!(
            annotations[provenance::SYNC_POLICY_REVISION],
            compiled.revision()
        );
        assert_eq!(annotations[provenance::SYNC_POLICY_RULE], "no-host-network");
        assert_eq!(
            vap["spec"]["validations"][0],
            json!({
                "expression": "!((has(object.spec.hostNetwork) && object.spec.hostNetwork == true))",
                "message": "HostNetworkForbidden: a tenant pod may not share the node's network namespace (SyncPolicy tenantplane-default, rule no-host-network, field spec.hostNetwork)",
                "reason": "Forbidden",
            })
        );
        assert_eq!(
            vap["spec"]["matchConditions"],
            json!([{"name": "tenantplane.io/kinds", "expression": "request.kind.kind in [\"Pod\"]"}])
        );
        assert_eq!(
            vap["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"],
            json!([""])
        );
        let binding = find(
            &a,
            "ValidatingAdmissionPolicyBinding",
            "tenantplane-acme-no-host-network",
        );
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(
            binding["spec"]["policyName"],
            "tenantplane-acme-no-host-network"
        );
        // First match wins: a later rule does not decide what an earlier rule matches.
        let host_pid = find(
            &a,
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-no-host-pid",
        );
        assert_eq!(
            host_pid["spec"]["matchConditions"][1],
            json!({"name": "earlier-rule.tenantplane.io/no-host-network",
                   "expression": "!((has(object.spec.hostNetwork) && object.spec.hostNetwork == true))"})
        );
        // Service rules are not held back by Pod rules.
        let node_port = find(
            &a,
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-no-node-port-services",
        );
        assert_eq!(
            node_port["spec"]["matchConditions"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_rule_can_warn_or_audit_at_admission_and_the_host_still_refuses() {
        let p = policy(json!([
            {"name": "warned", "match": {"kinds": ["Pod"], "conditions": [{"name": "c", "expression": "has(object.spec.hostPID)"}]},
             "action": "Reject", "reason": "R", "fieldPath": "spec.hostPID", "admission": "Warn"},
            {"name": "audited", "match": {"kinds": ["Service"]},
             "action": "Reject", "reason": "R", "fieldPath": "spec", "admission": "Audit"},
        ]));
        let a = p.tenant_admission("acme");
        let binding = find(
            &a,
            "ValidatingAdmissionPolicyBinding",
            "tenantplane-acme-warned",
        );
        assert_eq!(binding["spec"]["validationActions"], json!(["Warn"]));
        let binding = find(
            &a,
            "ValidatingAdmissionPolicyBinding",
            "tenantplane-acme-audited",
        );
        assert_eq!(binding["spec"]["validationActions"], json!(["Audit"]));
        let pod = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "namespace": "default"}, "spec": {"hostPID": true}}))
        .unwrap();
        let verdict = p.evaluate(&pod);
        assert_eq!(verdict.action, SyncAction::Reject, "the host refuses");
        assert_eq!(
            a.refused_by(verdict.rule.as_deref()),
            AtApply::Warned {
                admission_policy: "tenantplane-acme-warned".into()
            }
        );
    }

    #[test]
    fn a_rule_reading_status_is_enforced_on_the_host_side_only_and_the_policies_say_so() {
        let p = policy(json!([
            {"name": "late", "match": {"conditions": [{"name": "phase", "expression": "object.status.phase == 'Failed'"}]},
             "action": "Reject", "reason": "Late", "fieldPath": "status.phase"},
            {"name": "trusted", "match": {"kinds": ["Pod"], "labelSelector": {"matchLabels": {"trust": "yes"}}},
             "action": "Sync", "reason": "Trusted"},
            {"name": "no-host-pid", "match": {"kinds": ["Pod"], "namespaces": ["a", "b"],
                "conditions": [{"name": "c", "expression": "object.spec.hostPID == true"}]},
             "action": "Reject", "reason": "HostPID", "fieldPath": "spec.hostPID"},
        ]));
        let a = p.tenant_admission("acme");
        assert_eq!(
            a.rules[0].host_side_only.as_deref(),
            Some(
                "its condition phase reads object.status, which the tenant's controllers write after admission"
            )
        );
        assert!(
            a.rules[1]
                .host_side_only
                .as_deref()
                .unwrap()
                .starts_with("the earlier rule late decides first"),
            "{:?}",
            a.rules[1]
        );
        assert!(a.objects.is_empty());
        let pod = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "namespace": "a"}, "status": {"phase": "Failed"}}))
        .unwrap();
        let at_apply = a.refused_by(p.evaluate(&pod).rule.as_deref());
        assert!(matches!(at_apply, AtApply::Admitted { .. }), "{at_apply}");

        let p = policy(json!([
            {"name": "trusted", "match": {"kinds": ["Pod"], "labelSelector": {"matchLabels": {"trust": "yes"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}},
             "action": "Sync", "reason": "Trusted"},
            {"name": "no-host-pid", "match": {"kinds": ["Pod"], "namespaces": ["a", "b"],
                "conditions": [{"name": "c", "expression": "object.spec.hostPID == true"}]},
             "action": "Reject", "reason": "HostPID", "fieldPath": "spec.hostPID"},
            {"name": "late", "match": {"conditions": [{"name": "phase", "expression": "object.status.phase == 'Failed'"}]},
             "action": "Reject", "reason": "Late", "fieldPath": "status.phase"},
        ]));
        let a = p.tenant_admission("acme");
        let vap = find(
            &a,
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-no-host-pid",
        );
        assert_eq!(
            vap["spec"]["matchConditions"],
            json!([
                {"name": "tenantplane.io/kinds", "expression": "request.kind.kind in [\"Pod\"]"},
                {"name": "tenantplane.io/namespaces", "expression": "request.namespace in [\"a\", \"b\"]"},
                {"name": "earlier-rule.tenantplane.io/trusted", "expression":
                    "!((has(object.metadata.labels) && \"trust\" in object.metadata.labels && object.metadata.labels[\"trust\"] == \"yes\") && !(has(object.metadata.labels) && \"tier\" in object.metadata.labels && object.metadata.labels[\"tier\"] in [\"web\"]))"},
            ])
        );
        assert_eq!(
            vap["metadata"]["annotations"][provenance::HOST_SIDE_ONLY],
            "late: its condition phase reads object.status, which the tenant's controllers write after admission"
        );
    }

    #[test]
    fn a_rule_an_earlier_rule_always_preempts_is_never_compiled() {
        let p = policy(json!([
            {"name": "all-pods", "match": {"kinds": ["Pod"]}, "action": "Sync", "reason": "Pods"},
            {"name": "no-host-pid", "match": {"kinds": ["Pod"],
                "conditions": [{"name": "c", "expression": "object.spec.hostPID == true"}]},
             "action": "Reject", "reason": "HostPID", "fieldPath": "spec.hostPID"},
        ]));
        let a = p.tenant_admission("acme");
        assert!(a.objects.is_empty());
        assert_eq!(
            a.rules[0].host_side_only.as_deref(),
            Some("never decides: the earlier rule all-pods matches every object it matches")
        );
    }

    #[test]
    fn the_profiles_admission_policies_join_and_say_what_happens_at_apply_time() {
        let tenant: tenantplane_api::Tenant = serde_json::from_value(json!({
            "metadata": {"name": "acme"},
            "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": "ns", "name": "acme"}}},
        }))
        .unwrap();
        let profile = serde_json::from_value(
            json!({"metadata": {"name": "strict", "generation": 2}, "spec": {"level": "strict"}}),
        )
        .unwrap();
        let boundary = Boundary::compile(&tenant, &profile).unwrap();
        let a = CompiledPolicy::builtin_default()
            .tenant_admission("acme")
            .with_isolation("acme", &boundary, Some(vec!["shop".into()]));
        let vap = find(
            &a,
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-profile-image-pull-always",
        );
        assert_eq!(
            vap["metadata"]["annotations"][provenance::ISOLATION_PROFILE],
            "strict"
        );
        let binding = find(
            &a,
            "ValidatingAdmissionPolicyBinding",
            "tenantplane-acme-profile-image-pull-always",
        );
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"],
            json!(["shop"])
        );
        assert!(
            a.objects
                .iter()
                .all(|o| o["metadata"]["name"] != "tenantplane-acme-profile-protect-managed"),
            "who writes on the host is no tenant's concern"
        );
        assert_eq!(
            a.refused_by_profile("shop", "PodSecurity/runAsNonRoot"),
            AtApply::PodSecurity {
                enforced: "restricted:v1.34".into()
            }
        );
        assert_eq!(
            a.refused_by_profile(
                "shop",
                "ValidatingAdmissionPolicy/tenantplane-acme-runtime-class"
            ),
            AtApply::Refused {
                admission_policy: "tenantplane-acme-profile-runtime-class".into()
            }
        );
        assert!(matches!(
            a.refused_by_profile("kube-system", "PodSecurity/runAsNonRoot"),
            AtApply::Admitted { .. }
        ));
        // A pod a SyncPolicy rule refuses meets the namespace's Pod Security first.
        let debugger = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "d", "namespace": "shop"},
            "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox"}]}}))
        .unwrap();
        let planner = crate::Planner::new(&tenant, CompiledPolicy::builtin_default());
        let plan = planner.plan(&debugger, &Default::default());
        assert_eq!(
            a.at_apply(&debugger, &plan),
            Some(AtApply::PodSecurity {
                enforced: "restricted:v1.34".into()
            })
        );
        assert!(matches!(
            a.refused_by_profile("ops", "PodSecurity/runAsNonRoot"),
            AtApply::Admitted { .. }
        ));
    }

    #[test]
    fn admission_on_a_rule_that_does_not_reject_is_refused_with_its_field() {
        let policy = json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "s", "action": "Sync", "reason": "S", "admission": "Warn"}],
                     "default": {"action": "Skip", "reason": "NotSynced"}},
        });
        let e = CompiledPolicy::from_yaml(&policy.to_string()).unwrap_err();
        assert_eq!(e.field(), "spec.rules[0].admission");
        assert_eq!(
            e.to_string(),
            "spec.rules[0].admission: only a Reject rule is enforced at admission, and rule s is a Sync"
        );
    }
}
