//! Prometheus metrics of gRPC requests: a count per service, method and status code, and a
//! latency histogram per service and method, recorded by a tower layer around the gRPC router.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tonic::Code;

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandledLabels {
    grpc_service: String,
    grpc_method: String,
    grpc_code: String,
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    grpc_service: String,
    grpc_method: String,
}

type HistogramFamily = Family<MethodLabels, Histogram, fn() -> Histogram>;

/// The gRPC request metrics of one server.
#[derive(Debug)]
pub struct GrpcMetrics {
    handled: Family<HandledLabels, Counter>,
    latency: HistogramFamily,
    /// Services served; requests for any other path are labelled `unknown`, so that scanners
    /// cannot blow up the label cardinality.
    services: Vec<String>,
}

impl GrpcMetrics {
    /// Metrics for a server of `services` (fully qualified names), registered in `registry`.
    pub fn new(registry: &mut Registry, services: Vec<String>) -> Self {
        let handled = Family::default();
        let latency: HistogramFamily = Family::new_with_constructor(|| {
            // 50 µs to about 1.6 s.
            Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
        });
        registry.register(
            "tenantplane_grpc_server_handled",
            "gRPC requests completed, by service, method and status code",
            handled.clone(),
        );
        registry.register(
            "tenantplane_grpc_server_handling_seconds",
            "Time from receiving a gRPC request to its response headers, by service and method",
            latency.clone(),
        );
        GrpcMetrics {
            handled,
            latency,
            services,
        }
    }

    fn observe(&self, path: &str, code: Code, seconds: f64) {
        let (service, method) = match path.trim_start_matches('/').split_once('/') {
            Some((service, method)) if self.services.iter().any(|s| s == service) => {
                (service.to_string(), method.to_string())
            }
            _ => ("unknown".to_string(), "unknown".to_string()),
        };
        self.handled
            .get_or_create(&HandledLabels {
                grpc_service: service.clone(),
                grpc_method: method.clone(),
                grpc_code: format!("{code:?}"),
            })
            .inc();
        self.latency
            .get_or_create(&MethodLabels {
                grpc_service: service,
                grpc_method: method,
            })
            .observe(seconds);
    }
}

/// The tower layer that records [`GrpcMetrics`] for every request through the gRPC server.
#[derive(Clone, Debug)]
pub struct GrpcMetricsLayer {
    metrics: Arc<GrpcMetrics>,
}

impl GrpcMetricsLayer {
    /// A layer recording into `metrics`.
    pub fn new(metrics: Arc<GrpcMetrics>) -> Self {
        GrpcMetricsLayer { metrics }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`GrpcMetricsLayer`] wraps around the gRPC router.
#[derive(Clone, Debug)]
pub struct GrpcMetricsService<S> {
    inner: S,
    metrics: Arc<GrpcMetrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for GrpcMetricsService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path().to_string();
        let metrics = self.metrics.clone();
        let start = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            // Unary calls that fail answer "trailers-only": grpc-status is in the headers. A
            // response without it in the headers went on to send its status in the trailers,
            // which for the unary RPCs served here means it succeeded.
            let code = match &response {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(Code::Ok, Code::from),
                Err(_) => Code::Unavailable,
            };
            metrics.observe(&path, code, start.elapsed().as_secs_f64());
            response
        })
    }
}
