//! The planner: a SyncPolicy verdict, a placement and a collision check, combined into a plan and
//! then a decision. This is the computation the planner service serves, the syncer acts on and
//! `tenantplane explain-sync` prints.

use std::cell::RefCell;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tenantplane_api::{SyncAction, Tenant};

use crate::collision::{self, Collision, HostObjectMeta};
use crate::decision::{Decision, HostAction, HostTarget, Outcome, PolicyRef, Stamp, Subject};
use crate::mapping::{self, MAPPING_VERSION, Placement, TenantPlacement};
use crate::object::{SourceIdentity, TenantObject, group_of};
use crate::policy::{CompiledPolicy, Verdict};

/// A tenant and its compiled SyncPolicy: everything needed to plan its objects.
#[derive(Debug)]
pub struct Planner {
    tenant: TenantPlacement,
    policy: CompiledPolicy,
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
}

impl Planner {
    /// A planner for `tenant` under `policy`.
    pub fn new(tenant: &Tenant, policy: CompiledPolicy) -> Self {
        Planner {
            tenant: tenant.into(),
            policy,
        }
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

    /// Plans one tenant object against the host object currently at its target name, if any.
    pub fn plan(&self, object: &TenantObject, existing: Option<&HostObjectMeta>) -> Plan {
        let placement = mapping::place(&self.tenant, object);
        self.plan_placed(object, placement, existing)
    }

    /// Plans every object against a snapshot of host state.
    pub fn plan_all<'a>(
        &'a self,
        objects: impl IntoIterator<Item = &'a TenantObject> + 'a,
        host: &'a HostState,
    ) -> impl Iterator<Item = Plan> + 'a {
        objects.into_iter().map(move |object| {
            let placement = mapping::place(&self.tenant, object);
            let existing = host.get(&placement);
            self.plan_placed(object, placement, existing)
        })
    }

    fn plan_placed(
        &self,
        object: &TenantObject,
        placement: Placement,
        existing: Option<&HostObjectMeta>,
    ) -> Plan {
        let verdict = self.policy.evaluate(object);
        let (collision, outcome, action, reason, message) = match verdict.action {
            SyncAction::Reject => (
                None,
                Outcome::Rejected,
                HostAction::None,
                verdict.reason.clone(),
                verdict.message.clone(),
            ),
            SyncAction::Skip => (
                None,
                Outcome::Skipped,
                HostAction::None,
                verdict.reason.clone(),
                verdict.message.clone(),
            ),
            SyncAction::Sync => {
                let collision =
                    collision::check(&self.tenant.tenant, &object.identity, &placement, existing);
                let (outcome, action, reason, message) = match &collision {
                    Collision::Create => (
                        Outcome::Synced,
                        HostAction::Create,
                        verdict.reason.clone(),
                        verdict.message.clone(),
                    ),
                    Collision::UpdateOwn => (
                        Outcome::Synced,
                        HostAction::Update,
                        verdict.reason.clone(),
                        verdict.message.clone(),
                    ),
                    Collision::Conflict { owner, differs } => (
                        Outcome::Conflict,
                        HostAction::None,
                        differs.reason().to_string(),
                        format!(
                            "host {} {}/{} belongs to {owner}; refused and left untouched",
                            placement.kind, placement.namespace, placement.name
                        ),
                    ),
                };
                (Some(collision), outcome, action, reason, message)
            }
        };
        Plan {
            placement,
            verdict,
            collision,
            outcome,
            action,
            reason,
            message,
        }
    }
}

impl Plan {
    /// The decision record of this plan, about `object` in `tenant`.
    pub fn to_decision(&self, tenant: &str, object: &TenantObject, stamp: Stamp) -> Decision {
        self.decision_about(
            tenant,
            object.identity.clone(),
            object.resource_version.clone().unwrap_or_default(),
            stamp,
            input_digest(&object.object),
            MAPPING_VERSION.to_string(),
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
        let mut message = self.message.clone();
        if !self.placement.stripped_keys.is_empty() {
            message.push_str(&format!(
                "; reserved keys stripped (only tenantplane writes provenance): {}",
                self.placement.stripped_keys.join(", ")
            ));
        }
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
            profile: None,
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
