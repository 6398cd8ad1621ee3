//! Settling shared v1 host names over a stream of plans, holding only the plans a later object
//! may still change.

use std::collections::{BTreeMap, HashMap};

use crate::decision::Outcome;
use crate::mapping::{self, MappingVersion, TenantPlacement};
use crate::object::{SourceIdentity, group_of};
use crate::reference::{self, Reference};

use super::{Created, Plan, claim};

/// Settles the host names objects share under mapping v1 as [`super::settle_shared_names`]
/// settles a batch, for objects planned one after the other (explain-sync's input, read in
/// order), without keeping the plans that nothing later can change.
///
/// Which objects share a host name follows from their identities alone, so [`SharedNames::new`]
/// takes the identities of every object to come, by position. A plan at a host name no other
/// object maps to, whose references resolve to no name another object may create, is final as
/// soon as it is made ([`SharedNames::holds`] says which). The others are held in
/// [`HeldPlans`] until every object they depend on has been read, then settled by the batch's
/// rule. Under mapping v2 no name is shared and nothing is held.
#[derive(Debug)]
pub struct SharedNames {
    tenant: TenantPlacement,
    /// The host names several objects map to, or that may be shared (where a reference may
    /// resolve to another object than the one it names), by name.
    names: HashMap<String, Vec<SharedName>>,
    /// For each position that is the last object at a shared name, the names it completes.
    completed_at: HashMap<usize, Vec<(String, String, String)>>,
}

/// The plans a [`SharedNames`] holds until nothing can change them.
#[derive(Debug)]
pub struct HeldPlans<'n> {
    names: &'n SharedNames,
    /// The plans held, by position.
    held: BTreeMap<usize, Held>,
    /// The host objects plans create at names that may be shared, once settled.
    created: Created,
}

/// One host name several objects map to, or that may be shared.
#[derive(Debug)]
struct SharedName {
    group: String,
    kind: String,
    /// The positions of the objects that map to it, in order.
    positions: Vec<usize>,
}

/// A plan waiting for the objects it depends on.
#[derive(Debug)]
struct Held {
    identity: SourceIdentity,
    plan: Plan,
    /// Its references to names that may be shared.
    references: Vec<Reference>,
    /// The position after which nothing can change it.
    ready_at: usize,
}

impl SharedNames {
    /// The names shared among `objects` (the identities of the objects to be planned, each with
    /// its position in the stream) under `tenant`'s mapping.
    pub fn new<'a>(
        tenant: &TenantPlacement,
        objects: impl IntoIterator<Item = (usize, &'a SourceIdentity)>,
    ) -> Self {
        let mut names: HashMap<String, Vec<SharedName>> = HashMap::new();
        if tenant.mapping == MappingVersion::V1 {
            for (position, id) in objects {
                let name = tenant.host_name(id.group(), &id.kind, &id.namespace, &id.name);
                let same_name = names.entry(name).or_default();
                match same_name
                    .iter_mut()
                    .find(|n| n.group == id.group() && n.kind == id.kind)
                {
                    Some(shared) => shared.positions.push(position),
                    None => same_name.push(SharedName {
                        group: id.group().to_string(),
                        kind: id.kind.clone(),
                        positions: vec![position],
                    }),
                }
            }
        }
        names.retain(|name, same_name| {
            let may_be_shared = mapping::may_be_shared_under_v1(name);
            same_name.retain(|n| may_be_shared || n.positions.len() > 1);
            !same_name.is_empty()
        });
        let mut completed_at: HashMap<usize, Vec<_>> = HashMap::new();
        for (name, same_name) in &names {
            for n in same_name {
                let last = *n.positions.last().expect("a name has objects");
                completed_at.entry(last).or_default().push((
                    n.group.clone(),
                    n.kind.clone(),
                    name.clone(),
                ));
            }
        }
        SharedNames {
            tenant: tenant.clone(),
            names,
            completed_at,
        }
    }

    /// Where the plans it [holds](SharedNames::holds) wait.
    pub fn holding(&self) -> HeldPlans<'_> {
        HeldPlans {
            names: self,
            held: BTreeMap::new(),
            created: Created(Vec::new()),
        }
    }

    /// The shared name of `group`/`kind` at `name`, if it is one.
    fn shared(&self, group: &str, kind: &str, name: &str) -> Option<&SharedName> {
        self.names
            .get(name)?
            .iter()
            .find(|n| n.group == group && n.kind == kind)
    }

    /// The references that may resolve to a name another object creates.
    fn at_risk<'r>(&self, references: &'r [Reference]) -> impl Iterator<Item = &'r Reference> {
        references.iter().filter(|r| {
            mapping::may_be_shared_under_v1(&r.host_name)
                && self.shared(&r.group, &r.kind, &r.host_name).is_some()
        })
    }

    /// Whether a later object may still change `plan` (with the references of its translation):
    /// then it is to be [held](HeldPlans::hold) rather than used.
    pub fn holds(&self, plan: &Plan, references: &[Reference]) -> bool {
        if self.names.is_empty() {
            return false;
        }
        let p = &plan.placement;
        self.shared(group_of(&p.api_version), &p.kind, &p.name)
            .is_some()
            || (plan.outcome == Outcome::Synced && self.at_risk(references).next().is_some())
    }
}

impl HeldPlans<'_> {
    /// Holds the plan of the object at `position` until [`HeldPlans::passed`] gives it back
    /// settled.
    pub fn hold(
        &mut self,
        position: usize,
        identity: SourceIdentity,
        plan: Plan,
        references: Vec<Reference>,
    ) {
        let names = self.names;
        let p = &plan.placement;
        let own = names.shared(group_of(&p.api_version), &p.kind, &p.name);
        let references: Vec<Reference> = names.at_risk(&references).cloned().collect();
        let ready_at = own
            .into_iter()
            .chain(
                references
                    .iter()
                    .filter_map(|r| names.shared(&r.group, &r.kind, &r.host_name)),
            )
            .filter_map(|n| n.positions.last().copied())
            .fold(position, usize::max);
        self.held.insert(
            position,
            Held {
                identity,
                plan,
                references,
                ready_at,
            },
        );
    }

    /// After the object at `position` has been read (planned, held or not an object at all):
    /// the held plans that nothing can change any more, settled, with their positions, in order.
    pub fn passed(&mut self, position: usize) -> Vec<(usize, Plan)> {
        let names = self.names;
        if names.names.is_empty() {
            return Vec::new();
        }
        for (group, kind, name) in names.completed_at.get(&position).into_iter().flatten() {
            self.settle_claims(group, kind, name);
        }
        let ready: Vec<usize> = self
            .held
            .iter()
            .filter(|(_, held)| held.ready_at <= position)
            .map(|(&at, _)| at)
            .collect();
        ready
            .into_iter()
            .map(|at| {
                let mut held = self.held.remove(&at).expect("a held plan");
                if held.plan.outcome == Outcome::Synced
                    && let Err(refusal) =
                        reference::check(&names.tenant, &held.references, &self.created)
                {
                    held.plan.refuse(refusal);
                }
                (at, held.plan)
            })
            .collect()
    }

    /// Settles the claims on one shared name, all of whose objects have been read, and notes the
    /// host object its plan that creates it writes, if any.
    fn settle_claims(&mut self, group: &str, kind: &str, name: &str) {
        let names = self.names;
        let positions = names
            .shared(group, kind, name)
            .map_or(&[][..], |n| &n.positions);
        let claimed = claim(positions.iter().filter_map(|at| {
            let held = self.held.get(at)?;
            Some((*at, &held.identity, &held.plan))
        }))
        .map(|(taker, refused)| (taker.clone(), refused));
        if let Some((taker, refused)) = claimed {
            for at in refused {
                if let Some(held) = self.held.get_mut(&at) {
                    held.plan.refuse_claimed(&taker);
                }
            }
        }
        let creates = positions
            .iter()
            .filter_map(|at| self.held.get(at))
            .find(|held| held.plan.creates_shared_name())
            .map(|held| held.plan.placement.synced_meta());
        self.created.0.extend(creates);
    }
}
