//! ValidatingAdmissionPolicy enforcement on create and update, as kube-apiserver does it: every
//! binding whose policy matches the request (matchConstraints, the binding's matchResources,
//! matchConditions) has the policy's validations evaluated, with the same CEL library
//! tenantplane evaluates SyncPolicies with; the first denial (validationActions `Deny`) refuses
//! the request with kube-apiserver's Status: `<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`,
//! the validation's reason and its HTTP code.
//!
//! Not served: `paramKind` and params, `variables`, `auditAnnotations`, and the Warn and Audit
//! actions (admitted without a warning header or audit annotation). A policy whose expressions
//! read `request.userInfo` or the `authorizer` is not enforced: this server authenticates no one. A failing matchCondition or validation fails closed
//! (`failurePolicy: Fail`, the default) or is ignored (`Ignore`).

use kube_cel::KubeCelExt as _;
use kube_cel::cel::{Context, Program, Value as CelValue};
use serde_json::{Value, json};

use crate::admission::request::Request;
use crate::storage::error::{ApiError, ApiResult, Cause, Details};
use crate::storage::selectors::LabelSelector;

/// The API group of the admission registration kinds.
pub const GROUP: &str = "admissionregistration.k8s.io";
/// Plural of ValidatingAdmissionPolicy.
pub const POLICIES: &str = "validatingadmissionpolicies";
/// Plural of ValidatingAdmissionPolicyBinding.
pub const BINDINGS: &str = "validatingadmissionpolicybindings";

/// Refuses `request` when a binding of `bindings` (in name order, as kube-apiserver lists them)
/// with its policy among `policies` denies it.
pub fn admit<'a>(
    policies: impl Iterator<Item = &'a Value> + Clone,
    bindings: impl Iterator<Item = &'a Value>,
    request: &Request<'_>,
) -> ApiResult<()> {
    let mut scope = None;
    for binding in bindings {
        let Some(policy_name) = binding.pointer("/spec/policyName").and_then(Value::as_str) else {
            continue;
        };
        let Some(policy) = policies
            .clone()
            .find(|p| p.pointer("/metadata/name").and_then(Value::as_str) == Some(policy_name))
        else {
            continue;
        };
        let denies = binding
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .is_some_and(|actions| actions.iter().any(|a| a == "Deny"));
        if !denies
            || !matches(policy.pointer("/spec/matchConstraints"), request, false)
            || !matches(binding.pointer("/spec/matchResources"), request, true)
        {
            continue;
        }
        if reads_user(policy) {
            // No authentication here: every client is the same anonymous administrator, so a
            // policy about who makes the request (say, only the syncer may change its objects)
            // cannot be enforced without refusing everyone.
            continue;
        }
        let scope = scope.get_or_insert_with(|| Variables::of(request));
        let fail_closed = policy
            .pointer("/spec/failurePolicy")
            .and_then(Value::as_str)
            != Some("Ignore");
        if let Some(denial) = evaluate(policy, scope, fail_closed) {
            let binding_name = binding
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(forbidden(request, policy_name, binding_name, denial));
        }
    }
    Ok(())
}

/// Whether any expression of the policy reads `request.userInfo` (or asks the authorizer).
fn reads_user(policy: &Value) -> bool {
    ["matchConditions", "validations"].iter().any(|field| {
        policy
            .pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|item| item.get("expression").and_then(Value::as_str))
            .any(|e| e.contains("userInfo") || e.contains("authorizer"))
    })
}

/// A denial: the validation's message and reason.
struct Denial {
    message: String,
    reason: Option<String>,
}

/// The CEL variables of a request, converted once.
struct Variables {
    object: CelValue,
    old_object: CelValue,
    request: CelValue,
    namespace_object: CelValue,
}

impl Variables {
    fn of(r: &Request<'_>) -> Variables {
        let cel = |v: &Value| kube_cel::cel::to_value(v).unwrap_or(CelValue::Null);
        let request = json!({
            "kind": {"group": r.rt.group, "version": r.rt.version, "kind": r.rt.kind},
            "resource": {"group": r.rt.group, "version": r.rt.version, "resource": r.rt.plural},
            "requestKind": {"group": r.rt.group, "version": r.rt.version, "kind": r.rt.kind},
            "requestResource": {"group": r.rt.group, "version": r.rt.version, "resource": r.rt.plural},
            "name": r.name,
            "namespace": r.namespace,
            "operation": r.operation,
            "dryRun": r.dry_run,
        });
        Variables {
            object: cel(r.object),
            old_object: r.old.map_or(CelValue::Null, cel),
            request: cel(&request),
            namespace_object: r.namespace_object.map_or(CelValue::Null, cel),
        }
    }
}

thread_local! {
    /// The CEL standard and Kubernetes libraries, registered once per thread.
    static FUNCTIONS: Context<'static> = Context::default().with_all();
}

/// The first denial of the policy's matchConditions and validations, if any.
fn evaluate(policy: &Value, vars: &Variables, fail_closed: bool) -> Option<Denial> {
    FUNCTIONS.with(|functions| {
        let mut ctx = functions.new_inner_scope();
        ctx.add_variable_from_value("object", vars.object.clone());
        ctx.add_variable_from_value("oldObject", vars.old_object.clone());
        ctx.add_variable_from_value("request", vars.request.clone());
        ctx.add_variable_from_value("namespaceObject", vars.namespace_object.clone());
        ctx.add_variable_from_value("params", CelValue::Null);
        let items = |field: &str| {
            policy
                .pointer(&format!("/spec/{field}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let text = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        for condition in items("matchConditions") {
            let expression = text(&condition, "expression");
            match run(&ctx, &expression) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) if fail_closed => {
                    return Some(Denial {
                        message: format!(
                            "failed to evaluate matchCondition {}: {e}",
                            text(&condition, "name")
                        ),
                        reason: None,
                    });
                }
                Err(_) => return None,
            }
        }
        for validation in items("validations") {
            let expression = text(&validation, "expression");
            let message = match run(&ctx, &expression) {
                Ok(true) => continue,
                Ok(false) => validation
                    .get("messageExpression")
                    .and_then(Value::as_str)
                    .and_then(|m| match Program::compile(m).ok()?.execute(&ctx).ok()? {
                        CelValue::String(s) if !s.trim().is_empty() => Some(s.to_string()),
                        _ => None,
                    })
                    .or_else(|| {
                        validation
                            .get("message")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| format!("failed expression: {expression}")),
                Err(e) if fail_closed => {
                    format!("expression '{expression}' resulted in error: {e}")
                }
                Err(_) => continue,
            };
            return Some(Denial {
                message,
                reason: validation
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
        None
    })
}

/// A boolean expression's value, or the error (no-such-key included) as text.
fn run(ctx: &Context<'_>, expression: &str) -> Result<bool, String> {
    let program = Program::compile(expression).map_err(|e| e.to_string())?;
    match program.execute(ctx) {
        Ok(CelValue::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("expected a bool, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether matchConstraints (or a binding's matchResources) select the request; an absent
/// matchResources selects everything its policy does.
fn matches(criteria: Option<&Value>, r: &Request<'_>, absent_matches: bool) -> bool {
    let Some(criteria) = criteria else {
        return absent_matches;
    };
    let rules = |field: &str| {
        criteria
            .get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let resource_rules = rules("resourceRules");
    if !(resource_rules.is_empty() && absent_matches
        || resource_rules.iter().any(|rule| rule_matches(rule, r)))
    {
        return false;
    }
    if rules("excludeResourceRules")
        .iter()
        .any(|rule| rule_matches(rule, r))
    {
        return false;
    }
    let selected = |field: &str, object: Option<&Value>| match criteria.get(field) {
        None => true,
        Some(selector) => match (LabelSelector::from_object(selector), object) {
            (Ok(s), Some(o)) => s.matches(o),
            (Ok(_), None) => true,
            (Err(_), _) => false,
        },
    };
    // A Namespace is matched on its own labels; other cluster-scoped objects always match.
    let namespace = if r.rt.group.is_empty() && r.rt.kind == "Namespace" {
        Some(r.object)
    } else if r.namespace.is_empty() {
        None
    } else {
        r.namespace_object
    };
    selected("namespaceSelector", namespace)
        && (selected("objectSelector", Some(r.object))
            || r.old
                .is_some_and(|old| selected("objectSelector", Some(old))))
}

fn rule_matches(rule: &Value, r: &Request<'_>) -> bool {
    let listed = |field: &str, value: &str| {
        rule.get(field)
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(|i| i == "*" || i == value))
    };
    // A main resource (subresource writes are not admitted here): `*`, `*/*` or its plural.
    let resource_listed = rule
        .get("resources")
        .and_then(Value::as_array)
        .is_some_and(|items| {
            items
                .iter()
                .any(|i| i == "*" || i == "*/*" || i == r.rt.plural.as_str())
        });
    let scope_fits = match rule.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => r.rt.namespaced,
        Some("Cluster") => !r.rt.namespaced,
        _ => true,
    };
    listed("apiGroups", &r.rt.group)
        && listed("apiVersions", &r.rt.version)
        && listed("operations", r.operation)
        && resource_listed
        && scope_fits
}

/// kube-apiserver's refusal: `admission.NewForbidden` with the validation's reason and code.
fn forbidden(r: &Request<'_>, policy: &str, binding: &str, denial: Denial) -> ApiError {
    let message = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {}",
        denial.message
    );
    let resource = if r.rt.group.is_empty() {
        r.rt.plural.clone()
    } else {
        format!("{}.{}", r.rt.plural, r.rt.group)
    };
    let name = if r.name.is_empty() { "Unknown" } else { r.name };
    let (code, reason) = match denial.reason.as_deref() {
        Some("Forbidden") => (403, "Forbidden"),
        Some("Unauthorized") => (401, "Unauthorized"),
        Some("RequestEntityTooLarge") => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    ApiError {
        code,
        reason,
        message: format!("{resource} \"{name}\" is forbidden: {message}"),
        details: Some(Box::new(Details {
            name: name.to_string(),
            group: r.rt.group.clone(),
            kind: r.rt.plural.clone(),
            causes: vec![Cause {
                reason: String::new(),
                message,
                field: String::new(),
            }],
        })),
    }
}
