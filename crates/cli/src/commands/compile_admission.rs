//! `tenantplane compile-admission`: the ValidatingAdmissionPolicies and bindings a SyncPolicy's
//! Reject rules compile into for a tenant control plane, offline, from a file: the same compiler
//! the syncer runs. With `--profile`, the IsolationProfile's admission policies join them, and
//! the Pod Security labels the tenant's namespaces carry are listed.
//!
//! It prints the objects (`-o yaml`, the default, ready for `kubectl apply -f -`; `-o json` as a
//! `List`), or with `--explain` (`-o table`) one row per Reject rule: the policy that enforces it
//! at admission and its action, or why the host side alone enforces it (and one per admission
//! policy of the profile). Without `--policy`, the built-in default policy. Bad input exits with
//! status 2 and the field at fault.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tenantplane_api::Tenant;
use tenantplane_core::boundary::Boundary;
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

    /// The Tenant's IsolationProfile (YAML or JSON): its admission policies join the SyncPolicy's
    /// (`tenantplane-<tenant>-profile-<purpose>`), and its Pod Security labels are listed.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,

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
    let mut admission = policy.tenant_admission(&args.tenant);
    if let Some(path) = &args.profile {
        let document: serde_json::Value = input::read_resource(path)?;
        let profile = tenantplane_isolation::decode(&document)
            .with_context(|| format!("{} is not a valid IsolationProfile", path.display()))?;
        let tenant = Tenant::new(&args.tenant, Default::default());
        let boundary = Boundary::compile(&tenant, &profile)
            .with_context(|| format!("IsolationProfile {}", path.display()))?;
        admission = admission.with_isolation(&args.tenant, &boundary, policy.synced_namespaces());
    }
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
    let isolation = admission.isolation.as_ref();
    for p in isolation.into_iter().flat_map(|i| &i.policies) {
        rows.push([
            format!("(profile) {}", p.host),
            p.tenant.clone(),
            "Deny".into(),
        ]);
    }
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
    if let Some(i) = isolation {
        let _ = writeln!(
            out,
            "IsolationProfile {} (generation {}): Pod Security labels on {}: {}",
            i.profile,
            i.generation,
            match &i.namespaces {
                Some(listed) => format!("namespaces {}", listed.join(", ")),
                None => format!(
                    "every namespace but {}",
                    tenantplane_core::policy::EXEMPT_NAMESPACES.join(", ")
                ),
            },
            i.pod_security_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}
