//! `tenantplane decisions`: list, filter and watch the recorded sync decisions.
//!
//! Reads from the DecisionLog gRPC service (`--server`, what the syncer serves) or straight
//! from the log database (`--db`: a SQLite file or a PostgreSQL URL). Prints the newest
//! `--limit` matching decisions oldest first, like `kubectl get events`; with `-w`, then
//! follows new ones as they are appended, without gaps.
//!
//! The table names each decision's trace (the trace id of its `tenantplane.sync.decision` span)
//! and links to it in a tracing UI: `--trace-url` / `TENANTPLANE_TRACE_URL`, a URL template with
//! `{trace_id}`, by default the local Jaeger (`http://localhost:16686/trace/{trace_id}`).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use tenantplane_core::decision::{Decision, Outcome};
use tenantplane_decision_log::grpc::{entry_from_proto, filter_to_proto};
use tenantplane_decision_log::{Entry, Filter, ObjectFilter, entries_after};
use tenantplane_proto::decisions::v1 as pb;
use tenantplane_telemetry::TraceUrl;

use crate::decision_source::{DecisionSource, SourceArgs};

/// Arguments of `tenantplane decisions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: SourceArgs,
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only this tenant object: KIND/NAMESPACE/NAME, NAMESPACE/NAME or NAME (empty or * parts match all).
    #[arg(long)]
    subject: Option<String>,
    /// Only this host object: KIND/NAMESPACE/NAME, NAMESPACE/NAME or NAME.
    #[arg(long)]
    host: Option<String>,
    /// Only these outcomes (repeat or comma-separate: Rejected,Conflict).
    #[arg(long, value_delimiter = ',')]
    outcome: Vec<Outcome>,
    /// Only decisions of this SyncPolicy rule.
    #[arg(long)]
    rule: Option<String>,
    /// Only decisions taken at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<Timestamp>,
    /// Only decisions taken before this time (RFC 3339).
    #[arg(long)]
    until: Option<Timestamp>,
    /// How many of the newest matching decisions to print.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// After printing, watch for new decisions.
    #[arg(short, long)]
    watch: bool,
    /// Instead: the open host actions (--db only), decisions recording a create, update or
    /// delete whose write is not confirmed and that no later decision closes; of --tenant, or
    /// of every tenant. Right after a crash they are the writes the syncer may not have made.
    #[arg(long, conflicts_with_all = ["watch", "subject", "host", "outcome", "rule", "since", "until"])]
    open: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Format,
    /// Link to each decision's trace: a tracing UI's URL with `{trace_id}` (the table's TRACE
    /// column; JSON and YAML carry the trace id itself).
    #[arg(long, env = tenantplane_telemetry::TRACE_URL_ENV, default_value_t = TraceUrl::default())]
    trace_url: TraceUrl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns.
    Table,
    /// JSON (one entry a line when watching).
    Json,
    /// YAML documents.
    Yaml,
}

/// Runs `tenantplane decisions`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &Args) -> anyhow::Result<ExitCode> {
    let filter = Filter {
        tenant: args.tenant.clone(),
        subject: args
            .subject
            .as_deref()
            .map(ObjectFilter::parse)
            .unwrap_or_default(),
        host: args
            .host
            .as_deref()
            .map(ObjectFilter::parse)
            .unwrap_or_default(),
        outcomes: args.outcome.clone(),
        rule: args.rule.clone(),
        since: args.since,
        until: args.until,
    };
    let mut source = DecisionSource::connect(&args.source).await?;
    if args.open {
        let DecisionSource::Store(store) = &source else {
            anyhow::bail!("--open reads the log database: give --db");
        };
        let open = store.open_actions(args.tenant.clone()).await?;
        let mut printer = Printer::new(args.output).with_trace_url(args.trace_url.clone());
        for e in &open {
            printer.print(e)?;
        }
        if open.is_empty() && args.output == Format::Table {
            writeln!(std::io::stdout(), "no open host actions")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut newest = source.query(&filter, args.limit, true).await?;
    newest.reverse();
    let last = newest.last().map(|e| e.sequence);
    if args.output == Format::Json && !args.watch {
        writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&newest)?
        )?;
    } else {
        let mut printer = Printer::new(args.output).with_trace_url(args.trace_url.clone());
        for e in &newest {
            printer.print(e)?;
        }
        if args.watch {
            follow(&mut source, &filter, last, &mut printer).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints matching entries after `last` as they are appended, until interrupted.
async fn follow(
    source: &mut DecisionSource,
    filter: &Filter,
    last: Option<u64>,
    printer: &mut Printer,
) -> anyhow::Result<()> {
    match source {
        DecisionSource::Grpc(client) => {
            let start = last.map(pb::watch_request::Start::AfterSequence);
            let mut stream = client
                .watch(pb::WatchRequest {
                    filter: Some(filter_to_proto(filter)),
                    start,
                })
                .await?
                .into_inner();
            while let Some(entry) = stream.next().await {
                printer.print(&entry_from_proto(&entry?)?)?;
            }
            Ok(())
        }
        DecisionSource::Store(store) => {
            // Another process appends: poll by sequence, which never skips one.
            let mut after = match last {
                Some(s) => s,
                None => store.head().await?.sequence,
            };
            loop {
                let entries = entries_after(&**store, after, 500).await?;
                if entries.is_empty() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                for e in entries {
                    after = e.sequence;
                    if filter.matches(&e.decision) {
                        printer.print(&e)?;
                    }
                }
            }
        }
    }
}

/// Prints entries one at a time in the chosen format.
pub(crate) struct Printer {
    format: Format,
    header: bool,
    trace_url: TraceUrl,
}

impl Printer {
    pub(crate) fn new(format: Format) -> Printer {
        Printer {
            format,
            header: false,
            trace_url: TraceUrl::default(),
        }
    }

    /// Links traces through `trace_url` instead of the local Jaeger.
    pub(crate) fn with_trace_url(mut self, trace_url: TraceUrl) -> Printer {
        self.trace_url = trace_url;
        self
    }

    /// Prints one entry on stdout; an error when stdout is closed (the reader has gone).
    pub(crate) fn print(&mut self, e: &Entry) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        match self.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(e)?)?,
            Format::Yaml => write!(out, "---\n{}", serde_norway::to_string(e)?)?,
            Format::Table => {
                if !self.header {
                    self.header = true;
                    writeln!(
                        out,
                        "{:<8} {:<30} {:<16} {:<10} {:<40} {:<40} {:<20} {:<32} REASON  TRACE",
                        "SEQ", "TIME", "TENANT", "OUTCOME", "SUBJECT", "HOST", "RULE", "TRACE ID"
                    )?;
                }
                let d = &e.decision;
                let [subject, host, rule] = table_columns(d);
                let trace_id = d.trace_id.as_deref().unwrap_or("-");
                let reason = match &d.closes {
                    Some(closed) => format!("{} (closes {closed})", d.reason),
                    None => d.reason.clone(),
                };
                let link = self
                    .trace_url
                    .link_opt(d.trace_id.as_deref())
                    .unwrap_or_else(|| "-".to_string());
                writeln!(
                    out,
                    "{:<8} {:<30} {:<16} {:<10} {:<40} {:<40} {:<20} {:<32} {}  {}",
                    e.sequence,
                    d.time.to_string(),
                    d.tenant,
                    d.outcome.as_str(),
                    subject,
                    host,
                    rule,
                    trace_id,
                    reason,
                    link
                )?;
            }
        }
        Ok(())
    }
}

/// The SUBJECT, HOST and RULE columns of a decision: `Kind/namespace/name` (`Kind/name` for a
/// cluster-scoped subject such as an IsolationProfile), `namespace/name` of the host object
/// (`name` when it is cluster-scoped, such as a tenant's host Namespace), and
/// the SyncPolicy rule that decided (`policy/rule`, `policy/(default)`), or for an isolation
/// decision the IsolationProfile, its generation and the field that produced the object
/// (`profile@generation:spec.network.defaultDeny`), or for an object the host would refuse under
/// the profile, the profile and its rule (`profile@generation/PodSecurity/runAsUser`).
fn table_columns(d: &Decision) -> [String; 3] {
    let s = &d.subject;
    let subject = if s.namespace.is_empty() {
        format!("{}/{}", s.kind, s.name)
    } else {
        format!("{}/{}/{}", s.kind, s.namespace, s.name)
    };
    let host = d.target.as_ref().map_or("-".to_string(), |t| {
        if t.namespace.is_empty() {
            t.name.clone()
        } else {
            format!("{}/{}", t.namespace, t.name)
        }
    });
    let rule = match (&d.policy, &d.profile) {
        (_, Some(p)) if p.rule.is_some() => format!(
            "{}@{}/{}",
            p.name,
            p.generation,
            p.rule.as_deref().unwrap_or_default()
        ),
        (Some(p), _) => format!("{}/{}", p.name, p.rule.as_deref().unwrap_or("(default)")),
        (None, Some(p)) if p.field_path.is_empty() => format!("{}@{}", p.name, p.generation),
        (None, Some(p)) => format!("{}@{}:{}", p.name, p.generation, p.field_path),
        (None, None) => "-".to_string(),
    };
    [subject, host, rule]
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn the_table_names_an_isolation_decision_by_its_profile() {
        let decision = |extra: serde_json::Value| -> tenantplane_core::decision::Decision {
            let mut d = serde_json::json!({
                "id": "01", "time": "2026-11-30T05:00:00Z", "tenant": "acme",
                "outcome": "Synced", "action": "Create", "reason": "WorkloadKind", "message": "",
                "inputDigest": "", "mappingVersion": "v1", "component": "tenantplane-syncer",
                "componentVersion": "0.1.0",
            });
            d.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value(d).unwrap()
        };
        let synced = decision(serde_json::json!({
            "subject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "cfg"},
            "target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "t-acme", "name": "cfg-x-shop"},
            "policy": {"name": "strict", "revision": "3", "rule": "workloads"},
        }));
        assert_eq!(
            super::table_columns(&synced),
            [
                "ConfigMap/shop/cfg",
                "t-acme/cfg-x-shop",
                "strict/workloads"
            ]
        );
        let isolation = decision(serde_json::json!({
            "subject": {"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "namespace": "", "name": "baseline"},
            "target": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "namespace": "t-acme", "name": "deny-all"},
            "profile": {"name": "baseline", "generation": 4, "fieldPath": "spec.network"},
        }));
        assert_eq!(
            super::table_columns(&isolation),
            [
                "IsolationProfile/baseline",
                "t-acme/deny-all",
                "baseline@4:spec.network"
            ]
        );
        let namespace = decision(serde_json::json!({
            "subject": {"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "namespace": "", "name": "baseline"},
            "target": {"apiVersion": "v1", "kind": "Namespace", "namespace": "", "name": "t-acme"},
            "profile": {"name": "baseline", "generation": 4, "fieldPath": ""},
        }));
        assert_eq!(
            super::table_columns(&namespace)[1..],
            ["t-acme", "baseline@4"]
        );
        let refused = decision(serde_json::json!({
            "outcome": "Rejected", "action": "None", "reason": "PodSecurityForbidden",
            "subject": {"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web"},
            "target": {"apiVersion": "v1", "kind": "Pod", "namespace": "t-acme", "name": "web-x-shop"},
            "policy": {"name": "strict", "revision": "3", "rule": "workloads"},
            "profile": {"name": "walls", "generation": 2, "fieldPath": "spec.level",
                        "rule": "PodSecurity/runAsUser"},
        }));
        assert_eq!(
            super::table_columns(&refused)[2],
            "walls@2/PodSecurity/runAsUser"
        );
    }

    #[test]
    fn the_trace_url_flag_is_checked_and_used_for_links() {
        let refused =
            Cli::try_parse_from(["decisions", "--trace-url", "http://jaeger:16686/trace/"])
                .unwrap_err()
                .to_string();
        assert!(refused.contains("must contain {trace_id}"), "{refused}");
        let cli = Cli::try_parse_from([
            "decisions",
            "--trace-url",
            "https://tempo.example/explore?traceId={trace_id}",
        ])
        .unwrap();
        assert_eq!(
            cli.args.trace_url.link("4bf92f3577b34da6a3ce929d0e0e4736"),
            "https://tempo.example/explore?traceId=4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }
}
