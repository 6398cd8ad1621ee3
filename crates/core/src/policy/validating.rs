//! ValidatingAdmissionPolicies and their bindings, evaluated over one object as kube-apiserver's
//! admission evaluates them, with the CEL of SyncPolicy conditions (the same interpreter, the
//! same Kubernetes library, the same direct evaluation of simple guards).
//!
//! A policy matches a request by its `matchConstraints` (resourceRules by group, version,
//! operation and resource; objectSelector; namespaceSelector), its binding's `matchResources`
//! and its `matchConditions`; its validations must then all hold. The first that does not
//! refuses, with kube-apiserver's words: `ValidatingAdmissionPolicy '<policy>' with binding
//! '<binding>' denied request: <message>`. A validation that cannot be evaluated refuses too
//! (`failurePolicy: Fail`, what tenantplane compiles), with kube-apiserver's form of that
//! message. Expressions may read `object` only: a policy reading another admission variable
//! (`request`, `oldObject`, ...) is refused at [`AdmissionPolicy::compile`], and its caller
//! decides what that means.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use kube_cel::cel::Program;
use serde_json::Value;

use super::admission::admission_variable;
use super::{Unevaluable, holds, with_cel};

/// Why a policy cannot be evaluated over an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyUnusable {
    /// An expression reads an admission variable other than `object`.
    #[error("{field}: reads {variable}, not only the object")]
    ReadsBeyondObject {
        /// The expression's field.
        field: String,
        /// The variable.
        variable: String,
    },
    /// An expression does not compile, or a selector is malformed.
    #[error("{field}: {problem}")]
    Invalid {
        /// The offending field.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

/// A policy and its binding, compiled.
#[derive(Debug)]
pub struct AdmissionPolicy {
    name: String,
    binding: String,
    resource_rules: Vec<ResourceRule>,
    selectors: Vec<(Scope, Selector)>,
    match_conditions: Vec<Program>,
    validations: Vec<Validation>,
}

#[derive(Debug)]
struct ResourceRule {
    groups: Vec<String>,
    versions: Vec<String>,
    operations: Vec<String>,
    resources: Vec<String>,
}

/// What a label selector of a policy or binding selects by.
#[derive(Debug, Clone, Copy)]
enum Scope {
    /// The object's labels.
    Object,
    /// Its namespace's labels.
    Namespace,
}

#[derive(Debug)]
struct Validation {
    expression: String,
    program: Program,
    message: String,
}

/// One create or update of an object, as admission sees it.
#[derive(Debug)]
pub struct Request<'a> {
    /// `CREATE` or `UPDATE`.
    pub operation: &'a str,
    /// API group of the object (empty for the core group).
    pub group: &'a str,
    /// API version (`v1`).
    pub version: &'a str,
    /// Resource (`pods`).
    pub resource: &'a str,
    /// The object, as the API server has it after defaulting.
    pub object: &'a Value,
    /// The labels of its namespace (`kubernetes.io/metadata.name` included).
    pub namespace_labels: &'a BTreeMap<String, String>,
}

impl AdmissionPolicy {
    /// Compiles a ValidatingAdmissionPolicy and its binding (both as JSON). Fails, naming the
    /// field, on an expression that does not compile or reads more than `object`, and on a
    /// malformed selector.
    pub fn compile(policy: &Value, binding: &Value) -> Result<AdmissionPolicy, PolicyUnusable> {
        let name = text(policy.pointer("/metadata/name"));
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let resource_rules = policy
            .pointer("/spec/matchConstraints/resourceRules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| ResourceRule {
                groups: strings(r.get("apiGroups")),
                versions: strings(r.get("apiVersions")),
                operations: strings(r.get("operations")),
                resources: strings(r.get("resources")),
            })
            .collect();
        let mut selectors = Vec::new();
        for (at, scope, selector) in [
            (
                "spec.matchConstraints.objectSelector",
                Scope::Object,
                policy.pointer("/spec/matchConstraints/objectSelector"),
            ),
            (
                "spec.matchConstraints.namespaceSelector",
                Scope::Namespace,
                policy.pointer("/spec/matchConstraints/namespaceSelector"),
            ),
            (
                "binding spec.matchResources.objectSelector",
                Scope::Object,
                binding.pointer("/spec/matchResources/objectSelector"),
            ),
            (
                "binding spec.matchResources.namespaceSelector",
                Scope::Namespace,
                binding.pointer("/spec/matchResources/namespaceSelector"),
            ),
        ] {
            let Some(selector) = selector else { continue };
            let parsed = serde_json::from_value::<LabelSelector>(selector.clone())
                .map_err(|e| e.to_string())
                .and_then(|s| Selector::try_from(s).map_err(|e| e.to_string()))
                .map_err(|problem| PolicyUnusable::Invalid {
                    field: at.to_string(),
                    problem,
                })?;
            selectors.push((scope, parsed));
        }
        let program = |field: String, expression: &str| {
            let program = Program::compile(expression).map_err(|e| PolicyUnusable::Invalid {
                field: field.clone(),
                problem: format!("CEL expression does not compile: {e}"),
            })?;
            match admission_variable(program.expression()) {
                Some(variable) => Err(PolicyUnusable::ReadsBeyondObject { field, variable }),
                None => Ok(program),
            }
        };
        let match_conditions = policy
            .pointer("/spec/matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| {
                program(
                    format!("spec.matchConditions[{i}].expression"),
                    &text(c.get("expression")),
                )
            })
            .collect::<Result<_, _>>()?;
        let validations = policy
            .pointer("/spec/validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, v)| {
                let expression = text(v.get("expression"));
                Ok(Validation {
                    program: program(format!("spec.validations[{i}].expression"), &expression)?,
                    expression,
                    message: text(v.get("message")),
                })
            })
            .collect::<Result<_, PolicyUnusable>>()?;
        Ok(AdmissionPolicy {
            name,
            binding: text(binding.pointer("/metadata/name")),
            resource_rules,
            selectors,
            match_conditions,
            validations,
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its binding's name.
    pub fn binding(&self) -> &str {
        &self.binding
    }

    /// Whether the policy applies to `request`: its resource rules, selectors and match
    /// conditions (one that cannot be evaluated applies it, as `failurePolicy: Fail` does).
    fn matches(&self, request: &Request<'_>) -> bool {
        let listed = |list: &[String], value: &str| list.iter().any(|i| i == "*" || i == value);
        let by_rule = self.resource_rules.iter().any(|r| {
            listed(&r.groups, request.group)
                && listed(&r.versions, request.version)
                && listed(&r.operations, request.operation)
                && listed(&r.resources, request.resource)
        });
        if !by_rule {
            return false;
        }
        let object_labels: BTreeMap<String, String> = request
            .object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        let by_selectors = self.selectors.iter().all(|(scope, selector)| match scope {
            Scope::Object => selector.matches(&object_labels),
            Scope::Namespace => selector.matches(request.namespace_labels),
        });
        by_selectors
            && with_cel(|functions| {
                let mut scope = None;
                self.match_conditions.iter().all(|program| {
                    !matches!(
                        holds(program, request.object, functions, &mut scope),
                        Ok(false)
                    )
                })
            })
    }

    /// Admits `request`, or refuses it with kube-apiserver's message (without the
    /// `<resource> "<name>" is forbidden: ` in front).
    pub fn admit(&self, request: &Request<'_>) -> Result<(), String> {
        if !self.matches(request) {
            return Ok(());
        }
        let denied = with_cel(|functions| {
            let mut scope = None;
            self.validations.iter().find_map(|v| {
                match holds(&v.program, request.object, functions, &mut scope) {
                    Ok(true) => None,
                    Ok(false) => Some(v.message.clone()),
                    Err(Unevaluable::NotBool(value)) => Some(format!(
                        "expression '{}' resulted in error: {value} is not a bool",
                        v.expression
                    )),
                    Err(Unevaluable::Failed(e)) => Some(format!(
                        "expression '{}' resulted in error: {e}",
                        v.expression
                    )),
                }
            })
        });
        match denied {
            None => Ok(()),
            Some(message) => Err(format!(
                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
                self.name, self.binding
            )),
        }
    }
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}
