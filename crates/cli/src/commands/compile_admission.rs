//! `tenantplane compile-admission`: the ValidatingAdmissionPolicies and bindings a SyncPolicy's
//! Reject rules compile into for a tenant control plane, offline, from a file: the same compiler
//! the syncer runs.
//!
//! It prints the objects (`-o yaml`, the default, ready for `kubectl apply -f -`; `-o json` as a
//! `List`), or with `--explain` (`-o table`) one row per Reject rule: the policy that enforces it
//! at admission and its action, or why the host side alone enforces it. Without `--policy`, the
//! built-in default policy. Bad input exits with status 2 and the field at fault.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tenantplane_core::{CompiledPolicy, TenantAdmission};

use crate::input::{self, OutputFormat};

/// Arguments of `tenantplane compile-admission`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The SyncPolicy (YAML or JSON). Default: the built-in `tenantplane-default` policy.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// The Tenant the objects are for: their names (`tenantplane-<tenant>-<rule>`) and labels.
    #[arg(long, value_name = "NAME", default_value = "acme")]
    pub tenant: String,

    /// Output format: the objects as yaml or json, or the table of rules.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Print the table rule → admission policy → action instead of the objects (`-o table`).
    #[arg(long)]
    pub explain: bool,
}

/// Compiles and prints.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let policy = match &args.policy {
        Some(path) => CompiledPolicy::from_yaml(&input::read_text(path)?)
            .with_context(|| format!("{} does not compile", path.display()))?,
        None => CompiledPolicy::builtin_default(),
    };
    let admission = policy.tenant_admission(&args.tenant);
    let format = if args.explain {
        OutputFormat::Table
    } else {
        args.output
    };
    match format {
        OutputFormat::Table => print!("{}", explain(&admission)),
        OutputFormat::Yaml => print!("{}", admission.to_yaml()),
        OutputFormat::Json => {
            let list = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": admission.objects });
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per Reject rule.
fn explain(admission: &TenantAdmission) -> String {
    let mut rows: Vec<[String; 3]> = vec![[
        "RULE".into(),
        "ADMISSION POLICY".into(),
        "AT ADMISSION".into(),
    ]];
    for rule in &admission.rules {
        rows.push(match (&rule.admission_policy, &rule.host_side_only) {
            (Some(policy), _) => [
                rule.rule.clone(),
                policy.clone(),
                rule.action.as_str().into(),
            ],
            (None, why) => [
                rule.rule.clone(),
                "-".into(),
                format!("host side only: {}", why.as_deref().unwrap_or_default()),
            ],
        });
    }
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (rule_width, policy_width) = (width(0), width(1));
    let mut out = format!(
        "SyncPolicy {} (revision {}): {} Reject rules\n",
        admission.policy,
        admission.revision,
        admission.rules.len()
    );
    for [rule, policy, action] in &rows {
        let _ = writeln!(
            out,
            "{rule:<rule_width$}  {policy:<policy_width$}  {action}"
        );
    }
    out
}
