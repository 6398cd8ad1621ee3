//! `tenantplane explain-sync`: predicts, offline, what the syncer will do with tenant objects.
//!
//! It runs the planner of `tenantplane-core`, the code the syncer runs, over objects read from
//! files, directories and standard input, against an optional snapshot of host objects for
//! collision prediction, and prints one row per object: source → host namespace/name, action,
//! outcome, policy rule and reason. An object of a kind the syncer does not watch (cluster-scoped,
//! or named by no Sync rule) gets no plan: its row says `NotWatched` and why, as the syncer records
//! nothing about it (`tenantplane_core::watch`). A bad document is reported with its file,
//! document index and field; the rest of the input is still planned.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_client::{ClientConfig, PlannerClient};
use tenantplane_core::boundary::Boundary;
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::decision::Stamp;
use tenantplane_core::documents::Origin;
use tenantplane_core::parallel;
use tenantplane_core::planner::HostState;
use tenantplane_core::reference::REFERENCEABLE_KINDS;
use tenantplane_core::watch::{UnrecordedFate, Watches};
use tenantplane_core::{
    AtApply, CompiledPolicy, Decision, Outcome, Plan, Planner, TenantAdmission, TenantObject,
};

use crate::input::{self, OutputFormat};
use crate::{host_cluster, kind_scopes};

/// Component name recorded in the decisions explain-sync prints.
const COMPONENT: &str = "tenantplane explain-sync";

/// Arguments of `tenantplane explain-sync`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tenant objects: files, directories (searched for .yaml, .yml and .json) or `-` for stdin.
    #[arg(required = true, value_name = "PATH")]
    pub inputs: Vec<PathBuf>,

    /// The Tenant (YAML or JSON). Default: a Tenant named `demo`, host namespace `tenant-demo`.
    #[arg(long, value_name = "FILE")]
    pub tenant: Option<PathBuf>,

    /// The SyncPolicy (YAML or JSON). Default: the built-in `tenantplane-default` policy.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// The Tenant's IsolationProfile (YAML or JSON): what the host's admission refuses under it
    /// (Pod Security, its admission policies) is predicted Rejected. Default: the one the Tenant
    /// names (spec.isolationProfileRef), found among the --host documents or read with
    /// --host-kubeconfig.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,

    /// Current host objects (files or directories), to predict collisions at the target names.
    #[arg(long = "host", value_name = "PATH")]
    pub host: Vec<PathBuf>,

    /// Read the current host objects from a live host cluster instead (read-only: it only lists
    /// object metadata in the tenant's host namespace, for the kinds of the inputs and the kinds
    /// a reference can name).
    #[arg(long, value_name = "FILE", conflicts_with = "host")]
    pub host_kubeconfig: Option<PathBuf>,

    /// Context of --host-kubeconfig to use (its current context by default).
    #[arg(long, value_name = "NAME", requires = "host_kubeconfig")]
    pub host_context: Option<String>,

    /// Learn the scope of custom kinds from the tenant control plane's discovery (read-only).
    /// Without it, from --host-kubeconfig's; either way, a CustomResourceDefinition among the
    /// inputs says its kind's scope.
    #[arg(long, value_name = "FILE")]
    pub tenant_kubeconfig: Option<PathBuf>,

    /// Context of --tenant-kubeconfig to use (its current context by default).
    #[arg(long, value_name = "NAME", requires = "tenant_kubeconfig")]
    pub tenant_context: Option<String>,

    /// Ask a running planner service (`host:port` or URL) instead of planning in process; the
    /// output is the same, only the decisions' component and ids differ.
    #[arg(long, value_name = "ADDR", env = "TENANTPLANE_PLANNER")]
    pub planner: Option<String>,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// Exit with status 1 when any object gets one of these outcomes: comma-separated, case-insensitive
    /// outcomes or their verbs (`reject,conflict`), `notwatched` or `unknownscope` for objects the
    /// syncer records nothing about, `error` for unusable documents, `none` for never.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "error",
        value_name = "OUTCOMES"
    )]
    pub fail_on: Vec<String>,
}

/// One input document's result: a plan and its decision, or why the document was unusable.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explained {
    /// `file document N [item M]`.
    pub origin: String,
    /// The plan and decision, when the document is a tenant object the syncer watches.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Planned>,
    /// Why the syncer records nothing, when it does not watch the object's kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecorded: Option<UnrecordedFate>,
    /// Why the document could not be planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<InputError>,
    /// For an object the host refuses: what the tenant control plane's admission does with it
    /// when it is applied (the SyncPolicy compiled into ValidatingAdmissionPolicies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_admission: Option<AtApply>,
}

/// The plan and decision of one object.
#[derive(Debug, Serialize)]
pub struct Planned {
    /// The decision record, as the syncer would record it.
    pub decision: Decision,
    /// Placement, verdict and collision check behind the decision.
    pub plan: Plan,
}

/// A document that is not a usable tenant object.
#[derive(Debug, Serialize)]
pub struct InputError {
    /// Offending field (`""` for a malformed document).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// Runs explain-sync.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let fail_on = FailOn::parse(&args.fail_on)?;
    let tenant = match &args.tenant {
        Some(path) => input::read_resource::<Tenant>(path)?,
        None => default_tenant(),
    };
    let policy_text = args.policy.as_deref().map(input::read_text).transpose()?;
    let policy = match (&policy_text, &args.policy) {
        (Some(text), Some(path)) => CompiledPolicy::from_yaml(text)
            .with_context(|| format!("SyncPolicy {}", path.display()))?,
        _ => CompiledPolicy::builtin_default(),
    };
    let name = tenant.metadata.name.clone().unwrap_or_default();
    let mut admission = policy.tenant_admission(&name);
    let mut documents = input::read_documents(&args.inputs)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let profile = runtime.block_on(profile_in_force(args, &tenant))?;
    let planner = match &profile {
        Some((source, profile)) => Planner::new(&tenant, policy).with_boundary(
            Boundary::compile(&tenant, profile)
                .with_context(|| format!("IsolationProfile {source}"))?,
        ),
        None => Planner::new(&tenant, policy),
    };
    if let Some(boundary) = planner.boundary() {
        admission = admission.with_isolation(&name, boundary, planner.policy().synced_namespaces());
    }
    let mut kinds = kind_scopes::kinds_of(&documents);
    // The reference check looks at what each reference resolves to on the host, whatever kinds
    // the inputs are (a Pod naming a ServiceAccount when no ServiceAccount is among them). They
    // are all served at v1, as the syncer watches them.
    kinds.extend(REFERENCEABLE_KINDS.iter().map(|(group, kind)| {
        let api_version = match *group {
            "" => "v1".to_string(),
            group => format!("{group}/v1"),
        };
        (api_version, kind.to_string())
    }));
    let discovery = match (&args.tenant_kubeconfig, &args.host_kubeconfig) {
        (Some(kubeconfig), _) => Some((kubeconfig.as_path(), args.tenant_context.as_deref())),
        (None, Some(kubeconfig)) => Some((kubeconfig.as_path(), args.host_context.as_deref())),
        (None, None) => None,
    };
    let scopes = runtime.block_on(kind_scopes::of_inputs(&mut documents, discovery))?;
    let watches = Watches::new(planner.policy(), scopes);
    let host = match &args.host_kubeconfig {
        Some(kubeconfig) => runtime.block_on(host_cluster::read(
            kubeconfig,
            args.host_context.as_deref(),
            planner.host_namespace(),
            &kinds,
        ))?,
        None => read_host_state(&args.host)?,
    };

    let objects = tenant_objects(documents);
    let results = match &args.planner {
        None => explain(&planner, &admission, &watches, &host, objects),
        Some(address) => runtime.block_on(explain_remote(
            address,
            (&tenant, &admission),
            (
                policy_text.as_deref(),
                profile
                    .map(|(_, p)| serde_json::to_string(&p))
                    .transpose()?
                    .as_deref(),
            ),
            &watches,
            &host,
            objects,
        ))?,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match args.output {
        OutputFormat::Table => write_table(&mut out, &results)?,
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &results)?;
            writeln!(out)?;
        }
        OutputFormat::Yaml => write!(out, "{}", serde_norway::to_string(&results)?)?,
    }
    out.flush()?;
    if args.output == OutputFormat::Table {
        eprintln!("{}", summary(&results));
    }
    Ok(if results.iter().any(|r| fail_on.matches(r)) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A document read as a tenant object, or why it cannot be one; with its origin.
pub type ObjectInput = (String, Result<TenantObject, InputError>);

/// Reads each document's identity; unusable documents keep their error.
pub fn tenant_objects(
    documents: Vec<(Origin, Result<serde_json::Value, InputError>)>,
) -> Vec<ObjectInput> {
    documents
        .into_iter()
        .map(|(origin, value)| {
            let object = value.and_then(|v| {
                TenantObject::from_value(v).map_err(|e| InputError {
                    field: e.field().to_string(),
                    problem: e.to_string(),
                })
            });
            (origin.to_string(), object)
        })
        .collect()
}

/// What becomes of one usable tenant object: planned, or never seen by the syncer.
#[expect(
    clippy::large_enum_variant,
    reason = "each is moved at once into an Explained, which is as large; boxing would cost an \
              allocation per object"
)]
enum Fate {
    /// Planned, with what the tenant control plane does at apply time when the host refuses it.
    Planned(Planned, Option<AtApply>),
    Unrecorded(UnrecordedFate),
}

/// Plans every object the syncer watches in process, on every core, and returns the results in
/// input order, each refused one with what the tenant control plane's `admission` does with it.
pub fn explain(
    planner: &Planner,
    admission: &TenantAdmission,
    watches: &Watches<'_>,
    host: &HostState,
    objects: Vec<ObjectInput>,
) -> Vec<Explained> {
    let valid: Vec<&TenantObject> = objects
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok())
        .collect();
    // The objects the syncer never sees get their fate; the others are planned as one batch.
    let fates: Vec<Option<UnrecordedFate>> =
        parallel::map_in_order(&valid, |object| watches.unrecorded(object));
    let watched: Vec<&TenantObject> = valid
        .iter()
        .zip(&fates)
        .filter(|(_, fate)| fate.is_none())
        .map(|(object, _)| *object)
        .collect();
    let plans = planner.plan_batch(&watched, host);
    let each: Vec<usize> = (0..watched.len()).collect();
    let decisions = parallel::map_in_order(&each, |&i| {
        plans[i].to_decision(planner.tenant(), watched[i], Stamp::now(COMPONENT))
    });
    let mut planned =
        plans
            .into_iter()
            .zip(decisions)
            .zip(&watched)
            .map(|((plan, decision), object)| {
                let at_apply = admission.at_apply(object, &decision);
                (Planned { decision, plan }, at_apply)
            });
    let fates: Vec<Fate> = fates
        .into_iter()
        .map(|fate| match fate {
            Some(fate) => Fate::Unrecorded(fate),
            None => {
                let (planned, at_apply) = planned.next().expect("one plan per watched object");
                Fate::Planned(planned, at_apply)
            }
        })
        .collect();
    assemble(
        objects
            .iter()
            .map(|(origin, o)| (origin.clone(), o.as_ref().err())),
        fates.into_iter(),
    )
}

/// Plans every object the syncer watches on a planner service, in input order.
async fn explain_remote(
    address: &str,
    (tenant, admission): (&Tenant, &TenantAdmission),
    (policy, profile): (Option<&str>, Option<&str>),
    watches: &Watches<'_>,
    host: &HostState,
    objects: Vec<ObjectInput>,
) -> anyhow::Result<Vec<Explained>> {
    let mut client = PlannerClient::connect(&ClientConfig::new(address))
        .await
        .with_context(|| format!("connecting to the planner at {address}"))?;
    let fates: Vec<Option<UnrecordedFate>> = objects
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok())
        .map(|o| watches.unrecorded(o))
        .collect();
    let valid: Vec<TenantObject> = objects
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok())
        .zip(&fates)
        .filter(|(_, fate)| fate.is_none())
        .map(|(o, _)| o.clone())
        .collect();
    let host: Vec<HostObjectMeta> = host.iter().cloned().collect();
    let planned = client
        .plan(tenant, policy, profile, &valid, &host)
        .await
        .with_context(|| format!("planning on the planner at {address}"))?;
    let mut planned = planned.into_iter().zip(&valid).map(|(p, object)| {
        let at_apply = admission.at_apply(object, &p.decision);
        (
            Planned {
                decision: p.decision,
                plan: p.plan,
            },
            at_apply,
        )
    });
    let fates: Vec<Fate> = fates
        .into_iter()
        .map(|fate| match fate {
            Some(fate) => Some(Fate::Unrecorded(fate)),
            None => planned
                .next()
                .map(|(planned, at_apply)| Fate::Planned(planned, at_apply)),
        })
        .collect::<Option<_>>()
        .context("the planner answered fewer plans than it was asked for")?;
    Ok(assemble(
        objects
            .iter()
            .map(|(origin, o)| (origin.clone(), o.as_ref().err())),
        fates.into_iter(),
    ))
}

/// Puts the fates (one per usable document, in order) back beside the unusable documents.
fn assemble<'a>(
    documents: impl Iterator<Item = (String, Option<&'a InputError>)>,
    mut fates: impl Iterator<Item = Fate>,
) -> Vec<Explained> {
    documents
        .map(|(origin, error)| {
            let mut explained = Explained {
                origin,
                planned: None,
                unrecorded: None,
                tenant_admission: None,
                error: None,
            };
            match error {
                Some(e) => {
                    explained.error = Some(InputError {
                        field: e.field.clone(),
                        problem: e.problem.clone(),
                    });
                }
                None => match fates.next().expect("one fate per usable document") {
                    Fate::Planned(p, at_apply) => {
                        explained.planned = Some(p);
                        explained.tenant_admission = at_apply;
                    }
                    Fate::Unrecorded(u) => explained.unrecorded = Some(u),
                },
            }
            explained
        })
        .collect()
}

/// The IsolationProfile the objects are planned under, with where it was read: `--profile`, or
/// the one the Tenant names, among the `--host` documents or from `--host-kubeconfig`. A profile
/// the Tenant names that is found neither way is reported, and the objects are planned without
/// it.
async fn profile_in_force(
    args: &Args,
    tenant: &Tenant,
) -> anyhow::Result<Option<(String, IsolationProfile)>> {
    if let Some(path) = &args.profile {
        let document: serde_json::Value = input::read_resource(path)?;
        let profile = tenantplane_isolation::decode(&document)
            .with_context(|| format!("{} is not a valid IsolationProfile", path.display()))?;
        return Ok(Some((path.display().to_string(), profile)));
    }
    let Some(name) = &tenant.spec.isolation_profile_ref else {
        return Ok(None);
    };
    let found = match &args.host_kubeconfig {
        Some(kubeconfig) => {
            host_cluster::read_profile(kubeconfig, args.host_context.as_deref(), name)
                .await?
                .map(|p| (format!("{name} of the host cluster"), p))
        }
        None => input::read_documents(&args.host)?
            .into_iter()
            .filter_map(|(origin, document)| Some((origin, document.ok()?)))
            .find(|(_, d)| d["kind"] == "IsolationProfile" && d["metadata"]["name"] == *name)
            .map(|(origin, d)| {
                let profile = tenantplane_isolation::decode(&d)
                    .with_context(|| format!("{origin} is not a valid IsolationProfile"))?;
                anyhow::Ok((format!("{name} ({origin})"), profile))
            })
            .transpose()?,
    };
    if found.is_none() {
        eprintln!(
            "warning: Tenant {} names IsolationProfile {name}, which is not {}: predicting \
             without it (what the host's admission refuses under it shows up as HostRefused); \
             give it with --profile",
            tenant.name(),
            match &args.host_kubeconfig {
                Some(_) => "in the host cluster",
                None => "among the --host documents",
            }
        );
    }
    Ok(found)
}

fn default_tenant() -> Tenant {
    Tenant::new("demo", Default::default())
}

fn read_host_state(paths: &[PathBuf]) -> anyhow::Result<HostState> {
    let mut host = HostState::default();
    for (origin, value) in input::read_documents(paths)? {
        let value = value.map_err(|e| anyhow::anyhow!("host object {origin}: {}", e.problem))?;
        let meta = HostObjectMeta::from_value(&value)
            .map_err(|e| anyhow::anyhow!("host object {origin}: {e}"))?;
        host.insert(meta);
    }
    Ok(host)
}

/// The outcomes (and `error`, `notwatched`, `unknownscope`) that make explain-sync exit with
/// status 1.
struct FailOn {
    outcomes: BTreeSet<Outcome>,
    /// `NotWatched` and/or `UnknownScope`.
    unrecorded: BTreeSet<&'static str>,
    errors: bool,
}

impl FailOn {
    fn parse(items: &[String]) -> anyhow::Result<Self> {
        let mut fail_on = FailOn {
            outcomes: BTreeSet::new(),
            unrecorded: BTreeSet::new(),
            errors: false,
        };
        for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match item.to_ascii_lowercase().as_str() {
                "error" => fail_on.errors = true,
                "none" => {}
                "notwatched" => {
                    fail_on.unrecorded.insert("NotWatched");
                }
                "unknownscope" => {
                    fail_on.unrecorded.insert("UnknownScope");
                }
                other => {
                    // Accept the verbs too (`reject` for Rejected, `skip` for Skipped, ...).
                    let outcome = Outcome::ALL
                        .into_iter()
                        .find(|o| {
                            o.as_str()
                                .to_ascii_lowercase()
                                .starts_with(&other.to_ascii_lowercase())
                        })
                        .filter(|_| other.len() >= 4)
                        .map_or_else(|| other.parse::<Outcome>(), Ok)
                        .map_err(|e| {
                            anyhow::anyhow!(
                                "--fail-on: {e}, notwatched, unknownscope, error or none"
                            )
                        })?;
                    fail_on.outcomes.insert(outcome);
                }
            }
        }
        Ok(fail_on)
    }

    fn matches(&self, result: &Explained) -> bool {
        match (&result.planned, &result.unrecorded) {
            (Some(p), _) => self.outcomes.contains(&p.decision.outcome),
            (None, Some(u)) => self.unrecorded.contains(u.fate.outcome()),
            (None, None) => self.errors,
        }
    }
}

/// `15 documents: 6 Synced, 2 Skipped, 3 Rejected, 2 Conflict, 1 NotWatched, 1 error`.
fn summary(results: &[Explained]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    let mut unrecorded = std::collections::BTreeMap::new();
    let mut errors = 0;
    for r in results {
        match (&r.planned, &r.unrecorded) {
            (Some(p), _) => *counts.entry(p.decision.outcome).or_insert(0) += 1,
            (None, Some(u)) => *unrecorded.entry(u.fate.outcome()).or_insert(0) += 1,
            (None, None) => errors += 1,
        }
    }
    let mut parts: Vec<String> = counts.iter().map(|(o, n)| format!("{n} {o}")).collect();
    parts.extend(unrecorded.iter().map(|(o, n)| format!("{n} {o}")));
    if errors > 0 {
        parts.push(format!(
            "{errors} error{}",
            if errors == 1 { "" } else { "s" }
        ));
    }
    format!("{} documents: {}", results.len(), parts.join(", "))
}

/// The table explain-sync prints (and `--planner` mode prints identically).
pub fn write_table(out: &mut impl Write, results: &[Explained]) -> std::io::Result<()> {
    let mut table = Table::with_rows(results.len() + 1);
    for header in ["SOURCE", "HOST", "ACTION", "OUTCOME", "RULE", "REASON"] {
        table.cell(format_args!("{header}"));
    }
    for r in results {
        match &r.planned {
            Some(p) => {
                let d = &p.decision;
                let (kind, namespace, name) =
                    (&d.subject.kind, &d.subject.namespace, &d.subject.name);
                table.cell(format_args!("{kind}/{namespace}/{name}"));
                match &d.target {
                    Some(t) => table.cell(format_args!("{}/{}", t.namespace, t.name)),
                    None => table.cell(format_args!("-")),
                }
                table.cell(format_args!("{}", d.action.as_str()));
                table.cell(format_args!("{}", d.outcome));
                match (&d.profile, &d.policy) {
                    (Some(profile), _) if profile.rule.is_some() => table.cell(format_args!(
                        "{}/{}",
                        profile.name,
                        profile.rule.as_deref().unwrap_or_default()
                    )),
                    (_, Some(policy)) => match &policy.rule {
                        Some(rule) => table.cell(format_args!("{}/{rule}", policy.name)),
                        None => table.cell(format_args!("{}/(default)", policy.name)),
                    },
                    (_, None) => table.cell(format_args!("-")),
                }
                match d.stripped_keys.len() {
                    0 => table.cell(format_args!("{}", d.reason)),
                    n => table.cell(format_args!(
                        "{} ({n} reserved tenantplane.io/ keys stripped)",
                        d.reason
                    )),
                }
            }
            None => match (&r.unrecorded, &r.error) {
                (Some(u), _) => {
                    let s = &u.subject;
                    match s.namespace.as_str() {
                        "" => table.cell(format_args!("{}/{}", s.kind, s.name)),
                        ns => table.cell(format_args!("{}/{ns}/{}", s.kind, s.name)),
                    }
                    table.cell(format_args!("-"));
                    table.cell(format_args!("none"));
                    table.cell(format_args!("{}", u.fate.outcome()));
                    match &u.verdict.rule {
                        Some(rule) => table.cell(format_args!("{}/{rule}", u.verdict.policy)),
                        None => table.cell(format_args!("{}/(default)", u.verdict.policy)),
                    }
                    table.cell(format_args!("{}", u.fate.reason()));
                }
                (None, Some(e)) => {
                    for cell in [r.origin.as_str(), "-", "none", "Error", "-", &e.problem] {
                        table.cell(format_args!("{cell}"));
                    }
                }
                (None, None) => unreachable!("every result is planned, unrecorded or an error"),
            },
        }
    }
    table.write(out)?;
    write_tenant_admission(out, results)
}

/// After the table, for each refused object: what the tenant's control plane does when the
/// object is applied.
fn write_tenant_admission(out: &mut impl Write, results: &[Explained]) -> std::io::Result<()> {
    let refused: Vec<(String, &AtApply)> = results
        .iter()
        .filter_map(|r| {
            let s = &r.planned.as_ref()?.decision.subject;
            Some((
                format!("{}/{}/{}", s.kind, s.namespace, s.name),
                r.tenant_admission.as_ref()?,
            ))
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let width = refused
        .iter()
        .map(|(s, _)| s.chars().count())
        .max()
        .unwrap_or(0);
    writeln!(
        out,
        "\nREFUSED ON THE HOST · AT APPLY TIME IN THE TENANT CONTROL PLANE"
    )?;
    for (subject, at_apply) in refused {
        writeln!(out, "{subject:<width$}   {at_apply}")?;
    }
    Ok(())
}

/// Rows of [`Table::COLUMNS`] cells, all in one string, printed in aligned columns.
struct Table {
    /// Every cell's text, one after the other.
    text: String,
    /// Where each cell ends in `text`.
    ends: Vec<usize>,
    /// Width in characters of each column's widest cell.
    widths: [usize; Table::COLUMNS],
}

impl Table {
    const COLUMNS: usize = 6;

    fn with_rows(rows: usize) -> Self {
        Table {
            text: String::new(),
            ends: Vec::with_capacity(rows * Self::COLUMNS),
            widths: [0; Self::COLUMNS],
        }
    }

    /// Adds the next cell, filling rows left to right.
    fn cell(&mut self, content: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;

        let start = self.text.len();
        self.text
            .write_fmt(content)
            .expect("writing to a String cannot fail");
        let column = self.ends.len() % Self::COLUMNS;
        let width = self.text[start..].chars().count();
        self.widths[column] = self.widths[column].max(width);
        self.ends.push(self.text.len());
    }

    /// Each row on a line, each cell but the last padded to its column's width plus three
    /// spaces, trailing spaces trimmed.
    fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut line = String::new();
        let mut start = 0;
        for row in self.ends.chunks(Self::COLUMNS) {
            line.clear();
            for (column, &end) in row.iter().enumerate() {
                let cell = &self.text[start..end];
                start = end;
                line.push_str(cell);
                if column < Self::COLUMNS - 1 {
                    let pad = self.widths[column] - cell.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}
