//! Where plans come from: the planner service over gRPC in production, the same core in-process
//! for tests and for `--planner in-process`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tenantplane_api::Tenant;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Plan, Planner, TenantObject};

/// Why no plan could be had. Every variant defers the decision: nothing is guessed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The planner could not be reached or did not answer in time: retried with backoff.
    #[error("planner unavailable: {0}")]
    Unavailable(String),
    /// The planner refused the request (a malformed policy, object or tenant).
    #[error("planner refused the request: {0}")]
    Invalid(String),
}

impl PlanError {
    /// Machine reason for the Deferred decision.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::Unavailable(_) => "PlannerUnavailable",
            PlanError::Invalid(_) => "PlanRequestInvalid",
        }
    }
}

/// A batch planning request of one tenant.
#[derive(Debug)]
pub struct PlanRequest<'a> {
    /// The tenant.
    pub tenant: &'a Tenant,
    /// The SyncPolicy as YAML or JSON; `None` for the built-in default.
    pub policy: Option<&'a str>,
    /// Tenant objects to plan.
    pub objects: &'a [TenantObject],
    /// Host objects at their targets, for collision prediction.
    pub host: &'a [HostObjectMeta],
}

/// Plans batches of tenant objects.
pub trait PlanService: Send + Sync + std::fmt::Debug + 'static {
    /// One plan per object, in order.
    fn plan<'a>(
        &'a self,
        request: PlanRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Plan>, PlanError>>;
}

/// The planner core run in-process (same computation as the planner service).
#[derive(Debug, Default)]
pub struct InProcessPlanner {
    /// Planners by (tenant, host namespace, policy text): compiling CEL is the costly part.
    planners: Mutex<HashMap<(String, String, String), Arc<Planner>>>,
}

impl InProcessPlanner {
    fn planner(&self, tenant: &Tenant, text: Option<&str>) -> Result<Arc<Planner>, PlanError> {
        let key = (
            tenant.name().to_string(),
            tenant.host_namespace(),
            text.unwrap_or("").to_string(),
        );
        let mut cache = self.planners.lock().expect("planner cache lock");
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let compiled = match text {
            None => CompiledPolicy::builtin_default(),
            Some(t) => {
                CompiledPolicy::from_yaml(t).map_err(|e| PlanError::Invalid(e.to_string()))?
            }
        };
        let planner = Arc::new(Planner::new(tenant, compiled));
        if cache.len() > 256 {
            cache.clear();
        }
        cache.insert(key, planner.clone());
        Ok(planner)
    }
}

impl PlanService for InProcessPlanner {
    fn plan<'a>(
        &'a self,
        request: PlanRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Plan>, PlanError>> {
        Box::pin(async move {
            let planner = self.planner(request.tenant, request.policy)?;
            let mut host = HostState::default();
            for m in request.host {
                host.insert(m.clone());
            }
            Ok(planner.plan_all(request.objects, &host).collect())
        })
    }
}

/// The planner service over gRPC. The channel connects lazily and reconnects by itself: a
/// planner that is down answers `Unavailable`, and the decisions wait (Deferred) until it is back.
#[derive(Debug, Clone)]
pub struct GrpcPlanner {
    client:
        tenantplane_proto::planner::v1::planner_client::PlannerClient<tonic::transport::Channel>,
}

/// Connects (lazily) to the planner service at `url` (e.g. `http://127.0.0.1:50051`).
pub fn connect(url: &str) -> anyhow::Result<Arc<dyn PlanService>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect_timeout(std::time::Duration::from_secs(2))
        .timeout(std::time::Duration::from_secs(30))
        .connect_lazy();
    Ok(Arc::new(GrpcPlanner {
        client: tenantplane_proto::planner::v1::planner_client::PlannerClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20),
    }))
}

fn host_json(m: &HostObjectMeta) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": m.api_version,
        "kind": m.kind,
        "metadata": {
            "name": m.name,
            "namespace": m.namespace,
            "labels": m.labels,
            "annotations": m.annotations,
        }
    }))
    .expect("metadata always serializes")
}

impl PlanService for GrpcPlanner {
    fn plan<'a>(
        &'a self,
        request: PlanRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Plan>, PlanError>> {
        Box::pin(async move {
            use tenantplane_proto::planner::v1 as pb;
            let message = pb::PlanRequest {
                tenant: Some(tenantplane_grpc::convert::to_proto::tenant(request.tenant)),
                sync_policy: request.policy.unwrap_or("").as_bytes().to_vec(),
                objects: request
                    .objects
                    .iter()
                    .map(|o| serde_json::to_vec(&o.object).expect("JSON always serializes"))
                    .collect(),
                host_objects: request.host.iter().map(host_json).collect(),
            };
            let response = self
                .client
                .clone()
                .plan(message)
                .await
                .map_err(|status| match status.code() {
                    tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => {
                        PlanError::Invalid(status.message().to_string())
                    }
                    code => PlanError::Unavailable(format!("{code:?}: {}", status.message())),
                })?
                .into_inner();
            response
                .plans
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    tenantplane_grpc::convert::from_proto::object_plan(&format!("plans[{i}]"), p)
                        .map(|(plan, _planner_decision)| plan)
                        .map_err(|e| PlanError::Invalid(format!("the planner's answer: {e}")))
                })
                .collect()
        })
    }
}
