//! `tenantplane audit`: offline checks and exports of the decision log.
//!
//! - `verify` checks the hash chain of a database (SQLite file or PostgreSQL URL) or of a JSON
//!   Lines export, and names the first broken link; with signed checkpoints (from files or the
//!   host cluster) and their public keys, also that no link was removed from the tail and no
//!   link rewritten and rehashed up to the furthest checkpoint. Exit status 1 when broken.
//! - `export` writes the whole log as JSON Lines (verifiable with `verify --file`), or one
//!   wgpolicyk8s.io PolicyReport per tenant as YAML; with `--checkpoints FILE`, the signed
//!   checkpoints published in the host cluster too, for verifying offline.
//! - `checkpoints` adds the signed checkpoints published in the host cluster to a file.
//! - `keygen` makes a checkpoint key pair.
//! - `retain` removes old decisions and records the checkpoint that keeps the chain verifiable.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::jiff::Timestamp;
use tenantplane_decision_log::export::{export_jsonl, policy_reports_from, verify_jsonl_against};
use tenantplane_decision_log::signed::{self, Published, SignedCheckpoint};
use tenantplane_decision_log::{DecisionStore, Head, Retention, VerifyReport};

/// Arguments of `tenantplane audit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Verify the hash chain of a decision log database or JSON Lines export.
    Verify(VerifyArgs),
    /// Export the decision log as JSON Lines or as PolicyReports.
    Export(ExportArgs),
    /// Remove decisions older than an age or beyond a count, recording a checkpoint.
    Retain(RetainArgs),
    /// Add the signed checkpoints published in the host cluster to a file (kept ones stay).
    Checkpoints(CheckpointsArgs),
    /// Make an Ed25519 key pair for signed checkpoints (PKCS#8 and SPKI PEM files).
    Keygen(KeygenArgs),
}

/// Where signed checkpoints come from.
#[derive(Debug, clap::Args)]
struct CheckpointSource {
    /// A file of signed checkpoints, one JSON object a line (`audit checkpoints`,
    /// `audit export --checkpoints`); repeatable.
    #[arg(long = "checkpoints", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Also read the checkpoints published in the host cluster (KUBECONFIG, or in-cluster).
    #[arg(long)]
    checkpoints_from_cluster: bool,
    /// Namespace of the syncer's checkpoint ConfigMaps.
    #[arg(long, default_value = "tenantplane-system")]
    checkpoint_namespace: String,
}

impl CheckpointSource {
    fn given(&self) -> bool {
        !self.files.is_empty() || self.checkpoints_from_cluster
    }

    async fn read(&self) -> anyhow::Result<Vec<SignedCheckpoint>> {
        let mut all = Vec::new();
        for file in &self.files {
            let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
            all.extend(
                signed::read_jsonl(BufReader::new(f))
                    .with_context(|| format!("reading {}", file.display()))?,
            );
        }
        if self.checkpoints_from_cluster {
            all.extend(from_cluster(&self.checkpoint_namespace).await?);
        }
        Ok(all)
    }
}

async fn from_cluster(namespace: &str) -> anyhow::Result<Vec<SignedCheckpoint>> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the host cluster (KUBECONFIG or in-cluster)")?;
    tenantplane_syncer::checkpoint::published(&client, namespace).await
}

#[derive(Debug, clap::Args)]
struct CheckpointsArgs {
    /// Namespace of the syncer's checkpoint ConfigMaps.
    #[arg(long, default_value = "tenantplane-system")]
    checkpoint_namespace: String,
    /// The file to add them to (created when missing).
    #[arg(long, short = 'f')]
    output_file: PathBuf,
}

#[derive(Debug, clap::Args)]
struct KeygenArgs {
    /// Where the private key goes (PKCS#8 PEM, mode 0600): for the syncer's
    /// --checkpoint-key or its Secret's ed25519.pem entry.
    #[arg(long)]
    private_key: PathBuf,
    /// Where the public key goes (SPKI PEM): for auditors' `verify --public-key`.
    #[arg(long)]
    public_key: PathBuf,
}

/// Which log to read: a database or an export file.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Source {
    /// Decision log database: a SQLite file path (or sqlite:PATH) or a postgres:// URL.
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    db: Option<String>,
    /// A JSON Lines export written by `tenantplane audit export`.
    #[arg(long, conflicts_with = "db")]
    file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    #[command(flatten)]
    source: Source,
    /// A link recorded by an earlier verification, as SEQUENCE:HASH: it must still be there.
    #[arg(long, value_parser = parse_anchor)]
    anchor: Option<Head>,
    #[command(flatten)]
    checkpoints: CheckpointSource,
    /// Public key (SPKI PEM or 32 raw bytes) that signed the checkpoints; repeatable (the old
    /// and the new key while a key is rotated).
    #[arg(long = "public-key", value_name = "FILE")]
    public_keys: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    output: ReportFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ReportFormat {
    /// One line of prose.
    Text,
    /// The report as JSON.
    Json,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// Decision log database: a SQLite file path (or sqlite:PATH) or a postgres:// URL.
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    db: String,
    /// What to write.
    #[arg(long, value_enum, default_value = "jsonl")]
    format: ExportFormat,
    /// Only this tenant (PolicyReports only: a JSON Lines export is the whole chain).
    #[arg(long)]
    tenant: Option<String>,
    /// Write to this file instead of standard output.
    #[arg(long, short = 'f')]
    output_file: Option<PathBuf>,
    /// Also add the signed checkpoints published in the host cluster to this file, for
    /// verifying the export offline (read before the log, so none covers a link the export
    /// lacks).
    #[arg(long, value_name = "FILE")]
    checkpoints: Option<PathBuf>,
    /// Namespace of the syncer's checkpoint ConfigMaps.
    #[arg(long, default_value = "tenantplane-system")]
    checkpoint_namespace: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    /// Checkpoints, every link and the head, one JSON object a line.
    Jsonl,
    /// One wgpolicyk8s.io/v1alpha2 PolicyReport per tenant, as YAML documents.
    PolicyReport,
}

#[derive(Debug, clap::Args)]
struct RetainArgs {
    /// Decision log database: a SQLite file path (or sqlite:PATH) or a postgres:// URL.
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    db: String,
    /// Remove decisions older than this (`90d`, `12h`, `30m`, `45s`).
    #[arg(long, value_parser = parse_age)]
    max_age: Option<Duration>,
    /// Keep at most this many of the newest decisions.
    #[arg(long)]
    max_links: Option<u64>,
}

/// Runs `tenantplane audit`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match &args.command {
            AuditCommand::Verify(a) => verify(a).await,
            AuditCommand::Export(a) => export(a).await,
            AuditCommand::Retain(a) => retain(a).await,
            AuditCommand::Checkpoints(a) => checkpoints(a).await,
            AuditCommand::Keygen(a) => keygen(a),
        }
    })
}

/// Opens an existing log: auditing a path that does not exist must not create an empty log.
pub(crate) async fn open_existing(url: &str) -> anyhow::Result<std::sync::Arc<dyn DecisionStore>> {
    let is_postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    if !is_postgres {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        if !std::path::Path::new(path).is_file() {
            bail!("no decision log at {path}");
        }
    }
    tenantplane_decision_log::open(url)
        .await
        .with_context(|| format!("opening the decision log {url}"))
}

async fn verify(a: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let published = published(a).await?;
    let report: VerifyReport = match (&a.source.db, &a.source.file) {
        (Some(db), _) => {
            let store = open_existing(db).await?;
            tenantplane_decision_log::verify_against(&*store, a.anchor.clone(), &published).await?
        }
        (None, Some(file)) => {
            let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
            verify_jsonl_against(BufReader::new(f), a.anchor.clone(), &published)?
        }
        (None, None) => bail!("give --db or --file"),
    };
    match a.output {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        ReportFormat::Text => match &report.first_break {
            None => {
                println!(
                    "ok: {} links verified from sequence {} ({} checkpoints); head {}:{}",
                    report.links,
                    report.first_sequence,
                    report.checkpoints,
                    report.head.sequence,
                    report.head.hash
                );
                if a.checkpoints.given() {
                    println!(
                        "{} signed checkpoints matched ({} before retention, not checkable); \
                         last verified: {}",
                        report.signed_checkpoints,
                        report.signed_before_retention,
                        report
                            .last_signed
                            .as_ref()
                            .map_or("none".to_string(), SignedCheckpoint::summary)
                    );
                }
            }
            Some(b) => println!(
                "BROKEN: {b}; {} links verified before it (last good {}:{})",
                report.links, report.head.sequence, report.head.hash
            ),
        },
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The signed checkpoints and public keys a verification is pointed at.
async fn published(a: &VerifyArgs) -> anyhow::Result<Published> {
    let mut keys = Vec::new();
    for path in &a.public_keys {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        keys.push(signed::verifying_key(&bytes, &path.display().to_string())?);
    }
    if !a.checkpoints.given() {
        if !keys.is_empty() {
            bail!(
                "--public-key checks signed checkpoints: give --checkpoints FILE or --checkpoints-from-cluster"
            );
        }
        return Ok(Published::default());
    }
    if keys.is_empty() {
        bail!(
            "signed checkpoints are checked with the signer's public key: give --public-key FILE"
        );
    }
    let checkpoints = a.checkpoints.read().await?;
    if checkpoints.is_empty() {
        bail!("no signed checkpoints found where --checkpoints/--checkpoints-from-cluster point");
    }
    Ok(Published { checkpoints, keys })
}

async fn checkpoints(a: &CheckpointsArgs) -> anyhow::Result<ExitCode> {
    let added = from_cluster(&a.checkpoint_namespace).await?;
    let total = add_checkpoints(&a.output_file, added)?;
    println!("{total} signed checkpoints in {}", a.output_file.display());
    Ok(ExitCode::SUCCESS)
}

/// Adds checkpoints to a file, keeping those it holds (by signature, once each); returns how
/// many it holds now.
fn add_checkpoints(path: &std::path::Path, added: Vec<SignedCheckpoint>) -> anyhow::Result<usize> {
    let mut all = match File::open(path) {
        Ok(f) => signed::read_jsonl(BufReader::new(f))
            .with_context(|| format!("reading {}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    for c in added {
        if !all.iter().any(|k| k.signature == c.signature) {
            all.push(c);
        }
    }
    all.sort_by_key(|c| (c.time, c.sequence));
    std::fs::write(path, signed::to_jsonl(&all)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(all.len())
}

fn keygen(a: &KeygenArgs) -> anyhow::Result<ExitCode> {
    let (private, public) = signed::generate_key()?;
    write_private(&a.private_key, &private)?;
    std::fs::write(&a.public_key, public)
        .with_context(|| format!("writing {}", a.public_key.display()))?;
    println!(
        "private key {} (for the syncer), public key {} (for auditors)",
        a.private_key.display(),
        a.public_key.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes a private key readable by its owner only; refuses to overwrite one.
pub(crate) fn write_private(path: &std::path::Path, pem: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!(
                "creating {} (an existing key is never overwritten)",
                path.display()
            )
        })?;
    f.write_all(pem.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

async fn export(a: &ExportArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing(&a.db).await?;
    let mut out: Box<dyn Write> = match &a.output_file {
        Some(path) => Box::new(std::io::BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    match a.format {
        ExportFormat::Jsonl => {
            if a.tenant.is_some() {
                bail!("--tenant applies to PolicyReports; a JSON Lines export is the whole chain");
            }
            let published = match &a.checkpoints {
                Some(_) => from_cluster(&a.checkpoint_namespace).await?,
                None => Vec::new(),
            };
            let n = export_jsonl(&*store, &mut out).await?;
            out.flush()?;
            eprintln!("exported {n} decisions");
            if let Some(path) = &a.checkpoints {
                let total = add_checkpoints(path, published)?;
                eprintln!("{total} signed checkpoints in {}", path.display());
            }
        }
        ExportFormat::PolicyReport => {
            for report in policy_reports_from(&*store, a.tenant.as_deref()).await? {
                writeln!(out, "---")?;
                serde_norway::to_writer(&mut out, &report)?;
            }
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn retain(a: &RetainArgs) -> anyhow::Result<ExitCode> {
    if a.max_age.is_none() && a.max_links.is_none() {
        bail!("give --max-age, --max-links or both");
    }
    let store = open_existing(&a.db).await?;
    let retention = Retention {
        max_age: a.max_age,
        max_links: a.max_links,
    };
    match store.retain(retention, Timestamp::now()).await? {
        Some(c) => println!(
            "removed {} decisions; checkpoint {}: chain continues at {} after {}",
            c.removed, c.number, c.next_sequence, c.anchor_hash
        ),
        None => println!("nothing to remove"),
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_anchor(s: &str) -> Result<Head, String> {
    let (seq, hash) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected SEQUENCE:HASH"))?;
    let sequence = seq
        .parse()
        .map_err(|_| format!("{seq:?} is not a sequence number"))?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{hash:?} is not a SHA-256 hex digest"));
    }
    Ok(Head {
        sequence,
        hash: hash.to_ascii_lowercase(),
    })
}

fn parse_age(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and a unit, e.g. 90d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: the unit is one of s, m, h, d")),
    };
    Ok(Duration::from_secs(n * seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_anchors_parse() {
        assert_eq!(parse_age("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_age("45s"), Ok(Duration::from_secs(45)));
        assert!(parse_age("3w").is_err());
        let a = parse_anchor(&format!("12:{}", "A".repeat(64))).unwrap();
        assert_eq!((a.sequence, a.hash), (12, "a".repeat(64)));
        assert!(parse_anchor("12:abc").is_err());
    }
}
