//! The reconcile core: given a tenant object (or its absence), the planner's plan and what the
//! syncer sees live ([`Live`]: the host object at the target name, the host objects the object's
//! references resolve to, the other tenant objects at its v1 host name), the host action and the
//! decision. Every check the planner made is made again on the live view with the same core
//! functions (collision, translation and references, shared v1 names): the live view wins over
//! the planner's. Pure: no client, no clock beyond the [`Stamp`] passed in, tested without a
//! cluster.
//!
//! Every [`Decision`] the syncer takes is formed here: about a tenant object (this module), about
//! a host object someone else edited or deleted and its correction ([`drift`]), about a compiled
//! set's objects ([`compiled`]), about what cannot be decided yet ([`deferred`]), about a pod's
//! token Secret ([`tokens`]), and the decisions closing one whose host write was not made
//! ([`failure`]: the host refused or failed it, the host object changed since, or the syncer
//! stopped first).
//!
//! ```text
//!  tenant object ──plan (planner)──▶ verdict + placement
//!        │                                  │ collision::check(live host object)   (re-run here:
//!        │                                  ▼                                        the live object wins
//!        └──translate::to_host──▶ desired ──digest == host's digest? ──▶ Unchanged    over the planner's view)
//!                                           │     └─ but the host changed it behind our back ─▶ Drifted (drift)
//!                                           └─ otherwise ─▶ Create / Apply, decision id in the write
//!  tenant object gone ──host provenance says it is ours──▶ Delete
//! ```

use serde_json::{Value, json};
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_api::{SyncAction, provenance};
use tenantplane_core::collision::{self, Collision, ConflictCause, HostObjectMeta};
use tenantplane_core::decision::{Decision, HostAction, HostTarget, Outcome, Stamp, Subject};
use tenantplane_core::drift::{Drift, DriftChange};
use tenantplane_core::mapping::{self, TenantPlacement};
use tenantplane_core::pod_world::PodWorld;
use tenantplane_core::reference::HostObjects;
use tenantplane_core::translate::{self, HostDesired};
use tenantplane_core::{Plan, Planner, SourceIdentity, TenantObject};

use crate::writer::{FIELD_MANAGER, Write};
pub use drift::HostChange;

pub mod compiled;
pub mod deferred;
pub mod drift;
pub mod failure;
pub mod tokens;

/// The result of reconciling one tenant object.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The decision taken.
    pub decision: Decision,
    /// The host write it leads to, if any.
    pub write: Option<Write>,
    /// Status to write back to the tenant object, if it differs.
    pub status_up: Option<Value>,
    /// For a Drifted decision under `Revert`: the write that corrects the drift, made by a
    /// decision of its own ([`drift::correction`]).
    pub correction: Option<Write>,
}

impl Step {
    /// Whether the decision has to be recorded regardless of what was recorded before: every
    /// decision that writes to the host is.
    pub fn writes(&self) -> bool {
        self.write.is_some()
    }
}

/// What the syncer sees live when it decides about one tenant object.
pub struct Live<'a> {
    /// The host object at the object's target name, if any.
    pub host: Option<&'a Value>,
    /// The host objects of the tenant's host namespace, for the reference check.
    pub references: &'a dyn HostObjects,
    /// Under mapping v1, the other tenant objects of the object's kind whose host name is its
    /// own.
    pub sharing: Vec<&'a TenantObject>,
    /// For a Pod: its world, added to its host pod when it is created.
    pub world: Option<&'a PodWorld>,
    /// What the host shows of the host object since the last decision: written or deleted by
    /// someone else, or not.
    pub change: HostChange<'a>,
    /// How many times in a row the host object drifted before (a tug of war above one).
    pub streak: u32,
    /// What the Tenant does about drift.
    pub drift: DriftPolicy,
}

impl std::fmt::Debug for Live<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("host", &self.host)
            .field("sharing", &self.sharing)
            .field("world", &self.world)
            .field("change", &self.change)
            .field("streak", &self.streak)
            .field("drift", &self.drift)
            .finish_non_exhaustive()
    }
}

/// Metadata of a host object as JSON, for the collision check.
pub fn host_meta(host: &Value) -> Option<HostObjectMeta> {
    HostObjectMeta::from_value(host).ok()
}

fn uid_of(v: &Value) -> Option<String> {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn resource_version_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// Reconciles a present tenant object. `plan` is the planner's answer; the collision check, the
/// translation with its reference check and the v1 shared-name rule are re-run on `live`.
pub fn reconcile_present(
    planner: &Planner,
    object: &TenantObject,
    plan: &Plan,
    live: Live<'_>,
    stamp: Stamp,
) -> Step {
    let tenant = planner.placement();
    let host = live.host;
    let mut plan = plan.clone();
    let meta = host.and_then(host_meta);
    let mut at_target = collision::check(
        &tenant.tenant,
        &object.identity,
        &plan.placement,
        meta.as_ref(),
    );
    if provenance_removed(planner, object, &plan, &live, &at_target) {
        at_target = Collision::UpdateOwn;
    }
    let ours = meta.is_some() && at_target == Collision::UpdateOwn;
    let mut desired: Option<HostDesired> = None;
    if plan.verdict.action == SyncAction::Sync {
        // Decided again on the live view, the isolation boundary included.
        plan.profile = None;
        plan.decide_at_target(at_target);
        if let Some(Collision::Conflict {
            differs: ConflictCause::OtherUid,
            owner,
        }) = &plan.collision
        {
            // Same tenant, kind, namespace and name, another uid: the host object belongs to an
            // earlier incarnation of this very object, which is gone. It is deleted; the current
            // object is placed by the next evaluation.
            plan.outcome = Outcome::Deleted;
            plan.action = HostAction::Delete;
            plan.reason = "SourceRecreated".into();
            plan.message = format!(
                "host {} {}/{} belongs to {owner}, an earlier incarnation of this object that is \
                 gone: deleted, the current object is placed next",
                plan.placement.kind, plan.placement.namespace, plan.placement.name
            );
        }
        if let Some(by) = planner.claimant(object, &plan, live.sharing.iter().copied()) {
            plan.refuse_claimed(&by.identity);
        }
        if plan.outcome == Outcome::Synced {
            match planner.translate(object, &plan, live.references) {
                Ok(d) => desired = Some(d),
                Err(refusal) => plan.refuse(refusal),
            }
        }
    }

    let mut write = None;
    let mut drift = None;
    match (&desired, plan.outcome) {
        (Some(d), Outcome::Synced) => {
            let recorded = host.and_then(translate::recorded_digest);
            let unchanged = recorded.is_some_and(|recorded| recorded == d.digest);
            // Drift is what differs from what tenantplane last set: only when the tenant object
            // still asks for it (or the digest tenantplane set went with the edit: an object
            // without one that tenantplane never wrote, e.g. an older syncer's, is just synced).
            drift = match live.change {
                HostChange::Changed(full)
                    if host.is_some()
                        && (unchanged
                            || recorded.is_none()
                                && tenantplane_core::drift::written_by(full, FIELD_MANAGER)) =>
                {
                    tenantplane_core::drift::detect(&d.object, full, FIELD_MANAGER)
                }
                // Unless the tenant object changed since: its create is the sync.
                HostChange::Deleted(deleted)
                    if host.is_none() && deleted.is_none_or(|r| r == d.digest) =>
                {
                    Some(Drift::deleted())
                }
                _ => None,
            };
            let world = live.world.filter(|_| plan.action == HostAction::Create);
            if drift
                .as_ref()
                .is_some_and(|d| d.change != DriftChange::Deleted)
            {
                plan.action = HostAction::Update;
            } else if unchanged {
                plan.outcome = Outcome::Unchanged;
                plan.action = HostAction::None;
                plan.reason = "HostObjectUpToDate".into();
                plan.message = "the host object already carries what tenantplane sets; nothing \
                                written"
                    .into();
            } else if let Some((reason, waits)) = world.and_then(|w| awaited(w, d, live.references))
            {
                plan.outcome = Outcome::Deferred;
                plan.action = HostAction::None;
                plan.reason = reason.into();
                plan.message = waits;
            } else {
                let mut notes = d.notes.clone();
                notes.extend(world.map(PodWorld::describe));
                plan.note(&notes);
            }
        }
        (None, Outcome::Rejected | Outcome::Skipped) if ours && plan.profile.is_none() => {
            // Our host object for a source the policy no longer syncs: it goes. (One the host
            // would refuse to update under the profile stays as it is: the host keeps it.)
            plan.action = HostAction::Delete;
            plan.message = format!(
                "{}; the host object synced earlier is deleted",
                plan.message
            );
        }
        _ => {}
    }

    let decision = plan.to_decision(&tenant.tenant, object, stamp);
    let pod = object.identity.group().is_empty() && object.identity.kind == "Pod";
    match (plan.action, desired) {
        (HostAction::Create, Some(mut d)) => {
            if let Some(world) = live.world {
                world.furnish(&object.object, &mut d.object);
            }
            write = Some(Write::Create(with_decision_id(d.object, &decision.id)));
        }
        (HostAction::Update, Some(d)) if drift.is_some() => {
            let HostChange::Changed(full) = live.change else {
                unreachable!("an edit is drift only on the object the host sent")
            };
            write = Some(Write::Replace(tenantplane_core::drift::corrected(
                &d.object, full,
            )));
        }
        (HostAction::Update, Some(d)) => {
            let body = if pod {
                translate::pod_update(&d.object)
            } else {
                d.object
            };
            let mut object = with_decision_id(body, &decision.id);
            if let Some(rv) = host.and_then(resource_version_of) {
                object["metadata"]["resourceVersion"] = json!(rv);
            }
            write = Some(Write::Apply(object));
        }
        (HostAction::Delete, _) if host.is_some() => {
            write = Some(Write::Delete {
                name: plan.placement.name.clone(),
                uid: host.and_then(uid_of),
            });
        }
        _ => {}
    }
    let status_up = match (host, ours || plan.action == HostAction::Update) {
        (Some(h), true) if plan.action != HostAction::Delete => {
            translate::status_to_tenant(&object.object, h)
        }
        _ => None,
    };
    let step = Step {
        decision,
        write,
        status_up,
        correction: None,
    };
    match drift {
        Some(found) => drift::drifted(step, found, live.streak, live.drift),
        None => step,
    }
}

/// Whether the host object at the target, which the collision check found without complete
/// provenance, is the one tenantplane set for this object, its provenance removed or changed on
/// the host by someone else (seen only on an object the host sent since: its managedFields say
/// tenantplane wrote it).
fn provenance_removed(
    planner: &Planner,
    object: &TenantObject,
    plan: &Plan,
    live: &Live<'_>,
    at_target: &Collision,
) -> bool {
    let (
        Collision::Conflict {
            differs: ConflictCause::NoProvenance | ConflictCause::IncompleteProvenance,
            ..
        },
        HostChange::Changed(full),
    ) = (at_target, live.change)
    else {
        return false;
    };
    if plan.verdict.action != SyncAction::Sync {
        return false;
    }
    let mut own = plan.clone();
    own.decide_at_target(Collision::UpdateOwn);
    planner
        .translate(object, &own, live.references)
        .is_ok_and(|d| tenantplane_core::drift::provenance_removed(&d.object, full, FIELD_MANAGER))
}

/// What a pod about to be created waits for, if anything, with the reason: its ServiceAccount on
/// the host (the host's ServiceAccount admission refuses a pod whose ServiceAccount does not
/// exist), then what its world awaits (its tenant DNS Service's address).
fn awaited(
    world: &PodWorld,
    desired: &HostDesired,
    host: &dyn HostObjects,
) -> Option<(&'static str, String)> {
    let account = desired
        .references
        .iter()
        .find(|r| r.field_path == "spec.serviceAccountName")?;
    if host
        .host_object("", "ServiceAccount", &account.host_name)
        .is_none()
    {
        return Some((
            "ServiceAccountAwaited",
            format!(
                "its ServiceAccount {}/{} is not on the host yet (ServiceAccount {}): the host \
                 admits a pod only once its ServiceAccount exists",
                account.namespace, account.name, account.host_name
            ),
        ));
    }
    world.awaits().map(|waits| ("TenantDnsAwaited", waits))
}

/// The plan of a tenant Endpoints whose Service selects pods, which the planner would sync:
/// skipped. Those Endpoints are the tenant's endpoints controller's, and on the host the host's
/// endpoints controller keeps the Endpoints of the host Service; syncing them would only
/// collide (their addresses flow up instead).
pub fn skip_endpoints_of_selector_service(plan: &mut Plan) {
    if plan.verdict.action != SyncAction::Sync {
        return;
    }
    plan.verdict.action = SyncAction::Skip;
    plan.verdict.reason = "EndpointsOfSelectorService".into();
    plan.verdict.message = "the Service selects pods: the host's endpoints controller keeps the \
                            host Service's Endpoints"
        .into();
    plan.outcome = Outcome::Skipped;
    plan.action = HostAction::None;
    plan.reason = plan.verdict.reason.clone();
    plan.message = plan.verdict.message.clone();
    plan.collision = None;
}

/// A decision to update the host Service of a tenant Service the syncer recreated with the host
/// Service's cluster IPs (uid `from_uid` replaced by `to_uid`) says why its provenance changes.
pub fn note_recreation(decision: &mut Decision, from_uid: &str, to_uid: &str) {
    if decision.action != HostAction::Update {
        return;
    }
    decision.message = format!(
        "{}; the tenant Service was recreated with the host Service's cluster IPs (uid {from_uid} \
         replaced by {to_uid}): the host Service now names the new one",
        decision.message
    );
}

fn with_decision_id(mut object: Value, id: &str) -> Value {
    object["metadata"]["annotations"][provenance::DECISION_ID] = json!(id);
    object
}

/// Reconciles a tenant object that no longer exists: its host object is deleted when the host
/// object's provenance names exactly this source in this tenant; otherwise nothing happens and
/// no decision is taken (`None`). A host object already being deleted (a Pod's grace period, a
/// finalizer) needs no second decision.
pub fn reconcile_absent(
    tenant: &TenantPlacement,
    source: &SourceIdentity,
    host: Option<&Value>,
    stamp: Stamp,
) -> Option<Step> {
    let host = host.filter(|h| h.pointer("/metadata/deletionTimestamp").is_none())?;
    let meta = host_meta(host)?;
    let theirs = mapping::provenance(&meta.labels, &meta.annotations).ok()?;
    let same = theirs.tenant == tenant.tenant
        && theirs.source.kind == source.kind
        && tenantplane_core::object::group_of(&theirs.source.api_version) == source.group()
        && theirs.source.namespace == source.namespace
        && theirs.source.name == source.name;
    if !same {
        return None;
    }
    let decision = Decision {
        id: stamp.id,
        time: stamp.time,
        tenant: tenant.tenant.clone(),
        subject: Subject {
            api_version: source.api_version.clone(),
            kind: source.kind.clone(),
            namespace: source.namespace.clone(),
            name: source.name.clone(),
            uid: theirs.source.uid.clone(),
            resource_version: String::new(),
        },
        target: Some(HostTarget {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
        }),
        outcome: Outcome::Deleted,
        action: HostAction::Delete,
        policy: None,
        profile: None,
        reason: "SourceDeleted".into(),
        message: format!(
            "the tenant object {} is gone; its host object {}/{} is deleted",
            source, meta.namespace, meta.name
        ),
        field_path: None,
        stripped_keys: Vec::new(),
        input_digest: String::new(),
        mapping_version: tenant.mapping.to_string(),
        component: stamp.component,
        component_version: stamp.component_version,
        trace_id: stamp.trace_id,
        span_id: stamp.span_id,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    };
    Some(Step {
        decision,
        write: Some(Write::Delete {
            name: meta.name,
            uid: uid_of(host),
        }),
        status_up: None,
        correction: None,
    })
}

/// Whether a field manager other than `manager` has written `object` (its managedFields).
pub fn written_by_another_manager(object: &Value, manager: &str) -> bool {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("manager").and_then(Value::as_str) != Some(manager))
        })
}

/// What identifies the content of a tenant object for deciding whether a new decision carries
/// information: the object without status and server-maintained metadata.
pub fn observed_digest(object: &Value) -> String {
    let mut v = object.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in ["resourceVersion", "managedFields", "generation"] {
            meta.remove(f);
        }
    }
    translate::digest(&v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantplane_api::Tenant;
    use tenantplane_core::CompiledPolicy;
    use tenantplane_core::planner::HostState;

    pub(super) fn tenant() -> TenantPlacement {
        TenantPlacement {
            tenant: "acme".into(),
            host_namespace: "tenant-acme".into(),
            mapping: tenantplane_core::MappingVersion::V2,
        }
    }

    /// A host namespace with nothing at the references' names.
    struct NoHostObjects;

    impl HostObjects for NoHostObjects {
        fn host_object(&self, _: &str, _: &str, _: &str) -> Option<HostObjectMeta> {
            None
        }
    }

    /// The live view of a lone object: `host` at its target, nothing else.
    fn live(host: Option<&Value>) -> Live<'_> {
        Live {
            host,
            references: &NoHostObjects,
            sharing: Vec::new(),
            world: None,
            change: HostChange::Unseen,
            streak: 0,
            drift: DriftPolicy::Revert,
        }
    }

    /// The step for `o` planned against an empty host snapshot, with `host` live at its target.
    pub(super) fn decide(p: &Planner, o: &TenantObject, host: Option<&Value>) -> Step {
        reconcile_present(p, o, &p.plan(o, &HostState::default()), live(host), stamp())
    }

    pub(super) fn planner() -> Planner {
        let t = Tenant::new("acme", Default::default());
        Planner::new(&t, CompiledPolicy::builtin_default())
    }

    pub(super) fn stamp() -> Stamp {
        Stamp::now("tenantplane-syncer")
    }

    pub(super) fn cm(data: &str) -> TenantObject {
        TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "web", "uid": "u1", "resourceVersion": "3"},
            "data": {"k": data}}))
        .unwrap()
    }

    /// What the host would hold after a write, plus defaulting and a resourceVersion.
    fn landed(write: &Write) -> Value {
        let (Write::Create(v) | Write::Apply(v)) = write else {
            panic!("not a write: {write:?}")
        };
        let mut v = v.clone();
        v["metadata"]["uid"] = json!("host-uid");
        v["metadata"]["resourceVersion"] = json!("100");
        v["metadata"]["labels"]["added-by-host-admission"] = json!("yes");
        v
    }

    #[test]
    fn create_then_unchanged_then_update() {
        let p = planner();
        let o = cm("a");
        let step = decide(&p, &o, None);
        assert_eq!(step.decision.outcome, Outcome::Synced);
        let write = step.write.clone().unwrap();
        let Write::Create(created) = &write else {
            panic!("{write:?}")
        };
        assert_eq!(
            created["metadata"]["annotations"][provenance::DECISION_ID],
            json!(step.decision.id)
        );
        let host = landed(&write);

        // Resync with the same object: nothing written, whatever the host added.
        let again = decide(&p, &o, Some(&host));
        assert_eq!(again.decision.outcome, Outcome::Unchanged);
        assert_eq!(again.write, None);

        let changed = cm("b");
        let upd = decide(&p, &changed, Some(&host));
        assert_eq!(upd.decision.outcome, Outcome::Synced);
        let Some(Write::Apply(applied)) = &upd.write else {
            panic!("{:?}", upd.write)
        };
        assert_eq!(applied["metadata"]["resourceVersion"], "100");
        assert_eq!(applied["data"]["k"], "b");
    }

    #[test]
    fn a_foreign_host_object_is_a_conflict_even_when_the_planner_did_not_see_it() {
        let p = planner();
        let o = cm("a");
        let plan = p.plan(&o, &HostState::default());
        let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg-x-web", "namespace": "tenant-acme", "uid": "f"},
            "data": {"theirs": "1"}});
        let step = reconcile_present(&p, &o, &plan, live(Some(&foreign)), stamp());
        assert_eq!(step.decision.outcome, Outcome::Conflict);
        assert_eq!(step.decision.reason, "HostObjectNotManaged");
        assert_eq!(step.write, None);
        assert_eq!(step.status_up, None);
    }

    #[test]
    fn what_the_profile_refuses_is_rejected_before_the_write_and_kept_when_already_there() {
        let t = Tenant::new("acme", Default::default());
        let profile =
            serde_json::from_value(json!({"metadata": {"name": "strict", "generation": 2},
            "spec": {"level": "strict"}}))
            .unwrap();
        let p = Planner::new(&t, CompiledPolicy::builtin_default())
            .with_boundary(tenantplane_core::boundary::Boundary::compile(&t, &profile).unwrap());
        let pod = |pull: &str| {
            TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "web", "uid": "u"},
                "spec": {"runtimeClassName": "gvisor",
                         "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "a", "image": "x:1", "imagePullPolicy": pull,
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}))
            .unwrap()
        };
        let step = decide(&p, &pod("IfNotPresent"), None);
        assert_eq!(step.decision.outcome, Outcome::Rejected);
        assert_eq!(step.decision.reason, "ProfileAdmissionForbidden");
        assert_eq!(step.write, None, "the doomed write is not sent");
        assert_eq!(
            step.decision
                .profile
                .as_ref()
                .and_then(|p| p.rule.as_deref()),
            Some("ValidatingAdmissionPolicy/tenantplane-acme-image-pull-always")
        );

        // Synced under the profile, then changed into what the host would refuse to update: the
        // host object stays as the host keeps it.
        let synced = decide(&p, &pod("Always"), None);
        let host = landed(synced.write.as_ref().unwrap());
        let step = decide(&p, &pod("IfNotPresent"), Some(&host));
        assert_eq!(step.decision.outcome, Outcome::Rejected);
        assert_eq!(step.write, None);
    }

    #[test]
    fn rejected_objects_write_nothing_and_drop_what_was_synced_before() {
        let p = planner();
        let pod = |host_network: bool| {
            TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "web", "uid": "u"},
                "spec": {"hostNetwork": host_network, "containers": [{"name": "a", "image": "x"}]}}))
            .unwrap()
        };
        let bad = pod(true);
        let step = decide(&p, &bad, None);
        assert_eq!(step.decision.outcome, Outcome::Rejected);
        assert_eq!(step.decision.reason, "HostNetworkForbidden");
        assert_eq!(step.write, None);

        let good = pod(false);
        let created = decide(&p, &good, None);
        let host = landed(created.write.as_ref().unwrap());
        let step = decide(&p, &bad, Some(&host));
        assert_eq!(step.decision.outcome, Outcome::Rejected);
        assert_eq!(
            step.write,
            Some(Write::Delete {
                name: "p-x-web".into(),
                uid: Some("host-uid".into())
            })
        );
    }

    #[test]
    fn untranslatable_objects_are_rejected_with_the_field() {
        let p = planner();
        let o = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tok", "namespace": "web"},
            "type": "kubernetes.io/service-account-token"}))
        .unwrap();
        let step = decide(&p, &o, None);
        assert_eq!(step.decision.outcome, Outcome::Rejected);
        assert_eq!(step.decision.reason, "ServiceAccountTokenSecretForbidden");
        assert_eq!(step.decision.field_path.as_deref(), Some("type"));
        assert_eq!(step.write, None);
    }

    #[test]
    fn deletion_only_of_our_own_host_object() {
        let p = planner();
        let o = cm("a");
        let created = decide(&p, &o, None);
        let host = landed(created.write.as_ref().unwrap());
        let step = reconcile_absent(&tenant(), &o.identity, Some(&host), stamp()).unwrap();
        assert_eq!(step.decision.outcome, Outcome::Deleted);
        assert_eq!(
            step.write,
            Some(Write::Delete {
                name: "cfg-x-web".into(),
                uid: Some("host-uid".into())
            })
        );
        let mut other = o.identity.clone();
        other.namespace = "other".into();
        assert_eq!(
            reconcile_absent(&tenant(), &other, Some(&host), stamp()),
            None
        );
        let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg-x-web", "namespace": "tenant-acme"}});
        assert_eq!(
            reconcile_absent(&tenant(), &o.identity, Some(&foreign), stamp()),
            None
        );
        let mut terminating = host.clone();
        terminating["metadata"]["deletionTimestamp"] = json!("2026-11-29T23:00:00Z");
        assert_eq!(
            reconcile_absent(&tenant(), &o.identity, Some(&terminating), stamp()),
            None,
            "a host object already being deleted is not deleted (and recorded) again"
        );
    }

    #[test]
    fn a_host_object_of_an_earlier_incarnation_is_deleted_first() {
        let p = planner();
        let old = cm("a");
        let created = decide(&p, &old, None);
        let host = landed(created.write.as_ref().unwrap());
        let mut recreated = cm("a");
        recreated.identity.uid = "u2".into();
        recreated.object["metadata"]["uid"] = json!("u2");
        let step = decide(&p, &recreated, Some(&host));
        assert_eq!(step.decision.outcome, Outcome::Deleted);
        assert_eq!(step.decision.reason, "SourceRecreated");
        assert_eq!(
            step.write,
            Some(Write::Delete {
                name: "cfg-x-web".into(),
                uid: Some("host-uid".into())
            })
        );
    }

    #[test]
    fn status_flows_up_from_our_host_object() {
        let p = planner();
        let o = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "web", "uid": "u"},
            "spec": {"containers": [{"name": "a", "image": "x"}]}}))
        .unwrap();
        let created = decide(&p, &o, None);
        let mut host = landed(created.write.as_ref().unwrap());
        host["status"] = json!({"phase": "Running", "podIP": "10.0.0.9"});
        let step = decide(&p, &o, Some(&host));
        assert_eq!(step.write, None);
        assert_eq!(
            step.status_up,
            Some(json!({"phase": "Running", "podIP": "10.0.0.9"}))
        );
    }

    #[test]
    fn spoofed_provenance_is_stripped_and_said_so() {
        let p = planner();
        let o = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "web",
                "labels": {"tenantplane.io/tenant": "victim"}}}))
        .unwrap();
        let step = decide(&p, &o, None);
        let Some(Write::Create(v)) = &step.write else {
            panic!()
        };
        assert_eq!(v["metadata"]["labels"]["tenantplane.io/tenant"], "acme");
        assert_eq!(
            step.decision.stripped_keys,
            vec!["label tenantplane.io/tenant"]
        );
    }

    #[test]
    fn another_field_manager_is_seen_in_managed_fields() {
        let ours = json!({"metadata": {"managedFields": [
            {"manager": "tenantplane-syncer", "operation": "Apply"}]}});
        assert!(!written_by_another_manager(&ours, "tenantplane-syncer"));
        assert!(!written_by_another_manager(
            &json!({"metadata": {}}),
            "tenantplane-syncer"
        ));
        let theirs = json!({"metadata": {"managedFields": [
            {"manager": "tenantplane-syncer", "operation": "Apply"},
            {"manager": "kube-controller-manager", "operation": "Update"}]}});
        assert!(written_by_another_manager(&theirs, "tenantplane-syncer"));
    }
}
