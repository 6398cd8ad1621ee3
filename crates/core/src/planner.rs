//! The planner: a SyncPolicy verdict, a placement, a collision check, the translation's refusals,
//! the reference check and the tenant's isolation boundary (what the host's admission refuses
//! under its IsolationProfile), combined into a plan and then a decision. This is the
//! computation the planner service serves, the syncer acts on and `tenantplane explain-sync`
//! prints: every refusal the syncer can record about a tenant object is decided here, so that
//! the offline answer is the live one.

use std::cell::RefCell;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tenantplane_api::{SyncAction, Tenant};

use crate::boundary::{Boundary, ProfileRefusal};
use crate::collision::{self, Collision, ConflictCause, HostObjectMeta};
use crate::decision::{
    Decision, HostAction, HostTarget, Outcome, PolicyRef, ProfileRef, Stamp, Subject,
};
use crate::mapping::{self, MappingVersion, Placement, TenantPlacement};
use crate::object::{SourceIdentity, TenantObject, group_of};
use crate::parallel;
use crate::policy::{CompiledPolicy, Verdict};
use crate::reference::{self, HostObjects, Reference};
use crate::translate::{self, Findings, HostDesired, Untranslatable};

mod shared_names;

pub use shared_names::{HeldPlans, SharedNames};

/// A tenant, its compiled SyncPolicy and its isolation boundary: everything needed to plan its
/// objects.
#[derive(Debug)]
pub struct Planner {
    tenant: TenantPlacement,
    policy: CompiledPolicy,
    boundary: Option<Boundary>,
}

/// What the planner decided for one tenant object, before anything is written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Where the object lands (computed for every object, refused ones included, so that a
    /// refusal names the host object it would have written).
    pub placement: Placement,
    /// The SyncPolicy verdict.
    pub verdict: Verdict,
    /// The collision check, for objects the policy syncs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision: Option<Collision>,
    /// The resulting outcome.
    pub outcome: Outcome,
    /// The host action it leads to.
    pub action: HostAction,
    /// Machine reason of the outcome.
    pub reason: String,
    /// Human message of the outcome.
    pub message: String,
    /// The IsolationProfile under which the host would refuse the object, when it would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileRef>,
}

/// Why a plan that would write is refused instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The translation or the reference check refuses it.
    Untranslatable(Untranslatable),
    /// The host would refuse it under the tenant's IsolationProfile.
    Profile(Box<ProfileRefusal>),
}

impl From<Untranslatable> for Refusal {
    fn from(r: Untranslatable) -> Self {
        Refusal::Untranslatable(r)
    }
}

impl From<Box<ProfileRefusal>> for Refusal {
    fn from(r: Box<ProfileRefusal>) -> Self {
        Refusal::Profile(r)
    }
}

impl Planner {
    /// A planner for `tenant` under `policy`, without an isolation boundary: what the host's
    /// admission refuses shows only when the syncer writes (`HostRefused`).
    pub fn new(tenant: &Tenant, policy: CompiledPolicy) -> Self {
        Planner {
            tenant: tenant.into(),
            policy,
            boundary: None,
        }
    }

    /// The same planner, refusing what the host's admission would refuse under `boundary` (the
    /// tenant's compiled IsolationProfile).
    pub fn with_boundary(self, boundary: Boundary) -> Self {
        Planner {
            boundary: Some(boundary),
            ..self
        }
    }

    /// The isolation boundary in force, if any.
    pub fn boundary(&self) -> Option<&Boundary> {
        self.boundary.as_ref()
    }

    /// The tenant's name.
    pub fn tenant(&self) -> &str {
        &self.tenant.tenant
    }

    /// The tenant's host namespace.
    pub fn host_namespace(&self) -> &str {
        &self.tenant.host_namespace
    }

    /// The policy in force.
    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }

    /// The tenant's name and host namespace, and its mapping scheme.
    pub fn placement(&self) -> &TenantPlacement {
        &self.tenant
    }

    /// Plans one tenant object against a snapshot of host state (the host object at its target
    /// name, and those its references resolve to).
    pub fn plan(&self, object: &TenantObject, host: &HostState) -> Plan {
        self.plan_and_references(object, host).0
    }

    /// [`Planner::plan`], and the references of the object's translation (none unless the plan
    /// syncs it), which settling shared v1 host names over a stream of plans needs later
    /// ([`SharedNames`]).
    pub fn plan_and_references(
        &self,
        object: &TenantObject,
        host: &HostState,
    ) -> (Plan, Vec<Reference>) {
        let placement = mapping::place(&self.tenant, object);
        let existing = host.get(&placement);
        let mut plan = self.plan_placed(object, placement, existing);
        let mut references = Vec::new();
        if plan.outcome == Outcome::Synced {
            let namespace = plan.placement.namespace.clone();
            let host = host.in_namespace(&namespace);
            // The isolation boundary judges the host object itself; without one, what the
            // translation refuses, notes and names is enough.
            let findings = match &self.boundary {
                Some(_) => self.translate(object, &plan, &host).map(|d| Findings {
                    notes: d.notes,
                    references: d.references,
                }),
                None => translate::examine(&self.tenant, object, &plan.placement)
                    .and_then(|f| reference::check(&self.tenant, &f.references, &host).map(|()| f))
                    .map_err(Refusal::from),
            };
            match findings {
                Ok(findings) => {
                    plan.note(&findings.notes);
                    references = findings.references;
                }
                Err(refusal) => plan.refuse(refusal),
            }
        }
        (plan, references)
    }

    /// Plans a batch of objects against a snapshot of host state, on every core, in input order;
    /// under mapping v1, objects of the batch that share a host name are then settled by
    /// [`Planner::claimant`].
    pub fn plan_batch(&self, objects: &[&TenantObject], host: &HostState) -> Vec<Plan> {
        let mut plans = parallel::map_in_order(objects, |object| self.plan(object, host));
        self.settle_shared_names(objects, &mut plans);
        plans
    }

    /// Under mapping v1, refuses the plans (`plans[i]` of `objects[i]`) that would create a host
    /// object another object of the batch takes: [`settle_shared_names`].
    pub fn settle_shared_names(&self, objects: &[&TenantObject], plans: &mut [Plan]) {
        settle_shared_names(&self.tenant, objects, plans);
    }

    /// The translation of a planned object, with its references checked against `host` and the
    /// host's admission of it under the isolation boundary: what the syncer writes, or the
    /// refusal it records.
    pub fn translate(
        &self,
        object: &TenantObject,
        plan: &Plan,
        host: &(impl HostObjects + ?Sized),
    ) -> Result<HostDesired, Refusal> {
        let desired = translate::to_host(&self.tenant, object, &plan.placement)?;
        reference::check(&self.tenant, &desired.references, host)?;
        if let Some(boundary) = &self.boundary {
            boundary.admit(&desired.object, plan.action)?;
        }
        Ok(desired)
    }

    /// The object that takes `plan`'s empty host name instead of `object` under mapping v1
    /// ([`settle_shared_names`]'s rule), among `others`: the other tenant objects of the same
    /// kind that the live syncer knows at that host name, each evaluated by the policy.
    pub fn claimant<'o>(
        &self,
        object: &TenantObject,
        plan: &Plan,
        others: impl IntoIterator<Item = &'o TenantObject>,
    ) -> Option<&'o TenantObject> {
        if self.tenant.mapping != MappingVersion::V1
            || !matches!(plan.collision, Some(Collision::Create))
        {
            return None;
        }
        self.taker(others.into_iter().filter(|o| {
            o.identity.group() == object.identity.group()
                && o.identity.kind == object.identity.kind
                && precedes(&o.identity, &object.identity)
                && mapping::place(&self.tenant, o).name == plan.placement.name
        }))
    }

    /// Which of `objects`, tenant objects of one kind that share a v1 host name, takes it
    /// ([`settle_shared_names`]'s rule): the first by namespace and name that the policy syncs.
    pub fn taker<'o>(
        &self,
        objects: impl IntoIterator<Item = &'o TenantObject>,
    ) -> Option<&'o TenantObject> {
        objects
            .into_iter()
            .filter(|o| self.policy.evaluate(o).action == SyncAction::Sync)
            .min_by(|a, b| order(&a.identity).cmp(&order(&b.identity)))
    }

    fn plan_placed(
        &self,
        object: &TenantObject,
        placement: Placement,
        existing: Option<&HostObjectMeta>,
    ) -> Plan {
        let verdict = self.policy.evaluate(object);
        let outcome = match verdict.action {
            SyncAction::Reject => Outcome::Rejected,
            SyncAction::Skip => Outcome::Skipped,
            SyncAction::Sync => Outcome::Synced,
        };
        let mut plan = Plan {
            placement,
            collision: None,
            outcome,
            action: HostAction::None,
            reason: verdict.reason.clone(),
            message: verdict.message.clone(),
            verdict,
            profile: None,
        };
        if plan.verdict.action == SyncAction::Sync {
            let collision = collision::check(
                &self.tenant.tenant,
                &object.identity,
                &plan.placement,
                existing,
            );
            plan.decide_at_target(collision);
        }
        plan
    }
}

/// Under mapping v1, two objects of one kind can map to one host name (`c/a-x-b` and
/// `b-x-c/a`). Which one takes an empty host name does not depend on the order the syncer sees
/// them in: among the objects the policy syncs that map to it, the first by (namespace, name).
/// Refuses, as a Conflict naming that object, every other plan (`plans[i]` of `objects[i]`) that
/// would create it. A host object already there has been decided by the collision check (its
/// owner keeps it). Then a reference to such a name is checked against the object that takes
/// it, as it would be against its host object once written: a pod in `b-x-c` naming ConfigMap
/// `a` is refused when `c/a-x-b` takes `a-x-b-x-c` ([`reference::check`]).
///
/// Returns the indices of the plans it refused, in order.
pub fn settle_shared_names(
    tenant: &TenantPlacement,
    objects: &[&TenantObject],
    plans: &mut [Plan],
) -> Vec<usize> {
    if tenant.mapping != MappingVersion::V1 {
        return Vec::new();
    }
    let mut refused = settle_claims(objects, plans);
    refused.extend(settle_references(tenant, objects, plans));
    refused.sort_unstable();
    refused.dedup();
    refused
}

/// The first half of [`settle_shared_names`]: the Conflicts of the objects that do not take a
/// shared name.
fn settle_claims(objects: &[&TenantObject], plans: &mut [Plan]) -> Vec<usize> {
    let mut by_target: HashMap<(&str, &str, &str), Vec<usize>> = HashMap::new();
    for (i, plan) in plans.iter().enumerate() {
        let p = &plan.placement;
        by_target
            .entry((group_of(&p.api_version), &p.kind, &p.name))
            .or_default()
            .push(i);
    }
    let refused: Vec<(usize, SourceIdentity)> = by_target
        .values()
        .filter_map(|shared| claim(shared.iter().map(|&i| (i, &objects[i].identity, &plans[i]))))
        .flat_map(|(taker, refused)| refused.into_iter().map(move |i| (i, taker.clone())))
        .collect();
    refused
        .into_iter()
        .map(|(i, by)| {
            plans[i].refuse_claimed(&by);
            i
        })
        .collect()
}

/// The rule of [`settle_shared_names`] for the objects of one kind that map to one host name
/// (`(index, identity, plan)` each, in input order): among those the policy syncs, the first by
/// namespace and name takes it, and every other plan that would create it is refused. Returns
/// the taker and the indices to refuse, or `None` when fewer than two of them are synced.
fn claim<'a, I: Copy>(
    objects: impl IntoIterator<Item = (I, &'a SourceIdentity, &'a Plan)>,
) -> Option<(&'a SourceIdentity, Vec<I>)> {
    let synced: Vec<_> = objects
        .into_iter()
        .filter(|(_, _, plan)| plan.verdict.action == SyncAction::Sync)
        .collect();
    if synced.len() < 2 {
        return None;
    }
    let first = (0..synced.len())
        .min_by(|&a, &b| order(synced[a].1).cmp(&order(synced[b].1)))
        .expect("two or more objects");
    let refused = synced
        .iter()
        .enumerate()
        .filter(|&(at, (_, _, plan))| {
            at != first && matches!(plan.collision, Some(Collision::Create))
        })
        .map(|(_, &(i, _, _))| i)
        .collect();
    Some((synced[first].1, refused))
}

/// The second half of [`settle_shared_names`]: refuses the synced plans with a reference to a
/// shared v1 host name that another object of the batch creates.
fn settle_references(
    tenant: &TenantPlacement,
    objects: &[&TenantObject],
    plans: &mut [Plan],
) -> Vec<usize> {
    let created = Created(
        plans
            .iter()
            .filter(|p| p.creates_shared_name())
            .map(|p| p.placement.synced_meta())
            .collect(),
    );
    if created.0.is_empty() {
        return Vec::new();
    }
    let mut refused = Vec::new();
    for (i, (object, plan)) in objects.iter().zip(plans.iter_mut()).enumerate() {
        if plan.outcome != Outcome::Synced {
            continue;
        }
        let Ok(findings) = translate::examine(tenant, object, &plan.placement) else {
            continue;
        };
        if let Err(refusal) = reference::check(tenant, &findings.references, &created) {
            plan.refuse(refusal);
            refused.push(i);
        }
    }
    refused
}

/// The host objects a batch's plans create at shared v1 host names.
#[derive(Debug)]
struct Created(Vec<HostObjectMeta>);

impl HostObjects for Created {
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
        self.0
            .iter()
            .find(|m| m.name == name && m.kind == kind && group_of(&m.api_version) == group)
            .cloned()
    }
}

/// The order in which objects sharing a v1 host name take it: by namespace, then name.
fn order(id: &SourceIdentity) -> (&str, &str) {
    (&id.namespace, &id.name)
}

/// Whether `a` takes a shared v1 host name before `b`.
fn precedes(a: &SourceIdentity, b: &SourceIdentity) -> bool {
    order(a) < order(b)
}

impl Plan {
    /// Whether it creates a host object at a name another object of the tenant may map to under
    /// mapping v1, which a reference to that name then resolves to ([`settle_shared_names`]).
    fn creates_shared_name(&self) -> bool {
        self.outcome == Outcome::Synced
            && matches!(self.collision, Some(Collision::Create))
            && mapping::may_be_shared_under_v1(&self.placement.name)
    }

    /// Decides a plan the policy syncs by what the collision check found at its target: Synced
    /// with a create when nothing is there, with an update when its own host object is, and a
    /// Conflict, nothing written, when anything else is. The planner and the syncer (on its live
    /// view of the host) both decide with it.
    pub fn decide_at_target(&mut self, collision: Collision) {
        (self.outcome, self.action, self.reason, self.message) = match &collision {
            Collision::Create => (
                Outcome::Synced,
                HostAction::Create,
                self.verdict.reason.clone(),
                self.verdict.message.clone(),
            ),
            Collision::UpdateOwn => (
                Outcome::Synced,
                HostAction::Update,
                self.verdict.reason.clone(),
                self.verdict.message.clone(),
            ),
            Collision::Conflict { owner, differs } => (
                Outcome::Conflict,
                HostAction::None,
                differs.reason().to_string(),
                format!(
                    "host {} {}/{} belongs to {owner}; refused and left untouched",
                    self.placement.kind, self.placement.namespace, self.placement.name
                ),
            ),
        };
        self.collision = Some(collision);
    }

    /// The message of its decision: the plan's, and the reserved keys the placement stripped.
    fn decision_message(&self) -> String {
        let mut message = self.message.clone();
        if !self.placement.stripped_keys.is_empty() {
            message.push_str(&format!(
                "; reserved keys stripped (only tenantplane writes provenance): {}",
                self.placement.stripped_keys.join(", ")
            ));
        }
        message
    }

    /// Brings a decision built from this plan up to date after the plan was refused
    /// ([`settle_shared_names`]): outcome, action, reason, message and field.
    pub fn restate(&self, decision: &mut Decision) {
        decision.outcome = self.outcome;
        decision.action = self.action;
        decision.reason = self.reason.clone();
        decision.message = self.decision_message();
        decision.field_path = self.verdict.field_path.clone();
        decision.profile = self.profile.clone();
    }

    /// Says, in the message of a plan that writes, what the translation changed on the way
    /// ([`HostDesired::notes`]: a dropped token volume, dropped service account secrets).
    pub fn note(&mut self, notes: &[String]) {
        if !notes.is_empty() {
            self.message = format!("{}; {}", self.verdict.message, notes.join("; "));
        }
    }

    /// Turns a plan that would write into the refusal the translation, the reference check or
    /// the isolation boundary returned: Rejected, nothing written, the offending field named
    /// (and for the boundary, the profile and its rule).
    pub fn refuse(&mut self, refusal: impl Into<Refusal>) {
        self.outcome = Outcome::Rejected;
        self.action = HostAction::None;
        match refusal.into() {
            Refusal::Untranslatable(refusal) => {
                self.profile = None;
                self.reason = refusal.reason.to_string();
                self.message = format!("cannot be placed on the host safely: {}", refusal.message);
                self.verdict.field_path = Some(refusal.field_path);
            }
            Refusal::Profile(refusal) => {
                let refusal = *refusal;
                self.reason = refusal.reason.to_string();
                self.message = refusal.message();
                self.verdict.field_path = Some(refusal.field_path);
                self.profile = Some(refusal.profile);
            }
        }
    }

    /// Turns a plan that would create its host object into a Conflict with `by`, another object
    /// of the tenant that takes the same host name under mapping v1 ([`Planner::claimant`]).
    pub fn refuse_claimed(&mut self, by: &SourceIdentity) {
        let p = &self.placement;
        self.message = format!(
            "host {} {}/{} is also where {by} maps under mapping v1, and {by} takes it (the first \
             by namespace and name); refused and left untouched (mapping v2 gives every object a \
             host name of its own)",
            p.kind, p.namespace, p.name
        );
        self.outcome = Outcome::Conflict;
        self.action = HostAction::None;
        self.reason = ConflictCause::OtherSource.reason().to_string();
        self.collision = Some(Collision::Conflict {
            owner: by.to_string(),
            differs: ConflictCause::OtherSource,
        });
    }

    /// The decision record of this plan, about `object` in `tenant`.
    pub fn to_decision(&self, tenant: &str, object: &TenantObject, stamp: Stamp) -> Decision {
        self.decision_about(
            tenant,
            object.identity.clone(),
            object.resource_version.clone().unwrap_or_default(),
            stamp,
            input_digest(&object.object),
            self.placement.mapping_version.to_string(),
        )
    }

    /// The decision record of this plan about the tenant object `subject` (at
    /// `resource_version`) in `tenant`, whose content digested to `input_digest` and which was
    /// mapped by scheme `mapping_version`: [`Plan::to_decision`] for a caller that has these
    /// but not the object (a client completing the planner's compact answer).
    pub fn decision_about(
        &self,
        tenant: &str,
        subject: SourceIdentity,
        resource_version: String,
        stamp: Stamp,
        input_digest: String,
        mapping_version: String,
    ) -> Decision {
        let SourceIdentity {
            api_version,
            kind,
            namespace,
            name,
            uid,
        } = subject;
        let message = self.decision_message();
        Decision {
            id: stamp.id,
            time: stamp.time,
            tenant: tenant.to_string(),
            subject: Subject {
                api_version,
                kind,
                namespace,
                name,
                uid,
                resource_version,
            },
            target: Some(HostTarget {
                api_version: self.placement.api_version.clone(),
                kind: self.placement.kind.clone(),
                namespace: self.placement.namespace.clone(),
                name: self.placement.name.clone(),
            }),
            outcome: self.outcome,
            action: self.action,
            policy: Some(PolicyRef {
                name: self.verdict.policy.clone(),
                revision: self.verdict.policy_revision.clone(),
                rule: self.verdict.rule.clone(),
            }),
            profile: self.profile.clone(),
            reason: self.reason.clone(),
            message,
            field_path: self.verdict.field_path.clone(),
            stripped_keys: self.placement.stripped_keys.clone(),
            input_digest,
            mapping_version,
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

/// `sha256:` of the object's JSON (serde_json keeps object keys sorted, so it is canonical).
pub fn input_digest(object: &serde_json::Value) -> String {
    thread_local! {
        /// The JSON of the last object digested on this thread, kept for its capacity.
        static JSON: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    JSON.with_borrow_mut(|json| {
        json.clear();
        serde_json::to_writer(&mut *json, object).expect("a JSON value always serializes");
        json_digest(json)
    })
}

/// The input digest of an object whose canonical JSON (`serde_json`'s, of the object's value) is
/// `json`: for a caller that has that JSON already, as a client that sent it to the planner.
pub fn json_digest(json: &[u8]) -> String {
    let mut hex = [0; 64];
    hex::encode_to_slice(Sha256::digest(json), &mut hex).expect("a SHA-256 digest is 32 bytes");
    [
        "sha256:",
        std::str::from_utf8(&hex).expect("hex digits are ASCII"),
    ]
    .concat()
}

/// A snapshot of host objects, looked up by (API group, kind, namespace, name).
#[derive(Clone, Debug, Default)]
pub struct HostState {
    /// By name, then the few objects of other kinds or namespaces sharing it: looking a
    /// placement up allocates nothing.
    objects: HashMap<String, Vec<HostObjectMeta>>,
}

/// Whether two host objects have the same (API group, kind, namespace); the name is the map key.
fn same_slot(meta: &HostObjectMeta, api_version: &str, kind: &str, namespace: &str) -> bool {
    group_of(&meta.api_version) == group_of(api_version)
        && meta.kind == kind
        && meta.namespace == namespace
}

impl HostState {
    /// Adds a host object (a later one at the same key replaces an earlier one).
    pub fn insert(&mut self, meta: HostObjectMeta) {
        let slot = self.objects.entry(meta.name.clone()).or_default();
        match slot
            .iter_mut()
            .find(|m| same_slot(m, &meta.api_version, &meta.kind, &meta.namespace))
        {
            Some(earlier) => *earlier = meta,
            None => slot.push(meta),
        }
    }

    /// The host object at a placement's target, if any.
    pub fn get(&self, placement: &Placement) -> Option<&HostObjectMeta> {
        self.objects.get(placement.name.as_str())?.iter().find(|m| {
            same_slot(
                m,
                &placement.api_version,
                &placement.kind,
                &placement.namespace,
            )
        })
    }

    /// The objects of one host namespace, for the reference check.
    pub fn in_namespace<'a>(&'a self, namespace: &'a str) -> impl HostObjects + 'a {
        HostNamespace {
            state: self,
            namespace,
        }
    }

    /// Every host object, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &HostObjectMeta> {
        self.objects.values().flatten()
    }

    /// Number of host objects.
    pub fn len(&self) -> usize {
        self.objects.values().map(Vec::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The objects of one namespace of a [`HostState`].
struct HostNamespace<'a> {
    state: &'a HostState,
    namespace: &'a str,
}

impl HostObjects for HostNamespace<'_> {
    fn host_object(&self, group: &str, kind: &str, name: &str) -> Option<HostObjectMeta> {
        self.state
            .objects
            .get(name)?
            .iter()
            .find(|m| {
                group_of(&m.api_version) == group && m.kind == kind && m.namespace == self.namespace
            })
            .cloned()
    }
}

impl HostObjectMeta {
    /// Reads a host object's metadata from its JSON. Host objects without a namespace are
    /// cluster-scoped and can never be a placement's target, so the namespace defaults to empty.
    pub fn from_value(value: &serde_json::Value) -> Result<Self, crate::object::ObjectError> {
        let mut scratch = value.clone();
        if let Some(meta) = scratch.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.entry("namespace").or_insert_with(|| "".into());
        }
        let object = TenantObject::from_value(scratch)?;
        let labels = object
            .labels()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let annotations = object
            .annotations()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let id = object.identity;
        Ok(HostObjectMeta {
            api_version: id.api_version,
            kind: id.kind,
            namespace: id.namespace,
            name: id.name,
            labels,
            annotations,
        })
    }
}
