//! Static cost estimation of CRD validation rules, as kube-apiserver does it.
//!
//! A port of cel-go's `checker/cost.go` (the estimator walking a checked
//! AST), of Kubernetes' library cost estimator
//! (`k8s.io/apiserver/pkg/cel/library/cost.go`) and of the CRD size
//! estimator (`apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go`),
//! kept close to the Go code so that estimates agree to the unit: the same
//! numbers decide whether kube-apiserver refuses a CRD, and the factor it
//! prints.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cel::check::{
    ACCUMULATOR, CIDR, Checked, Comprehension, DeclType, FORMAT, IP, Kind, LEGACY_ACCUMULATOR, Lit,
    Node, NodeKind, QUANTITY, SEMVER, Ty, URL,
};

/// cel-go `common.StringTraversalCostFactor`.
const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
/// cel-go `common.RegexStringLengthCostFactor`.
const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
const SELECT_AND_IDENT_COST: u64 = 1;
const CONST_COST: u64 = 0;
const LIST_CREATE_BASE_COST: u64 = 10;
const MAP_CREATE_BASE_COST: u64 = 30;
const STRUCT_CREATE_BASE_COST: u64 = 40;
/// apiserver `cel.MaxFormatSize` and `MaxNameFormatRegexSize`.
const MAX_FORMAT_SIZE: u64 = 64;
const MAX_NAME_FORMAT_REGEX_SIZE: f64 = 128.0;

/// A size or cost range (cel-go `SizeEstimate` / `CostEstimate`), saturating
/// at `u64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Estimate {
    pub min: u64,
    pub max: u64,
}

const UNKNOWN: Estimate = Estimate {
    min: 0,
    max: u64::MAX,
};

fn fixed(v: u64) -> Estimate {
    Estimate { min: v, max: v }
}

impl Estimate {
    fn add(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn multiply(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    fn multiply_by_cost_factor(self, factor: f64) -> Estimate {
        Estimate {
            min: multiply_by_cost_factor(self.min, factor),
            max: multiply_by_cost_factor(self.max, factor),
        }
    }

    fn union(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// cel-go `multiplyByCostFactor`: rounds up, saturates.
fn multiply_by_cost_factor(x: u64, y: f64) -> u64 {
    let xf = x as f64;
    let max = u64::MAX as f64;
    if xf > 0.0 && y > 0.0 && xf > max / y {
        return u64::MAX;
    }
    let ceil = (xf * y).ceil();
    if ceil >= 2f64.powi(64) {
        return u64::MAX;
    }
    ceil as u64
}

/// The size estimate of list or map entries.
#[derive(Clone, Copy, Debug)]
struct EntrySize {
    list: bool,
    key: Estimate,
    val: Estimate,
}

fn union_entry(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
    let (a, b) = (a?, b?);
    Some(EntrySize {
        list: a.list,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

/// What the estimators know of one node (cel-go `AstNode`).
#[derive(Clone, Debug)]
struct AstNode<'n> {
    /// Path from a variable through fields, `@items`, `@keys`, `@values`;
    /// `None` where the node is not reachable from a declared variable.
    path: Option<Vec<String>>,
    ty: Ty,
    expr: Option<&'n Node>,
    computed: Option<Estimate>,
}

#[derive(Clone, Debug)]
struct LocalVar {
    path: Option<Vec<String>>,
    size: Option<Estimate>,
    entry: Option<EntrySize>,
}

/// Estimates the cost of a checked rule whose `self` has declaration `root`.
pub(crate) fn estimate_cost(node: &Node, checked: &Checked, root: &Arc<DeclType>) -> Estimate {
    let mut coster = Coster {
        checked,
        root,
        paths: HashMap::new(),
        locals: HashMap::new(),
        sizes: HashMap::new(),
        entry_sizes: HashMap::new(),
        // Kubernetes keeps has() free (cel.CostEstimatorOptions(PresenceTestHasCost(false))).
        presence_test_cost: fixed(0),
    };
    coster.cost(node)
}

struct Coster<'a> {
    checked: &'a Checked,
    root: &'a Arc<DeclType>,
    paths: HashMap<u64, Vec<String>>,
    locals: HashMap<String, Vec<LocalVar>>,
    sizes: HashMap<u64, Estimate>,
    entry_sizes: HashMap<u64, EntrySize>,
    presence_test_cost: Estimate,
}

fn is_accumulator(name: &str) -> bool {
    name == ACCUMULATOR || name == LEGACY_ACCUMULATOR
}

fn with(path: Option<Vec<String>>, element: &str) -> Vec<String> {
    let mut p = path.unwrap_or_default();
    p.push(element.to_string());
    p
}

impl<'a> Coster<'a> {
    fn cost(&mut self, e: &Node) -> Estimate {
        match &e.kind {
            NodeKind::Lit(_) => fixed(CONST_COST),
            NodeKind::Ident(name) => {
                let path = match self.peek_local(name) {
                    Some(v) => v.path.clone(),
                    None => Some(vec![name.clone()]),
                };
                if let Some(path) = path {
                    self.paths.insert(e.id, path);
                }
                fixed(SELECT_AND_IDENT_COST)
            }
            NodeKind::Select {
                operand,
                field,
                test,
            } => {
                let mut sum = Estimate::default();
                if *test {
                    sum = sum.add(self.presence_test_cost);
                    return sum.add(self.cost(operand));
                }
                sum = sum.add(self.cost(operand));
                if matches!(
                    self.checked.type_of(operand.id).kind(),
                    Kind::Map | Kind::Struct
                ) {
                    sum = sum.add(fixed(SELECT_AND_IDENT_COST));
                }
                let path = with(self.get_path(operand), field);
                self.paths.insert(e.id, path);
                sum
            }
            NodeKind::Call { func, target, args } => {
                self.cost_call(e, func, target.as_deref(), args)
            }
            NodeKind::List(elements) => {
                let mut sum = Estimate::default();
                let mut item = Estimate {
                    min: u64::MAX,
                    max: 0,
                };
                if elements.is_empty() {
                    item.min = 0;
                }
                for el in elements {
                    sum = sum.add(self.cost(el));
                    item = item.union(self.size_or_unknown(el));
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        list: true,
                        key: fixed(1),
                        val: item,
                    },
                );
                sum.add(fixed(LIST_CREATE_BASE_COST))
            }
            NodeKind::Map(entries) => {
                let mut sum = Estimate::default();
                let mut key = Estimate {
                    min: u64::MAX,
                    max: 0,
                };
                let mut val = key;
                if entries.is_empty() {
                    key.min = 0;
                    val.min = 0;
                }
                for (k, v) in entries {
                    sum = sum.add(self.cost(k));
                    sum = sum.add(self.cost(v));
                    key = key.union(self.size_or_unknown(k));
                    val = val.union(self.size_or_unknown(v));
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        list: false,
                        key,
                        val,
                    },
                );
                sum.add(fixed(MAP_CREATE_BASE_COST))
            }
            NodeKind::Struct(_) => fixed(STRUCT_CREATE_BASE_COST),
            NodeKind::Comprehension(c) => {
                if is_bind(c) {
                    self.cost_bind(e, c)
                } else {
                    self.cost_comprehension(e, c)
                }
            }
        }
    }

    fn peek_local(&self, name: &str) -> Option<&LocalVar> {
        self.locals.get(name).and_then(|s| s.last())
    }

    fn push_local(&mut self, name: &str, var: LocalVar) {
        self.locals.entry(name.to_string()).or_default().push(var);
    }

    fn pop_local(&mut self, name: &str) {
        if let Some(s) = self.locals.get_mut(name) {
            s.pop();
        }
    }

    fn get_path(&self, e: &Node) -> Option<Vec<String>> {
        if let NodeKind::Ident(name) = &e.kind
            && let Some(v) = self.peek_local(name)
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned()
    }

    fn container_is_list(&self, entry: Option<EntrySize>, range: &Node) -> bool {
        match entry {
            Some(entry) => entry.list,
            None => self.checked.type_of(range.id).kind() == Kind::List,
        }
    }

    fn push_iter_single(&mut self, var: &str, range: &Node) {
        let entry = self.compute_entry_size(range);
        let list = self.container_is_list(entry, range);
        let (size, sub) = if list {
            (entry.map(|e| e.val), "@items")
        } else {
            (entry.map(|e| e.key), "@keys")
        };
        let path = with(self.get_path(range), sub);
        self.push_local(
            var,
            LocalVar {
                path: Some(path),
                size,
                entry: None,
            },
        );
    }

    fn push_local_var(&mut self, var: &str, e: &Node) {
        let path = self.get_path(e);
        let entry = self.compute_entry_size(e);
        let size = self.compute_size(e);
        self.push_local(var, LocalVar { path, size, entry });
    }

    fn cost_comprehension(&mut self, e: &Node, c: &Comprehension) -> Estimate {
        let mut sum = Estimate::default();
        sum = sum.add(self.cost(&c.range));
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local_var(&c.accu_var, &c.accu_init);
        self.push_iter_single(&c.iter_var, &c.range);
        let loop_cost = self.cost(&c.cond);
        let step_cost = self.cost(&c.step);
        self.pop_local(&c.iter_var);
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        let range_count = self.size_or_unknown(&c.range);
        let range_cost = range_count.multiply(step_cost.add(loop_cost));
        sum = sum.add(range_cost);
        match &c.accu_init.kind {
            NodeKind::Lit(_) => {
                if let Some(size) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, size);
                }
            }
            NodeKind::List(_) | NodeKind::Map(_) => {
                self.sizes.insert(e.id, range_count);
                if let Some(entry) = self.compute_entry_size(&c.step) {
                    self.entry_sizes.insert(e.id, entry);
                }
            }
            _ => {}
        }
        sum
    }

    fn cost_bind(&mut self, e: &Node, c: &Comprehension) -> Estimate {
        let mut sum = Estimate::default();
        sum = sum.add(self.cost(&c.range));
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local_var(&c.accu_var, &c.accu_init);
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        if let Some(size) = self.compute_size(&c.result) {
            self.sizes.insert(e.id, size);
        }
        if let Some(entry) = self.compute_entry_size(&c.result) {
            self.entry_sizes.insert(e.id, entry);
        }
        sum
    }

    fn new_ast_node<'n>(&mut self, e: &'n Node) -> AstNode<'n> {
        let mut path = self.get_path(e);
        if path
            .as_ref()
            .and_then(|p| p.first())
            .is_some_and(|first| is_accumulator(first))
        {
            path = None;
        }
        AstNode {
            path,
            ty: self.checked.type_of(e.id),
            expr: Some(e),
            computed: self.compute_size(e),
        }
    }

    fn cost_call(
        &mut self,
        e: &Node,
        func: &str,
        target: Option<&Node>,
        args: &[Node],
    ) -> Estimate {
        if func == "dyn" && args.len() == 1 {
            let arg_cost = self.cost(&args[0]);
            if let Some(size) = self.compute_size(&args[0]) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.compute_entry_size(&args[0]) {
                self.entry_sizes.insert(e.id, entry);
            }
            return fixed(1).add(arg_cost);
        }
        let mut arg_nodes = Vec::with_capacity(args.len());
        let mut arg_costs = Vec::with_capacity(args.len());
        for arg in args {
            arg_costs.push(self.cost(arg));
            arg_nodes.push(self.new_ast_node(arg));
        }
        let overloads = self
            .checked
            .overloads
            .get(&e.id)
            .cloned()
            .unwrap_or_default();
        if overloads.is_empty() {
            return Estimate::default();
        }
        let mut sum = Estimate::default();
        let target_node = match target {
            Some(t) => {
                sum = sum.add(self.cost(t));
                Some(self.new_ast_node(t))
            }
            None => None,
        };
        let mut fn_cost = Estimate {
            min: u64::MAX,
            max: 0,
        };
        let mut result_size: Option<Estimate> = None;
        for overload in overloads {
            let (cost, size) = self.function_cost(
                e,
                func,
                overload,
                target_node.as_ref(),
                &arg_nodes,
                &arg_costs,
            );
            fn_cost = fn_cost.union(cost);
            if let Some(size) = size {
                result_size = Some(match result_size {
                    None => size,
                    Some(r) => r.union(size),
                });
            }
            match overload {
                "index_list" if !args.is_empty() => {
                    result_size = self.compute_entry_size(&args[0]).map(|e| e.val);
                    let path = with(self.get_path(&args[0]), "@items");
                    self.paths.insert(e.id, path);
                }
                "index_map" if !args.is_empty() => {
                    result_size = self.compute_entry_size(&args[0]).map(|e| e.val);
                    let path = with(self.get_path(&args[0]), "@values");
                    self.paths.insert(e.id, path);
                }
                _ => {}
            }
            if result_size.is_none() {
                result_size = self.compute_size(e);
            }
        }
        if let Some(size) = result_size {
            self.sizes.insert(e.id, size);
        }
        sum.add(fn_cost)
    }

    /// cel-go `coster.functionCost`: the Kubernetes library's estimate first,
    /// then cel-go's own for the standard functions.
    fn function_cost(
        &mut self,
        e: &Node,
        func: &str,
        overload: &str,
        target: Option<&AstNode<'_>>,
        args: &[AstNode<'_>],
        arg_costs: &[Estimate],
    ) -> (Estimate, Option<Estimate>) {
        let arg_sum = arg_costs.iter().fold(Estimate::default(), |s, c| s.add(*c));
        if let Some((cost, size)) = self.extension_call_cost(overload, target, args) {
            return (cost.add(arg_sum), size);
        }
        if let Some((cost, size)) = self.library_call_cost(func, overload, target, args) {
            return (cost.add(arg_sum), size);
        }
        let size_of = |n: &AstNode<'_>| n.computed.unwrap_or(UNKNOWN);
        match overload {
            "string_format" => {
                if let Some(t) = target {
                    return (
                        size_of(t)
                            .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                            .add(arg_sum),
                        None,
                    );
                }
            }
            "string_to_bytes" if args.len() == 1 => {
                let sz = size_of(&args[0]);
                return (
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    Some(Estimate {
                        min: sz.min,
                        max: sz.max.saturating_mul(4),
                    }),
                );
            }
            "bytes_to_string" if args.len() == 1 => {
                let sz = size_of(&args[0]);
                return (
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    Some(Estimate {
                        min: sz.min / 4,
                        max: sz.max,
                    }),
                );
            }
            "strings_quote" if args.len() == 1 => {
                let sz = size_of(&args[0]);
                return (
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    Some(Estimate {
                        min: sz.min + 2,
                        max: sz.max.saturating_mul(2).saturating_add(2),
                    }),
                );
            }
            "starts_with_string" | "ends_with_string" if args.len() == 1 => {
                return (
                    size_of(&args[0])
                        .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    None,
                );
            }
            "in_list" if args.len() == 2 => {
                return (
                    size_of(&args[1]).multiply_by_cost_factor(1.0).add(arg_sum),
                    None,
                );
            }
            "matches_string" => {
                if let Some(t) = target
                    && args.len() == 1
                {
                    let str_cost = size_of(t)
                        .add(fixed(1))
                        .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                    let regex_cost =
                        size_of(&args[0]).multiply_by_cost_factor(REGEX_STRING_LENGTH_COST_FACTOR);
                    return (str_cost.multiply(regex_cost).add(arg_sum), None);
                }
            }
            "contains_string" => {
                if let Some(t) = target
                    && args.len() == 1
                {
                    let str_cost = size_of(t).multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                    let sub_cost =
                        size_of(&args[0]).multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                    return (str_cost.multiply(sub_cost).add(arg_sum), None);
                }
            }
            "logical_or" | "logical_and" => {
                let (lhs, rhs) = (arg_costs[0], arg_costs[1]);
                return (
                    Estimate {
                        min: lhs.min,
                        max: lhs.add(rhs).max,
                    },
                    None,
                );
            }
            "conditional" => {
                let size = size_of(&args[1]).union(size_of(&args[2]));
                let entry = union_entry(
                    args[1].expr.and_then(|x| self.compute_entry_size(x)),
                    args[2].expr.and_then(|x| self.compute_entry_size(x)),
                );
                if let Some(entry) = entry {
                    self.entry_sizes.insert(e.id, entry);
                }
                let cost = arg_costs[0].add(arg_costs[1].union(arg_costs[2]));
                return (cost, Some(size));
            }
            "add_string" | "add_bytes" | "add_list" if args.len() == 2 => {
                let result = size_of(&args[0]).add(size_of(&args[1]));
                let entry = union_entry(
                    args[0].expr.and_then(|x| self.compute_entry_size(x)),
                    args[1].expr.and_then(|x| self.compute_entry_size(x)),
                );
                if let Some(entry) = entry {
                    self.entry_sizes.insert(e.id, entry);
                }
                if overload == "add_list" {
                    return (fixed(1).add(arg_sum), Some(result));
                }
                return (
                    result
                        .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    Some(result),
                );
            }
            o if o == "equals"
                || o == "not_equals"
                || (o.ends_with("_string") || o.ends_with("_bytes"))
                    && (o.starts_with("less") || o.starts_with("greater")) =>
            {
                let lhs = size_of(&args[0]);
                let rhs = size_of(&args[1]);
                let smallest_max = lhs.max.min(rhs.max);
                let min = u64::from(smallest_max > 0);
                return (
                    Estimate {
                        min,
                        max: smallest_max,
                    }
                    .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                    .add(arg_sum),
                    None,
                );
            }
            _ => {}
        }
        (fixed(1).add(arg_sum), None)
    }

    /// The estimators cel-go's lists (version 3) and sets extensions register
    /// for their overloads.
    fn extension_call_cost(
        &self,
        overload: &str,
        target: Option<&AstNode<'_>>,
        args: &[AstNode<'_>],
    ) -> Option<(Estimate, Option<Estimate>)> {
        // estimateAllocatingListCall: the result size times the factor, plus
        // the call and the list allocation.
        let allocating = |factor: f64, size: Estimate| {
            let cost = size
                .multiply_by_cost_factor(factor)
                .add(fixed(1))
                .add(fixed(LIST_CREATE_BASE_COST));
            Some((cost, Some(size)))
        };
        match overload {
            "list_slice" if args.len() == 2 => {
                let sz = self.size_estimate(target?);
                let start = int_literal(&args[0], 0);
                let end = int_literal(&args[1], sz.max);
                allocating(1.0, fixed(end.wrapping_sub(start)))
            }
            "lists_range" if target.is_none() && args.len() == 1 => {
                allocating(1.0, fixed(int_literal(&args[0], u64::MAX)))
            }
            "list_reverse" if args.is_empty() => allocating(1.0, self.size_estimate(target?)),
            "list_flatten" | "list_flatten_int" if args.len() <= 1 => {
                let depth = args.first().map_or(1, |a| int_literal(a, u64::MAX));
                allocating(depth as f64, self.size_estimate(target?))
            }
            "list_distinct" if args.is_empty() => {
                let sz = self.size_estimate(target?);
                allocating(2.0, sz.multiply(sz))
            }
            "list_sort" if args.is_empty() => {
                let t = target?;
                let sz = self.size_estimate(t);
                let elem = t.ty.parameters().into_iter().next();
                let factor = match elem {
                    Some(Ty::String | Ty::Bytes) => 2.0 + STRING_TRAVERSAL_COST_FACTOR,
                    _ => 2.0,
                };
                allocating(factor, sz.multiply(sz))
            }
            "list_sets_contains_list"
            | "list_sets_intersects_list"
            | "list_sets_equivalent_list"
                if args.len() == 2 =>
            {
                let factor = if overload == "list_sets_equivalent_list" {
                    2.0
                } else {
                    1.0
                };
                let size = self
                    .size_estimate(&args[0])
                    .multiply(self.size_estimate(&args[1]));
                Some((size.multiply_by_cost_factor(factor).add(fixed(1)), None))
            }
            _ => None,
        }
    }

    /// Kubernetes `library.CostEstimator.EstimateCallCost`.
    fn library_call_cost(
        &mut self,
        func: &str,
        overload: &str,
        target: Option<&AstNode<'_>>,
        args: &[AstNode<'_>],
    ) -> Option<(Estimate, Option<Estimate>)> {
        let one = Some((fixed(1), None));
        match func {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let t = target?;
                if let Some(el) = list_element_node(t) {
                    let mut el_cost = fixed(1);
                    if matches!(el.ty.kind(), Kind::String | Kind::Bytes) {
                        let sz = self.size_estimate(&el);
                        el_cost =
                            el_cost.add(sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR));
                    }
                    let cost = self.size_estimate(t).multiply(el_cost);
                    Some((cost, None))
                } else {
                    let cost = self
                        .size_estimate(t)
                        .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                    Some((cost, None))
                }
            }
            "url" if args.len() == 1 => {
                let sz = self.size_estimate(&args[0]);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    Some(sz),
                ))
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = self.size_estimate(target?);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    Some(sz),
                ))
            }
            "replace" if target.is_some() && args.len() >= 2 => {
                let sz = self.size_estimate(target?);
                let to_replace = self.size_estimate(&args[0]);
                let replace_with = self.size_estimate(&args[1]);
                let mut count = Estimate::default();
                let mut retained = Estimate::default();
                if to_replace.min == 0 {
                    count.max = if sz.max < u64::MAX {
                        sz.max + 1
                    } else {
                        sz.max
                    };
                    retained.max = sz.max;
                } else if replace_with.max <= to_replace.min {
                    count.max = 0;
                    retained.max = sz.max;
                } else {
                    count.max = (sz.max as f64 / to_replace.min as f64).ceil() as u64;
                }
                if to_replace.max == 0 {
                    count.min = if sz.min < u64::MAX {
                        sz.min + 1
                    } else {
                        sz.min
                    };
                    retained.min = sz.min;
                } else if to_replace.max <= replace_with.min {
                    count.min = 0;
                    retained.min = sz.min;
                } else {
                    count.min = (sz.min as f64 / to_replace.max as f64).ceil() as u64;
                }
                let size = count.multiply(replace_with).add(retained);
                Some((
                    sz.multiply_by_cost_factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    Some(size),
                ))
            }
            "split" => {
                let sz = self.size_estimate(target?);
                let mut max = sz.max;
                if args.len() > 1
                    && let Some(Node {
                        kind: NodeKind::Lit(Lit::Int(i)),
                        ..
                    }) = args[1].expr
                {
                    max = *i as u64;
                }
                Some((
                    sz.multiply_by_cost_factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    Some(Estimate { min: 0, max }),
                ))
            }
            "join" => {
                let t = target?;
                let mut sz = Estimate::default();
                let list_size = self.size_estimate(t);
                if let Some(el) = list_element_node(t) {
                    let elem_size = self.size_estimate(&el);
                    sz = list_size.multiply(elem_size);
                }
                if let Some(sep) = args.first() {
                    let sep_size = self.size_estimate(sep);
                    let separators = Estimate {
                        min: list_size.min.saturating_sub(1),
                        max: list_size.max.saturating_sub(1),
                    };
                    sz = sz.add(sep_size.multiply(separators));
                }
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    Some(sz),
                ))
            }
            "find" | "findAll" if target.is_some() && !args.is_empty() => {
                let sz = self.size_estimate(target?);
                let str_cost = sz
                    .add(fixed(1))
                    .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                let regex_cost = self
                    .size_estimate(&args[0])
                    .multiply_by_cost_factor(REGEX_STRING_LENGTH_COST_FACTOR);
                Some((
                    str_cost.multiply(regex_cost),
                    Some(Estimate {
                        min: 0,
                        max: sz.max,
                    }),
                ))
            }
            "cidr" | "isIP" | "isCIDR" if !args.is_empty() => {
                let sz = self.size_estimate(&args[0]);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    None,
                ))
            }
            "ip" => {
                if overload == "cidr_ip" {
                    return one;
                }
                let arg = args.first()?;
                let sz = self.size_estimate(arg);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    None,
                ))
            }
            "ip.isCanonical" if !args.is_empty() => {
                let sz = self.size_estimate(&args[0]);
                Some((
                    sz.multiply_by_cost_factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    None,
                ))
            }
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "isGlobalUnicast" => one,
            "containsIP" if !args.is_empty() => {
                let sz = Estimate { min: 4, max: 16 };
                let mut cost = sz
                    .add(sz)
                    .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                if overload == "cidr_contains_ip_string" {
                    cost = cost.add(
                        self.size_estimate(&args[0])
                            .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    );
                }
                Some((cost, None))
            }
            "containsCIDR" if !args.is_empty() => {
                let sz = Estimate { min: 4, max: 16 };
                let mut cost = sz
                    .add(sz)
                    .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR);
                cost = cost.add(sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR));
                cost = cost.add(fixed(1));
                if overload == "cidr_contains_cidr_string" {
                    cost = cost.add(
                        self.size_estimate(&args[0])
                            .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    );
                }
                Some((cost, None))
            }
            "quantity" | "isQuantity" | "semver" | "isSemver" if !args.is_empty() => {
                let sz = self.size_estimate(&args[0]);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                    None,
                ))
            }
            "validate" if !args.is_empty() => {
                let sz = self.size_estimate(&args[0]);
                Some((
                    sz.multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR)
                        .multiply_by_cost_factor(
                            MAX_NAME_FORMAT_REGEX_SIZE * REGEX_STRING_LENGTH_COST_FACTOR,
                        ),
                    None,
                ))
            }
            "format.named" => one,
            "sign" | "asInteger" | "isInteger" | "asApproximateFloat" | "isGreaterThan"
            | "isLessThan" | "compareTo" | "add" | "sub" | "major" | "minor" | "patch" => one,
            "getScheme" | "getHostname" | "getHost" | "getPort" | "getEscapedPath" | "getQuery" => {
                one
            }
            "_==_" if args.len() == 2 => {
                let (lhs, rhs) = (&args[0], &args[1]);
                if lhs.ty != rhs.ty {
                    return None;
                }
                match &lhs.ty {
                    Ty::Opaque(name) if *name == IP || *name == CIDR => one,
                    Ty::Opaque(name) if *name == QUANTITY || *name == SEMVER => one,
                    Ty::Opaque(name) if *name == FORMAT => Some((
                        Estimate {
                            min: 1,
                            max: MAX_FORMAT_SIZE,
                        }
                        .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                        None,
                    )),
                    Ty::Opaque(name) if *name == URL => {
                        // As in Kubernetes, both sides are read from the right-hand side.
                        let size = match rhs.computed {
                            Some(r) => r.union(r),
                            None => fixed(1),
                        };
                        Some((
                            Estimate {
                                min: 1,
                                max: size.max,
                            }
                            .multiply_by_cost_factor(STRING_TRAVERSAL_COST_FACTOR),
                            None,
                        ))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Kubernetes `library.CostEstimator.sizeEstimate`.
    fn size_estimate(&self, node: &AstNode<'_>) -> Estimate {
        node.computed
            .or_else(|| self.estimate_size(node.path.as_deref()))
            .unwrap_or(UNKNOWN)
    }

    /// The CRD size estimator (`sizeEstimator.EstimateSize`): walks the path
    /// from `self` through the rule's declaration.
    fn estimate_size(&self, path: Option<&[String]>) -> Option<Estimate> {
        let path = path?;
        if path.is_empty() {
            return None;
        }
        let mut current = self.root;
        for name in &path[1..] {
            current = match name.as_str() {
                "@items" | "@values" => current.elem()?,
                "@keys" => current.key()?,
                field => current.field(field)?,
            };
        }
        Some(Estimate {
            min: 0,
            max: current.max_elements.max(0) as u64,
        })
    }

    fn size_or_unknown(&mut self, e: &Node) -> Estimate {
        self.compute_size(e).unwrap_or(UNKNOWN)
    }

    fn compute_size(&mut self, e: &Node) -> Option<Estimate> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = expr_size(e) {
            return Some(size);
        }
        if let Some(size) = self.estimate_size(self.get_path(e).as_deref()) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.checked.type_of(e.id).is_scalar() {
            return Some(fixed(1));
        }
        if let NodeKind::Ident(name) = &e.kind
            && let Some(v) = self.peek_local(name)
        {
            return v.size;
        }
        None
    }

    fn compute_entry_size(&self, e: &Node) -> Option<EntrySize> {
        if let Some(size) = self.entry_sizes.get(&e.id) {
            return Some(*size);
        }
        if let NodeKind::Ident(name) = &e.kind
            && let Some(v) = self.peek_local(name)
        {
            return v.entry;
        }
        None
    }
}

/// The element node of a list (cel-go's `listElementNode`): the first type
/// parameter, with the path extended by `@items` where there is one.
fn list_element_node<'n>(list: &AstNode<'n>) -> Option<AstNode<'n>> {
    let first = list.ty.parameters().into_iter().next()?;
    Some(AstNode {
        path: list.path.clone().map(|p| with(Some(p), "@items")),
        ty: first,
        expr: None,
        computed: None,
    })
}

/// cel-go's `nodeAsIntValue`: an int literal (negative ones as 0), else `default`.
fn int_literal(node: &AstNode<'_>, default: u64) -> u64 {
    match node.expr.map(|e| &e.kind) {
        Some(NodeKind::Lit(Lit::Int(i))) => u64::try_from(*i).unwrap_or(0),
        _ => default,
    }
}

/// Sizes known from the expression itself: literals and inline lists and maps.
fn expr_size(e: &Node) -> Option<Estimate> {
    let v = match &e.kind {
        NodeKind::Lit(lit) => match lit {
            Lit::String(s) => s.chars().count() as u64,
            Lit::Bytes(n) => *n as u64,
            _ => 1,
        },
        NodeKind::List(elements) => elements.len() as u64,
        NodeKind::Map(entries) => entries.len() as u64,
        _ => return None,
    };
    Some(fixed(v))
}

fn is_bind(c: &Comprehension) -> bool {
    matches!(&c.range.kind, NodeKind::List(e) if e.is_empty())
        && matches!(c.cond.kind, NodeKind::Lit(Lit::Bool(false)))
        && c.accu_var != LEGACY_ACCUMULATOR
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::check::{check, parse, schema_decl_type};
    use serde_json::{Value, json};

    /// The estimated cost of the one rule of `schema` (on that node).
    fn cost_of(schema: &Value) -> u64 {
        let rule = schema["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .expect("a rule");
        let root = schema_decl_type(schema, false, "selfType").expect("a CEL type");
        let parsed = parse(rule).expect("parses");
        let (checked, _) = check(rule, &parsed, &root.cel_type(), false).expect("checks");
        estimate_cost(&parsed.node, &checked, &root).max
    }

    fn with_rule(mut s: Value, rule: &str) -> Value {
        s["x-kubernetes-validations"] = json!([{"rule": rule}]);
        s
    }

    fn set(mut s: Value, key: &str, max: Option<i64>) -> Value {
        if let Some(max) = max {
            s[key] = json!(max);
        }
        s
    }

    /// `parseRuleType` of the Go test: formats are strings, int-or-string has no type.
    fn typed(t: &str) -> Value {
        match t {
            "duration" | "date" | "date-time" => json!({"type": "string", "format": t}),
            "int-or-string" => json!({"x-kubernetes-int-or-string": true}),
            t => json!({"type": t}),
        }
    }

    fn array(item: &str, rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        let item = item.to_string();
        move |max| {
            with_rule(
                set(
                    json!({"type": "array", "items": typed(&item)}),
                    "maxItems",
                    max,
                ),
                rule,
            )
        }
    }

    fn array_of_arrays(item: &str, rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        let item = item.to_string();
        move |max| {
            let inner = json!({"type": "array", "items": typed(&item)});
            with_rule(
                set(json!({"type": "array", "items": inner}), "maxItems", max),
                rule,
            )
        }
    }

    fn object_item() -> Value {
        json!({"type": "object", "required": ["required"], "properties": {
            "required": {"type": "string"}, "optional": {"type": "string"}}})
    }

    fn object_array(rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        move |max| {
            with_rule(
                set(
                    json!({"type": "array", "items": object_item()}),
                    "maxItems",
                    max,
                ),
                rule,
            )
        }
    }

    fn map_array(item: &str, rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        let item = item.to_string();
        move |max| {
            let map = json!({"type": "object", "additionalProperties": typed(&item)});
            with_rule(
                set(json!({"type": "array", "items": map}), "maxItems", max),
                rule,
            )
        }
    }

    fn map_of(item: Value, rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        move |max| {
            let map = json!({"type": "object", "additionalProperties": item.clone()});
            with_rule(set(map, "maxProperties", max), rule)
        }
    }

    fn map(item: &str, rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        map_of(typed(item), rule)
    }

    fn string(rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        move |max| with_rule(set(json!({"type": "string"}), "maxLength", max), rule)
    }

    fn nested_spec(rule: &'static str) -> impl Fn(Option<i64>) -> Value {
        move |max| {
            let value = set(json!({"type": "string"}), "maxLength", max);
            let map = json!({"type": "object", "additionalProperties": value});
            with_rule(set(map, "maxProperties", max), rule)
        }
    }

    fn nested_root(rule: &'static str, all_max: bool) -> impl Fn(Option<i64>) -> Value {
        move |max| {
            let inner_max = if all_max { max } else { None };
            let value = set(object_item(), "maxProperties", inner_max);
            let item = set(
                json!({"type": "object", "additionalProperties": value}),
                "maxProperties",
                max,
            );
            with_rule(
                set(
                    json!({"type": "array", "items": item}),
                    "maxItems",
                    inner_max,
                ),
                rule,
            )
        }
    }

    #[test]
    fn agrees_with_kubernetes_cost_estimation_tests() {
        // apiextensions-apiserver pkg/apiserver/schema/cel/compilation_test.go
        // TestCostEstimation: (schema, cost without bounds, bound, cost with it).
        type Gen = Box<dyn Fn(Option<i64>) -> Value>;
        let join = |max: Option<i64>| {
            let s = set(json!({"type": "string"}), "maxLength", max);
            let a = set(
                json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": s}),
                "maxItems",
                max,
            );
            with_rule(a, "self.join(' ') == 'aa bb'")
        };
        let sorted = |max: Option<i64>| {
            let s = set(json!({"type": "string"}), "maxLength", max);
            let a = set(
                json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": s}),
                "maxItems",
                max,
            );
            with_rule(a, "self.isSorted() == true")
        };
        let replace = |max: Option<i64>| {
            let s = set(json!({"type": "string"}), "maxLength", max);
            let o = json!({"type": "object", "properties": {"str": s,
                "before": {"type": "string", "maxLength": 2}, "after": {"type": "string", "maxLength": 4}}});
            with_rule(
                o,
                "self.str.replace(self.before, self.after) == 'does not matter'",
            )
        };
        let split = |max: Option<i64>| {
            let s = set(json!({"type": "string"}), "maxLength", max);
            let o = json!({"type": "object", "properties": {"str": s, "separator": s}});
            with_rule(o, "self.str.split(self.separator) == []")
        };
        let enums = |max: Option<i64>| {
            let s = json!({"type": "string", "enum": ["A", "B", "C", "LongValue"]});
            with_rule(set(s, "maxLength", max), "self.contains('A')")
        };
        let quantity = |max: Option<i64>| {
            let s = json!({"x-kubernetes-int-or-string": true});
            with_rule(set(s, "maxLength", max), "isQuantity(self)")
        };
        let number_map = json!({"type": "object", "additionalProperties": {"type": "number"}});
        let number_array = json!({"type": "array", "items": {"type": "number"}});
        let cases: Vec<(&str, Gen, u64, i64, u64)> = vec![
            (
                "number array all",
                Box::new(array("number", "self.all(x, true)")),
                4718591,
                10,
                32,
            ),
            (
                "string array all",
                Box::new(array("string", "self.all(x, true)")),
                3145727,
                20,
                62,
            ),
            (
                "boolean array all",
                Box::new(array("boolean", "self.all(x, true)")),
                1887437,
                5,
                17,
            ),
            (
                "array of arrays all",
                Box::new(array_of_arrays("number", "self.all(x, true)")),
                3145727,
                100,
                302,
            ),
            (
                "object array all",
                Box::new(object_array("self.all(x, true)")),
                555128,
                50,
                152,
            ),
            (
                "number map all",
                Box::new(map("number", "self.all(x, true)")),
                1348169,
                10,
                32,
            ),
            (
                "number map has",
                Box::new(map("number", "has(self.x)")),
                0,
                100,
                0,
            ),
            (
                "string map all",
                Box::new(map("string", "self.all(x, true)")),
                1179647,
                3,
                11,
            ),
            (
                "boolean map all",
                Box::new(map("boolean", "self.all(x, true)")),
                943718,
                100,
                302,
            ),
            (
                "contains",
                Box::new(string("self.contains('test')")),
                314574,
                10,
                5,
            ),
            (
                "startsWith",
                Box::new(string("self.startsWith('test')")),
                2,
                15,
                2,
            ),
            (
                "endsWith",
                Box::new(string("self.endsWith('test')")),
                2,
                30,
                2,
            ),
            (
                "concat",
                Box::new(string("size(self + \"hello\") > size(\"hello\")")),
                314578,
                4,
                7,
            ),
            (
                "index numbers",
                Box::new(array("number", "self[1] == 0.0")),
                2,
                5000,
                2,
            ),
            (
                "index strings",
                Box::new(array("string", "self[1] == self[1]")),
                314577,
                8,
                314577,
            ),
            (
                "O(n^2)",
                Box::new(array("number", "self.all(x, self.all(y, true))")),
                0,
                10,
                352,
            ),
            (
                "O(n^3)",
                Box::new(array(
                    "number",
                    "self.all(x, self.all(y, self.all(z, true)))",
                )),
                0,
                10,
                3552,
            ),
            (
                "matches",
                Box::new(string("self.matches(\"x\")")),
                314574,
                50,
                22,
            ),
            (
                "matches on empty",
                Box::new(string("\"\".matches(\"(((((((((())))))))))[0-9]\")")),
                7,
                10,
                7,
            ),
            (
                "matches empty regex",
                Box::new(string("self.matches(\"\")")),
                1,
                100,
                1,
            ),
            (
                "map value length",
                Box::new(nested_spec("self.all(x, x.contains(self[x]))")),
                2752507,
                10,
                72,
            ),
            (
                "array max zero",
                Box::new(array("number", "self[3] == 0.0")),
                2,
                0,
                2,
            ),
            (
                "map max zero",
                Box::new(map("number", "self[\"x\"] == 0.0")),
                2,
                0,
                2,
            ),
            (
                "string max zero",
                Box::new(string("self == \"x\"")),
                2,
                0,
                1,
            ),
            (
                "bigger than estimated",
                Box::new(array("number", "self.all(x, x == 0.0)")),
                6291454,
                3 * 1024 * 2048,
                25165826,
            ),
            (
                "nested all max",
                Box::new(nested_root("self.all(x, x[\"y\"].required == \"z\")", true)),
                7340027,
                10,
                72,
            ),
            (
                "nested one max",
                Box::new(nested_root(
                    "self.all(x, x[\"y\"].required == \"z\")",
                    false,
                )),
                7340027,
                10,
                7340027,
            ),
            (
                "int-or-string array all",
                Box::new(array("int-or-string", "self.all(x, true)")),
                4718591,
                10,
                32,
            ),
            (
                "int-or-string index",
                Box::new(array("int-or-string", "self[0] == 5")),
                3,
                10,
                3,
            ),
            (
                "boolean index",
                Box::new(array("boolean", "self[0] == false")),
                2,
                25,
                2,
            ),
            (
                "object index",
                Box::new(object_array("self[0] == null")),
                2,
                422,
                2,
            ),
            (
                "array of arrays index",
                Box::new(array_of_arrays("number", "self[0][0] == -1.0")),
                3,
                51,
                3,
            ),
            (
                "number maps all",
                Box::new(map_array("number", "self.all(x, x.y == 25.2)")),
                6291452,
                12,
                74,
            ),
            (
                "number maps index",
                Box::new(map_array("number", "self[0].x > 2.0")),
                4,
                3000,
                4,
            ),
            (
                "duration array all",
                Box::new(array("duration", "self.all(x, true)")),
                2359295,
                5,
                17,
            ),
            (
                "duration index",
                Box::new(array("duration", "self[0].getHours() == 2")),
                4,
                525,
                4,
            ),
            (
                "date array all",
                Box::new(array("date", "self.all(x, true)")),
                725936,
                15,
                47,
            ),
            (
                "date index",
                Box::new(array("date", "self[2].getDayOfMonth() == 13")),
                4,
                42,
                4,
            ),
            (
                "date-time array all",
                Box::new(array("date-time", "self.all(x, true)")),
                428963,
                25,
                77,
            ),
            (
                "date-time index",
                Box::new(array("date-time", "self[2].getMinutes() == 45")),
                4,
                99,
                4,
            ),
            (
                "int-or-string map all",
                Box::new(map("int-or-string", "self.all(x, true)")),
                1348169,
                15,
                47,
            ),
            (
                "object map all",
                Box::new(map_of(object_item(), "self.all(x, true)")),
                428963,
                20,
                62,
            ),
            (
                "map of maps all",
                Box::new(map_of(number_map, "self.all(x, true)")),
                1179647,
                10,
                32,
            ),
            (
                "map of arrays all",
                Box::new(map_of(number_array, "self.all(x, true)")),
                1179647,
                25,
                77,
            ),
            (
                "duration map all",
                Box::new(map("duration", "self.all(x, true)")),
                1048577,
                5,
                17,
            ),
            (
                "date map all",
                Box::new(map("date", "self.all(x, true)")),
                524288,
                10,
                32,
            ),
            (
                "date-time map all",
                Box::new(map("date-time", "self.all(x, true)")),
                349526,
                25,
                77,
            ),
            (
                "find",
                Box::new(string("self.find('[0-9]+') == ''")),
                629147,
                10,
                11,
            ),
            ("join", Box::new(join), 329853068905, 10, 43),
            ("isSorted", Box::new(sorted), 329854432052, 10, 52),
            ("replace", Box::new(replace), 629154, 4, 12),
            ("split", Box::new(split), 629160, 10, 22),
            (
                "lowerAscii",
                Box::new(string("self.lowerAscii() == 'lower!'")),
                314575,
                10,
                6,
            ),
            (
                "size",
                Box::new(map("integer", "oldSelf.size() == self.size()")),
                5,
                10,
                5,
            ),
            (
                "timestamps",
                Box::new(map("date-time", "self[\"a\"] == self[\"b\"]")),
                8,
                7,
                8,
            ),
            (
                "durations",
                Box::new(map("duration", "self[\"c\"] == self[\"d\"]")),
                8,
                42,
                8,
            ),
            ("enum", Box::new(enums), 2, 1000, 401),
            ("quantity", Box::new(quantity), 314574, 20, 9),
        ];
        for (name, generator, unbounded, bound, bounded) in cases {
            // As in the Go test, 0 means "not checked".
            let calc = cost_of(&generator(None));
            if name.starts_with("O(") {
                assert!(calc >= 100_000_000, "{name}: {calc}");
            } else if unbounded > 0 {
                assert_eq!(calc, unbounded, "{name} without bounds");
            }
            if bounded > 0 {
                assert_eq!(
                    cost_of(&generator(Some(bound))),
                    bounded,
                    "{name} with {bound}"
                );
            }
        }
    }

    #[test]
    fn agrees_with_a_real_kube_apiserver() {
        // Costs measured on kube-apiserver 1.36: each rule under an array of
        // k items, k chosen so that the refusal prints the factor to six
        // decimals (factor * 10,000,000 / k).
        let string = |max: i64| json!({"type": "string", "maxLength": max});
        let names = json!({"type": "array", "maxItems": 50, "items": {
            "type": "object", "required": ["name"], "properties": {"name": string(63)}}});
        let short_strings = json!({"type": "array", "maxItems": 20, "items": string(10)});
        let cases = [
            (
                names,
                "self.all(r, self.exists_one(o, o.name == r.name))",
                80_302,
            ),
            (
                string(63),
                "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
                209,
            ),
            (
                string(45),
                "isCIDR(self) && cidr(self).containsIP('10.0.0.1')",
                43,
            ),
            (
                string(63),
                "!format.dns1123Label().validate(self).hasValue()",
                836,
            ),
            (
                short_strings,
                "self.map(x, x + 'a').filter(y, y.size() > 2).size() < 5",
                705,
            ),
        ];
        for (schema, rule, expected) in cases {
            assert_eq!(cost_of(&with_rule(schema, rule)), expected, "{rule}");
        }
    }

    #[test]
    fn all_is_cidr_over_unbounded_strings() {
        // Each of 64 items: isCIDR over 3 MiB-2 characters (314,573) plus the
        // macro's && (1), the iteration variable (1) and the loop condition (2).
        let schema = |max_length: Option<i64>| {
            let items = set(json!({"type": "string"}), "maxLength", max_length);
            with_rule(
                json!({"type": "array", "maxItems": 64, "items": items}),
                "self.all(c, isCIDR(c))",
            )
        };
        assert_eq!(cost_of(&schema(None)), 20_132_930);
        // maxLength 43 is 172 bytes: 18 per isCIDR.
        assert_eq!(cost_of(&schema(Some(43))), 64 * 22 + 2);
    }
}
