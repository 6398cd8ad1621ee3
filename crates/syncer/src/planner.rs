//! Where plans come from: the planner service over gRPC in production, the same core in-process
//! for tests and for `--planner in-process`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenantplane_api::Tenant;
use tenantplane_client::{ClientConfig, ClientError};
use tenantplane_core::boundary::Boundary;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Plan, Planner, TenantObject};

use crate::metrics::SyncMetrics;

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
    /// The tenant's IsolationProfile as YAML or JSON; `None` when it has none.
    pub profile: Option<&'a str>,
    /// Tenant objects to plan.
    pub objects: &'a [TenantObject],
    /// Host objects at their targets, for collision prediction.
    pub host: &'a [HostObjectMeta],
    /// The W3C traceparent of each object's decision span (empty, or one per object): the
    /// planner service plans each object in a child span of it.
    pub trace_contexts: &'a [String],
}

/// Plans batches of tenant objects.
pub trait PlanService: Send + Sync + std::fmt::Debug + 'static {
    /// One plan per object, in order.
    fn plan<'a>(
        &'a self,
        request: PlanRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Plan>, PlanError>>;
}

/// What an in-process planner is compiled for: tenant, host namespace, mapping scheme, policy,
/// profile.
type PlannerKey = (
    String,
    String,
    tenantplane_api::MappingVersion,
    String,
    String,
);

/// The planner core run in-process (same computation as the planner service).
#[derive(Debug, Default)]
pub struct InProcessPlanner {
    /// Planners by (tenant, host namespace, mapping scheme, policy text, profile text):
    /// compiling CEL is the costly part.
    planners: Mutex<HashMap<PlannerKey, Arc<Planner>>>,
}

impl InProcessPlanner {
    fn planner(
        &self,
        tenant: &Tenant,
        text: Option<&str>,
        profile: Option<&str>,
    ) -> Result<Arc<Planner>, PlanError> {
        let key = (
            tenant.name().to_string(),
            tenant.host_namespace(),
            tenant.mapping_version(),
            text.unwrap_or("").to_string(),
            profile.unwrap_or("").to_string(),
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
        let mut planner = Planner::new(tenant, compiled);
        if let Some(profile) = profile {
            let profile = serde_norway::from_str(profile)
                .map_err(|e| PlanError::Invalid(format!("isolation profile: {e}")))?;
            planner = planner.with_boundary(
                Boundary::compile(tenant, &profile)
                    .map_err(|e| PlanError::Invalid(format!("isolation profile: {e}")))?,
            );
        }
        let planner = Arc::new(planner);
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
            let planner = self.planner(request.tenant, request.policy, request.profile)?;
            let mut host = HostState::default();
            for m in request.host {
                host.insert(m.clone());
            }
            let objects: Vec<&TenantObject> = request.objects.iter().collect();
            Ok(planner.plan_batch(&objects, &host))
        })
    }
}

/// The planner service over gRPC, through `tenantplane-client` (TLS and mutual TLS, and the
/// caller's trace context: the call's `traceparent` is the batch span, and each object carries
/// its own decision span's). The channel connects lazily and reconnects by itself: a planner
/// that is down answers `Unavailable`, and the decisions wait (Deferred) until it is back.
#[derive(Debug, Clone)]
pub struct GrpcPlanner {
    client: tenantplane_client::PlannerClient,
    metrics: SyncMetrics,
}

/// How long one Plan call may take before its batch is Deferred.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects (lazily) to the planner service at `url` (e.g. `http://127.0.0.1:50051`), plaintext.
pub fn connect(url: &str) -> anyhow::Result<Arc<dyn PlanService>> {
    connect_with(&ClientConfig::new(url), SyncMetrics::default())
}

/// Connects (lazily) to the planner service `config` describes, timing calls into `metrics`.
pub fn connect_with(
    config: &ClientConfig,
    metrics: SyncMetrics,
) -> anyhow::Result<Arc<dyn PlanService>> {
    let config = config.clone().with_timeout(CALL_TIMEOUT);
    let channel = tenantplane_client::connect_lazy(&config)?;
    Ok(Arc::new(GrpcPlanner {
        client: tenantplane_client::PlannerClient::new(channel),
        metrics,
    }))
}

impl PlanService for GrpcPlanner {
    fn plan<'a>(
        &'a self,
        request: PlanRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Plan>, PlanError>> {
        Box::pin(async move {
            let start = Instant::now();
            let planned = self
                .client
                .clone()
                .plan_traced(
                    request.tenant,
                    request.policy,
                    request.profile,
                    request.objects,
                    request.host,
                    request.trace_contexts,
                )
                .await;
            let code = match &planned {
                Ok(_) => tonic::Code::Ok,
                Err(ClientError::Status(status)) => status.code(),
                Err(ClientError::Connect { .. }) => tonic::Code::Unavailable,
                Err(_) => tonic::Code::Internal,
            };
            self.metrics
                .rpc(PLANNER_SERVICE, "Plan", code, start.elapsed());
            match planned {
                Ok(planned) => Ok(planned.into_iter().map(|p| p.plan).collect()),
                Err(ClientError::Status(status))
                    if matches!(
                        status.code(),
                        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
                    ) =>
                {
                    Err(PlanError::Invalid(status.message().to_string()))
                }
                Err(e @ (ClientError::Status(_) | ClientError::Connect { .. })) => {
                    Err(PlanError::Unavailable(e.to_string()))
                }
                Err(e) => Err(PlanError::Invalid(format!("the planner's answer: {e}"))),
            }
        })
    }
}

/// The planner's gRPC service name, as metrics label it.
const PLANNER_SERVICE: &str = "tenantplane.planner.v1.Planner";
