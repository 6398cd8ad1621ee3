//! `tenantplane compile-isolation`: the host objects an IsolationProfile compiles into for a
//! Tenant, offline, from files: the same compiler the isolation-compiler service and the syncer
//! run.
//!
//! It prints the objects (`-o yaml`, the default, as a multi-document stream ready for
//! `kubectl apply -f -`; `-o json` as a `List`), or with `--explain` (`-o table`) a table of each
//! object, the profile fields that produced it and why. With `--previous`, the objects applied
//! before that the profile no longer wants are listed too (the prune list; on standard error for
//! yaml and json). Bad input exits with status 2 and the field at fault on standard error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde::de::DeserializeOwned;
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_core::documents;
use tenantplane_isolation::{Compilation, CompileOptions, ObjectRef};

use crate::input::{self, OutputFormat};

/// Arguments of `tenantplane compile-isolation`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Tenant (YAML or JSON): its name and host namespace.
    #[arg(long, value_name = "FILE")]
    pub tenant: PathBuf,

    /// The IsolationProfile (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub profile: PathBuf,

    /// Output format: the objects as yaml or json, or the explanation table.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Print the table object → fields → why instead of the objects (same as `-o table`).
    #[arg(long)]
    pub explain: bool,

    /// Objects applied before (files or directories, e.g. an earlier output of this command):
    /// list those the profile no longer compiles, which the syncer would delete.
    #[arg(long, value_name = "PATH")]
    pub previous: Vec<PathBuf>,

    /// The user the syncer acts as: the only one that may change tenantplane-managed objects.
    #[arg(
        long,
        env = "TENANTPLANE_SYNCER_USERNAME",
        default_value = tenantplane_isolation::DEFAULT_SYNCER_USERNAME
    )]
    pub syncer_username: String,
}

/// Compiles and prints.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let tenant: Tenant = read_one(&args.tenant)?;
    let profile: IsolationProfile = read_one(&args.profile)?;
    let options = CompileOptions {
        syncer_username: args.syncer_username.clone(),
    };
    let compilation = tenantplane_isolation::compile_with(&tenant, &profile, &options)
        .with_context(|| format!("{} does not compile", args.profile.display()))?;
    let prune = if args.previous.is_empty() {
        Vec::new()
    } else {
        compilation.prune(&previous_refs(&args.previous)?)
    };
    let format = if args.explain {
        OutputFormat::Table
    } else {
        args.output
    };
    match format {
        OutputFormat::Table => print!("{}", explain(&compilation, &prune)),
        OutputFormat::Yaml => {
            for compiled in &compilation.objects {
                print!("---\n{}", serde_norway::to_string(&compiled.object)?);
            }
        }
        OutputFormat::Json => {
            let items: Vec<&serde_json::Value> =
                compilation.objects.iter().map(|o| &o.object).collect();
            let list = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items });
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
    }
    if format != OutputFormat::Table {
        for gone in &prune {
            eprintln!("prune: {} {gone}", gone.api_version);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the single resource a file holds, naming the field at fault when it does not fit `T`.
fn read_one<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let source = path.display().to_string();
    let text = input::read_text(path)?;
    let mut docs = documents::parse(&source, &text).into_iter();
    let (Some(first), None) = (docs.next(), docs.next()) else {
        bail!("{source}: expected exactly one document");
    };
    let doc = first?;
    tenantplane_isolation::decode(&doc.value).with_context(|| source.clone())
}

fn previous_refs(paths: &[PathBuf]) -> anyhow::Result<Vec<ObjectRef>> {
    input::read_documents(paths)?
        .into_iter()
        .map(|(origin, doc)| {
            let value = doc.map_err(|e| anyhow::anyhow!("{origin}: {}: {}", e.field, e.problem))?;
            ObjectRef::from_object(&value).with_context(|| {
                format!("{origin}: not a Kubernetes object (apiVersion, kind and metadata.name)")
            })
        })
        .collect()
}

/// The table: one row per compiled object (its fields, comma-separated) and per pruned object.
fn explain(compilation: &Compilation, prune: &[ObjectRef]) -> String {
    let mut rows: Vec<[String; 3]> = vec![["OBJECT".into(), "FIELDS".into(), "WHY".into()]];
    for (compiled, r) in compilation.objects.iter().zip(compilation.refs()) {
        rows.push([
            r.to_string(),
            compiled.provenance.field_paths.join(","),
            compiled.provenance.explanation.clone(),
        ]);
    }
    for gone in prune {
        rows.push([
            gone.to_string(),
            "-".into(),
            "prune: applied before, no longer compiled from the profile".into(),
        ]);
    }
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (object_width, fields_width) = (width(0), width(1));
    let mut out = String::new();
    for [object, fields, why] in &rows {
        let _ = writeln!(
            out,
            "{object:<object_width$}  {fields:<fields_width$}  {why}"
        );
    }
    out
}
