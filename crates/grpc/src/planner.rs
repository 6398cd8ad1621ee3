//! The Planner service: the core planner behind `tenantplane.planner.v1.Planner`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tenantplane_api::Tenant;
use tenantplane_core::boundary::Boundary;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::Stamp;
use tenantplane_core::mapping::{self, ProvenanceError};
use tenantplane_core::mapping::{LATEST_MAPPING_VERSION, MappingVersion};
use tenantplane_core::parallel;
use tenantplane_core::planner::{HostState, input_digest};
use tenantplane_core::{CompiledPolicy, ENGINE_VERSION, Plan, Planner, TenantObject};
use tenantplane_proto::planner::v1::planner_server::{self, PlannerServer};
use tenantplane_proto::planner::v1::{
    DecisionForm, ExplainHostObjectRequest, ExplainHostObjectResponse, GetVersionRequest,
    GetVersionResponse, ObjectPlan, Ownership, PlacementForm, PlanForm, PlanRequest, PlanResponse,
};
use tenantplane_proto::types::v1 as types;
use tonic::{Request, Response, Status};

use crate::convert::{from_proto, to_proto};
use crate::error::{FieldError, RequestError};

/// The acting component recorded in the decisions the planner service returns.
pub const COMPONENT: &str = "tenantplane-planner";

/// Compiled planners kept for reuse. Compiling a SyncPolicy (its CEL programs) costs more than
/// planning a small batch, and callers send the same tenant and policy again and again.
const CACHE_CAPACITY: usize = 256;

/// The Planner service. Cheap to clone: clones share the cache of compiled policies.
#[derive(Clone, Debug)]
pub struct PlannerService {
    cache: Arc<Mutex<HashMap<CacheKey, Arc<Planner>>>>,
    /// Name and revision of the built-in default policy, reported by GetVersion.
    default_policy: Arc<types::PolicyRef>,
}

/// A tenant (name, host namespace, mapping scheme), the exact SyncPolicy bytes (empty: the
/// built-in default) and the exact IsolationProfile bytes (empty: none).
type CacheKey = (String, String, MappingVersion, Vec<u8>, Vec<u8>);

impl Default for PlannerService {
    fn default() -> Self {
        Self::new()
    }
}

impl PlannerService {
    /// A planner service with an empty cache.
    pub fn new() -> Self {
        let default = CompiledPolicy::builtin_default();
        PlannerService {
            cache: Arc::default(),
            default_policy: Arc::new(to_proto::policy_ref(default.name(), default.revision())),
        }
    }

    /// The tonic server of this service, ready to add to a router.
    pub fn into_server(self) -> PlannerServer<Self> {
        PlannerServer::new(self)
    }

    /// The planner for a tenant under the policy in `policy` (YAML or JSON; empty for the
    /// built-in default) and the isolation boundary of the profile in `profile` (YAML or JSON;
    /// empty for none), compiled once per distinct tenant, policy and profile.
    fn planner(
        &self,
        tenant: &Tenant,
        policy: &[u8],
        profile: &[u8],
    ) -> Result<Arc<Planner>, RequestError> {
        let key = (
            tenant.name().to_string(),
            tenant.host_namespace(),
            tenant.mapping_version(),
            policy.to_vec(),
            profile.to_vec(),
        );
        if let Some(planner) = self.lock().get(&key) {
            return Ok(planner.clone());
        }
        let compiled = if policy.is_empty() {
            CompiledPolicy::builtin_default()
        } else {
            CompiledPolicy::from_yaml(&from_proto::text("sync_policy", policy)?)?
        };
        let mut planner = Planner::new(tenant, compiled);
        if !profile.is_empty() {
            let at = "isolation_profile";
            let profile = from_proto::isolation_profile(at, profile)?;
            planner = planner.with_boundary(
                Boundary::compile(tenant, &profile).map_err(RequestError::isolation(at))?,
            );
        }
        let planner = Arc::new(planner);
        let mut cache = self.lock();
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(key, planner.clone());
        Ok(planner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Arc<Planner>>> {
        // A panic while holding the lock cannot leave the map inconsistent (inserts are atomic).
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Plans a batch: each object is read, planned, recorded and converted on one of the cores
    /// (large batches are cut into one run per core, answered in request order), so the
    /// per-object work of a big batch uses the whole machine, as explain-sync does.
    fn plan_batch(&self, request: PlanRequest) -> Result<PlanResponse, RequestError> {
        let tenant = from_proto::tenant(request.tenant.as_ref())?;
        let mut host = HostState::default();
        for (i, bytes) in request.host_objects.iter().enumerate() {
            let at = format!("host_objects[{i}]");
            let value = from_proto::json_object(&at, bytes)?;
            host.insert(
                HostObjectMeta::from_value(&value)
                    .map_err(|error| RequestError::Object { at, error })?,
            );
        }
        let traces = &request.trace_contexts;
        if !traces.is_empty() && traces.len() != request.objects.len() {
            return Err(FieldError::new(
                "trace_contexts",
                format!(
                    "has {} entries for {} objects; send none or one per object",
                    traces.len(),
                    request.objects.len()
                ),
            )
            .into());
        }
        let planner = self.planner(&tenant, &request.sync_policy, &request.isolation_profile)?;
        let forms = AnswerForms::granted(&request, &tenant);
        let objects: Vec<_> = request.objects.iter().enumerate().collect();
        let planned: Vec<Planned> = parallel::map_in_order(&objects, |&(i, bytes)| {
            plan_object(&planner, &host, bytes, i, traces.get(i))
        })
        .into_iter()
        .collect::<Result<_, _>>()?;
        let (mut planned, mut plans): (Vec<_>, Vec<_>) = planned
            .into_iter()
            .map(|p| ((p.object, p.span), p.plan))
            .unzip();
        let batch: Vec<&TenantObject> = planned.iter().map(|(object, _)| object).collect();
        planner.settle_shared_names(&batch, &mut plans);
        let answers: Vec<_> = planned.drain(..).zip(plans).collect();
        let plans = parallel::map_in_order(&answers, |((object, span), plan)| {
            answer(&planner, object, span.as_ref(), plan.clone(), forms)
        });
        let policy = planner.policy();
        Ok(PlanResponse {
            plans,
            policy: Some(to_proto::policy_ref(policy.name(), policy.revision())),
            decision_form: forms.decision.into(),
            placement_form: forms.placement.into(),
            plan_form: forms.plan.into(),
            component: COMPONENT.to_string(),
            component_version: ENGINE_VERSION.to_string(),
            isolation_profile: planner
                .boundary()
                .map(|b| to_proto::profile_ref(b.profile())),
        })
    }

    fn explain(
        request: &ExplainHostObjectRequest,
    ) -> Result<ExplainHostObjectResponse, RequestError> {
        let at = "host_object";
        let value = from_proto::json_object(at, &request.host_object)?;
        let meta = HostObjectMeta::from_value(&value).map_err(|error| RequestError::Object {
            at: at.to_string(),
            error,
        })?;
        let host_object = Some(types::ObjectRef {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
        });
        let mut response = ExplainHostObjectResponse {
            host_object,
            ..Default::default()
        };
        match mapping::provenance(&meta.labels, &meta.annotations) {
            Ok(p) => {
                response.set_ownership(Ownership::Managed);
                response.message = format!(
                    "synced from {} of tenant {} (mapping {})",
                    p.source, p.tenant, p.mapping_version
                );
                response.provenance = Some(to_proto::provenance(&p));
            }
            Err(e @ ProvenanceError::NotManaged) => {
                response.set_ownership(Ownership::NotManaged);
                response.message = e.to_string();
            }
            Err(e @ ProvenanceError::Incomplete { key }) => {
                response.set_ownership(Ownership::Incomplete);
                response.missing_key = key.to_string();
                response.message = e.to_string();
            }
        }
        Ok(response)
    }
}

/// The forms a Plan answer is in: those the request asked for, where this planner grants them.
#[derive(Clone, Copy, Debug)]
struct AnswerForms {
    decision: DecisionForm,
    placement: PlacementForm,
    plan: PlanForm,
}

impl AnswerForms {
    fn granted(request: &PlanRequest, tenant: &Tenant) -> Self {
        // Placements are derived, and plans minimal, only under the caller's mapping scheme
        // being the tenant's; values unknown here mean the full and standard forms.
        let same_mapping = request.mapping_version == tenant.mapping_version().as_str();
        if same_mapping && request.plan_form() == PlanForm::Minimal {
            return AnswerForms {
                decision: DecisionForm::Compact,
                placement: PlacementForm::Derived,
                plan: PlanForm::Minimal,
            };
        }
        AnswerForms {
            decision: match request.decision_form() {
                DecisionForm::Compact => DecisionForm::Compact,
                DecisionForm::Full | DecisionForm::Unspecified => DecisionForm::Full,
            },
            placement: match request.placement_form() {
                PlacementForm::Derived if same_mapping => PlacementForm::Derived,
                _ => PlacementForm::Full,
            },
            plan: PlanForm::Standard,
        }
    }
}

/// Name of the span the planner opens per object whose trace context the request carries.
pub const PLAN_OBJECT_SPAN: &str = "tenantplane.planner.plan_object";

/// One object of a batch, read and planned.
struct Planned {
    object: TenantObject,
    /// The span of its planning, when the request carried its trace context.
    span: Option<tracing::Span>,
    plan: Plan,
}

/// Reads and plans `objects[i]` (JSON `bytes`), in a child span of the caller's span for it when
/// the request carries its trace context, so each decision's trace shows its own planning.
fn plan_object(
    planner: &Planner,
    host: &HostState,
    bytes: &[u8],
    i: usize,
    trace_context: Option<&String>,
) -> Result<Planned, RequestError> {
    let value = from_proto::json_object(format_args!("objects[{i}]"), bytes)?;
    let object = TenantObject::from_value(value).map_err(|error| RequestError::Object {
        at: format!("objects[{i}]"),
        error,
    })?;
    let span = trace_context.and_then(|parent| object_span(&object, parent));
    let plan = match &span {
        Some(span) => span.in_scope(|| planner.plan(&object, host)),
        None => planner.plan(&object, host),
    };
    Ok(Planned { object, span, plan })
}

/// The answer about one planned object, with its decision record, in the `forms` granted; its
/// outcome is recorded on its planning span.
fn answer(
    planner: &Planner,
    object: &TenantObject,
    span: Option<&tracing::Span>,
    plan: Plan,
    forms: AnswerForms,
) -> ObjectPlan {
    if let Some(span) = span {
        span.record("tenantplane.decision.outcome", plan.outcome.as_str());
        span.record("tenantplane.decision.reason", plan.reason.as_str());
    }
    let stamp = Stamp::now(COMPONENT);
    let decision = match forms.decision {
        // The client rebuilds the rest of the record from the plan: it is not built here.
        DecisionForm::Compact => {
            // Minimal plans leave the digest to the caller, which has the object's JSON.
            let digest = match forms.plan {
                PlanForm::Minimal => String::new(),
                PlanForm::Standard | PlanForm::Unspecified => input_digest(&object.object),
            };
            to_proto::compact_decision(stamp, digest, plan.placement.mapping_version)
        }
        DecisionForm::Full | DecisionForm::Unspecified => {
            to_proto::decision_of(plan.to_decision(planner.tenant(), object, stamp))
        }
    };
    to_proto::object_plan(
        object.identity.clone(),
        plan,
        decision,
        forms.placement,
        forms.plan,
    )
}

/// The span of planning one object, a child of the caller's span for it; `None` when `parent` is
/// not a valid `traceparent`.
fn object_span(object: &TenantObject, parent: &str) -> Option<tracing::Span> {
    let id = &object.identity;
    let span = tracing::info_span!(
        "tenantplane.planner.plan_object",
        tenantplane.subject.kind = %id.kind,
        tenantplane.subject.namespace = %id.namespace,
        tenantplane.subject.name = %id.name,
        tenantplane.decision.outcome = tracing::field::Empty,
        tenantplane.decision.reason = tracing::field::Empty,
    );
    tenantplane_telemetry::propagation::set_parent_from_traceparent(&span, parent).then_some(span)
}

#[tonic::async_trait]
impl planner_server::Planner for PlannerService {
    async fn plan(&self, request: Request<PlanRequest>) -> Result<Response<PlanResponse>, Status> {
        Ok(Response::new(self.plan_batch(request.into_inner())?))
    }

    async fn explain_host_object(
        &self,
        request: Request<ExplainHostObjectRequest>,
    ) -> Result<Response<ExplainHostObjectResponse>, Status> {
        Ok(Response::new(Self::explain(request.get_ref())?))
    }

    async fn get_version(
        &self,
        _request: Request<GetVersionRequest>,
    ) -> Result<Response<GetVersionResponse>, Status> {
        Ok(Response::new(GetVersionResponse {
            mapping_version: LATEST_MAPPING_VERSION.to_string(),
            engine_version: ENGINE_VERSION.to_string(),
            default_policy: Some(types::PolicyRef::clone(&self.default_policy)),
        }))
    }
}
