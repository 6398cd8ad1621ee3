//! Spans reach a real OTLP receiver (the official OpenTelemetry proto definitions, served in this
//! test process), and a gRPC call made inside a span has its server span as a child: same trace,
//! parent span id = the caller's span id. The resource carries the configured attributes, and a
//! log filter of `warn` does not stop INFO spans from being exported.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use tenantplane_telemetry::{LogFormat, OtlpSettings, init_with, propagation};
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tracing::Instrument;

#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    resources: Arc<Mutex<Vec<Resource>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            self.resources
                .lock()
                .unwrap()
                .extend(resource.resource.clone());
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_inside_a_span_exports_a_parent_and_a_child_span() {
    let receiver = Receiver::default();
    let otlp_addr = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(receiver.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        addr
    };
    let telemetry = init_with(
        "telemetry-test",
        LogFormat::Text,
        // Quiet logs do not switch tracing off: the spans below are still exported.
        "warn",
        &OtlpSettings {
            endpoint: Some(format!("http://{otlp_addr}")),
            protocol: "grpc".into(),
            service_name: None,
            resource_attributes: vec![
                ("service.name".into(), "syncer-eu".into()),
                ("deployment.environment".into(), "test".into()),
            ],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(telemetry.exporting());

    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(propagation::grpc_server_trace_layer())
            .add_service(health)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::with_interceptor(channel, propagation::inject_trace_context);

    let caller = tracing::info_span!("sync.decision");
    let ids = async {
        client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap();
        tenantplane_telemetry::current_trace_ids().unwrap()
    }
    .instrument(caller)
    .await;
    drop(telemetry); // flushes

    let spans = receiver.spans.lock().unwrap().clone();
    let parent = spans
        .iter()
        .find(|s| s.name == "sync.decision")
        .expect("the caller's span is exported");
    let child = spans
        .iter()
        .find(|s| s.name == "grpc.health.v1.Health/Check")
        .expect("the server span is exported");
    assert_eq!(hex(&parent.trace_id), ids.0);
    assert_eq!(hex(&parent.span_id), ids.1);
    assert_eq!(
        child.trace_id, parent.trace_id,
        "one trace across the gRPC hop"
    );
    assert_eq!(
        child.parent_span_id, parent.span_id,
        "the server span is the caller's child"
    );
    let resource = receiver.resources.lock().unwrap()[0].clone();
    let attribute = |key: &str| {
        resource
            .attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.clone())
    };
    assert_eq!(
        attribute("service.name"),
        Some(Value::StringValue("syncer-eu".into())),
        "service.name of OTEL_RESOURCE_ATTRIBUTES wins over the binary's name"
    );
    assert_eq!(
        attribute("deployment.environment"),
        Some(Value::StringValue("test".into()))
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
