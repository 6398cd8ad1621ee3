//! One trace per decision, across the three services: the syncer, the planner and the isolation
//! compiler (each a real gRPC server on a loopback socket, on the shared service runtime), against
//! the harness's local API servers, exporting to a real OTLP receiver in this process (the
//! official OpenTelemetry proto definitions).
//!
//! Every decision in the durable log has exactly one `tenantplane.sync.decision` span, whose ids
//! the decision records, with its attributes; the planner's span of each object is a child of
//! that object's decision span; the host write is a child too; the isolation compiler's server
//! span is a child of the decision span of the Tenant's isolation compilation, whose compiled
//! objects are decisions in child spans; a second decision about an object links to the first's
//! span.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};
use tenantplane_core::decision::{HostAction, Outcome};
use tenantplane_decision_log::{Entry, Filter, Query};
use tenantplane_e2e::{Env, OtlpReceiver, create, eventually, get, merge};
use tenantplane_service::{GrpcApi, Server};
use tenantplane_syncer::{isolation, planner};
use tenantplane_telemetry::{LogFormat, OtlpSettings};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

/// A planner or isolation compiler on the service runtime (server spans parented to callers).
async fn serve(api: GrpcApi) -> String {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let server = Server::bind(loopback, loopback, None).await.unwrap();
    let url = format!("http://{}", server.grpc_addr());
    tokio::spawn(server.serve(api, std::future::pending()));
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_is_one_span_with_the_planner_compiler_and_host_calls_as_children() {
    let (receiver, otlp) = OtlpReceiver::start().await.unwrap();
    let telemetry = tenantplane_telemetry::init_with(
        "tenantplane-e2e",
        LogFormat::Text,
        "warn,tenantplane_syncer=info,tenantplane_grpc=info,tenantplane_telemetry=info",
        &OtlpSettings {
            endpoint: Some(otlp),
            protocol: "grpc".into(),
            ..Default::default()
        },
    )
    .unwrap();

    // The harness's clusters; its own syncer and untraced services make way for traced ones.
    let mut env = Env::start().await.unwrap();
    env.stop_syncer().await;
    let planner_url =
        serve(GrpcApi::new().with_service(tenantplane_grpc::PlannerService::new().into_server()))
            .await;
    let compiler_url = serve(
        GrpcApi::new().with_service(
            tenantplane_grpc::IsolationService::new(tenantplane_isolation::CompileOptions {
                syncer_username: env.syncer_username.clone(),
            })
            .into_server(),
        ),
    )
    .await;
    let log_path = std::env::temp_dir().join(format!(
        "tenantplane-tracing-{}-{}.sqlite",
        std::process::id(),
        env.run
    ));
    let log_url = format!("sqlite:{}", log_path.display());
    let mut config = env.syncer_config().await.unwrap();
    config.planner = planner::connect(&planner_url).unwrap();
    config.isolation = isolation::connect(&compiler_url).unwrap();
    config.decision_log = Some(
        tenantplane_syncer::record::open_log(&log_url)
            .await
            .unwrap(),
    );
    let syncer = tokio::spawn(tenantplane_syncer::run(config));

    let profile = env.name("traced");
    create(
        &env.host.client,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
               "metadata": {"name": profile}, "spec": {"level": "baseline"}}),
    )
    .await
    .unwrap();
    // The gitRepo pod below is admitted by the tenant control plane (the rule is audited there,
    // and Pod Security baseline allows gitRepo) and refused on the host side.
    let policy = env
        .default_policy_in("traced-policy", &[env.name("shop")], true)
        .await
        .unwrap();
    let t = env
        .create_tenant_with(
            "traced",
            json!({"isolationProfileRef": profile, "syncPolicyRef": policy}),
        )
        .await
        .unwrap();
    let ns = env.tenant_namespace("shop").await.unwrap();
    let c = &env.tenant_cp.client;
    for i in 0..4 {
        create(
            c,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cfg{i}"), "namespace": ns}, "data": {"v": "1"}}),
        )
        .await
        .unwrap();
    }
    create(
        c,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cloner", "namespace": ns},
        "spec": {"containers": [{"name": "a", "image": "busybox"}],
                 "volumes": [{"name": "src", "gitRepo": {"repository": "https://example.com/x.git"}}]}}),
    )
    .await
    .unwrap();
    let host_ns = format!("tenant-{t}");
    let host_name = format!("cfg0-x-{ns}");
    let first = eventually("the first ConfigMap on the host", || async {
        get(
            &env.host.client,
            "v1",
            "ConfigMap",
            Some(&host_ns),
            &host_name,
        )
        .await
    })
    .await;
    merge(
        c,
        "v1",
        "ConfigMap",
        Some(&ns),
        "cfg0",
        json!({"data": {"v": "2"}}),
    )
    .await
    .unwrap();
    let second = eventually("the updated ConfigMap on the host", || async {
        get(
            &env.host.client,
            "v1",
            "ConfigMap",
            Some(&host_ns),
            &host_name,
        )
        .await
        .filter(|h| h["data"]["v"] == "2")
    })
    .await;

    // Wait for the log to settle: every object decided, nothing new for a while.
    let store = tenantplane_decision_log::open(&log_url).await.unwrap();
    // This test's objects: its namespace's and the IsolationProfile's (a shared real tenant
    // control plane also holds other runs' namespaces, which the Tenant syncs too).
    let ours = {
        let ns = ns.clone();
        move |namespace: &str| namespace == ns || namespace.is_empty()
    };
    let entries = |store: Arc<dyn tenantplane_decision_log::DecisionStore>, t: String| {
        let ours = ours.clone();
        async move {
            let filter = Filter {
                tenant: Some(t),
                ..Filter::default()
            };
            let mut entries = store
                .query(Query::new(filter, 10_000))
                .await
                .unwrap()
                .entries;
            entries.retain(|e| ours(&e.decision.subject.namespace));
            entries
        }
    };
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let decisions: Vec<Entry> = eventually("the decision log to settle", || {
        let (store, t, seen) = (store.clone(), t.clone(), seen.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let e = entries(store, t).await;
            let last = seen.swap(e.len(), std::sync::atomic::Ordering::SeqCst);
            (last == e.len() && e.iter().any(|e| e.decision.outcome == Outcome::Rejected))
                .then_some(e)
        }
    })
    .await;
    syncer.abort();
    let _ = syncer.await;
    tokio::task::spawn_blocking(move || drop(telemetry))
        .await
        .unwrap(); // flushes

    let spans = receiver.spans();
    let by_id: HashMap<String, &Span> = spans.iter().map(|s| (hex(&s.span_id), s)).collect();
    let decision_spans: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.name == "tenantplane.sync.decision"
                && attribute(s, "tenantplane.tenant").as_deref() == Some(t.as_str())
                && ours(&attribute(s, "tenantplane.subject.namespace").unwrap_or_default())
        })
        .collect();
    assert_eq!(
        decision_spans.len(),
        decisions.len(),
        "one decision span per recorded decision: {:?}",
        decisions
            .iter()
            .map(|e| (&e.decision.subject.name, e.decision.outcome))
            .collect::<Vec<_>>()
    );

    let mut planned_children = 0;
    for entry in &decisions {
        let d = &entry.decision;
        let span_id = d
            .span_id
            .as_deref()
            .expect("a traced decision records its span id");
        let span = by_id
            .get(span_id)
            .unwrap_or_else(|| panic!("the span {span_id} of decision {} is exported", d.id));
        assert_eq!(span.name, "tenantplane.sync.decision");
        assert_eq!(
            Some(hex(&span.trace_id)),
            d.trace_id,
            "trace id of {}",
            d.id
        );
        let mut keys: Vec<&str> = span.attributes.iter().map(|a| a.key.as_str()).collect();
        let all = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(
            keys.len(),
            all,
            "each attribute once on the span of {}",
            d.id
        );
        let attr = |k: &str| attribute(span, k);
        assert_eq!(
            attr("tenantplane.decision.id").as_deref(),
            Some(d.id.as_str())
        );
        assert_eq!(
            attr("tenantplane.decision.outcome").as_deref(),
            Some(d.outcome.as_str())
        );
        assert_eq!(
            attr("tenantplane.decision.reason").as_deref(),
            Some(d.reason.as_str())
        );
        assert_eq!(
            attr("tenantplane.subject.kind").as_deref(),
            Some(d.subject.kind.as_str())
        );
        assert_eq!(
            attr("tenantplane.subject.namespace").as_deref(),
            Some(d.subject.namespace.as_str())
        );
        assert_eq!(
            attr("tenantplane.subject.name").as_deref(),
            Some(d.subject.name.as_str())
        );
        assert_eq!(
            attr("tenantplane.mapping.version").as_deref(),
            Some(d.mapping_version.as_str())
        );
        if let Some(target) = &d.target {
            assert_eq!(
                attr("tenantplane.host.namespace").as_deref(),
                Some(target.namespace.as_str())
            );
            assert_eq!(
                attr("tenantplane.host.name").as_deref(),
                Some(target.name.as_str())
            );
        }
        if let Some(policy) = &d.policy {
            assert_eq!(
                attr("tenantplane.policy.name").as_deref(),
                Some(policy.name.as_str())
            );
            assert_eq!(
                attr("tenantplane.policy.rule").as_deref(),
                Some(policy.rule.as_deref().unwrap_or("(default)"))
            );
        }
        let children: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == span.span_id && s.trace_id == span.trace_id)
            .collect();
        // The SyncPolicy's own decisions (its admission policies in the tenant control plane)
        // are compiled in the syncer, not planned; their writes go to the tenant.
        let tenant_admission = d.subject.kind == "SyncPolicy";
        if d.policy.is_some() && !tenant_admission {
            assert!(
                children
                    .iter()
                    .any(|c| c.name == "tenantplane.planner.plan_object"
                        && attribute(c, "tenantplane.subject.name").as_deref()
                            == Some(d.subject.name.as_str())),
                "the planner's span of {} is a child of its decision span",
                d.subject.name
            );
            planned_children += 1;
        }
        if d.action != HostAction::None {
            let write = if tenant_admission {
                "tenantplane.tenant.write"
            } else {
                "tenantplane.host.write"
            };
            assert!(
                children.iter().any(|c| c.name == write),
                "the write of {} is a child of its decision span",
                d.subject.name
            );
        }
    }
    assert!(planned_children >= 5, "every object was planned");

    // The host object names the decision whose span and log record agree.
    let cfg0: Vec<&Entry> = decisions
        .iter()
        .filter(|e| {
            // On a shared real tenant control plane, other runs' namespaces hold a cfg0 too.
            e.decision.subject.namespace == ns
                && e.decision.subject.name == "cfg0"
                && e.decision.outcome == Outcome::Synced
        })
        .collect();
    assert_eq!(cfg0.len(), 2, "created, then updated");
    let id_on = |h: &Value| h["metadata"]["annotations"]["tenantplane.io/decision-id"].clone();
    assert_eq!(id_on(&first), json!(cfg0[0].decision.id));
    assert_eq!(id_on(&second), json!(cfg0[1].decision.id));
    // The second decision about cfg0 links to the first's span.
    let later = by_id[cfg0[1].decision.span_id.as_deref().unwrap()];
    assert!(
        later
            .links
            .iter()
            .any(|l| Some(hex(&l.span_id)) == cfg0[0].decision.span_id
                && Some(hex(&l.trace_id)) == cfg0[0].decision.trace_id),
        "the update's span links to the creation's: {:?}",
        later.links
    );

    // The batch's Plan call: the planner's server span is a child of the syncer's batch span.
    assert!(spans.iter().any(|s| {
        s.name == "tenantplane.planner.v1.Planner/Plan"
            && by_id
                .get(&hex(&s.parent_span_id))
                .is_some_and(|p| p.name == "tenantplane.sync.plan_batch")
    }));
    // Isolation: the compilation is a decision about the IsolationProfile, the compiler's server
    // span its child; each compiled object applied is a decision of its own (with the profile
    // fields that produced it) in a child span, its server-side apply a child of that.
    let isolation: Vec<&Entry> = decisions
        .iter()
        .filter(|e| e.decision.subject.kind == "IsolationProfile")
        .collect();
    let compilations: Vec<&&Entry> = isolation
        .iter()
        .filter(|e| e.decision.target.is_none())
        .collect();
    // The Tenant was reconciled again and again (each status write is a change), its compiled
    // objects already in place: one compilation recorded, not one per reconcile.
    assert_eq!(compilations.len(), 1, "{compilations:?}");
    let compilation = compilations[0];
    let compile_span = by_id[compilation.decision.span_id.as_deref().unwrap()];
    assert_eq!(
        attribute(compile_span, "tenantplane.profile.name").as_deref(),
        Some(profile.as_str())
    );
    assert!(
        spans.iter().any(
            |s| s.name == "tenantplane.isolation.v1.IsolationCompiler/Compile"
                && s.parent_span_id == compile_span.span_id
                && s.trace_id == compile_span.trace_id
        ),
        "the compiler's server span is a child of the compilation's decision span"
    );
    let objects: Vec<&&Entry> = isolation
        .iter()
        .filter(|e| e.decision.target.is_some())
        .collect();
    assert!(
        objects.len() >= 3,
        "the namespace, network policies, quota... are each a decision: {objects:?}"
    );
    for entry in objects {
        let d = &entry.decision;
        let profile_ref = d.profile.as_ref().expect("the profile that produced it");
        assert_eq!(profile_ref.name, profile);
        assert!(!profile_ref.field_path.is_empty(), "{d:?}");
        assert_eq!(d.outcome, Outcome::Synced);
        let span = by_id[d.span_id.as_deref().unwrap()];
        assert_eq!(
            span.parent_span_id, compile_span.span_id,
            "the decision span of {:?} is a child of the compilation's",
            d.target
        );
        assert_eq!(
            attribute(span, "tenantplane.profile.field").as_deref(),
            Some(profile_ref.field_path.as_str())
        );
    }
    let _ = std::fs::remove_file(&log_path);
}
