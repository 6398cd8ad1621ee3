//! Direct evaluation of CEL conditions over the tenant object's JSON, without converting it.
//!
//! The `cel` interpreter first converts the object into its own values and then clones every
//! map or list a field selection passes through, which makes a SyncPolicy guard such as
//! `has(object.spec.hostNetwork) && object.spec.hostNetwork == true` cost microseconds. Most
//! guards use a small part of the language (field selection, `has()`, `&&`, `||`, `?:`, `==`,
//! `!=`, integer comparisons, `in`, `size()`, list literals and the comprehension macros such as
//! `exists`), and for that part this module reads the JSON in place.
//!
//! It reproduces the interpreter of `cel` 0.13 exactly, quirks included: a JSON integer is a
//! `uint` there (so `1 == object.spec.replicas` is false), equality between different types is
//! false, a selection on a value that is not a map yields `false`. Whenever anything falls
//! outside that well-understood part — an unknown function, a value of another type, anything
//! that would be an error — it answers "not decided" and the caller runs the interpreter, which
//! gives the verdict and the error message. So an answer from here is always the interpreter's
//! answer, and a refusal (fail closed) is always decided and worded by the interpreter.

use std::rc::Rc;

use kube_cel::cel::common::ast::{Expr, LiteralValue, operators};
use kube_cel::cel::parser::Expression;
use serde_json::{Map, Value as Json};

/// A value during direct evaluation: JSON borrowed from the object, or a literal's value.
#[derive(Clone, Debug)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(&'a str),
    /// A list of the object.
    Array(&'a [Json]),
    /// A map of the object.
    Object(&'a Map<String, Json>),
    /// A list built by a list literal.
    List(Rc<[Val<'a>]>),
}

impl<'a> Val<'a> {
    /// The value the interpreter's JSON conversion gives (`serde_json` numbers that fit a `u64`
    /// become `uint`, other integers `int`, the rest `double`).
    fn of_json(json: &'a Json) -> Val<'a> {
        match json {
            Json::Null => Val::Null,
            Json::Bool(b) => Val::Bool(*b),
            Json::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Val::UInt(u),
                (None, Some(i), _) => Val::Int(i),
                (None, None, Some(f)) => Val::Double(f),
                (None, None, None) => unreachable!("a JSON number is a u64, an i64 or an f64"),
            },
            Json::String(s) => Val::Str(s),
            Json::Array(items) => Val::Array(items),
            Json::Object(map) => Val::Object(map),
        }
    }

    fn len(&self) -> Option<usize> {
        match self {
            Val::Array(items) => Some(items.len()),
            Val::List(items) => Some(items.len()),
            Val::Object(map) => Some(map.len()),
            _ => None,
        }
    }

    fn item(&self, i: usize) -> Val<'a> {
        match self {
            Val::Array(items) => Val::of_json(&items[i]),
            Val::List(items) => items[i].clone(),
            _ => unreachable!("item of a list only"),
        }
    }

    /// The interpreter's `==` on scalars: false across types; `None` for lists and maps.
    fn scalar_eq(&self, other: &Val<'_>) -> Option<bool> {
        Some(match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Int(a), Val::Int(b)) => a == b,
            (Val::UInt(a), Val::UInt(b)) => a == b,
            (Val::Double(a), Val::Double(b)) => a == b,
            (Val::Str(a), Val::Str(b)) => a == b,
            (a, b) if a.len().is_some() || b.len().is_some() => return None,
            _ => false,
        })
    }
}

/// Variables in scope: `object`, then the comprehension variables, innermost last.
type Scope<'a> = Vec<(&'a str, Val<'a>)>;

/// Evaluates a condition over `object`; `None` when only the interpreter can tell.
pub(super) fn evaluate(expression: &Expression, object: &Json) -> Option<bool> {
    let mut scope = vec![("object", Val::of_json(object))];
    match eval(expression, &mut scope)? {
        Val::Bool(b) => Some(b),
        _ => None,
    }
}

fn eval<'a>(expression: &'a Expression, scope: &mut Scope<'a>) -> Option<Val<'a>> {
    match &expression.expr {
        Expr::Literal(literal) => Some(match literal {
            LiteralValue::Boolean(b) => Val::Bool(*b.inner()),
            LiteralValue::Int(i) => Val::Int(*i.inner()),
            LiteralValue::UInt(u) => Val::UInt(*u.inner()),
            LiteralValue::Double(d) => Val::Double(*d.inner()),
            LiteralValue::String(s) => Val::Str(s.inner()),
            LiteralValue::Null => Val::Null,
            LiteralValue::Bytes(_) => return None,
        }),
        Expr::Ident(name) => scope
            .iter()
            .rev()
            .find(|(n, _)| *n == name.as_str())
            .map(|(_, v)| v.clone()),
        Expr::Select(select) => match eval(&select.operand, scope)? {
            Val::Object(map) if select.test => Some(Val::Bool(map.contains_key(&select.field))),
            // An absent field is a "no such key" error: the interpreter words it.
            Val::Object(map) => map.get(&select.field).map(Val::of_json),
            // The interpreter's selection on anything but a map is `false`.
            _ => Some(Val::Bool(false)),
        },
        Expr::List(list) if list.optional_indices.is_empty() => {
            let items = list
                .elements
                .iter()
                .map(|e| eval(e, scope))
                .collect::<Option<Vec<_>>>()?;
            Some(Val::List(items.into()))
        }
        Expr::Call(call) if call.target.is_none() => {
            call_function(&call.func_name, &call.args, scope)
        }
        Expr::Comprehension(c) if c.iter_var2.is_none() => {
            let accu = eval(&c.accu_init, scope)?;
            let range = eval(&c.iter_range, scope)?;
            let len = match range {
                Val::Array(_) | Val::List(_) => range.len()?,
                _ => return None,
            };
            let depth = scope.len();
            scope.push((c.accu_var.as_str(), accu));
            let result = comprehension(c, &range, len, depth, scope);
            scope.truncate(depth);
            result
        }
        _ => None,
    }
}

/// The loop of a comprehension, as the interpreter runs it: the condition is read before the
/// item is bound, the step's value becomes the accumulator.
fn comprehension<'a>(
    c: &'a kube_cel::cel::common::ast::ComprehensionExpr,
    range: &Val<'a>,
    len: usize,
    depth: usize,
    scope: &mut Scope<'a>,
) -> Option<Val<'a>> {
    let accu_at = depth;
    let mut item_at = None;
    for i in 0..len {
        match eval(&c.loop_cond, scope)? {
            Val::Bool(true) => {}
            Val::Bool(false) => break,
            _ => return None,
        }
        let item = range.item(i);
        match item_at {
            Some(at) => scope[at] = (c.iter_var.as_str(), item),
            None => {
                scope.push((c.iter_var.as_str(), item));
                item_at = Some(scope.len() - 1);
            }
        }
        let accu = eval(&c.loop_step, scope)?;
        scope[accu_at].1 = accu;
    }
    eval(&c.result, scope)
}

fn call_function<'a>(name: &str, args: &'a [Expression], scope: &mut Scope<'a>) -> Option<Val<'a>> {
    let bool_of = |v: Option<Val<'a>>| match v? {
        Val::Bool(b) => Some(b),
        _ => None,
    };
    match (name, args) {
        (operators::CONDITIONAL, [cond, yes, no]) => {
            if bool_of(eval(cond, scope))? {
                eval(yes, scope)
            } else {
                eval(no, scope)
            }
        }
        (operators::LOGICAL_AND, [left, right]) => match bool_of(eval(left, scope))? {
            false => Some(Val::Bool(false)),
            true => bool_of(eval(right, scope)).map(Val::Bool),
        },
        (operators::LOGICAL_OR, [left, right]) => match bool_of(eval(left, scope))? {
            true => Some(Val::Bool(true)),
            false => bool_of(eval(right, scope)).map(Val::Bool),
        },
        (operators::EQUALS | operators::NOT_EQUALS, [left, right]) => {
            let left = eval(left, scope)?;
            let right = eval(right, scope)?;
            let equal = left.scalar_eq(&right)?;
            Some(Val::Bool(equal == (name == operators::EQUALS)))
        }
        (
            operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS,
            [left, right],
        ) => {
            let ordering = match (eval(left, scope)?, eval(right, scope)?) {
                (Val::Int(a), Val::Int(b)) => a.cmp(&b),
                (Val::UInt(a), Val::UInt(b)) => a.cmp(&b),
                _ => return None,
            };
            Some(Val::Bool(match name {
                operators::LESS => ordering.is_lt(),
                operators::LESS_EQUALS => ordering.is_le(),
                operators::GREATER => ordering.is_gt(),
                _ => ordering.is_ge(),
            }))
        }
        (operators::IN, [item, list]) => {
            let item = eval(item, scope)?;
            let list = eval(list, scope)?;
            let len = match list {
                Val::Array(_) | Val::List(_) => list.len()?,
                _ => return None,
            };
            for i in 0..len {
                if list.item(i).scalar_eq(&item)? {
                    return Some(Val::Bool(true));
                }
            }
            Some(Val::Bool(false))
        }
        (operators::LOGICAL_NOT, [operand]) => bool_of(eval(operand, scope)).map(|b| Val::Bool(!b)),
        (operators::NOT_STRICTLY_FALSE, [operand]) => match eval(operand, scope)? {
            Val::Bool(b) => Some(Val::Bool(b)),
            _ => Some(Val::Bool(true)),
        },
        // `size` of a string counts bytes in the interpreter; lists and maps count entries.
        ("size", [operand]) => match eval(operand, scope)? {
            Val::Str(s) => Some(Val::Int(s.len() as i64)),
            other => other.len().map(|n| Val::Int(n as i64)),
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use kube_cel::KubeCelExt;
    use kube_cel::cel::{Context, Program, Value as CelValue};
    use proptest::prelude::*;
    use serde_json::json;

    use super::evaluate;

    /// What the interpreter says: `Some(verdict)`, or `None` for an error or a non-bool.
    fn interpreted(program: &Program, object: &serde_json::Value) -> Option<bool> {
        let functions = Context::default().with_all();
        let mut ctx = functions.new_inner_scope();
        ctx.add_variable_from_value("object", kube_cel::cel::to_value(object).unwrap());
        match program.execute(&ctx) {
            Ok(CelValue::Bool(b)) => Some(b),
            _ => None,
        }
    }

    /// Every guard of the shipped default policy, and expressions that probe the quirks.
    fn expressions() -> Vec<String> {
        let policy: serde_json::Value =
            serde_norway::from_str(crate::policy::DEFAULT_POLICY_YAML).unwrap();
        let mut all: Vec<String> = policy["spec"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r["match"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c["expression"].as_str().unwrap().to_string())
            .collect();
        assert!(all.len() >= 10, "the default policy's guards are read");
        all.extend(
            [
                "object.spec.replicas == 1",
                "object.spec.replicas == 1u",
                "object.spec.replicas > 1",
                "object.spec.replicas >= 1u",
                "object.spec.replicas < -1",
                "object.spec.hostNetwork",
                "object.spec.hostNetwork != false",
                "!object.spec.hostNetwork",
                "has(object.spec.hostNetwork.x)",
                "object.spec.hostNetwork.x",
                "object.spec.type in ['NodePort', 'LoadBalancer', 1, 1u, null, true]",
                "object.spec.type in object.spec.externalIPs",
                "size(object.spec.type) == 3",
                "size(object.spec.externalIPs) > 0u",
                "size(object.spec) > 2",
                "object.spec.externalIPs.exists(ip, ip == '1.2.3.4')",
                "object.spec.externalIPs.all(ip, ip != '1.2.3.4')",
                "object.spec.externalIPs.exists_one(ip, ip == '1.2.3.4')",
                "object.spec.externalIPs.exists(ip, ip)",
                "object.spec.containers.exists(c, c.securityContext.privileged)",
                "object.spec.hostNetwork ? 1 : 2",
                "(object.spec.hostNetwork ? object.spec.type : 'x') == 'x'",
                "object.spec.hostPID || object.spec.hostIPC",
                "object.spec.hostPID && object.spec.hostIPC",
                "object.spec == object.spec",
                "[1, 2].exists(x, x == object.spec.replicas)",
                "object.metadata.name.startsWith('web')",
                "object.spec.ratio == 0.5",
                "object.spec.nothing == null",
            ]
            .map(String::from),
        );
        all
    }

    fn scalar() -> impl Strategy<Value = serde_json::Value> {
        prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            (-3i64..5).prop_map(|i| json!(i)),
            Just(json!(0.5)),
            prop::sample::select(vec![
                "",
                "x",
                "NodePort",
                "LoadBalancer",
                "1.2.3.4",
                "web-1"
            ])
            .prop_map(|s| json!(s)),
        ]
    }

    /// JSON values, biased towards the fields and shapes the guards read.
    fn value() -> impl Strategy<Value = serde_json::Value> {
        let key = prop::sample::select(vec![
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "volumes",
            "hostPath",
            "containers",
            "initContainers",
            "ephemeralContainers",
            "securityContext",
            "privileged",
            "allowPrivilegeEscalation",
            "capabilities",
            "add",
            "ports",
            "hostPort",
            "type",
            "externalIPs",
            "replicas",
            "ratio",
            "x",
        ]);
        scalar().prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| {
                    serde_json::Value::Object(
                        m.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    )
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Direct evaluation, when it decides, decides as the interpreter does.
        #[test]
        fn direct_answers_are_the_interpreters(spec in value(), name in scalar()) {
            let object = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name}, "spec": spec});
            for expression in expressions() {
                let program = Program::compile(&expression).unwrap();
                if let Some(direct) = evaluate(program.expression(), &object) {
                    prop_assert_eq!(Some(direct), interpreted(&program, &object), "{}", expression);
                }
            }
        }
    }

    #[test]
    fn the_default_guards_are_decided_directly_on_ordinary_pods() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"hostNetwork": false, "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "web", "ports": [{"containerPort": 80}],
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}}}]}});
        let rejected = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "web", "ports": [{"hostPort": 0}]}]}});
        for expression in &expressions()[..10] {
            let program = Program::compile(expression).unwrap();
            for object in [&pod, &rejected] {
                let direct = evaluate(program.expression(), object);
                assert!(direct.is_some(), "{expression} is decided directly");
                assert_eq!(direct, interpreted(&program, object), "{expression}");
            }
        }
    }

    #[test]
    fn errors_are_left_to_the_interpreter() {
        let no_spec = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}});
        let program = Program::compile("has(object.spec.hostNetwork)").unwrap();
        assert_eq!(evaluate(program.expression(), &no_spec), None);
        assert_eq!(
            interpreted(&program, &no_spec),
            None,
            "the interpreter refuses it"
        );
    }
}
