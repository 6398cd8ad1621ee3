//! `tenantplane explain-sync`: predicts, offline, what the syncer will do with tenant objects.
//!
//! It runs the planner of `tenantplane-core`, the code the syncer runs, over objects read from
//! files, directories and standard input, against an optional snapshot of host objects for
//! collision prediction, and prints one row per object: source → host namespace/name, action,
//! outcome, policy rule and reason. An object of a kind the syncer does not watch (cluster-scoped,
//! or named by no Sync rule) gets no plan: its row says `NotWatched` and why, as the syncer records
//! nothing about it (`tenantplane_core::watch`). A bad document is reported with its file,
//! document index and field; the rest of the input is still planned.
//!
//! A large input is planned in bounded memory: each document is parsed, planned and rendered on
//! one of the cores, and of it only its output is kept (docs/architecture.md, "Large inputs").

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::Context;
use serde::Serialize;
use tenantplane_api::tenant::DriftPolicy;
use tenantplane_api::{IsolationProfile, Tenant, provenance};
use tenantplane_client::{ClientConfig, PlannerClient};
use tenantplane_core::boundary::Boundary;
use tenantplane_core::collision::{Collision, HostObjectMeta};
use tenantplane_core::decision::{HostAction, Stamp};
use tenantplane_core::documents::{self, Document, DocumentError, Reader};
use tenantplane_core::drift::{self, Drift};
use tenantplane_core::planner::{HeldPlans, HostState, SharedNames};
use tenantplane_core::pod_world::{self, PodWorld, TenantService, TenantServices, TenantWorld};
use tenantplane_core::reference::{REFERENCEABLE_KINDS, Reference};
use tenantplane_core::watch::{UnrecordedFate, Watches};
use tenantplane_core::{
    AtApply, CompiledPolicy, Decision, Outcome, Plan, Planner, SourceIdentity, TenantAdmission,
    TenantObject,
};
use tenantplane_core::{scope, translate};

use crate::host_cluster::HostContent;
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
    /// For a pod whose host pod is created: what it sees of its tenant's cluster there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodWorld>,
}

/// A document that is not a usable tenant object.
#[derive(Debug, Serialize)]
pub struct InputError {
    /// Offending field (`""` for a malformed document).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl From<DocumentError> for InputError {
    fn from(e: DocumentError) -> Self {
        InputError {
            field: e.field,
            problem: e.problem,
        }
    }
}

/// Runs explain-sync.
///
/// The inputs are read twice, as texts held in memory: first their [outlines](Survey), on every
/// core, for what must be known before the first object is planned (the kinds, the
/// CustomResourceDefinitions, which objects share a v1 host name); then each document is parsed,
/// planned and written, on every core and in input order, and only what the output still needs
/// of it is kept ([`Rows`], [`Report`]).
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
    let profile_text = profile
        .map(|(_, p)| serde_json::to_string(&p))
        .transpose()?;
    let inputs = input::read_inputs(&args.inputs)?;
    let mut readers: Vec<Reader> = inputs
        .iter()
        .map(|input| Reader::new(&input.source, &input.text))
        .collect();
    let mut survey = Survey::of(&mut readers);
    // The reference check looks at what each reference resolves to on the host, whatever kinds
    // the inputs are (a Pod naming a ServiceAccount when no ServiceAccount is among them). They
    // are all served at v1, as the syncer watches them.
    let mut kinds = survey.kinds.clone();
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
    let scopes = runtime.block_on(kind_scopes::of_inputs(
        &survey.kinds,
        &survey.crds,
        discovery,
    ))?;
    let watches = Watches::new(planner.policy(), scopes);
    let (host, content) = match &args.host_kubeconfig {
        Some(kubeconfig) => runtime.block_on(host_cluster::read(
            kubeconfig,
            args.host_context.as_deref(),
            planner.host_namespace(),
            &kinds,
        ))?,
        None => read_host_state(&args.host, planner.host_namespace())?,
    };
    let host_addresses = match &args.host_kubeconfig {
        Some(kubeconfig) => runtime.block_on(host_cluster::service_addresses(
            kubeconfig,
            args.host_context.as_deref(),
            planner.host_namespace(),
        ))?,
        None => host_service_addresses(&args.host, planner.host_namespace())?,
    };
    let world = TenantWorld::of(&tenant, None);
    let services = PodInputs::new(
        std::mem::take(&mut survey.pod_inputs),
        host_addresses,
        &planner,
        watches.watches("", "Service"),
    );
    let shared = SharedNames::new(
        planner.placement(),
        survey
            .objects
            .iter()
            .filter(|(_, id)| watches.watches(id.group(), &id.kind))
            .map(|(position, id)| (*position, id)),
    );
    drop(survey);
    let explainer = Explainer {
        planner: &planner,
        watches: &watches,
        host: &host,
        content: (&content, tenant.spec.drift),
        admission: &admission,
        shared: &shared,
        output: args.output,
        pods: (&world, &services),
    };
    let mut report = Report::new(
        std::io::BufWriter::new(std::io::stdout().lock()),
        args.output,
    );
    match &args.planner {
        None => explainer.explain(readers, &mut report)?,
        Some(address) => runtime.block_on(explain_remote(
            &explainer,
            address,
            &tenant,
            (policy_text.as_deref(), profile_text.as_deref()),
            readers,
            &mut report,
        ))?,
    }
    let tally = report.finish()?;
    if args.output == OutputFormat::Table {
        eprintln!("{tally}");
    }
    Ok(if fail_on.matches(&tally) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// What explain-sync must know of the whole input before it plans the first object, read from
/// the documents' outlines: the kinds of the inputs (for discovery and the host cluster's
/// state), the CustomResourceDefinitions among them (which say their kinds' scopes), and the
/// identity of every object, by position (which objects share a v1 host name).
struct Survey {
    kinds: BTreeSet<(String, String)>,
    crds: Vec<serde_json::Value>,
    /// The tenant Services and ServiceAccounts, of which the pods' world is made.
    pod_inputs: Vec<serde_json::Value>,
    objects: Vec<(usize, SourceIdentity)>,
}

/// What the survey keeps of one document.
struct Surveyed {
    kind: Option<(String, String)>,
    crd: Option<serde_json::Value>,
    pod_input: Option<serde_json::Value>,
    identity: Option<SourceIdentity>,
}

impl Surveyed {
    fn of(outline: Option<serde_json::Value>) -> Self {
        let Some(outline) = outline else {
            return Surveyed {
                kind: None,
                crd: None,
                pod_input: None,
                identity: None,
            };
        };
        let field = |name: &str| outline.get(name).and_then(|v| v.as_str()).map(String::from);
        let kind = field("apiVersion").zip(field("kind"));
        let crd = scope::is_crd(&outline).then(|| outline.clone());
        let identity = TenantObject::from_value(outline.clone())
            .ok()
            .map(|o| o.identity);
        let pod_input = (documents::read_whole(&outline) && crd.is_none()).then_some(outline);
        Surveyed {
            kind,
            crd,
            pod_input,
            identity,
        }
    }
}

impl Survey {
    fn of(readers: &mut [Reader]) -> Self {
        let mut survey = Survey {
            kinds: BTreeSet::new(),
            crds: Vec::new(),
            pod_inputs: Vec::new(),
            objects: Vec::new(),
        };
        let documents = readers
            .iter_mut()
            .flat_map(|reader| reader.outlines(Surveyed::of));
        for (position, surveyed) in documents.enumerate() {
            survey.kinds.extend(surveyed.kind);
            survey.crds.extend(surveyed.crd);
            survey.pod_inputs.extend(surveyed.pod_input);
            survey
                .objects
                .extend(surveyed.identity.map(|identity| (position, identity)));
        }
        survey
    }
}

/// Explains documents: everything a document's row needs, computed where the document is read.
struct Explainer<'a> {
    planner: &'a Planner,
    watches: &'a Watches<'a>,
    host: &'a HostState,
    /// The content of tenantplane's host objects, where known, and what the Tenant does about
    /// their drift.
    content: (&'a HostContent, DriftPolicy),
    admission: &'a TenantAdmission,
    shared: &'a SharedNames,
    output: OutputFormat,
    /// What the tenant's pods see of its cluster on the host, and its Services there.
    pods: (&'a TenantWorld, &'a PodInputs),
}

/// One document explained: its row, or its plan held until the objects it shares a v1 host name
/// with have been planned.
#[expect(
    clippy::large_enum_variant,
    reason = "nearly every document is a row, moved once to the writer; boxing it would cost an \
              allocation per document, and a held plan is rare"
)]
enum Explanation {
    Row(Row),
    Held(Box<Held>),
}

/// A plan [`SharedNames`] holds, and the rest of its row.
struct Held {
    origin: String,
    object: TenantObject,
    /// Its decision record, unless the output is the table.
    decision: Option<Decision>,
    plan: Plan,
    references: Vec<Reference>,
    pod: Option<SeenPod>,
}

/// A created pod's world, and the line that describes it (in the plan's message and the table's
/// last section), made once.
struct SeenPod {
    world: PodWorld,
    line: String,
}

impl Explainer<'_> {
    /// Plans every document of `readers` in process, on every core, and writes each row as soon
    /// as it is final, in input order.
    fn explain(&self, readers: Vec<Reader>, report: &mut Report<impl Write>) -> anyhow::Result<()> {
        let mut rows = Rows::new(self.shared);
        for reader in readers {
            reader.read(
                |document| self.explain_document(document),
                |explanation| rows.take(explanation, self, report),
            )?;
        }
        Ok(())
    }

    fn explain_document(&self, document: Result<Document, DocumentError>) -> Explanation {
        let (origin, object) = tenant_object(document);
        let object = match object {
            Ok(object) => object,
            Err(error) => return Explanation::Row(self.row(&Explained::error(origin, error))),
        };
        if let Some(fate) = self.watches.unrecorded(&object) {
            return Explanation::Row(self.row(&Explained::unrecorded(origin, fate)));
        }
        let (mut plan, references) = self.planner.plan_and_references(&object, self.host);
        let pod = self.pod_world(&object, &mut plan);
        let drift = self.drift(&object, &mut plan);
        // The table shows no decision record (id, time, input digest): only the other outputs
        // make one.
        let decision = (self.output != OutputFormat::Table).then(|| Decision {
            drift,
            ..plan.to_decision(self.planner.tenant(), &object, Stamp::now(COMPONENT))
        });
        if self.shared.holds(&plan, &references) {
            return Explanation::Held(Box::new(Held {
                origin,
                object,
                decision,
                plan,
                references,
                pod,
            }));
        }
        self.planned_row(origin, &object, plan, decision, pod)
    }

    /// The row of a planned object: its decision record and plan, or the table's cells.
    fn planned_row(
        &self,
        origin: String,
        object: &TenantObject,
        plan: Plan,
        decision: Option<Decision>,
        pod: Option<SeenPod>,
    ) -> Explanation {
        let at_apply = self.admission.at_apply(object, &plan);
        // A held plan settled otherwise creates no host pod.
        let pod = pod.filter(|_| plan.outcome == Outcome::Synced);
        Explanation::Row(match decision {
            Some(decision) => self.row(&Explained::planned(
                origin,
                Planned {
                    decision,
                    plan,
                    pod: pod.map(|p| p.world),
                },
                at_apply,
            )),
            None => Row::planned_cells(&object.identity, &plan, at_apply, pod.map(|p| p.line)),
        })
    }

    /// For an object whose host object is tenantplane's and known whole (`--host` documents,
    /// `--host-kubeconfig` but for Secrets), and records the digest of what the object produces
    /// (nothing changed on the tenant side since it was synced): the
    /// drift of the host object from it, as the syncer finds it ([`drift::detect`]). The plan
    /// then says Drifted, and the update that corrects it under `Revert`.
    fn drift(&self, object: &TenantObject, plan: &mut Plan) -> Option<Drift> {
        let (content, policy) = self.content;
        if plan.outcome != Outcome::Synced || plan.collision != Some(Collision::UpdateOwn) {
            return None;
        }
        let live = content.get(&plan.placement.kind, &plan.placement.name)?;
        let host = self.host.in_namespace(&plan.placement.namespace);
        let desired = self.planner.translate(object, plan, &host).ok()?;
        if translate::recorded_digest(live) != Some(desired.digest.as_str()) {
            // The tenant object changed since (or the host object predates digests): the update
            // is the sync, not a correction.
            return None;
        }
        let found = drift::detect(&desired.object, live, drift::FIELD_MANAGER)?;
        plan.outcome = Outcome::Drifted;
        plan.action = match policy {
            DriftPolicy::Revert => HostAction::Update,
            DriftPolicy::Record => HostAction::None,
        };
        plan.reason = found.change.reason().into();
        plan.message = found.message(policy);
        Some(found)
    }

    /// For a pod whose host pod the plan creates: its world, which the plan's message says as the
    /// syncer's decision does.
    fn pod_world(&self, object: &TenantObject, plan: &mut Plan) -> Option<SeenPod> {
        let id = &object.identity;
        let created = plan.outcome == Outcome::Synced && plan.action == HostAction::Create;
        if !(created && id.group().is_empty() && id.kind == "Pod") {
            return None;
        }
        let (world, inputs) = self.pods;
        let account = object
            .object
            .pointer("/spec/serviceAccountName")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("default");
        let account = inputs
            .accounts
            .get(&(id.namespace.clone(), account.to_string()));
        let admitted = pod_world::as_admitted(object, account);
        let pod = PodWorld::of(
            world,
            admitted.as_ref().unwrap_or(object),
            &plan.placement.name,
            inputs,
        );
        let line = pod.describe();
        plan.message = format!("{}; {line}", plan.message);
        Some(SeenPod { world: pod, line })
    }

    fn row(&self, explained: &Explained) -> Row {
        Row::of(explained, self.output)
    }
}

/// A document read as a tenant object, or why it cannot be one; with its origin.
fn tenant_object(
    document: Result<Document, DocumentError>,
) -> (String, Result<TenantObject, InputError>) {
    match document {
        Err(e) => (e.origin.to_string(), Err(InputError::from(e))),
        Ok(Document { origin, value }) => {
            let object = match kind_scopes::crd_error(&value) {
                Some(error) => Err(error),
                None => TenantObject::from_value(value).map_err(|e| InputError {
                    field: e.field().to_string(),
                    problem: e.to_string(),
                }),
            };
            (origin.to_string(), object)
        }
    }
}

impl Explained {
    fn error(origin: String, error: InputError) -> Self {
        Explained {
            origin,
            planned: None,
            unrecorded: None,
            error: Some(error),
            tenant_admission: None,
        }
    }

    fn unrecorded(origin: String, fate: UnrecordedFate) -> Self {
        Explained {
            origin,
            planned: None,
            unrecorded: Some(fate),
            error: None,
            tenant_admission: None,
        }
    }

    /// A planned object, with what the tenant control plane does with it when the host refuses
    /// it.
    fn planned(origin: String, planned: Planned, tenant_admission: Option<AtApply>) -> Self {
        Explained {
            origin,
            planned: Some(planned),
            unrecorded: None,
            error: None,
            tenant_admission,
        }
    }
}

/// The rows of the documents read so far that are not written yet: those from the first held
/// plan on (none, unless objects share a v1 host name), which [`HeldPlans`] gives back settled.
struct Rows<'n> {
    held: HeldPlans<'n>,
    /// The position of the next document.
    next: usize,
    /// The rows after the last one written, `None` for a held plan's.
    waiting: VecDeque<Option<Row>>,
    /// The rest of each held plan's row, by position.
    held_rows: HashMap<usize, (String, TenantObject, Option<Decision>, Option<SeenPod>)>,
}

impl<'n> Rows<'n> {
    fn new(shared: &'n SharedNames) -> Self {
        Rows {
            held: shared.holding(),
            next: 0,
            waiting: VecDeque::new(),
            held_rows: HashMap::new(),
        }
    }

    /// Takes the next document's explanation and writes the rows that are final.
    fn take(
        &mut self,
        explanation: Explanation,
        explainer: &Explainer<'_>,
        report: &mut Report<impl Write>,
    ) -> std::io::Result<()> {
        let position = self.next;
        self.next += 1;
        self.waiting.push_back(match explanation {
            Explanation::Row(row) => Some(row),
            Explanation::Held(held) => {
                let Held {
                    origin,
                    object,
                    decision,
                    plan,
                    references,
                    pod,
                } = *held;
                let identity = object.identity.clone();
                self.held_rows
                    .insert(position, (origin, object, decision, pod));
                self.held.hold(position, identity, plan, references);
                None
            }
        });
        let first = self.next - self.waiting.len();
        for (at, plan) in self.held.passed(position) {
            let (origin, object, mut decision, pod) =
                self.held_rows.remove(&at).expect("a held row");
            if let Some(decision) = &mut decision {
                plan.restate(decision);
            }
            let Explanation::Row(row) = explainer.planned_row(origin, &object, plan, decision, pod)
            else {
                unreachable!("a settled plan's row is final");
            };
            self.waiting[at - first] = Some(row);
        }
        while let Some(Some(_)) = self.waiting.front() {
            let row = self
                .waiting
                .pop_front()
                .flatten()
                .expect("the front is a row");
            report.write(row)?;
        }
        Ok(())
    }
}

/// Plans every object the syncer watches on a planner service, in input order. The service plans
/// them as one batch, so they are all read first.
async fn explain_remote(
    explainer: &Explainer<'_>,
    address: &str,
    tenant: &Tenant,
    (policy, profile): (Option<&str>, Option<&str>),
    readers: Vec<Reader<'_>>,
    report: &mut Report<impl Write>,
) -> anyhow::Result<()> {
    let mut client = PlannerClient::connect(&ClientConfig::new(address))
        .await
        .with_context(|| format!("connecting to the planner at {address}"))?;
    let mut documents = Vec::new();
    for reader in readers {
        reader.read(tenant_object, |document| {
            documents.push(document);
            Ok::<_, std::convert::Infallible>(())
        })?;
    }
    let fates: Vec<Option<UnrecordedFate>> = documents
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok())
        .map(|o| explainer.watches.unrecorded(o))
        .collect();
    let valid: Vec<TenantObject> = documents
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok())
        .zip(&fates)
        .filter(|(_, fate)| fate.is_none())
        .map(|(o, _)| o.clone())
        .collect();
    let host: Vec<HostObjectMeta> = explainer.host.iter().cloned().collect();
    let planned = client
        .plan(tenant, policy, profile, &valid, &host)
        .await
        .with_context(|| format!("planning on the planner at {address}"))?;
    let mut planned = planned.into_iter().zip(&valid).map(|(mut p, object)| {
        let pod = explainer.pod_world(object, &mut p.plan).map(|p| p.world);
        let drift = explainer.drift(object, &mut p.plan);
        if pod.is_some() || drift.is_some() {
            p.plan.restate(&mut p.decision);
        }
        p.decision.drift = drift;
        let at_apply = explainer.admission.at_apply(object, &p.plan);
        (
            Planned {
                decision: p.decision,
                plan: p.plan,
                pod,
            },
            at_apply,
        )
    });
    let mut fates = fates.into_iter();
    let results = documents
        .into_iter()
        .map(|(origin, object)| {
            Ok(match object {
                Err(error) => Explained::error(origin, error),
                Ok(_) => match fates.next().expect("one fate per usable document") {
                    Some(fate) => Explained::unrecorded(origin, fate),
                    None => {
                        let (planned, at_apply) = planned
                            .next()
                            .context("the planner answered fewer plans than it was asked for")?;
                        Explained::planned(origin, planned, at_apply)
                    }
                },
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for explained in &results {
        report.write(explainer.row(explained))?;
    }
    Ok(())
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

/// The cluster IP of each host Service of `namespace` among the `--host` documents, by name.
fn host_service_addresses(
    paths: &[PathBuf],
    namespace: &str,
) -> anyhow::Result<HashMap<String, String>> {
    let mut addresses = HashMap::new();
    for (_, value) in input::read_documents(paths)? {
        let Ok(v) = value else { continue };
        let field = |path: &str| v.pointer(path).and_then(serde_json::Value::as_str);
        if field("/apiVersion") == Some("v1")
            && field("/kind") == Some("Service")
            && field("/metadata/namespace") == Some(namespace)
            && let (Some(name), Some(ip)) = (field("/metadata/name"), field("/spec/clusterIP"))
        {
            addresses.insert(name.to_string(), ip.to_string());
        }
    }
    Ok(addresses)
}

/// What a pod's world is made of among the inputs, offline: the tenant's Services, placed on
/// the host as its SyncPolicy and the host Services' cluster IPs (from `--host` or
/// `--host-kubeconfig`) say, as the syncer finds them in its stores; and its ServiceAccounts
/// (whether they mount tokens).
struct PodInputs {
    /// The tenant Services by namespace, each ordered by name, placed once: every pod of the
    /// namespace sees them all.
    by_namespace: BTreeMap<String, Vec<TenantService>>,
    /// The tenant ServiceAccounts by (namespace, name).
    accounts: HashMap<(String, String), serde_json::Value>,
    /// Whether the SyncPolicy syncs Services at all.
    watched: bool,
}

impl PodInputs {
    /// From the Services and ServiceAccounts among the inputs (`objects`).
    fn new(
        objects: Vec<serde_json::Value>,
        host_addresses: HashMap<String, String>,
        planner: &Planner,
        watched: bool,
    ) -> Self {
        let mut by_namespace: BTreeMap<String, Vec<TenantService>> = BTreeMap::new();
        let mut accounts = HashMap::new();
        for object in objects {
            let namespace = metadata_field(&object, "namespace").to_string();
            if object["kind"] == "ServiceAccount" {
                let name = metadata_field(&object, "name").to_string();
                accounts.insert((namespace, name), object);
            } else {
                let host_name = planner.placement().host_name(
                    "",
                    "Service",
                    &namespace,
                    metadata_field(&object, "name"),
                );
                let ip = host_addresses.get(&host_name).map(String::as_str);
                let service = TenantService::placed(&object, ip, planner.policy());
                by_namespace.entry(namespace).or_default().push(service);
            }
        }
        for services in by_namespace.values_mut() {
            services.sort_by(|a, b| a.name.cmp(&b.name));
        }
        PodInputs {
            by_namespace,
            accounts,
            watched,
        }
    }
}

fn metadata_field<'v>(object: &'v serde_json::Value, field: &str) -> &'v str {
    object
        .pointer(&format!("/metadata/{field}"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

impl TenantServices for PodInputs {
    fn service(&self, namespace: &str, name: &str) -> Option<TenantService> {
        self.by_namespace
            .get(namespace)?
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    fn services_in(&self, namespace: &str) -> Vec<TenantService> {
        self.by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    fn known(&self) -> Result<(), String> {
        if self.watched {
            Ok(())
        } else {
            Err("the SyncPolicy syncs no Services".into())
        }
    }
}

fn read_host_state(paths: &[PathBuf], namespace: &str) -> anyhow::Result<(HostState, HostContent)> {
    let mut host = HostState::default();
    let mut content = HostContent::default();
    for (origin, value) in input::read_documents(paths)? {
        let value = value.map_err(|e| anyhow::anyhow!("host object {origin}: {}", e.problem))?;
        let meta = HostObjectMeta::from_value(&value)
            .map_err(|e| anyhow::anyhow!("host object {origin}: {e}"))?;
        if meta.namespace == namespace && meta.labels.contains_key(provenance::TENANT) {
            content.insert(meta.kind.clone(), meta.name.clone(), value);
        }
        host.insert(meta);
    }
    Ok((host, content))
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

    /// Whether any of the documents counted in `tally` fails the run.
    fn matches(&self, tally: &Tally) -> bool {
        tally.outcomes.keys().any(|o| self.outcomes.contains(o))
            || tally.unrecorded.keys().any(|u| self.unrecorded.contains(u))
            || (self.errors && tally.errors > 0)
    }
}

/// How many documents got each outcome, each fate of the syncer's not watching them, and how
/// many were unusable.
#[derive(Debug, Default)]
struct Tally {
    documents: usize,
    outcomes: BTreeMap<Outcome, usize>,
    unrecorded: BTreeMap<&'static str, usize>,
    errors: usize,
}

/// What one row counts for in a [`Tally`].
#[derive(Clone, Copy, Debug)]
enum Counted {
    Outcome(Outcome),
    Unrecorded(&'static str),
    Error,
}

impl Tally {
    fn count(&mut self, counted: Counted) {
        self.documents += 1;
        match counted {
            Counted::Outcome(o) => *self.outcomes.entry(o).or_insert(0) += 1,
            Counted::Unrecorded(u) => *self.unrecorded.entry(u).or_insert(0) += 1,
            Counted::Error => self.errors += 1,
        }
    }
}

/// `15 documents: 6 Synced, 2 Skipped, 3 Rejected, 2 Conflict, 1 NotWatched, 1 error`.
impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .outcomes
            .iter()
            .map(|(o, n)| format!("{n} {o}"))
            .collect();
        parts.extend(self.unrecorded.iter().map(|(o, n)| format!("{n} {o}")));
        if self.errors > 0 {
            parts.push(format!(
                "{} error{}",
                self.errors,
                if self.errors == 1 { "" } else { "s" }
            ));
        }
        write!(f, "{} documents: {}", self.documents, parts.join(", "))
    }
}

/// One document's part of the output, rendered where the document was explained; what the
/// explanation was is dropped.
struct Row {
    text: RowText,
    /// For the table: the subject of an object the host refuses, and what the tenant control
    /// plane does with it at apply time.
    refused: Option<(String, AtApply)>,
    /// For the table: the subject of a pod whose host pod is created, and what it sees there.
    pod: Option<(String, String)>,
    counted: Counted,
}

enum RowText {
    /// The table's cells.
    Cells([String; Table::COLUMNS]),
    /// An element of the JSON or YAML list, as it stands in the list.
    Element(String),
}

impl Row {
    /// The table's row of a planned object, from its plan.
    fn planned_cells(
        subject: &SourceIdentity,
        plan: &Plan,
        at_apply: Option<AtApply>,
        pod: Option<String>,
    ) -> Row {
        let source = format!("{}/{}/{}", subject.kind, subject.namespace, subject.name);
        Row {
            text: RowText::Cells(plan_cells(source.clone(), plan)),
            refused: at_apply.map(|at_apply| (source.clone(), at_apply)),
            pod: pod.map(|line| (source, line)),
            counted: Counted::Outcome(plan.outcome),
        }
    }

    fn of(explained: &Explained, output: OutputFormat) -> Row {
        let counted = match (&explained.planned, &explained.unrecorded) {
            (Some(p), _) => Counted::Outcome(p.decision.outcome),
            (None, Some(u)) => Counted::Unrecorded(u.fate.outcome()),
            (None, None) => Counted::Error,
        };
        let (text, refused, pod) = match output {
            OutputFormat::Table => (
                RowText::Cells(cells(explained)),
                refused(explained),
                pod_seen(explained),
            ),
            OutputFormat::Json => (RowText::Element(json_element(explained)), None, None),
            OutputFormat::Yaml => (RowText::Element(yaml_element(explained)), None, None),
        };
        Row {
            text,
            refused,
            pod,
            counted,
        }
    }
}

/// The element of a pretty-printed JSON list: the result pretty-printed, each line indented by
/// the list's two spaces (a JSON string holds no line break).
fn json_element(explained: &Explained) -> String {
    let text = serde_json::to_string_pretty(explained).expect("a result always serializes");
    format!("  {}", text.replace('\n', "\n  "))
}

/// The entry of a YAML sequence: the result as a document, its first line after `- `, the others
/// (but empty lines, which a block scalar writes bare) indented by two spaces.
fn yaml_element(explained: &Explained) -> String {
    let text = serde_norway::to_string(explained).expect("a result always serializes");
    let mut element = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.lines().enumerate() {
        element.push_str(match (i, line.is_empty()) {
            (0, _) => "- ",
            (_, false) => "  ",
            (_, true) => "",
        });
        element.push_str(line);
        element.push('\n');
    }
    element
}

/// The table's cells of one result.
fn cells(r: &Explained) -> [String; Table::COLUMNS] {
    if let Some(p) = &r.planned {
        let s = &p.decision.subject;
        return plan_cells(format!("{}/{}/{}", s.kind, s.namespace, s.name), &p.plan);
    }
    match (&r.unrecorded, &r.error) {
        (Some(u), _) => {
            let s = &u.subject;
            let rule = match &u.verdict.rule {
                Some(rule) => format!("{}/{rule}", u.verdict.policy),
                None => format!("{}/(default)", u.verdict.policy),
            };
            [
                match s.namespace.as_str() {
                    "" => format!("{}/{}", s.kind, s.name),
                    ns => format!("{}/{ns}/{}", s.kind, s.name),
                },
                "-".to_string(),
                "none".to_string(),
                u.fate.outcome().to_string(),
                rule,
                u.fate.reason().to_string(),
            ]
        }
        (None, Some(e)) => [
            r.origin.clone(),
            "-".to_string(),
            "none".to_string(),
            "Error".to_string(),
            "-".to_string(),
            e.problem.clone(),
        ],
        (None, None) => unreachable!("every result is planned, unrecorded or an error"),
    }
}

/// The cells of a planned object's row (`source` the first), from its plan: what its decision
/// says, which the plan makes.
fn plan_cells(source: String, plan: &Plan) -> [String; Table::COLUMNS] {
    let (p, v) = (&plan.placement, &plan.verdict);
    let profile_rule = plan
        .profile
        .as_ref()
        .and_then(|profile| Some((&profile.name, profile.rule.as_ref()?)));
    let rule = match (profile_rule, &v.rule) {
        (Some((profile, rule)), _) => format!("{profile}/{rule}"),
        (None, Some(rule)) => format!("{}/{rule}", v.policy),
        (None, None) => format!("{}/(default)", v.policy),
    };
    let reason = match p.stripped_keys.len() {
        0 => plan.reason.clone(),
        n => format!(
            "{} ({n} reserved tenantplane.io/ keys stripped)",
            plan.reason
        ),
    };
    [
        source,
        format!("{}/{}", p.namespace, p.name),
        plan.action.as_str().to_string(),
        plan.outcome.to_string(),
        rule,
        reason,
    ]
}

/// For the section after the table: a pod's subject and what it sees on the host.
fn pod_seen(r: &Explained) -> Option<(String, String)> {
    let planned = r.planned.as_ref()?;
    let s = &planned.decision.subject;
    Some((
        format!("{}/{}/{}", s.kind, s.namespace, s.name),
        planned.pod.as_ref()?.describe(),
    ))
}

/// For the section after the table: a refused object's subject and what the tenant's control
/// plane does when it is applied.
fn refused(r: &Explained) -> Option<(String, AtApply)> {
    let s = &r.planned.as_ref()?.decision.subject;
    Some((
        format!("{}/{}/{}", s.kind, s.namespace, s.name),
        r.tenant_admission.clone()?,
    ))
}

/// explain-sync's output, written as the rows come: the JSON and YAML lists element by element;
/// the table at the end, since its columns are as wide as their widest cell, from the cells
/// alone, then, for each refused object, what the tenant's control plane does when it is applied.
struct Report<W: Write> {
    out: W,
    output: OutputFormat,
    table: Table,
    refused: Vec<(String, AtApply)>,
    pods: PodWorlds,
    tally: Tally,
}

impl<W: Write> Report<W> {
    fn new(out: W, output: OutputFormat) -> Self {
        let mut table = Table::default();
        table.push(["SOURCE", "HOST", "ACTION", "OUTCOME", "RULE", "REASON"].map(String::from));
        Report {
            out,
            output,
            table,
            refused: Vec::new(),
            pods: PodWorlds::default(),
            tally: Tally::default(),
        }
    }

    fn write(&mut self, row: Row) -> std::io::Result<()> {
        let first = self.tally.documents == 0;
        self.tally.count(row.counted);
        self.refused.extend(row.refused);
        if let Some((subject, line)) = row.pod {
            self.pods.push(subject, line);
        }
        match row.text {
            RowText::Cells(cells) => self.table.push(cells),
            RowText::Element(element) if self.output == OutputFormat::Json => {
                self.out.write_all(if first { b"[\n" } else { b",\n" })?;
                self.out.write_all(element.as_bytes())?;
            }
            RowText::Element(element) => self.out.write_all(element.as_bytes())?,
        }
        Ok(())
    }

    /// Ends the output; returns the tally of every document written.
    fn finish(mut self) -> std::io::Result<Tally> {
        let empty = self.tally.documents == 0;
        match self.output {
            OutputFormat::Table => {
                self.table.write(&mut self.out)?;
                write_tenant_admission(&mut self.out, &self.refused)?;
                self.pods.write(&mut self.out)?;
            }
            OutputFormat::Json => self.out.write_all(if empty { b"[]\n" } else { b"\n]\n" })?,
            OutputFormat::Yaml if empty => self.out.write_all(b"[]\n")?,
            OutputFormat::Yaml => {}
        }
        self.out.flush()?;
        Ok(self.tally)
    }
}

/// After the table, for each refused object: what the tenant's control plane does when the
/// object is applied.
fn write_tenant_admission(
    out: &mut impl Write,
    refused: &[(String, AtApply)],
) -> std::io::Result<()> {
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

/// After the table, for each pod whose host pod is created: the line that says what it sees of
/// its tenant's cluster. A line ends with the pod's service links, the names of every Service of
/// its namespace (thousands, in a large namespace), the same for nearly every pod of the
/// namespace: that last part (after the last `; `) is kept once per distinct text, so that the
/// section's memory grows with the pods, not with the pods times the Services.
#[derive(Default)]
struct PodWorlds {
    /// Each pod's subject, its line but the last part, and the last part.
    lines: Vec<(String, String, Rc<str>)>,
    /// Every distinct last part, by length.
    last_parts: HashMap<usize, Vec<Rc<str>>>,
}

impl PodWorlds {
    fn push(&mut self, subject: String, mut line: String) {
        let at = line.rfind("; ").map_or(0, |i| i + 2);
        let last = &line[at..];
        let kept = self.last_parts.entry(last.len()).or_default();
        let last = match kept.iter().find(|k| ***k == *last) {
            Some(k) => k.clone(),
            None => {
                let k = Rc::<str>::from(last);
                kept.push(k.clone());
                k
            }
        };
        line.truncate(at);
        line.shrink_to_fit();
        self.lines.push((subject, line, last));
    }

    fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        if self.lines.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "\nWHAT EACH POD CREATED ON THE HOST SEES OF ITS TENANT"
        )?;
        for (subject, line, last) in &self.lines {
            writeln!(out, "{subject}\n    {line}{last}")?;
        }
        Ok(())
    }
}

/// Rows of [`Table::COLUMNS`] cells, all in one string, printed in aligned columns.
#[derive(Default)]
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

    /// Adds a row.
    fn push(&mut self, cells: [String; Table::COLUMNS]) {
        for (column, cell) in cells.iter().enumerate() {
            self.text.push_str(cell);
            self.widths[column] = self.widths[column].max(cell.chars().count());
            self.ends.push(self.text.len());
        }
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tenantplane_core::scope::KindScopes;

    use super::*;

    /// Results of every kind: synced, refused (with what admission does), not watched, and
    /// unusable documents whose problems YAML writes in every style it has.
    fn results() -> Vec<Explained> {
        let planner = Planner::new(&default_tenant(), CompiledPolicy::builtin_default());
        let watches = Watches::new(planner.policy(), KindScopes::new());
        let admission = planner.policy().tenant_admission("demo");
        let shared = SharedNames::new(planner.placement(), std::iter::empty());
        let host = HostState::default();
        let world = TenantWorld::of(&default_tenant(), None);
        let services = PodInputs::new(Vec::new(), HashMap::new(), &planner, true);
        let content = HostContent::default();
        let explainer = Explainer {
            planner: &planner,
            watches: &watches,
            host: &host,
            content: (&content, DriftPolicy::Revert),
            admission: &admission,
            shared: &shared,
            output: OutputFormat::Json,
            pods: (&world, &services),
        };
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop",
                "labels": {"tenantplane.io/tenant": "forged", "app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug"},
                "spec": {"hostNetwork": true, "containers": [{"name": "sh", "image": "busybox"}]}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        ];
        let mut results: Vec<Explained> = objects
            .into_iter()
            .map(|value| {
                let object = TenantObject::from_value(value).unwrap();
                match watches.unrecorded(&object) {
                    Some(fate) => Explained::unrecorded("f document 1".into(), fate),
                    None => {
                        let plan = planner.plan(&object, &host);
                        let decision = plan.to_decision("demo", &object, Stamp::now(COMPONENT));
                        let at_apply = explainer.admission.at_apply(&object, &plan);
                        Explained::planned(
                            "f document 2".into(),
                            Planned {
                                decision,
                                plan,
                                pod: None,
                            },
                            at_apply,
                        )
                    }
                }
            })
            .collect();
        for problem in [
            "line one\n\nline three after a blank line\n",
            "  leading spaces: and a colon",
            "- looks like an entry",
            "'quoted' \"twice\" # and a comment",
            "",
        ] {
            results.push(Explained::error(
                "f document 3".into(),
                InputError {
                    field: "spec".into(),
                    problem: problem.into(),
                },
            ));
        }
        results
    }

    /// What the report writes of `results`, row by row.
    fn reported(results: &[Explained], output: OutputFormat) -> String {
        let mut out = Vec::new();
        let mut report = Report::new(&mut out, output);
        for result in results {
            report.write(Row::of(result, output)).unwrap();
        }
        report.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lists_written_row_by_row_are_the_lists_written_whole() {
        let results = results();
        assert!(results[1].tenant_admission.is_some(), "a refused pod");
        for n in [0, 1, results.len()] {
            let results = &results[..n];
            assert_eq!(
                reported(results, OutputFormat::Json),
                serde_json::to_string_pretty(results).unwrap() + "\n"
            );
            assert_eq!(
                reported(results, OutputFormat::Yaml),
                serde_norway::to_string(results).unwrap()
            );
        }
    }
}
