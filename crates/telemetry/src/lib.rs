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
use opentelemetry::KeyValue;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OtlpSettings {
    /// OTLP endpoint; `None` means no exporter at all.
    pub endpoint: Option<String>,
    /// `grpc` (default) or `http/protobuf`.
    pub protocol: String,
    /// `service.name` from `OTEL_SERVICE_NAME`, overriding the binary's own name and a
    /// `service.name` in the resource attributes.
    pub service_name: Option<String>,
    /// Resource attributes from `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`).
    pub resource_attributes: Vec<(String, String)>,
    /// Which traces are kept, from `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
    pub sampler: TraceSampler,
}

/// The samplers of the OpenTelemetry specification that `OTEL_TRACES_SAMPLER` names.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum TraceSampler {
    /// `always_on`: every trace.
    AlwaysOn,
    /// `always_off`: none.
    AlwaysOff,
    /// `traceidratio`: this fraction of traces, by trace id.
    TraceIdRatio(f64),
    /// `parentbased_always_on` (the default): the caller's choice, every root.
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`: the caller's choice, no root.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`: the caller's choice, this fraction of roots.
    ParentBasedTraceIdRatio(f64),
}

impl TraceSampler {
    /// Parses `OTEL_TRACES_SAMPLER` and its argument (a ratio in 0..=1, default 1).
    pub fn parse(name: &str, arg: Option<&str>) -> anyhow::Result<Self> {
        let ratio = || -> anyhow::Result<f64> {
            match arg {
                None => Ok(1.0),
                Some(a) => a
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .with_context(|| {
                        format!("OTEL_TRACES_SAMPLER_ARG {a:?} is not a ratio between 0 and 1")
                    }),
            }
        };
        Ok(match name.trim() {
            "always_on" => TraceSampler::AlwaysOn,
            "always_off" => TraceSampler::AlwaysOff,
            "traceidratio" => TraceSampler::TraceIdRatio(ratio()?),
            "parentbased_always_on" => TraceSampler::ParentBasedAlwaysOn,
            "parentbased_always_off" => TraceSampler::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => TraceSampler::ParentBasedTraceIdRatio(ratio()?),
            other => anyhow::bail!(
                "OTEL_TRACES_SAMPLER {other:?} is not supported; use always_on, always_off, \
                 traceidratio, parentbased_always_on, parentbased_always_off or \
                 parentbased_traceidratio"
            ),
        })
    }

    fn sdk(self) -> Sampler {
        match self {
            TraceSampler::AlwaysOn => Sampler::AlwaysOn,
            TraceSampler::AlwaysOff => Sampler::AlwaysOff,
            TraceSampler::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
            TraceSampler::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            TraceSampler::ParentBasedAlwaysOff => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOff))
            }
            TraceSampler::ParentBasedTraceIdRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

impl OtlpSettings {
    /// Reads `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`
    /// and `OTEL_TRACES_SAMPLER[_ARG]` from the process environment. (The exporter itself reads
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` and `..._HEADERS`; the batch queue `OTEL_BSP_*`.)
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`OtlpSettings::from_env`] over any source of variables.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let env = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none");
        let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "grpc".to_string());
        if !["grpc", "http/protobuf"].contains(&protocol.as_str()) {
            anyhow::bail!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {protocol:?} is not supported; use grpc or http/protobuf"
            );
        }
        let resource_attributes = env("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| parse_resource_attributes(&v))
            .transpose()?
            .unwrap_or_default();
        let sampler = match env("OTEL_TRACES_SAMPLER") {
            Some(name) => TraceSampler::parse(&name, env("OTEL_TRACES_SAMPLER_ARG").as_deref())?,
            None => TraceSampler::default(),
        };
        Ok(OtlpSettings {
            endpoint: endpoint.filter(|_| !disabled),
            protocol,
            service_name: env("OTEL_SERVICE_NAME"),
            resource_attributes,
            sampler,
        })
    }
}

/// `key=value,key=value` with percent-encoded values, as `OTEL_RESOURCE_ATTRIBUTES` holds them.
fn parse_resource_attributes(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("OTEL_RESOURCE_ATTRIBUTES: {pair:?} is not key=value"))?;
            Ok((key.trim().to_string(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Installs logging (`filter` in EnvFilter syntax, e.g. `info` or `tenantplane_syncer=debug,info`;
/// it filters log lines, not the spans exported, which are those at INFO and above)
/// and tracing for `service`, with OTLP configured by the environment. Call once, early in
/// `main`, inside a tokio runtime.
pub fn init(service: &str, format: LogFormat, filter: &str) -> anyhow::Result<Telemetry> {
    init_with(service, format, filter, &OtlpSettings::from_env()?)
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
    let otel = provider.as_ref().map(|p| {
        // Spans carry the attributes the services give them and nothing per poll: no busy/idle
        // timing and no OpenTelemetry context attached on every enter of an instrumented future
        // (the propagation reads each span's context directly), no thread or source-location
        // attributes. Each of these costs CPU on every decision (docs/tracing.md, "Overhead").
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("tenantplane"))
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(filter_fn(exported))
    });
    // The log filter chooses log lines only: spans at INFO and above are exported whatever it
    // says (quiet logs must not switch tracing off).
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .context("a global tracing subscriber is already installed")?;
    Ok(Telemetry { provider })
}

/// What the OTLP layer turns into telemetry: spans at INFO and above, and, as events of the span
/// they happen in, log lines at WARN and above. INFO log lines stay log lines: a decision's
/// `decision` line repeats what its span's attributes already say.
fn exported(metadata: &tracing::Metadata<'_>) -> bool {
    let floor = if metadata.is_span() {
        Level::INFO
    } else {
        Level::WARN
    };
    *metadata.level() <= floor
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
    // OTEL_SERVICE_NAME, then service.name among the resource attributes, then the binary.
    let name = otlp
        .service_name
        .clone()
        .or_else(|| {
            otlp.resource_attributes
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| service.to_string());
    let resource = Resource::builder()
        .with_attributes(
            otlp.resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(name)
        .build();
    // The batch processor exports from its own thread through a bounded queue (2048 spans,
    // `OTEL_BSP_MAX_QUEUE_SIZE`): when the collector is down or slow, new spans are dropped.
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(otlp.sampler.sdk())
            .with_resource(resource)
            .build(),
    ))
}

/// The W3C trace id and span id of the current span, as lowercase hex, when it is sampled into a
/// trace (what a decision records so that `tenantplane why` can link to the trace).
pub fn current_trace_ids() -> Option<(String, String)> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    (span_context.is_valid() && span_context.is_sampled()).then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// Builds the URL of a trace in a tracing UI from a template containing `{trace_id}`
/// (e.g. `http://localhost:16686/trace/{trace_id}` for Jaeger). [`TraceUrl`] is the validated
/// form the commands take as a flag.
pub fn trace_link(template: &str, trace_id: &str) -> String {
    template.replace("{trace_id}", trace_id)
}

/// Jaeger's UI on this machine (the all-in-one binary or container, or the Tilt dev overlay's
/// port-forward): the default of [`TraceUrl`].
pub const DEFAULT_TRACE_URL: &str = "http://localhost:16686/trace/{trace_id}";

/// The environment variable the `tenantplane` commands read the trace URL template from.
pub const TRACE_URL_ENV: &str = "TENANTPLANE_TRACE_URL";

/// The URL template of a trace in a tracing UI: an `http://` or `https://` URL containing
/// `{trace_id}`. Commands that print decisions take it as `--trace-url` ([`TRACE_URL_ENV`]) and
/// print [`TraceUrl::link`] of each decision's trace id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceUrl(String);

impl TraceUrl {
    /// The link to the trace `trace_id`.
    pub fn link(&self, trace_id: &str) -> String {
        trace_link(&self.0, trace_id)
    }

    /// The link to a decision's trace, when it has one.
    pub fn link_opt(&self, trace_id: Option<&str>) -> Option<String> {
        trace_id.filter(|t| !t.is_empty()).map(|t| self.link(t))
    }
}

impl Default for TraceUrl {
    fn default() -> Self {
        TraceUrl(DEFAULT_TRACE_URL.to_string())
    }
}

impl std::fmt::Display for TraceUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TraceUrl {
    type Err = String;

    fn from_str(template: &str) -> Result<Self, Self::Err> {
        if !(template.starts_with("http://") || template.starts_with("https://")) {
            return Err(format!(
                "trace URL template {template:?} must be an http:// or https:// URL"
            ));
        }
        if !template.contains("{trace_id}") {
            return Err(format!(
                "trace URL template {template:?} must contain {{trace_id}} (e.g. {DEFAULT_TRACE_URL})"
            ));
        }
        Ok(TraceUrl(template.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otel_variables_are_read_and_bad_values_named() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let s = OtlpSettings::from_lookup(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "syncer-eu"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod, k8s.cluster.name=eu%2C1",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]))
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(s.protocol, "http/protobuf");
        assert_eq!(s.service_name.as_deref(), Some("syncer-eu"));
        assert_eq!(
            s.resource_attributes,
            vec![
                ("deployment.environment".into(), "prod".into()),
                ("k8s.cluster.name".into(), "eu,1".into())
            ]
        );
        assert_eq!(s.sampler, TraceSampler::ParentBasedTraceIdRatio(0.25));

        let traces_endpoint_wins = OtlpSettings::from_lookup(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4317"),
        ]))
        .unwrap();
        assert_eq!(
            traces_endpoint_wins.endpoint.as_deref(),
            Some("http://b:4317")
        );
        assert_eq!(
            traces_endpoint_wins.sampler,
            TraceSampler::ParentBasedAlwaysOn
        );

        let off = OtlpSettings::from_lookup(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]))
        .unwrap();
        assert_eq!(off.endpoint, None, "OTEL_SDK_DISABLED means no exporter");
        assert_eq!(OtlpSettings::from_lookup(|_| None).unwrap().endpoint, None);

        let bad = |pairs| {
            OtlpSettings::from_lookup(vars(pairs))
                .unwrap_err()
                .to_string()
        };
        assert!(bad(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).contains("\"http/json\""));
        assert!(bad(&[("OTEL_TRACES_SAMPLER", "xray")]).contains("\"xray\" is not supported"));
        assert!(
            bad(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2")
            ])
            .contains("between 0 and 1")
        );
        assert!(bad(&[("OTEL_RESOURCE_ATTRIBUTES", "team")]).contains("\"team\" is not key=value"));
    }

    #[test]
    fn trace_url_templates_are_checked_and_filled() {
        let jaeger = TraceUrl::default();
        assert_eq!(
            jaeger.link("4bf92f3577b34da6a3ce929d0e0e4736"),
            "http://localhost:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let grafana: TraceUrl = "https://grafana.example/explore?traceId={trace_id}"
            .parse()
            .unwrap();
        assert_eq!(
            grafana.link_opt(Some("abc")).as_deref(),
            Some("https://grafana.example/explore?traceId=abc")
        );
        assert_eq!(grafana.link_opt(None), None);
        assert!(
            "http://localhost:16686/trace/"
                .parse::<TraceUrl>()
                .unwrap_err()
                .contains("must contain {trace_id}")
        );
        assert!(
            "localhost:16686/{trace_id}"
                .parse::<TraceUrl>()
                .unwrap_err()
                .contains("http://")
        );
    }
}
