//! A planner and an isolation compiler served on loopback answer exactly what the core computes
//! in process: the guarantee behind `tenantplane explain-sync --planner ADDR`.

use std::path::Path;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use pretty_assertions::assert_eq;
use prost::Message;
use serde_json::json;
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_client::{
    ClientConfig, ClientError, HostObjectSource, IsolationClient, PlannedObject, PlannerClient,
};
use tenantplane_core::boundary::Boundary;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::Stamp;
use tenantplane_core::mapping::{LATEST_MAPPING_VERSION, TenantPlacement};
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Decision, Planner, TenantObject};
use tenantplane_grpc::convert::{from_proto, to_proto};
use tenantplane_grpc::{IsolationService, PlannerService};
use tenantplane_isolation::ObjectRef;
use tenantplane_proto::planner::v1::planner_client::PlannerClient as RawPlannerClient;
use tenantplane_proto::planner::v1::planner_server::{self, PlannerServer};
use tenantplane_proto::planner::v1::{
    DecisionForm, ExplainHostObjectRequest, ExplainHostObjectResponse, GetVersionRequest,
    GetVersionResponse, PlacementForm, PlanForm, PlanRequest, PlanResponse,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

async fn serve() -> ClientConfig {
    serve_planner(PlannerService::new().into_server()).await
}

/// `planner` and the isolation compiler on a loopback port.
async fn serve_planner(planner: PlannerServer<impl planner_server::Planner>) -> ClientConfig {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(planner)
            .add_service(IsolationService::default().into_server())
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    ClientConfig::new(addr.to_string())
}

fn example(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn documents(path: &str) -> Vec<serde_json::Value> {
    tenantplane_core::documents::parse(path, &example(path))
        .into_iter()
        .filter_map(Result::ok)
        .map(|d| d.value)
        .collect()
}

fn tenant_objects() -> Vec<TenantObject> {
    [
        "workloads/shop.yaml",
        "workloads/refused.yaml",
        "workloads/tricky.yaml",
    ]
    .iter()
    .flat_map(|p| documents(p))
    .filter_map(|v| TenantObject::from_value(v).ok())
    .collect()
}

fn host_objects() -> Vec<HostObjectMeta> {
    documents("host/tenant-acme.yaml")
        .iter()
        .map(|v| HostObjectMeta::from_value(v).unwrap())
        .collect()
}

/// What explain-sync computes offline.
fn local(
    tenant: &Tenant,
    (policy, profile): (Option<&str>, Option<&str>),
    objects: &[TenantObject],
    host: &[HostObjectMeta],
) -> Vec<PlannedObject> {
    let policy = policy.map_or_else(CompiledPolicy::builtin_default, |p| {
        CompiledPolicy::from_yaml(p).unwrap()
    });
    let mut planner = Planner::new(tenant, policy);
    if let Some(profile) = profile {
        let profile = serde_norway::from_str(profile).unwrap();
        planner = planner.with_boundary(Boundary::compile(tenant, &profile).unwrap());
    }
    let mut state = HostState::default();
    for meta in host {
        state.insert(meta.clone());
    }
    let batch: Vec<&TenantObject> = objects.iter().collect();
    planner
        .plan_batch(&batch, &state)
        .into_iter()
        .zip(objects)
        .map(|(plan, object)| {
            let decision = plan.to_decision(
                planner.tenant(),
                object,
                Stamp::now("tenantplane explain-sync"),
            );
            PlannedObject { plan, decision }
        })
        .collect()
}

/// A decision without what differs between two runs: id, time and acting component.
fn comparable(planned: Vec<PlannedObject>) -> Vec<PlannedObject> {
    planned
        .into_iter()
        .map(|p| PlannedObject {
            decision: Decision {
                id: String::new(),
                time: Timestamp::UNIX_EPOCH,
                component: String::new(),
                ..p.decision
            },
            plan: p.plan,
        })
        .collect()
}

#[tokio::test]
async fn remote_plans_equal_in_process_plans() {
    let mut client = PlannerClient::connect(&serve().await).await.unwrap();
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let objects = tenant_objects();
    assert!(objects.len() >= 10, "the examples hold a real batch");
    let host = host_objects();
    let profile = example("isolationprofile.yaml");
    for rules in [
        (None, None),
        (Some(example("syncpolicy.yaml")), None),
        (None, Some(profile.clone())),
    ] {
        let rules = (rules.0.as_deref(), rules.1.as_deref());
        let remote = client
            .plan(&tenant, rules.0, rules.1, &objects, &host)
            .await
            .unwrap();
        for p in &remote {
            assert_eq!(p.decision.component, "tenantplane-planner");
        }
        let expected = comparable(local(&tenant, rules, &objects, &host));
        assert_eq!(comparable(remote), expected);
        // Every outcome the examples exercise came across the wire.
        let outcomes: std::collections::BTreeSet<_> =
            expected.iter().map(|p| p.plan.outcome).collect();
        assert!(outcomes.len() >= 3, "{outcomes:?}");
    }
}

/// `plan` as the syncer calls it: boxed as a `Send` future borrowing the batch.
fn boxed_plan<'a>(
    client: &'a mut PlannerClient,
    tenant: &'a Tenant,
    objects: &'a [TenantObject],
) -> BoxFuture<'a, Result<Vec<PlannedObject>, ClientError>> {
    Box::pin(client.plan(tenant, None, None, objects, &[]))
}

#[tokio::test]
async fn batches_larger_than_one_request_keep_their_order() {
    let mut client = PlannerClient::connect(&serve().await).await.unwrap();
    let tenant = Tenant::new("big", Default::default());
    let objects: Vec<TenantObject> = (0..2500)
        .map(|i| {
            TenantObject::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % 7),
                             "labels": {"i": i.to_string()}},
                "data": {"payload": "x".repeat(600)},
            }))
            .unwrap()
        })
        .collect();
    let remote = boxed_plan(&mut client, &tenant, &objects).await.unwrap();
    assert_eq!(remote.len(), objects.len());
    assert_eq!(
        comparable(remote),
        comparable(local(&tenant, (None, None), &objects, &[]))
    );
}

/// A batch of `n` ConfigMaps and, in its tenant's host namespace, a host object at the target of
/// every fifth (the tenant's own: an update) and of the one after (someone else's: a conflict),
/// among `others` unrelated host objects; each host object carries 1 KiB of annotations.
fn with_a_large_host_set(
    tenant: &Tenant,
    n: usize,
    others: usize,
) -> (Vec<TenantObject>, Vec<HostObjectMeta>) {
    let objects: Vec<TenantObject> = (0..n)
        .map(|i| {
            TenantObject::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % 7)},
                "data": {"i": i.to_string()},
            }))
            .unwrap()
        })
        .collect();
    let placement = TenantPlacement::from(tenant);
    let padding = || [("note".to_string(), "x".repeat(1024))].into();
    let at_target = objects
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 < 2)
        .map(|(i, o)| {
            let p = tenantplane_core::mapping::place(&placement, o);
            let own = |m: &tenantplane_core::mapping::MetadataMap| {
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            };
            HostObjectMeta {
                labels: if i % 5 == 0 {
                    own(&p.labels)
                } else {
                    Default::default()
                },
                annotations: if i % 5 == 0 {
                    own(&p.annotations)
                } else {
                    padding()
                },
                api_version: p.api_version,
                kind: p.kind,
                namespace: p.namespace,
                name: p.name,
            }
        });
    let unrelated = (0..others).map(|i| HostObjectMeta {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: placement.host_namespace.clone(),
        name: format!("unrelated-{i}"),
        labels: Default::default(),
        annotations: padding(),
    });
    let host = at_target.chain(unrelated).collect();
    (objects, host)
}

#[tokio::test]
async fn only_the_host_objects_at_the_targets_are_sent() {
    let mut client = PlannerClient::connect(&serve().await).await.unwrap();
    let tenant = Tenant::new("crowded", Default::default());
    // 6,000 host objects of over 1 KiB each: more than the 4 MiB a request may have.
    let (objects, host) = with_a_large_host_set(&tenant, 2500, 6000);
    let remote = client
        .plan(&tenant, None, None, &objects, &host)
        .await
        .unwrap();
    let expected = comparable(local(&tenant, (None, None), &objects, &host));
    let actions: std::collections::BTreeSet<_> = expected
        .iter()
        .map(|p| format!("{:?} {:?}", p.plan.outcome, p.plan.action))
        .collect();
    assert_eq!(
        actions.len(),
        3,
        "creates, updates and conflicts: {actions:?}"
    );
    assert_eq!(comparable(remote), expected);
}

/// The planner, answering as an older or differently built one would: each Plan request is
/// rewritten before it is planned. Records the number of host objects each request carried, and
/// the forms it asked for.
#[derive(Clone)]
struct Rewriting {
    planner: std::sync::Arc<PlannerService>,
    rewrite: fn(&mut PlanRequest),
    host_objects: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    forms: std::sync::Arc<std::sync::Mutex<Vec<AskedForms>>>,
}

/// The forms a Plan request asked for.
#[derive(Debug, PartialEq, Eq)]
struct AskedForms {
    plan: PlanForm,
    decision: DecisionForm,
    placement: PlacementForm,
    mapping_version: String,
}

impl Rewriting {
    fn new(rewrite: fn(&mut PlanRequest)) -> Self {
        Rewriting {
            planner: Default::default(),
            rewrite,
            host_objects: Default::default(),
            forms: Default::default(),
        }
    }
}

#[tonic::async_trait]
impl planner_server::Planner for Rewriting {
    async fn plan(
        &self,
        request: tonic::Request<PlanRequest>,
    ) -> Result<tonic::Response<PlanResponse>, tonic::Status> {
        let mut request = request.into_inner();
        self.host_objects
            .lock()
            .unwrap()
            .push(request.host_objects.len());
        self.forms.lock().unwrap().push(AskedForms {
            plan: request.plan_form(),
            decision: request.decision_form(),
            placement: request.placement_form(),
            mapping_version: request.mapping_version.clone(),
        });
        (self.rewrite)(&mut request);
        self.planner.plan(tonic::Request::new(request)).await
    }

    async fn explain_host_object(
        &self,
        request: tonic::Request<ExplainHostObjectRequest>,
    ) -> Result<tonic::Response<ExplainHostObjectResponse>, tonic::Status> {
        self.planner.explain_host_object(request).await
    }

    async fn get_version(
        &self,
        request: tonic::Request<GetVersionRequest>,
    ) -> Result<tonic::Response<GetVersionResponse>, tonic::Status> {
        self.planner.get_version(request).await
    }
}

#[tokio::test]
async fn a_planner_under_another_mapping_gets_every_host_object() {
    // Its mapping scheme is another version: it answers in the full placement form.
    let planner = Rewriting::new(|request| request.mapping_version = "v0".into());
    let config = serve_planner(PlannerServer::new(planner.clone())).await;
    let mut client = PlannerClient::connect(&config).await.unwrap();
    let tenant = Tenant::new("upgrading", Default::default());
    let (objects, host) = with_a_large_host_set(&tenant, 10, 20);
    let remote = client
        .plan(&tenant, None, None, &objects, &host)
        .await
        .unwrap();
    assert_eq!(
        comparable(remote),
        comparable(local(&tenant, (None, None), &objects, &host))
    );
    // First the host objects at the client's targets, then, as the answer's placements were not
    // derived under the client's mapping, all of them.
    assert_eq!(*planner.host_objects.lock().unwrap(), vec![4, 24]);
}

#[tokio::test]
async fn the_client_asks_for_minimal_plans_alone() {
    // The combination planner.proto recommends to a client that runs the mapping scheme:
    // plan_form with the scheme's version, the decision and placement forms left unset.
    let planner = Rewriting::new(|_| {});
    let config = serve_planner(PlannerServer::new(planner.clone())).await;
    let mut client = PlannerClient::connect(&config).await.unwrap();
    let tenant = Tenant::new("current", Default::default());
    let (objects, host) = with_a_large_host_set(&tenant, 10, 20);
    let remote = client
        .plan(&tenant, None, None, &objects, &host)
        .await
        .unwrap();
    assert_eq!(
        comparable(remote),
        comparable(local(&tenant, (None, None), &objects, &host))
    );
    assert_eq!(
        *planner.forms.lock().unwrap(),
        vec![AskedForms {
            plan: PlanForm::Minimal,
            decision: DecisionForm::Unspecified,
            placement: PlacementForm::Unspecified,
            mapping_version: tenant.mapping_version().to_string(),
        }]
    );
}

#[tokio::test]
async fn a_planner_that_predates_minimal_plans_is_understood() {
    // It ignores plan_form, and the client asks for nothing else: it answers in the standard
    // form, with full decisions and placements.
    let planner = Rewriting::new(|request| request.plan_form = PlanForm::Unspecified.into());
    let config = serve_planner(PlannerServer::new(planner.clone())).await;
    let mut client = PlannerClient::connect(&config).await.unwrap();
    let tenant = Tenant::new("older", Default::default());
    let (objects, host) = with_a_large_host_set(&tenant, 10, 20);
    let remote = client
        .plan(&tenant, None, None, &objects, &host)
        .await
        .unwrap();
    assert_eq!(
        comparable(remote),
        comparable(local(&tenant, (None, None), &objects, &host))
    );
    // Its placements were not derived under the client's mapping, so, as from a planner under
    // another mapping, the request was sent again with every host object.
    assert_eq!(*planner.host_objects.lock().unwrap(), vec![4, 24]);
}

#[tokio::test]
async fn explains_host_objects_and_reports_versions() {
    let mut client = PlannerClient::connect(&serve().await).await.unwrap();
    let host = documents("host/tenant-acme.yaml");
    match client.explain_host_object(&host[1]).await.unwrap() {
        HostObjectSource::Managed(p) => {
            let meta = HostObjectMeta::from_value(&host[1]).unwrap();
            assert_eq!(
                p,
                tenantplane_core::mapping::provenance(&meta.labels, &meta.annotations).unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client.explain_host_object(&host[0]).await.unwrap(),
        HostObjectSource::NotManaged { .. }
    ));
    let version = client.version().await.unwrap();
    assert_eq!(version.mapping_version, LATEST_MAPPING_VERSION.as_str());
    assert_eq!(version.engine_version, tenantplane_core::ENGINE_VERSION);
    assert_eq!(version.default_policy.name, "tenantplane-default");
}

#[tokio::test]
async fn refusals_come_back_as_field_violations() {
    let mut client = PlannerClient::connect(&serve().await).await.unwrap();
    let tenant = Tenant::new("acme", Default::default());
    let object = TenantObject::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}
    }))
    .unwrap();
    let error = client
        .plan(
            &tenant,
            Some("spec: {rules: [{name: x}]}"),
            None,
            &[object],
            &[],
        )
        .await
        .unwrap_err();
    let ClientError::Status(status) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let violations = error.field_violations();
    assert_eq!(violations.len(), 1);
    assert!(
        violations[0].field.starts_with("sync_policy"),
        "{violations:?}"
    );
}

#[tokio::test]
async fn remote_compilation_equals_in_process_compilation() {
    let mut client = IsolationClient::connect(&serve().await).await.unwrap();
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let profile: IsolationProfile =
        serde_norway::from_str(&example("isolationprofile.yaml")).unwrap();
    let local = tenantplane_isolation::compile(&tenant, &profile).unwrap();
    let mut applied = local.refs();
    let stale = ObjectRef {
        api_version: "v1".into(),
        kind: "LimitRange".into(),
        namespace: Some("tenant-acme".into()),
        name: "tenantplane-old".into(),
    };
    applied.push(stale.clone());
    let remote = client.compile(&tenant, &profile, &applied).await.unwrap();
    assert_eq!(remote.compilation, local);
    assert_eq!(remote.prune, vec![stale]);
}

#[tokio::test]
async fn connecting_to_nothing_fails_with_the_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = PlannerClient::connect(&ClientConfig::new(addr.to_string()))
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Connect { .. }), "{error:?}");
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}

/// The objects of the examples plus one with a uid and a resource version, which the compact
/// form leaves the client to fill in.
fn objects_with_a_resource_version() -> Vec<TenantObject> {
    let mut objects = tenant_objects();
    objects.push(
        TenantObject::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "seen", "namespace": "shop", "uid": "6f0c2a1e",
                         "resourceVersion": "4711",
                         "annotations": {"tenantplane.io/source-uid": "spoofed"}},
        }))
        .unwrap(),
    );
    objects
}

/// A Plan request as a client that knows nothing of decision forms sends it.
fn plan_request(tenant: &Tenant, objects: &[TenantObject], host: &[HostObjectMeta]) -> PlanRequest {
    PlanRequest {
        tenant: Some(to_proto::tenant(tenant)),
        sync_policy: example("syncpolicy.yaml").into_bytes(),
        objects: objects
            .iter()
            .map(|o| serde_json::to_vec(&o.object).unwrap())
            .collect(),
        host_objects: host
            .iter()
            .map(|m| {
                serde_json::to_vec(&json!({
                    "apiVersion": m.api_version, "kind": m.kind,
                    "metadata": {"name": m.name, "namespace": m.namespace,
                                 "labels": m.labels, "annotations": m.annotations},
                }))
                .unwrap()
            })
            .collect(),
        ..PlanRequest::default()
    }
}

/// Plans the examples (and an object with a resource version) under the examples' policy with a
/// request that does not name a decision form, as a client that predates the field sends it:
/// the answer's size and its plans as the client reads the full form.
async fn plan_without_asking(config: &ClientConfig) -> (usize, Vec<PlannedObject>) {
    let mut raw = RawPlannerClient::new(tenantplane_client::connect(config).await.unwrap());
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let request = plan_request(&tenant, &objects_with_a_resource_version(), &host_objects());
    let full = raw.plan(request).await.unwrap().into_inner();
    assert_eq!(full.decision_form(), DecisionForm::Full);
    let bytes = full.encoded_len();
    let planned = full
        .plans
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let (plan, decision) = from_proto::object_plan(&format!("plans[{i}]"), p).unwrap();
            PlannedObject { plan, decision }
        })
        .collect();
    (bytes, planned)
}

#[tokio::test]
async fn a_client_that_does_not_ask_gets_full_decisions_and_placements() {
    let config = serve().await;
    let mut raw = RawPlannerClient::new(tenantplane_client::connect(&config).await.unwrap());
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let objects = objects_with_a_resource_version();
    let answer = raw
        .plan(plan_request(&tenant, &objects, &host_objects()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.decision_form(), DecisionForm::Full);
    assert_eq!(answer.placement_form(), PlacementForm::Full);
    for p in &answer.plans {
        let placement = p.placement.as_ref().unwrap();
        assert!(
            placement.labels.contains_key("tenantplane.io/tenant"),
            "{placement:?}"
        );
        let decision = p.decision.as_ref().unwrap();
        assert_eq!(decision.tenant, "acme");
        assert!(decision.subject.is_some() && decision.target.is_some());
        assert!(decision.policy.is_some() && !decision.reason.is_empty());
    }
    // Read back, each decision is the record the core builds in process.
    let (_, full) = plan_without_asking(&config).await;
    let policy = example("syncpolicy.yaml");
    let local = local(&tenant, (Some(&policy), None), &objects, &host_objects());
    assert_eq!(comparable(full), comparable(local));
}

#[tokio::test]
async fn compact_and_full_decisions_are_the_same_plans_and_decisions() {
    let config = serve().await;
    let mut client = PlannerClient::connect(&config).await.unwrap();
    let mut raw = RawPlannerClient::new(tenantplane_client::connect(&config).await.unwrap());
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let objects = objects_with_a_resource_version();
    let host = host_objects();
    let (full_bytes, full) = plan_without_asking(&config).await;
    let seen = &full.last().unwrap().decision;
    assert_eq!(seen.subject.resource_version, "4711");
    assert!(!seen.stripped_keys.is_empty(), "{seen:?}");

    // Asked for, the compact form leaves out what the plan repeats (a quarter of these bytes).
    let compact = raw
        .plan(PlanRequest {
            decision_form: DecisionForm::Compact.into(),
            ..plan_request(&tenant, &objects, &host)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(compact.decision_form(), DecisionForm::Compact);
    assert!(
        compact.encoded_len() * 5 < full_bytes * 4,
        "{} bytes compact, {full_bytes} full",
        compact.encoded_len()
    );
    for p in &compact.plans {
        let decision = p.decision.as_ref().unwrap();
        assert!(
            decision.subject.is_none() && decision.tenant.is_empty(),
            "{decision:?}"
        );
        assert!(decision.input_digest.starts_with("sha256:"), "{decision:?}");
    }

    // Derived placements leave out the labels, annotations and stripped keys the caller's mapping
    // computes from the objects it sent: about a third of the compact answer.
    let derived = raw
        .plan(PlanRequest {
            decision_form: DecisionForm::Compact.into(),
            placement_form: PlacementForm::Derived.into(),
            mapping_version: tenant.mapping_version().to_string(),
            ..plan_request(&tenant, &objects, &host)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(derived.placement_form(), PlacementForm::Derived);
    assert_eq!(compact.placement_form(), PlacementForm::Full);
    assert!(
        derived.encoded_len() * 4 < compact.encoded_len() * 3,
        "{} bytes derived, {} compact",
        derived.encoded_len(),
        compact.encoded_len()
    );
    for p in &derived.plans {
        let placement = p.placement.as_ref().unwrap();
        assert!(placement.target.is_some(), "{placement:?}");
        assert!(
            placement.labels.is_empty()
                && placement.annotations.is_empty()
                && placement.stripped_keys.is_empty(),
            "{placement:?}"
        );
    }

    // Minimal plans leave out what the request and the response say: the source, the whole
    // placement, the policy's name and revision, a reason and message equal to the verdict's, the
    // decision's stamping component and mapping version, and the input digest, which the caller
    // computes from the JSON it sent. About a third of the derived answer.
    let minimal = raw
        .plan(PlanRequest {
            plan_form: PlanForm::Minimal.into(),
            mapping_version: tenant.mapping_version().to_string(),
            ..plan_request(&tenant, &objects, &host)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(minimal.plan_form(), PlanForm::Minimal);
    assert_eq!(minimal.decision_form(), DecisionForm::Compact);
    assert_eq!(minimal.placement_form(), PlacementForm::Derived);
    assert_eq!(derived.plan_form(), PlanForm::Standard);
    assert_eq!(minimal.component, "tenantplane-planner");
    assert_eq!(
        minimal.component_version,
        full.last().unwrap().decision.component_version
    );
    assert!(
        minimal.encoded_len() * 2 < derived.encoded_len(),
        "{} bytes minimal, {} derived",
        minimal.encoded_len(),
        derived.encoded_len()
    );
    for p in &minimal.plans {
        assert!(p.source.is_none() && p.placement.is_none(), "{p:?}");
        let policy = p.verdict.as_ref().unwrap().policy.as_ref().unwrap();
        assert!(
            policy.name.is_empty() && policy.revision.is_empty(),
            "{p:?}"
        );
        let decision = p.decision.as_ref().unwrap();
        assert!(decision.component.is_empty() && decision.mapping_version.is_empty());
        assert!(decision.input_digest.is_empty(), "{decision:?}");
        assert!(
            !decision.id.is_empty() && decision.time.is_some(),
            "{decision:?}"
        );
    }
    // A conflict's reason and message are its own, not the verdict's: they are sent.
    assert!(
        minimal
            .plans
            .iter()
            .any(|p| p.reason.starts_with("HostObject") && !p.message.is_empty()),
        "{:?}",
        minimal.plans
    );

    // PlannerClient asks for minimal plans and rebuilds the very plans and records of the full
    // forms, stripped keys and their mention in the message included.
    let rebuilt = client
        .plan(
            &tenant,
            Some(&example("syncpolicy.yaml")),
            None,
            &objects,
            &host,
        )
        .await
        .unwrap();
    assert_eq!(comparable(rebuilt), comparable(full));
}

#[tokio::test]
async fn placements_are_derived_and_plans_minimal_only_under_the_planners_mapping_scheme() {
    let config = serve().await;
    let mut raw = RawPlannerClient::new(tenantplane_client::connect(&config).await.unwrap());
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let objects = objects_with_a_resource_version();
    // The example Tenant's scheme is v1, and no other value is granted.
    assert_eq!(tenant.mapping_version().as_str(), "v1");
    for mapping_version in ["", "v0", "v2"] {
        let answer = raw
            .plan(PlanRequest {
                placement_form: PlacementForm::Derived.into(),
                plan_form: PlanForm::Minimal.into(),
                mapping_version: mapping_version.to_string(),
                ..plan_request(&tenant, &objects, &host_objects())
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            answer.placement_form(),
            PlacementForm::Full,
            "{mapping_version:?}"
        );
        assert_eq!(
            answer.plan_form(),
            PlanForm::Standard,
            "{mapping_version:?}"
        );
        assert!(answer.plans.iter().all(|p| p.source.is_some()));
        let last = answer.plans.last().unwrap().placement.as_ref().unwrap();
        assert_eq!(
            last.stripped_keys,
            vec!["annotation tenantplane.io/source-uid"]
        );
    }
}

#[test]
fn a_derived_placement_that_lands_elsewhere_is_refused() {
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let placement = TenantPlacement::from(&tenant);
    let object = objects_with_a_resource_version().pop().unwrap();
    let planned = local(&tenant, (None, None), std::slice::from_ref(&object), &[]).remove(0);
    let stamp = Stamp::now("tenantplane-planner");
    let mut p = to_proto::object_plan(
        object.identity.clone(),
        planned.plan,
        to_proto::compact_decision(stamp, planned.decision.input_digest, placement.mapping),
        PlacementForm::Derived,
        PlanForm::Standard,
    );
    let response = PlanResponse {
        decision_form: DecisionForm::Compact.into(),
        placement_form: PlacementForm::Derived.into(),
        ..PlanResponse::default()
    };
    let answer = from_proto::PlanAnswer::of(&response, &placement).unwrap();
    let (_, sent) = from_proto::SentObject::encode(&placement, &object);
    assert!(
        answer
            .object_plan("plans[0]", p.clone(), sent.clone())
            .is_ok()
    );
    // A planner whose scheme of the same version placed the object elsewhere.
    p.placement.as_mut().unwrap().target.as_mut().unwrap().name = "seen-elsewhere".into();
    let error = answer.object_plan("plans[0]", p, sent).unwrap_err();
    assert_eq!(error.field, "plans[0].placement.target");
    assert!(error.problem.contains("seen-x-shop"), "{error:?}");
}

#[test]
fn a_minimal_answer_without_what_its_plans_share_is_refused() {
    let tenant: Tenant = serde_norway::from_str(&example("tenant.yaml")).unwrap();
    let placement = TenantPlacement::from(&tenant);
    let mut response = PlanResponse {
        plan_form: PlanForm::Minimal.into(),
        decision_form: DecisionForm::Compact.into(),
        placement_form: PlacementForm::Derived.into(),
        policy: Some(to_proto::policy_ref("default", "builtin")),
        component_version: "0.1.0".into(),
        ..PlanResponse::default()
    };
    let refused = |response: &PlanResponse| {
        from_proto::PlanAnswer::of(response, &placement)
            .unwrap_err()
            .field
    };
    assert_eq!(refused(&response), "component");
    response.component = "tenantplane-planner".into();
    assert!(from_proto::PlanAnswer::of(&response, &placement).is_ok());
    response.policy = None;
    assert_eq!(refused(&response), "policy");
}
