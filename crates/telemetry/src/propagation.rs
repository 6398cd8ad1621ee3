//! W3C trace context across gRPC: the client side injects `traceparent` into request metadata,
//! the server side opens its span as a child of the caller's.
//!
//! Client: `MyClient::with_interceptor(channel, propagation::inject_trace_context)`.
//! Server: `Server::builder().layer(propagation::grpc_server_trace_layer())`: every RPC gets a
//! `grpc.server` span named after its method, parented to the incoming `traceparent`.
//!
//! A batch RPC about many objects, each with its own span (the syncer's Plan call: one decision
//! span per object), also carries one `traceparent` per object in the request body:
//! [`traceparent`] writes one for a span, [`set_parent_from_traceparent`] reads it on the server.

use opentelemetry::propagation::{Extractor, Injector};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tower_http::classify::{GrpcErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, TraceLayer};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes the current span's trace context into gRPC request metadata.
pub fn inject(metadata: &mut MetadataMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut MetadataInjector(metadata));
    });
}

/// A tonic interceptor that carries the current span to the server (`traceparent`).
pub fn inject_trace_context(
    mut request: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    inject(request.metadata_mut());
    Ok(request)
}

/// The caller's trace context from HTTP/2 headers (empty when there is none).
pub fn extract(headers: &http::HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    })
}

/// Keeps the `traceparent` a propagator writes and nothing else (`tracestate` is empty for the
/// spans of this process).
#[derive(Default)]
struct TraceparentInjector(Option<String>);

impl Injector for TraceparentInjector {
    fn set(&mut self, key: &str, value: String) {
        if key == "traceparent" {
            self.0 = Some(value);
        }
    }
}

/// The W3C `traceparent` value of `span` (`00-<trace id>-<span id>-<flags>`), when it is traced.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let mut carrier = TraceparentInjector::default();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut carrier);
    });
    carrier.0
}

/// Makes `span` a child of the span a `traceparent` value names (as [`traceparent`] wrote it).
/// Returns false, leaving `span` as it was, when the value is empty or not a valid traceparent.
pub fn set_parent_from_traceparent(span: &tracing::Span, traceparent: &str) -> bool {
    use opentelemetry::trace::TraceContextExt as _;
    if traceparent.is_empty() {
        return false;
    }
    let carrier =
        std::collections::HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let context =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier));
    context.span().span_context().is_valid() && span.set_parent(context).is_ok()
}

/// Opens the server span of each gRPC request as a child of the caller's span.
#[derive(Clone, Copy, Debug, Default)]
pub struct MakeGrpcServerSpan;

impl<B> MakeSpan<B> for MakeGrpcServerSpan {
    fn make_span(&mut self, request: &http::Request<B>) -> tracing::Span {
        let path = request.uri().path();
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or((path, ""));
        let span = tracing::info_span!(
            "grpc.server",
            otel.name = %path.trim_start_matches('/'),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
        );
        let _ = span.set_parent(extract(request.headers()));
        span
    }
}

/// The tower layer that gives every gRPC request a server span parented to its caller.
pub fn grpc_server_trace_layer()
-> TraceLayer<SharedClassifier<GrpcErrorsAsFailures>, MakeGrpcServerSpan> {
    TraceLayer::new_for_grpc().make_span_with(MakeGrpcServerSpan)
}
