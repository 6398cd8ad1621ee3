//! `tenantplane why`: why a host object exists, or why a tenant object was refused.
//!
//! For a host object (`why KIND/NAMESPACE/NAME`): reads its provenance from the host cluster
//! (read-only), then finds in the decision log the decision that created it and the one that
//! last changed it (the one whose id the object carries), and prints the chain from the host
//! object to the tenant object, the mapping, the SyncPolicy rule or IsolationProfile field, and
//! the trace. A compiled isolation object (NetworkPolicy, ResourceQuota...) is explained the same
//! way: its profile, level and fields from its annotations, then the syncer's decisions that
//! applied it (subject: the IsolationProfile; the profile generation and fields they name).
//!
//! For a tenant object (`why --tenant NAME KIND/NAMESPACE/NAME`, or `KIND/NAME` for a
//! cluster-scoped kind): prints the latest decision about it from the log, which is how a refused
//! object (no host object) is explained. When the log has none, the answer comes from the policy
//! in force (the Tenant's SyncPolicy read from the host cluster, or --policy): the syncer does not
//! watch the object's kind, so it never records anything about it (cluster-scoped, or named by
//! no Sync rule: `tenantplane_core::watch`, the rule the syncer's discovery applies), or it does
//! and has not seen the object (it may not exist, or not be synced yet).
//!
//! Exit status: 0 when the log or the policy accounts for the object; 1 when something does not
//! add up, or the syncer watches the object's kind and has recorded nothing about it, or its
//! kind's scope is unknown; 2 on errors (bad input, unreachable cluster or log).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery};
use serde::Serialize;
use tenantplane_api::Tenant;
use tenantplane_api::provenance;
use tenantplane_core::CompiledPolicy;
use tenantplane_core::decision::{Decision, HostAction, Outcome};
use tenantplane_core::scope::{BuiltinKind, KindScope, KindScopes};
use tenantplane_core::watch::{Fate, UnrecordedFate, Watches, discovered_scope};
use tenantplane_decision_log::{Entry, Filter, ObjectFilter};
use tenantplane_telemetry::{TRACE_URL_ENV, TraceUrl};

use crate::decision_source::{DecisionSource, SourceArgs};
use crate::input;

/// How many of an object's decisions are read, newest first, to find the one that created it.
const HISTORY: u32 = 1000;

/// Arguments of `tenantplane why`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object: KIND/NAMESPACE/NAME (kind as in `kubectl get`: Pod, pod, pods,
    /// deployments.apps). A host object unless --tenant is given; a tenant object of a
    /// cluster-scoped kind is KIND/NAME.
    object: String,
    /// Explain the tenant object of this Tenant instead: from the decision log, or, when it has
    /// no decision about the object, from the Tenant's SyncPolicy.
    #[arg(long)]
    tenant: Option<String>,
    /// With --tenant: the SyncPolicy in force (YAML or JSON), instead of the one the Tenant
    /// names in the host cluster.
    #[arg(long, value_name = "FILE", requires = "tenant")]
    policy: Option<PathBuf>,
    /// With --tenant: the tenant control plane's kubeconfig, to learn a custom kind and its
    /// scope from its discovery (read-only).
    #[arg(long, value_name = "FILE", requires = "tenant")]
    tenant_kubeconfig: Option<PathBuf>,
    /// Context of --tenant-kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME", requires = "tenant_kubeconfig")]
    tenant_context: Option<String>,
    /// Host cluster kubeconfig (default: KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "TENANTPLANE_HOST_KUBECONFIG")]
    host_kubeconfig: Option<PathBuf>,
    /// Context of the host kubeconfig (default: its current context).
    #[arg(long)]
    host_context: Option<String>,
    #[command(flatten)]
    source: SourceArgs,
    /// Link to a trace in the tracing UI; `{trace_id}` is replaced.
    #[arg(long, env = TRACE_URL_ENV, default_value_t = TraceUrl::default())]
    trace_url: TraceUrl,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    output: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// The chain, for people.
    Text,
    /// One JSON document.
    Json,
}

/// What `why` found: the answer, printed as text or JSON.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Explanation {
    /// The host object asked about, with its tenantplane metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_object: Option<HostObject>,
    /// The tenant object the host object traces back to (or that was asked about).
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<SourceObject>,
    /// The IsolationProfile the object was compiled from, for isolation objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    isolation: Option<Isolation>,
    /// The decision that created the host object (or the tenant side: the first one found).
    #[serde(skip_serializing_if = "Option::is_none")]
    created_by: Option<Entry>,
    /// The decision that last changed it: the one whose id the host object carries (tenant side:
    /// the latest decision).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_changed_by: Option<Entry>,
    /// For a tenant object the log has no decision about, whose kind the syncer does not watch:
    /// why it records nothing, from the policy in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    unrecorded: Option<UnrecordedFate>,
    /// How many decisions the log holds about the object (up to the lookup limit).
    decisions: usize,
    /// The decisions of its history that close a recorded host action that was not carried
    /// out (a failed or refused write, a syncer stopped before it), newest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_carried_out: Vec<Entry>,
    /// The Drifted decisions of its history (edited or deleted on the host by someone else),
    /// newest first, each with the decision that corrected it when one did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drifts: Vec<Drifted>,
    /// What does not add up, e.g. a decision id on the object that the log does not have.
    problems: Vec<String>,
}

/// One drift of a host object and its correction.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Drifted {
    /// The Drifted decision: what differed and who changed it.
    drift: Entry,
    /// The decision that corrected it (re-applied, re-created), if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    corrected_by: Option<Entry>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HostObject {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    /// The object's tenantplane.io/ labels and annotations.
    provenance: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SourceObject {
    tenant: String,
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
    mapping_version: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Isolation {
    profile: String,
    generation: String,
    level: String,
    fields: Vec<String>,
}

/// Runs `tenantplane why`; exits 1 when the log does not account for the object.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &Args) -> anyhow::Result<ExitCode> {
    let target = ObjectRef::parse(&args.object, args.tenant.is_some())?;
    let explanation = match &args.tenant {
        Some(tenant) => explain_tenant_object(args, tenant, &target).await?,
        None => explain_host_object(args, &target).await?,
    };
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
        Format::Text => print!("{}", render(&explanation, &args.trace_url)),
    }
    Ok(if explanation.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `KIND/NAMESPACE/NAME` as typed.
#[derive(Debug)]
struct ObjectRef {
    kind: String,
    namespace: String,
    name: String,
}

impl ObjectRef {
    /// `KIND/NAMESPACE/NAME`, or `KIND/NAME` (namespace empty) when `cluster_scoped` may be.
    fn parse(s: &str, cluster_scoped: bool) -> anyhow::Result<ObjectRef> {
        match s.split('/').collect::<Vec<_>>().as_slice() {
            [kind, name] if cluster_scoped && !kind.is_empty() && !name.is_empty() => {
                Ok(ObjectRef {
                    kind: kind.to_string(),
                    namespace: String::new(),
                    name: name.to_string(),
                })
            }
            [kind, namespace, name]
                if !kind.is_empty() && !namespace.is_empty() && !name.is_empty() =>
            {
                Ok(ObjectRef {
                    kind: kind.to_string(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            }
            _ if cluster_scoped => bail!(
                "{s:?} is not KIND/NAMESPACE/NAME (e.g. Deployment/shop/web), nor KIND/NAME for a \
                 cluster-scoped kind (e.g. ClusterRoleBinding/admin)"
            ),
            _ => bail!(
                "{s:?} is not KIND/NAMESPACE/NAME (e.g. Pod/tenant-acme/web-x-shop); why explains \
                 namespaced host objects"
            ),
        }
    }

    /// `NAMESPACE/NAME`, or `NAME` for a cluster-scoped object.
    fn display_name(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// Whether `kind` (a Kind like `Pod`) is what the user typed: the kind, or its lowercase
    /// plural, in any case.
    fn names_kind(&self, kind: &str) -> bool {
        let typed = self.kind.to_ascii_lowercase();
        let kind = kind.to_ascii_lowercase();
        typed == kind || typed == format!("{kind}s") || typed == format!("{kind}es")
    }
}

async fn explain_tenant_object(
    args: &Args,
    tenant: &str,
    target: &ObjectRef,
) -> anyhow::Result<Explanation> {
    let mut log = DecisionSource::connect(&args.source).await?;
    let filter = Filter {
        tenant: Some(tenant.to_string()),
        subject: ObjectFilter {
            kind: None,
            namespace: Some(target.namespace.clone()).filter(|ns| !ns.is_empty()),
            name: Some(target.name.clone()),
        },
        ..Filter::default()
    };
    let history: Vec<Entry> = log
        .query(&filter, HISTORY, true)
        .await?
        .into_iter()
        .filter(|e| {
            target.names_kind(&e.decision.subject.kind)
                && (!target.namespace.is_empty() || e.decision.subject.namespace.is_empty())
        })
        .collect();
    let Some(latest) = history.first().cloned() else {
        return explain_unrecorded(args, tenant, target).await;
    };
    let d = &latest.decision;
    Ok(Explanation {
        host_object: None,
        source: Some(SourceObject {
            tenant: d.tenant.clone(),
            api_version: d.subject.api_version.clone(),
            kind: d.subject.kind.clone(),
            namespace: d.subject.namespace.clone(),
            name: d.subject.name.clone(),
            uid: d.subject.uid.clone(),
            mapping_version: d.mapping_version.clone(),
        }),
        isolation: None,
        created_by: creation(&history, latest.sequence),
        unrecorded: None,
        decisions: history.len(),
        not_carried_out: closings(&history),
        drifts: drifts(&history),
        last_changed_by: Some(latest),
        problems: Vec::new(),
    })
}

/// The answer for a tenant object the decision log has no decision about, from the policy in
/// force: the syncer does not watch its kind (why, and what the policy would decide), or it does
/// and has recorded nothing (a problem: never seen).
async fn explain_unrecorded(
    args: &Args,
    tenant: &str,
    target: &ObjectRef,
) -> anyhow::Result<Explanation> {
    let policy = match &args.policy {
        Some(path) => CompiledPolicy::from_yaml(&input::read_text(path)?)
            .with_context(|| format!("SyncPolicy {}", path.display()))?,
        None => {
            let host = crate::host_cluster::client(
                args.host_kubeconfig.as_deref(),
                args.host_context.as_deref(),
            )
            .await?;
            let found = Api::<Tenant>::all(host.clone())
                .get_opt(tenant)
                .await
                .with_context(|| format!("reading Tenant {tenant} on the host cluster"))?
                .with_context(|| {
                    format!(
                        "the decision log has no decision about {} {}, and the host cluster has \
                         no Tenant {tenant} whose SyncPolicy could say why",
                        target.kind,
                        target.display_name()
                    )
                })?;
            tenantplane_syncer::controller::policy_in_force(&host, &found)
                .await?
                .1
        }
    };
    let (api_version, kind, scope) = tenant_kind(args, &target.kind).await?;
    let mut scopes = KindScopes::new();
    if let Some(scope) = scope {
        scopes.learn(
            tenantplane_core::object::group_of(&api_version),
            &kind,
            scope,
        );
    }
    let mut explanation = Explanation::default();
    let fate = Watches::new(&policy, scopes)
        .unrecorded_identity(&api_version, &kind, &target.namespace, &target.name)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.object))?;
    match fate {
        Some(fate) => {
            if fate.fate == Fate::ClusterScoped && !target.namespace.is_empty() {
                explanation.problems.push(format!(
                    "{kind} is cluster-scoped: the object is {kind}/{} (a namespace is ignored)",
                    target.name
                ));
            } else if fate.fate != Fate::ClusterScoped && target.namespace.is_empty() {
                bail!("{kind} is not cluster-scoped: name the object as {kind}/NAMESPACE/NAME");
            }
            if fate.fate == Fate::UnknownScope {
                explanation.problems.push(format!(
                    "the scope of {kind} is unknown, so whether the syncer watches it cannot be \
                     told (give --tenant-kubeconfig to ask the tenant control plane)"
                ));
            }
            explanation.unrecorded = Some(fate);
        }
        None => {
            if target.namespace.is_empty() {
                bail!("{kind} is not cluster-scoped: name the object as {kind}/NAMESPACE/NAME");
            }
            explanation.problems.push(format!(
                "never seen: SyncPolicy {} (revision {}) syncs {kind}, so the syncer watches it, \
                 but the decision log has no decision about {kind} {}/{} of tenant {tenant} (it \
                 may not exist in the tenant control plane, or not be synced yet, or its \
                 decisions were pruned by retention)",
                policy.name(),
                policy.revision(),
                target.namespace,
                target.name
            ));
        }
    }
    Ok(explanation)
}

/// The apiVersion, kind and (when learned) scope of a typed tenant kind: a built-in kind's from
/// the built-in table, any other's from the tenant control plane's discovery
/// (--tenant-kubeconfig), as explain-sync learns them.
async fn tenant_kind(
    args: &Args,
    typed: &str,
) -> anyhow::Result<(String, String, Option<KindScope>)> {
    if let Some(builtin) = BuiltinKind::typed(typed) {
        return Ok((builtin.api_version(), builtin.kind.to_string(), None));
    }
    let Some(kubeconfig) = &args.tenant_kubeconfig else {
        bail!(
            "{typed:?} is not a built-in Kubernetes kind: give --tenant-kubeconfig, so that the \
             tenant control plane's discovery says what it is and its scope"
        );
    };
    let client =
        crate::host_cluster::client(Some(kubeconfig), args.tenant_context.as_deref()).await?;
    let (resource, caps) = resolve_kind(&client, typed)
        .await
        .context("on the tenant control plane")?;
    Ok((
        resource.api_version,
        resource.kind,
        Some(discovered_scope(&caps)),
    ))
}

async fn explain_host_object(args: &Args, target: &ObjectRef) -> anyhow::Result<Explanation> {
    let client = crate::host_cluster::client(
        args.host_kubeconfig.as_deref(),
        args.host_context.as_deref(),
    )
    .await?;
    let (resource, _) = resolve_kind(&client, &target.kind)
        .await
        .context("on the host cluster")?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &target.namespace, &resource);
    let meta = api
        .get_metadata_opt(&target.name)
        .await
        .with_context(|| {
            format!(
                "reading {} {}/{} on the host cluster",
                resource.kind, target.namespace, target.name
            )
        })?
        .with_context(|| {
            format!(
                "the host cluster has no {} {}/{}",
                resource.kind, target.namespace, target.name
            )
        })?
        .metadata;
    let mut marks: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in meta
        .labels
        .iter()
        .flatten()
        .chain(meta.annotations.iter().flatten())
    {
        if provenance::is_reserved(k) {
            marks.insert(k.clone(), v.clone());
        }
    }
    let host_object = HostObject {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        provenance: marks.clone(),
    };
    let mut explanation = Explanation {
        host_object: Some(host_object),
        ..Explanation::default()
    };
    let mark = |key: &str| marks.get(key).cloned().unwrap_or_default();
    if let Some(profile) = marks.get(provenance::ISOLATION_PROFILE) {
        explanation.isolation = Some(Isolation {
            profile: profile.clone(),
            generation: mark(provenance::ISOLATION_PROFILE_GENERATION),
            level: mark(provenance::ISOLATION_LEVEL),
            fields: mark(provenance::ISOLATION_FIELD)
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect(),
        });
    }
    let Some(tenant) = marks.get(provenance::TENANT).cloned() else {
        explanation.problems.push(format!(
            "{} {}/{} has no {} label: tenantplane did not create it (the syncer never writes \
             to an object like this; a tenant object mapped to this name gets a Conflict)",
            resource.kind,
            target.namespace,
            target.name,
            provenance::TENANT
        ));
        return Ok(explanation);
    };
    if explanation.isolation.is_none() {
        explanation.source = Some(SourceObject {
            tenant: tenant.clone(),
            api_version: mark(provenance::SOURCE_API_VERSION),
            kind: mark(provenance::SOURCE_KIND),
            namespace: mark(provenance::SOURCE_NAMESPACE),
            name: mark(provenance::SOURCE_NAME),
            uid: mark(provenance::SOURCE_UID),
            mapping_version: mark(provenance::MAPPING_VERSION),
        });
    }

    let mut log = DecisionSource::connect(&args.source).await?;
    let filter = Filter {
        tenant: Some(tenant),
        host: ObjectFilter {
            kind: Some(resource.kind.clone()),
            namespace: Some(target.namespace.clone()),
            name: Some(target.name.clone()),
        },
        ..Filter::default()
    };
    let history = log.query(&filter, HISTORY, true).await?;
    explanation.decisions = history.len();
    explanation.not_carried_out = closings(&history);
    explanation.drifts = drifts(&history);
    let decision_id = mark(provenance::DECISION_ID);
    let last = if decision_id.is_empty() {
        explanation.problems.push(format!(
            "the object carries no {} annotation",
            provenance::DECISION_ID
        ));
        None
    } else {
        match history.iter().find(|e| e.decision.id == decision_id) {
            Some(e) => Some(e.clone()),
            None => log.get(&decision_id).await?,
        }
    };
    match &last {
        Some(entry) => {
            explanation.created_by = creation(&history, entry.sequence);
            check_matches(&mut explanation, &entry.decision);
        }
        None if !decision_id.is_empty() => explanation.problems.push(format!(
            "decision {decision_id}, named on the object, is not in the decision log (pruned by \
             retention, or recorded in another log)"
        )),
        None => {}
    }
    explanation.last_changed_by = last;
    Ok(explanation)
}

/// The decisions of `history` that close one whose host action was not carried out.
fn closings(history: &[Entry]) -> Vec<Entry> {
    history
        .iter()
        .filter(|e| e.decision.closes.is_some())
        .cloned()
        .collect()
}

/// The Drifted decisions of `history` (newest first), each with its correction.
fn drifts(history: &[Entry]) -> Vec<Drifted> {
    history
        .iter()
        .filter(|e| e.decision.outcome == Outcome::Drifted)
        .map(|drift| Drifted {
            corrected_by: history
                .iter()
                .find(|c| {
                    c.decision
                        .drift
                        .as_ref()
                        .and_then(|d| d.corrects.as_deref())
                        == Some(drift.decision.id.as_str())
                })
                .cloned(),
            drift: drift.clone(),
        })
        .collect()
}

/// The decision that created the current incarnation: the newest Create at or before
/// `sequence` (history is newest first).
fn creation(history: &[Entry], sequence: u64) -> Option<Entry> {
    history
        .iter()
        .find(|e| e.sequence <= sequence && e.decision.action == HostAction::Create)
        .cloned()
}

/// Reports where the object's provenance and the decision it names disagree.
fn check_matches(explanation: &mut Explanation, decision: &Decision) {
    if let Some(isolation) = &explanation.isolation {
        let decided_by = decision.profile.as_ref().map(|p| p.name.as_str());
        if decided_by != Some(isolation.profile.as_str()) {
            explanation.problems.push(format!(
                "the object was compiled from IsolationProfile {}, but decision {} names {}",
                isolation.profile,
                decision.id,
                decided_by.map_or("no IsolationProfile".to_string(), |p| {
                    format!("IsolationProfile {p}")
                })
            ));
        }
    }
    let Some(source) = &explanation.source else {
        return;
    };
    let problems = &mut explanation.problems;
    if source.uid != decision.subject.uid {
        problems.push(format!(
            "the object's source uid {} differs from decision {}'s subject uid {}",
            source.uid, decision.id, decision.subject.uid
        ));
    }
    if source.namespace != decision.subject.namespace || source.name != decision.subject.name {
        problems.push(format!(
            "the object's source {}/{} differs from decision {}'s subject {}/{}",
            source.namespace,
            source.name,
            decision.id,
            decision.subject.namespace,
            decision.subject.name
        ));
    }
}

/// Finds the resource a typed kind names (`Pod`, `pods`, `deployments.apps`), as kubectl does.
async fn resolve_kind(
    client: &kube::Client,
    typed: &str,
) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
    let (name, group) = match typed.split_once('.') {
        Some((name, group)) => (name, Some(group)),
        None => (typed, None),
    };
    let name = name.to_ascii_lowercase();
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the cluster's resources")?;
    let found = discovery
        .groups()
        .filter(|g| group.is_none_or(|want| g.name() == want))
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.kind.to_ascii_lowercase() == name || r.plural == name);
    found.with_context(|| format!("the cluster serves no resource named {typed:?}"))
}

/// The explanation as the chain a person reads.
fn render(e: &Explanation, trace_url: &TraceUrl) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<16}{value}\n"));
    };
    if let Some(h) = &e.host_object {
        line(
            "Host object",
            format!("{} {}/{} ({})", h.kind, h.namespace, h.name, h.api_version),
        );
    }
    if let Some(i) = &e.isolation {
        line(
            "Compiled from",
            format!(
                "IsolationProfile {} generation {}, level {}",
                i.profile, i.generation, i.level
            ),
        );
        line("Profile fields", i.fields.join(", "));
    }
    if let Some(s) = &e.source {
        line(
            "Tenant object",
            format!(
                "{} {}/{} in tenant {} (uid {})",
                s.kind, s.namespace, s.name, s.tenant, s.uid
            ),
        );
        line("Mapping", format!("scheme {}", s.mapping_version));
    }
    if let Some(u) = &e.unrecorded {
        let s = &u.subject;
        let placed = match s.namespace.as_str() {
            "" => s.name.clone(),
            ns => format!("{ns}/{}", s.name),
        };
        line(
            "Tenant object",
            format!("{} {placed} ({})", s.kind, s.api_version),
        );
        line(
            u.fate.outcome(),
            format!("{}: {}", u.fate.reason(), u.message),
        );
        line(
            "  policy",
            format!(
                "SyncPolicy {} revision {}, rule {}",
                u.verdict.policy,
                u.verdict.policy_revision,
                u.verdict.rule.as_deref().unwrap_or("(the policy default)")
            ),
        );
        line(
            "  would decide",
            format!("{:?} ({})", u.verdict.action, u.verdict.reason),
        );
    }
    let same = matches!((&e.created_by, &e.last_changed_by), (Some(c), Some(l)) if c.sequence == l.sequence);
    if let Some(c) = &e.created_by
        && !same
    {
        render_decision(&mut out, "Created by", c, trace_url);
    }
    if let Some(l) = &e.last_changed_by {
        let label = match (&e.host_object, same) {
            (Some(_), true) => "Created by",
            (Some(_), false) => "Last changed by",
            (None, _) => "Latest decision",
        };
        render_decision(&mut out, label, l, trace_url);
    }
    if e.host_object.is_none() || e.source.is_some() || e.isolation.is_some() {
        out.push_str(&format!(
            "{:<16}{} in the log about this object\n",
            "History", e.decisions
        ));
    }
    for c in &e.not_carried_out {
        let d = &c.decision;
        out.push_str(&format!(
            "{:<16}decision {} ({} not made): closed by decision {} (#{}), {}: {}\n",
            "Not carried out",
            d.closes.as_deref().unwrap_or_default(),
            d.action.as_str(),
            d.id,
            c.sequence,
            d.reason,
            d.message
        ));
    }
    for d in &e.drifts {
        let drift = &d.drift.decision;
        let times = drift.drift.as_ref().map_or(1, |x| x.times);
        let fight = if times > 1 {
            format!(", {times} times in a row")
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{:<16}decision {} (#{}) at {}: {}{fight}\n",
            "Drifted", drift.id, d.drift.sequence, drift.time, drift.reason
        ));
        for field in drift.drift.iter().flat_map(|x| &x.fields) {
            out.push_str(&format!("{:<16}{field}\n", ""));
        }
        let correction = match &d.corrected_by {
            Some(c) => format!(
                "corrected by decision {} (#{}), {}",
                c.decision.id, c.sequence, c.decision.reason
            ),
            None => "not corrected (spec.drift: Record, or a tug of war holds it back)".into(),
        };
        out.push_str(&format!("{:<16}{correction}\n", ""));
    }
    for p in &e.problems {
        out.push_str(&format!("{:<16}{p}\n", "PROBLEM"));
    }
    out
}

fn render_decision(out: &mut String, label: &str, entry: &Entry, trace_url: &TraceUrl) {
    let d = &entry.decision;
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<16}{value}\n"));
    };
    line(
        label,
        format!(
            "decision {} (#{}) at {} by {} {}",
            d.id, entry.sequence, d.time, d.component, d.component_version
        ),
    );
    line(
        "  outcome",
        format!("{}, host action {}", d.outcome, d.action.as_str()),
    );
    if let Some(p) = &d.policy {
        line(
            "  policy",
            format!(
                "SyncPolicy {} revision {}, rule {}",
                p.name,
                p.revision,
                p.rule.as_deref().unwrap_or("(the policy default)")
            ),
        );
    }
    if let Some(p) = &d.profile {
        let rule = p
            .rule
            .as_deref()
            .map(|r| format!(", rule {r}"))
            .unwrap_or_default();
        line(
            "  profile",
            format!(
                "IsolationProfile {} generation {}, field {}{rule}",
                p.name, p.generation, p.field_path
            ),
        );
    }
    line("  reason", format!("{}: {}", d.reason, d.message));
    if let Some(corrects) = d.drift.as_ref().and_then(|x| x.corrects.as_ref()) {
        line(
            "  corrects",
            format!("drift decision {corrects}: the host object had been changed on the host"),
        );
    }
    if let Some(closed) = &d.closes {
        line(
            "  closes",
            format!("decision {closed}: its host action was not carried out"),
        );
    }
    if let Some(field) = &d.field_path {
        line("  field", field.clone());
    }
    if !d.stripped_keys.is_empty() {
        line("  stripped", d.stripped_keys.join(", "));
    }
    for t in &d.tokens {
        let audiences = match t.audiences.as_slice() {
            [] => "the tenant API server's audience".to_string(),
            audiences => format!("audience {}", audiences.join(", ")),
        };
        line(
            "  token",
            format!(
                "key {}: ServiceAccount {}, {audiences}, expires {}",
                t.key, t.service_account, t.expires
            ),
        );
    }
    match &d.trace_id {
        Some(trace) => line("  trace", format!("{trace} {}", trace_url.link(trace))),
        None => line("  trace", "(not traced)".to_string()),
    }
}
