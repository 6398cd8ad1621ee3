//! One telemetry setup shared by every tenantplane binary.
//!
//! [`init`] installs, once per process:
//! - logs: a `tracing` fmt layer to stderr, text or JSON, filtered by an EnvFilter directive;
//! - traces: an OpenTelemetry layer exporting over OTLP, configured by the standard `OTEL_*`
//!   variables (`OTEL_EXPORTER_OTLP_ENDPOINT`/`..._TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`
//!   `grpc` or `http/protobuf`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//!   `OTEL_TRACES_SAMPLER[_ARG]`). Without an endpoint no exporter is built at all.
//!   Spans leave through a bounded batch queue on a background thread: an exporter that is down
//!   or slow drops spans, it never blocks the caller and never grows memory without bound;
//! - the W3C trace-context propagator, which [`propagation`] uses to carry a span across gRPC.
//!
//! The returned [`Telemetry`] flushes and shuts the exporter down when dropped.

pub mod propagation;

use anyhow::Context as _;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// The installed telemetry; flushes pending spans and shuts the exporter down when dropped.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported (an OTLP endpoint was configured).
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("telemetry: flushing spans at shutdown failed: {e}");
        }
    }
}

/// Where spans go: read from the standard `OTEL_*` variables by [`OtlpSettings::from_env`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OtlpSettings {
    /// OTLP endpoint; `None` means no exporter at all.
    pub endpoint: Option<String>,
    /// `grpc` (default) or `http/protobuf`.
    pub protocol: String,
    /// `service.name` from `OTEL_SERVICE_NAME`, overriding the binary's own name.
    pub service_name: Option<String>,
}

impl OtlpSettings {
    /// Reads `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` and `OTEL_SERVICE_NAME`. The SDK itself reads
    /// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_TRACES_SAMPLER[_ARG]`.
    pub fn from_env() -> Self {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none");
        let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        OtlpSettings {
            endpoint: endpoint.filter(|_| !disabled),
            protocol: env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
                .unwrap_or_else(|| "grpc".to_string()),
            service_name: env("OTEL_SERVICE_NAME"),
        }
    }
}

/// Installs logging (`filter` in EnvFilter syntax, e.g. `info` or `tenantplane_syncer=debug,info`)
/// and tracing for `service`, with OTLP configured by the environment. Call once, early in
/// `main`, inside a tokio runtime.
pub fn init(service: &str, format: LogFormat, filter: &str) -> anyhow::Result<Telemetry> {
    init_with(service, format, filter, &OtlpSettings::from_env())
}

/// [`init`] with explicit OTLP settings.
pub fn init_with(
    service: &str,
    format: LogFormat,
    filter: &str,
    otlp: &OtlpSettings,
) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(filter).with_context(|| format!("log filter {filter:?}"))?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .boxed(),
    };
    let provider = tracer_provider(service, otlp)?;
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("tenantplane")));
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .context("a global tracing subscriber is already installed")?;
    Ok(Telemetry { provider })
}

/// The OTLP tracer provider, or `None` when no endpoint is configured.
fn tracer_provider(
    service: &str,
    otlp: &OtlpSettings,
) -> anyhow::Result<Option<SdkTracerProvider>> {
    let Some(endpoint) = &otlp.endpoint else {
        return Ok(None);
    };
    let exporter = match otlp.protocol.as_str() {
        "grpc" => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .build(),
        "http/protobuf" => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build(),
        other => {
            anyhow::bail!("OTLP protocol {other:?} is not supported; use grpc or http/protobuf")
        }
    }
    .context("building the OTLP span exporter")?;
    let name = otlp
        .service_name
        .clone()
        .unwrap_or_else(|| service.to_string());
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(name).build())
            .build(),
    ))
}

/// The W3C trace id and span id of the current span, as lowercase hex, when it is sampled into a
/// trace (what a decision records so that `tenantplane why` can link to the trace).
pub fn current_trace_ids() -> Option<(String, String)> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// Builds the URL of a trace in a tracing UI from a template containing `{trace_id}`
/// (e.g. `http://localhost:16686/trace/{trace_id}` for Jaeger).
pub fn trace_link(template: &str, trace_id: &str) -> String {
    template.replace("{trace_id}", trace_id)
}
