//! The Planner client.

use std::iter::Peekable;
use std::ops::Range;
use std::task::Poll;

use futures::stream::{FuturesOrdered, StreamExt};
use serde_json::json;
use tenantplane_api::Tenant;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::PolicyRef;
use tenantplane_core::mapping::Provenance;
use tenantplane_core::mapping::TenantPlacement;
use tenantplane_core::planner::HostState;
use tenantplane_core::reference::HostObjects;
use tenantplane_core::translate;
use tenantplane_core::{Decision, Plan, TenantObject};
use tenantplane_grpc::FieldError;
use tenantplane_grpc::convert::from_proto::{self, PlanAnswer, SentObject};
use tenantplane_grpc::convert::to_proto;
use tenantplane_proto::planner::v1::planner_client;
use tenantplane_proto::planner::v1::{
    ExplainHostObjectRequest, GetVersionRequest, Ownership, PlacementForm, PlanForm, PlanRequest,
    PlanResponse,
};
use tonic::transport::Channel;

use crate::connect::{TracedChannel, traced};
use crate::{ClientConfig, ClientError, connect};

/// Objects per Plan request: batches are split so that requests and responses stay far below
/// gRPC's default 4 MiB message limit on the server side.
const MAX_OBJECTS_PER_REQUEST: usize = 1000;
/// Plan requests of one batch in flight at once. A batch of more than `MIN_OBJECTS_PER_SHARE`
/// objects is sent as at least this many requests, so that the planner plans one while the
/// answer to another is encoded, decoded and converted.
const CONCURRENT_REQUESTS: usize = 4;
/// The fewest objects a batch is split into requests of (fewer are sent as one request).
const MIN_OBJECTS_PER_SHARE: usize = 128;
/// Bytes of tenant objects and the host objects at their targets per Plan request.
const MAX_BYTES_PER_REQUEST: usize = 1024 * 1024;

/// A client of the Planner service.
#[derive(Clone, Debug)]
pub struct PlannerClient {
    inner: planner_client::PlannerClient<TracedChannel>,
}

/// One tenant object's plan and decision, as the planner service computed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedObject {
    /// Placement, verdict, collision check and outcome: equal to the in-process plan.
    pub plan: Plan,
    /// The decision record, stamped by the planner service (component `tenantplane-planner`).
    pub decision: Decision,
}

/// Where a host object came from, read back from its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostObjectSource {
    /// A tenantplane host object: its tenant and source object.
    Managed(Provenance),
    /// Not created by tenantplane.
    NotManaged {
        /// The service's explanation.
        message: String,
    },
    /// tenantplane provenance altered by hand: a key is missing.
    Incomplete {
        /// The missing provenance key.
        missing_key: String,
        /// The service's explanation.
        message: String,
    },
}

/// What the planner service runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// Mapping scheme version.
    pub mapping_version: String,
    /// Version of the planning engine (tenantplane-core).
    pub engine_version: String,
    /// The built-in default SyncPolicy (rule: `None`).
    pub default_policy: PolicyRef,
}

impl PlannerClient {
    /// Connects to a planner service.
    pub async fn connect(config: &ClientConfig) -> Result<Self, ClientError> {
        Ok(Self::new(connect(config).await?))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Self {
        PlannerClient {
            inner: planner_client::PlannerClient::new(traced(channel))
                .max_decoding_message_size(crate::connect::max_response_bytes()),
        }
    }

    /// Plans `objects` of `tenant` under `sync_policy` (its YAML or JSON text; `None` for the
    /// built-in default) and the isolation boundary of `isolation_profile` (its YAML or JSON
    /// text; `None` when the tenant has none) against the `host` objects at their target names,
    /// in order: the remote twin of `Planner::plan_batch` followed by `Plan::to_decision`. Large
    /// batches are sent as several requests. A planner that predates isolation profiles, and so
    /// planned without the one sent, is an error.
    pub async fn plan(
        &mut self,
        tenant: &Tenant,
        sync_policy: Option<&str>,
        isolation_profile: Option<&str>,
        objects: &[TenantObject],
        host: &[HostObjectMeta],
    ) -> Result<Vec<PlannedObject>, ClientError> {
        self.plan_traced(tenant, sync_policy, isolation_profile, objects, host, &[])
            .await
    }

    /// [`plan`](Self::plan), with the W3C `traceparent` of each object's own span (empty, or one
    /// per object): the planner plans each object in a child span of it
    /// (`tenantplane.planner.plan_object`), so a batch of decisions shares one call while each
    /// decision's trace shows its planning.
    pub async fn plan_traced(
        &mut self,
        tenant: &Tenant,
        sync_policy: Option<&str>,
        isolation_profile: Option<&str>,
        objects: &[TenantObject],
        host: &[HostObjectMeta],
        trace_contexts: &[String],
    ) -> Result<Vec<PlannedObject>, ClientError> {
        if !trace_contexts.is_empty() && trace_contexts.len() != objects.len() {
            return Err(ClientError::Config(format!(
                "{} trace contexts for {} objects",
                trace_contexts.len(),
                objects.len()
            )));
        }
        let mut at_targets = HostState::default();
        for meta in host {
            at_targets.insert(meta.clone());
        }
        let per_request = objects
            .len()
            .div_ceil(CONCURRENT_REQUESTS)
            .clamp(MIN_OBJECTS_PER_SHARE, MAX_OBJECTS_PER_REQUEST);
        let batch = Batch {
            tenant: TenantPlacement::from(tenant),
            objects,
            host,
            at_targets,
            trace_contexts,
            each: PlanRequest {
                tenant: Some(to_proto::tenant(tenant)),
                sync_policy: sync_policy.unwrap_or_default().as_bytes().to_vec(),
                isolation_profile: isolation_profile.unwrap_or_default().as_bytes().to_vec(),
                // The form planner.proto recommends to a client that runs the mapping scheme:
                // each plan carries only what is not derived here from the objects sent and the
                // response. Under another mapping version the answer is complete (the standard
                // form), and is read as such.
                plan_form: PlanForm::Minimal.into(),
                mapping_version: tenant.mapping_version().to_string(),
                ..PlanRequest::default()
            },
        };
        let mut parts = Parts::of(&batch).peekable();
        // Up to CONCURRENT_REQUESTS requests in flight, answers taken in order. Each request is
        // cut and encoded, then polled once so that it is on its way, before the next is cut: the
        // planner plans the first while the rest are encoded here, and one part while the answer
        // to another is completed. Each plan is completed straight into the batch's result (a
        // plan and its decision are about a kilobyte, and moving them through intermediate
        // vectors cost a twentieth of the CPU).
        let mut in_flight = FuturesOrdered::new();
        let mut planned = Vec::with_capacity(objects.len());
        let mut start = 0;
        loop {
            let answer = if in_flight.len() < CONCURRENT_REQUESTS && start < objects.len() {
                let (request, sent) = batch.cut(&mut parts, per_request, start);
                let range = start..start + sent.len();
                start = range.end;
                in_flight.push_back(self.call(&batch, range, request, sent));
                match futures::poll!(in_flight.next()) {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => continue,
                }
            } else {
                in_flight.next().await
            };
            let Some(answer) = answer else {
                // Objects of different requests may share a v1 host name: settled over the batch,
                // as the planner settles them over a request.
                let batch_objects: Vec<&TenantObject> = objects.iter().collect();
                let mut plans: Vec<Plan> = planned
                    .iter()
                    .map(|p: &PlannedObject| p.plan.clone())
                    .collect();
                let refused = tenantplane_core::planner::settle_shared_names(
                    &batch.tenant,
                    &batch_objects,
                    &mut plans,
                );
                for i in refused {
                    plans[i].restate(&mut planned[i].decision);
                    planned[i].plan = plans[i].clone();
                }
                return Ok(planned);
            };
            let (response, sent) = answer?;
            if isolation_profile.is_some() && response.isolation_profile.is_none() {
                return Err(FieldError::new(
                    "isolation_profile",
                    "is absent: the planner predates isolation profiles and planned without the \
                     one sent",
                )
                .into());
            }
            complete(&mut planned, &batch.tenant, response, sent)?;
        }
    }

    /// The answer to the request for `batch.objects[range]`, which carries the host objects at
    /// their targets, with the objects `sent` in it. An answer not in the derived placement form
    /// comes from a planner whose mapping is not this client's: its targets, and so the host
    /// objects it had to compare the objects with, may be others, so the request is sent again
    /// with every host object of the batch.
    async fn call<'a>(
        &self,
        batch: &Batch<'a>,
        range: Range<usize>,
        request: PlanRequest,
        sent: Vec<SentObject<'a>>,
    ) -> Result<(PlanResponse, Vec<SentObject<'a>>), ClientError> {
        let mut inner = self.inner.clone();
        let mut response = inner.plan(request).await?.into_inner();
        if !batch.host.is_empty() && response.placement_form() != PlacementForm::Derived {
            let traces = batch.trace_contexts.get(range.clone()).unwrap_or_default();
            let again = PlanRequest {
                objects: batch.objects[range]
                    .iter()
                    .map(from_proto::object_json)
                    .collect(),
                host_objects: batch.host.iter().map(host_object_json).collect(),
                trace_contexts: traces.to_vec(),
                ..batch.each.clone()
            };
            response = inner.plan(again).await?.into_inner();
        }
        Ok((response, sent))
    }

    /// Reads a host object's source back from its metadata (`kubectl get -o json` output).
    pub async fn explain_host_object(
        &mut self,
        host_object: &serde_json::Value,
    ) -> Result<HostObjectSource, ClientError> {
        let request = ExplainHostObjectRequest {
            host_object: serde_json::to_vec(host_object).expect("a JSON value serializes"),
        };
        let response = self.inner.explain_host_object(request).await?.into_inner();
        Ok(match response.ownership() {
            Ownership::Managed => HostObjectSource::Managed(from_proto::provenance(
                "provenance",
                response
                    .provenance
                    .as_ref()
                    .ok_or_else(|| FieldError::new("provenance", "is required"))?,
            )?),
            Ownership::NotManaged => HostObjectSource::NotManaged {
                message: response.message,
            },
            Ownership::Incomplete => HostObjectSource::Incomplete {
                missing_key: response.missing_key,
                message: response.message,
            },
            Ownership::Unspecified => {
                return Err(FieldError::new(
                    "ownership",
                    "is unspecified or unknown to this client",
                )
                .into());
            }
        })
    }

    /// The versions the service runs.
    pub async fn version(&mut self) -> Result<Version, ClientError> {
        let response = self
            .inner
            .get_version(GetVersionRequest {})
            .await?
            .into_inner();
        let policy = response
            .default_policy
            .ok_or_else(|| FieldError::new("default_policy", "is required"))?;
        Ok(Version {
            mapping_version: response.mapping_version,
            engine_version: response.engine_version,
            default_policy: PolicyRef {
                name: policy.name,
                revision: policy.revision,
                rule: None,
            },
        })
    }
}

/// One `PlannerClient::plan` call.
struct Batch<'a> {
    tenant: TenantPlacement,
    objects: &'a [TenantObject],
    host: &'a [HostObjectMeta],
    /// The host objects, by target.
    at_targets: HostState,
    /// Empty, or one per object.
    trace_contexts: &'a [String],
    /// The fields every request of the batch has.
    each: PlanRequest,
}

impl<'a> Batch<'a> {
    /// The next request, of the `parts` from `objects[start]` on: up to `per_request` objects
    /// (at least one) and the host objects at their targets, within `MAX_BYTES_PER_REQUEST`;
    /// with the objects sent in it.
    fn cut(
        &self,
        parts: &mut Peekable<Parts<'a, '_>>,
        per_request: usize,
        start: usize,
    ) -> (PlanRequest, Vec<SentObject<'a>>) {
        let mut request = self.each.clone();
        let mut sent = Vec::new();
        let mut bytes = 0;
        while let Some(next) = parts.peek() {
            let size = next.json.len() + next.host.iter().map(Vec::len).sum::<usize>();
            let full = request.objects.len() >= per_request || bytes + size > MAX_BYTES_PER_REQUEST;
            if full && !request.objects.is_empty() {
                break;
            }
            bytes += size;
            let part = parts.next().expect("peeked");
            request.objects.push(part.json);
            request.host_objects.extend(part.host);
            sent.push(part.sent);
        }
        if !self.trace_contexts.is_empty() {
            request.trace_contexts = self.trace_contexts[start..start + sent.len()].to_vec();
        }
        (request, sent)
    }
}

/// The objects of a batch, each encoded for its request, placed by the mapping and digested when
/// its request is cut: what its answer is completed with, and, by its placement, the host object
/// the planner compares it with.
struct Parts<'a, 'b> {
    objects: std::slice::Iter<'a, TenantObject>,
    batch: &'b Batch<'a>,
}

impl<'a, 'b> Parts<'a, 'b> {
    fn of(batch: &'b Batch<'a>) -> Self {
        Parts {
            objects: batch.objects.iter(),
            batch,
        }
    }
}

impl<'a> Iterator for Parts<'a, '_> {
    type Item = Part<'a>;

    fn next(&mut self) -> Option<Part<'a>> {
        let object = self.objects.next()?;
        let (json, sent) = SentObject::encode(&self.batch.tenant, object);
        let at_targets = &self.batch.at_targets;
        let mut host: Vec<Vec<u8>> = at_targets
            .get(sent.placement())
            .map(host_object_json)
            .into_iter()
            .collect();
        // The host objects its references resolve to, for the planner's reference check.
        let placement = sent.placement();
        if translate::names_other_objects(object.identity.group(), &object.identity.kind)
            && let Ok(desired) = translate::to_host(&self.batch.tenant, object, placement)
        {
            let namespace = at_targets.in_namespace(&placement.namespace);
            host.extend(desired.references.iter().filter_map(|r| {
                namespace
                    .host_object(&r.group, &r.kind, &r.host_name)
                    .map(|m| host_object_json(&m))
            }));
        }
        Some(Part { json, host, sent })
    }
}

/// One object of a batch, ready for its request.
struct Part<'a> {
    /// The object as JSON.
    json: Vec<u8>,
    /// The host objects at its target and at its references' targets, as JSON.
    host: Vec<Vec<u8>>,
    /// What its answer is completed with.
    sent: SentObject<'a>,
}

/// The part of a host object the planner reads, as JSON.
fn host_object_json(meta: &HostObjectMeta) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": meta.api_version,
        "kind": meta.kind,
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": meta.labels,
            "annotations": meta.annotations,
        },
    }))
    .expect("a JSON value serializes")
}

/// Completes the plans and decisions of one Plan answer, for the objects `sent` in its request,
/// onto `planned`.
fn complete(
    planned: &mut Vec<PlannedObject>,
    tenant: &TenantPlacement,
    mut response: PlanResponse,
    sent: Vec<SentObject>,
) -> Result<(), ClientError> {
    let plans = std::mem::take(&mut response.plans);
    if plans.len() != sent.len() {
        return Err(FieldError::new(
            "plans",
            format!("{} plans for {} objects", plans.len(), sent.len()),
        )
        .into());
    }
    let answer = PlanAnswer::of(&response, tenant)?;
    for (i, (p, sent)) in plans.into_iter().zip(sent).enumerate() {
        let (plan, decision) = answer.object_plan(&format!("plans[{i}]"), p, sent)?;
        planned.push(PlannedObject { plan, decision });
    }
    Ok(())
}
