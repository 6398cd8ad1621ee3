//! The Tenant controller in the host cluster: finalizer, host namespace, isolation, the tenant
//! control plane connection, and one [`TenantRuntime`](crate::tenant::TenantRuntime) per Tenant
//! (`runtimes`: the runtime table).
//!
//! A Tenant is reconciled when its spec, identity, deletion or finalizer change (not its status,
//! which the syncer itself writes), when its SyncPolicy or IsolationProfile changes, when one of
//! its compiled isolation objects in the host changes (someone may have edited it: drift), and
//! every resync period; a failing reconcile is retried with exponential backoff. Deleting a Tenant is
//! `cleanup`'s.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{PredicateConfig, WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use tenantplane_api::{IsolationProfile, SyncPolicy, Tenant, conditions, provenance};
use tenantplane_core::CompiledPolicy;
use tenantplane_core::boundary::Boundary;
use tokio::sync::Mutex;
use tracing::Instrument as _;

use crate::discovery;
use crate::isolation::{self, IsolationService};
use crate::record::DecisionRecorder;
use crate::shard::Shard;
use crate::tenant::{self, Shared};
use crate::tenant_admission;
use crate::tenant_status::TenantLedger;

mod cleanup;
mod compiled_watches;
mod runtimes;

use cleanup::cleanup;
use runtimes::{Books, Running};

pub use tenantplane_api::tenant::FINALIZER;
/// Annotation on a host namespace tenantplane created (and so may delete).
pub const CREATED_ANNOTATION: &str = "tenantplane.io/created-by";
/// How soon a Tenant whose control plane has an unavailable API group is looked at again (its
/// kinds start syncing once the group answers).
const UNAVAILABLE_GROUP_RETRY: Duration = Duration::from_secs(30);

/// Errors of a Tenant reconcile; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Anything that went wrong, with its context.
    #[error("{0:#}")]
    Reconcile(#[from] anyhow::Error),
}

impl Error {
    /// Label for metrics.
    pub fn metric_label(&self) -> &'static str {
        "reconcile"
    }
}

/// What the Tenant controller shares between reconciles.
#[derive(Debug)]
pub struct Context {
    /// Shared by all tenant runtimes.
    pub shared: Arc<Shared>,
    /// The isolation compiler.
    pub isolation: Arc<dyn IsolationService>,
    /// How often each Tenant is reconciled without a change.
    pub resync: Duration,
    /// How often a Tenant's status is written at most.
    pub status_interval: Duration,
    /// This replica's share of the Tenants, when several replicas split them.
    pub shard: Option<Arc<Shard>>,
    running: Mutex<HashMap<String, Running>>,
    books: Mutex<HashMap<String, Books>>,
    /// Consecutive failed reconciles per Tenant, for the retry backoff.
    failures: std::sync::Mutex<HashMap<String, u32>>,
    /// Tenants to reconcile again at once.
    wakes: runtimes::Wakes,
}

/// Runs the Tenant controller until the stream ends (shutdown), and, when sharded, the
/// membership rounds beside it (stopping the runtimes of Tenants this replica loses).
pub async fn run(ctx: Arc<Context>) {
    let Some(shard) = ctx.shard.clone() else {
        return run_controller(ctx).await;
    };
    let rounds = {
        let ctx = ctx.clone();
        async move {
            loop {
                shard.round().await;
                ctx.shared.metrics.shard_members(shard.members().len());
                ctx.stop_unserved().await;
                tokio::time::sleep(shard.renew_interval()).await;
            }
        }
    };
    tokio::select! {
        () = run_controller(ctx) => {}
        () = rounds => {}
    }
}

async fn run_controller(ctx: Arc<Context>) {
    let host = ctx.shared.host.clone();
    let tenants: Api<Tenant> = Api::all(host.clone());
    let (store, writer) = reflector::store();
    let changes = watcher(tenants, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(reconcile_inputs, PredicateConfig::default());
    let controller = Controller::for_stream(changes, store.clone());
    let by_profile = store.clone();
    let by_policy = store.clone();
    compiled_watches::watch_compiled_objects(controller, &host)
        .watches(
            Api::<IsolationProfile>::all(host.clone()),
            watcher::Config::default(),
            move |p: IsolationProfile| {
                let name = p.name_any();
                by_profile
                    .state()
                    .into_iter()
                    .filter(|t| t.spec.isolation_profile_ref.as_deref() == Some(name.as_str()))
                    .map(|t| ObjectRef::from_obj(&*t))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            Api::<SyncPolicy>::all(host.clone()),
            watcher::Config::default(),
            move |p: SyncPolicy| {
                let name = p.name_any();
                by_policy
                    .state()
                    .into_iter()
                    .filter(|t| t.spec.sync_policy_ref.as_deref() == Some(name.as_str()))
                    .map(|t| ObjectRef::from_obj(&*t))
                    .collect::<Vec<_>>()
            },
        )
        .reconcile_on(ctx.wakes.take())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::warn!(error = %e, "tenant reconcile");
            }
        })
        .await;
}

/// What a reconcile reads from the Tenant object itself: which Tenant (a recreated one is new),
/// its spec (the generation), whether it is being deleted and whether it carries the finalizer.
/// Status writes (the syncer writes the counts every status interval) change none of these, so
/// they do not reconcile the Tenant again; its SyncPolicy and IsolationProfile have watches of
/// their own, and everything else (the kubeconfig Secret, the tenant control plane) is looked at
/// again every resync period.
fn reconcile_inputs(tenant: &Tenant) -> Option<u64> {
    let mut h = std::hash::DefaultHasher::new();
    (
        tenant.metadata.uid.as_deref(),
        tenant.metadata.generation,
        tenant.metadata.deletion_timestamp.is_some(),
        tenant.finalizers().iter().any(|f| f == FINALIZER),
    )
        .hash(&mut h);
    Some(h.finish())
}

/// The first retry of a failed Tenant reconcile; each further failure doubles it.
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// The longest wait between retries of a failing Tenant.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The wait before the next retry after `failures` consecutive failed reconciles (1 or more):
/// 5 s, 10 s, 20 s, ... up to 5 minutes.
fn retry_after(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

fn error_policy(tenant: Arc<Tenant>, error: &Error, ctx: Arc<Context>) -> Action {
    let name = tenant.name_any();
    let failures = {
        let mut failures = ctx.failures.lock().expect("failures lock");
        let n = failures.entry(name.clone()).or_insert(0);
        *n += 1;
        *n
    };
    let wait = retry_after(failures);
    tracing::warn!(tenant = %name, error = %error, failures, retry_in_seconds = wait.as_secs(), "tenant reconcile failed");
    Action::requeue(wait)
}

async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_tenant(&tenant, &ctx).await;
    if result.is_ok() {
        ctx.failures
            .lock()
            .expect("failures lock")
            .remove(&tenant.name_any());
    }
    result
}

async fn reconcile_tenant(tenant: &Arc<Tenant>, ctx: &Arc<Context>) -> Result<Action, Error> {
    if let Some(shard) = &ctx.shard {
        let name = tenant.name_any();
        let running = ctx.running.lock().await.contains_key(&name);
        if !shard.serves(&name, running) {
            // Another replica's, or not yet ours for a whole lease duration: look again soon.
            ctx.stop_serving(&name).await;
            return Ok(Action::requeue(shard.renew_interval()));
        }
    }
    let api: Api<Tenant> = Api::all(ctx.shared.host.clone());
    let finalizers = tenant.finalizers().to_vec();
    let ours = finalizers.iter().any(|f| f == FINALIZER);
    if tenant.metadata.deletion_timestamp.is_some() {
        if !ours {
            return Ok(Action::await_change());
        }
        let action = cleanup(tenant, ctx).await?;
        let rest: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
        set_finalizers(&api, tenant, json!(rest)).await?;
        return Ok(action);
    }
    if tenant.spec.mapping_version.is_none() {
        // Resolved once and written down, so that it never changes under the tenant: v1 for a
        // Tenant an earlier syncer served (its host objects are named by v1), v2 for a new one.
        // The spec change brings the Tenant back here.
        let patched = api
            .patch(
                tenant.name(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({
                    "metadata": {"resourceVersion": tenant.resource_version()},
                    "spec": {"mappingVersion": tenant.mapping_version()},
                })),
            )
            .await;
        return match patched {
            Ok(_) => Ok(Action::await_change()),
            Err(e) if changed_since_read(&e) => Ok(Action::requeue(STALE_TENANT_RETRY)),
            Err(e) => Err(anyhow::Error::from(e)
                .context(format!(
                    "setting spec.mappingVersion of Tenant {}",
                    tenant.name()
                ))
                .into()),
        };
    }
    if !ours {
        // A merge patch carrying the resourceVersion: applied only to the Tenant as read.
        let mut all: Vec<&str> = finalizers.iter().map(String::as_str).collect();
        all.push(FINALIZER);
        match set_finalizers(&api, tenant, json!(all)).await {
            Err(e) if e.downcast_ref().is_some_and(changed_since_read) => {
                return Ok(Action::requeue(STALE_TENANT_RETRY));
            }
            done => done?,
        }
    }
    apply(tenant, ctx).await
}

/// How soon a Tenant is reconciled again when it changed since the controller's copy was read
/// (its status, which this syncer writes, mostly): the copy catches up at once.
const STALE_TENANT_RETRY: Duration = Duration::from_millis(200);

/// Whether a write failed on its resourceVersion precondition (409): the object changed since
/// it was read.
fn changed_since_read(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

async fn set_finalizers(
    api: &Api<Tenant>,
    tenant: &Tenant,
    finalizers: serde_json::Value,
) -> anyhow::Result<()> {
    api.patch(
        tenant.name(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": tenant.resource_version(),
        }})),
    )
    .await
    .with_context(|| format!("updating the finalizers of Tenant {}", tenant.name()))?;
    Ok(())
}

/// The SyncPolicy in force for `tenant`, compiled: the one it references, read from the host
/// cluster (`Some`), or the built-in default (`None`). `tenantplane why` reads it the same way.
pub async fn policy_in_force(
    host: &Client,
    tenant: &Tenant,
) -> anyhow::Result<(Option<SyncPolicy>, CompiledPolicy)> {
    match &tenant.spec.sync_policy_ref {
        Some(p) => {
            let policy = Api::<SyncPolicy>::all(host.clone())
                .get(p)
                .await
                .with_context(|| format!("reading SyncPolicy {p}"))?;
            let compiled = CompiledPolicy::compile(&policy)
                .with_context(|| format!("SyncPolicy {p} does not compile"))?;
            Ok((Some(policy), compiled))
        }
        None => Ok((None, CompiledPolicy::builtin_default())),
    }
}

async fn apply(tenant: &Tenant, ctx: &Context) -> Result<Action, Error> {
    let host = &ctx.shared.host;
    let name = tenant.name().to_string();
    let host_ns = tenant.host_namespace();
    let (ledger, host_side_recorder) = ctx.books(tenant).await;
    ledger.observe(tenant.metadata.generation, &host_ns);

    ensure_namespace(host, tenant, &host_ns).await?;
    let isolation_host = isolation::Host {
        client: host,
        writer: &ctx.shared.host_writer,
        recorder: &host_side_recorder,
        ledger: &ledger,
    };
    let profile = isolation::keep(tenant, ctx.isolation.as_ref(), isolation_host).await?;
    // The boundary the planner decides with: what the host's admission refuses under the
    // profile, which is sent as its name, generation and spec (its status and server metadata
    // change nothing the planner decides).
    let profile = match profile {
        Some(profile) => {
            let planned = json!({
                "apiVersion": "tenantplane.io/v1alpha1",
                "kind": "IsolationProfile",
                "metadata": {"name": profile.name_any(), "generation": profile.metadata.generation},
                "spec": profile.spec,
            });
            Some((
                planned.to_string(),
                Boundary::compile(tenant, &profile)
                    .with_context(|| format!("IsolationProfile {}", profile.name_any()))?,
            ))
        }
        None => None,
    };

    let (policy, compiled) = policy_in_force(host, tenant).await?;
    let (policy_text, policy_version) = match &policy {
        Some(policy) => (
            Some(serde_json::to_string(policy).context("serializing the SyncPolicy")?),
            policy.resource_version().unwrap_or_default(),
        ),
        None => (None, String::new()),
    };

    // The tenant control plane.
    let kubeconfig = read_kubeconfig(host, tenant).await;
    let client = match kubeconfig {
        Ok(yaml) => match connect(&yaml, tenant.spec.control_plane.context.as_deref()).await {
            Ok(c) => Ok((c, yaml)),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let (client, yaml) = match client {
        Ok(c) => c,
        Err(e) => {
            ledger.set_condition(
                conditions::CONTROL_PLANE_REACHABLE,
                false,
                "Unreachable",
                &format!("{e:#}"),
            );
            return Err(e.into());
        }
    };
    let discovered = match discovery::synced_kinds(&client, &compiled).await {
        Ok(d) => d,
        Err(e) => {
            let e = anyhow::Error::from(e).context("discovering the tenant control plane's API");
            ledger.set_condition(
                conditions::CONTROL_PLANE_REACHABLE,
                false,
                "DiscoveryFailed",
                &format!("{e:#}"),
            );
            return Err(e.into());
        }
    };
    record_discovery(tenant, &compiled, &ledger, &host_side_recorder, &discovered).await?;
    let admission_source = tenant_admission::Source::new(tenant, policy.as_ref(), &compiled);
    let mut admission = compiled.tenant_admission(&name);
    if let Some((_, boundary)) = &profile {
        admission = admission.with_isolation(&name, boundary, compiled.synced_namespaces());
    }
    let admission_served = tenant_admission::reconcile(
        &client,
        &host_side_recorder,
        &ledger,
        &admission_source,
        &admission,
    )
    .await;
    let requeue = if discovered.unavailable.is_empty() {
        ctx.resync
    } else {
        ctx.resync.min(UNAVAILABLE_GROUP_RETRY)
    };
    let kinds = discovered.kinds;

    let mut h = Sha256::new();
    h.update(yaml.as_bytes());
    h.update(format!("{:?}", tenant.spec).as_bytes());
    h.update(policy_version.as_bytes());
    h.update(policy_text.as_deref().unwrap_or("").as_bytes());
    h.update(
        profile
            .as_ref()
            .map_or("", |(text, _)| text.as_str())
            .as_bytes(),
    );
    for (ar, _) in &kinds {
        h.update(format!("{}/{}/{};", ar.group, ar.version, ar.kind).as_bytes());
    }
    let fingerprint = hex::encode(h.finalize());
    let mut running = ctx.running.lock().await;
    if !ctx.serves(&name, running.contains_key(&name)) {
        // Lost to another replica while this reconcile ran: the rounds stop what runs.
        return Ok(Action::requeue(requeue));
    }
    if running.get(&name).map(|r| r.fingerprint.as_str()) != Some(fingerprint.as_str()) {
        running.remove(&name);
        let labels = tenant_admission::keep_namespace_labels(
            client.clone(),
            host_side_recorder.clone(),
            admission_source,
            admission.isolation,
        );
        let pods = crate::pod_api::pod_context(tenant, &yaml)
            .context("reading what the tenant's pods get of its control plane")?;
        // Edits of the Tenant's admission objects in its control plane reconcile it again.
        let admission_drift = admission_served.then(|| {
            tenant_admission::watch_admission_objects(
                client.clone(),
                name.clone(),
                ctx.wakes.send.clone(),
            )
        });
        let mut runtime = tenant::start(
            ctx.shared.clone(),
            tenant.clone(),
            (policy_text, compiled),
            profile,
            kinds,
            (client, pods),
            ledger,
        )
        .await?;
        runtime.adopt(tokio::spawn(labels));
        if let Some(watch) = admission_drift {
            runtime.adopt(tokio::spawn(watch));
        }
        tracing::info!(tenant = %name, kinds = ?runtime.kinds, "tenant runtime started");
        ctx.shared.metrics.serving(&name, true);
        running.insert(
            name,
            Running {
                fingerprint,
                runtime,
            },
        );
    }
    Ok(Action::requeue(requeue))
}

/// Records what discovery of the tenant control plane found: the ControlPlaneReachable
/// condition, a Deferred decision for each group version that newly failed (or failed
/// differently), and the end of those that answer again.
async fn record_discovery(
    tenant: &Tenant,
    policy: &CompiledPolicy,
    ledger: &TenantLedger,
    recorder: &DecisionRecorder,
    discovered: &discovery::SyncedKinds,
) -> anyhow::Result<()> {
    let watching = format!(
        "watching {} kinds in the tenant control plane",
        discovered.kinds.len()
    );
    if discovered.unavailable.is_empty() {
        ledger.set_condition(
            conditions::CONTROL_PLANE_REACHABLE,
            true,
            "Reached",
            &watching,
        );
    } else {
        let groups: Vec<String> = discovered
            .unavailable
            .iter()
            .map(|g| format!("{} ({})", g.group_version(), g.error))
            .collect();
        ledger.set_condition(
            conditions::CONTROL_PLANE_REACHABLE,
            true,
            "APIGroupsUnavailable",
            &format!(
                "{watching}; not synced until their discovery answers: {}",
                groups.join("; ")
            ),
        );
    }
    let keys: Vec<String> = discovered
        .unavailable
        .iter()
        .map(discovery::UnavailableGroup::ledger_key)
        .collect();
    for answering in ledger.pending_keys(discovery::LEDGER_PREFIX) {
        if !keys.contains(&answering) {
            ledger.forget(&answering);
        }
    }
    for (group, key) in discovered.unavailable.iter().zip(&keys) {
        let span = crate::trace::evaluation_span(
            tenant.name(),
            "apiregistration.k8s.io/v1",
            "APIService",
            "",
            &group.api_service(),
        );
        let decision = crate::reconcile::deferred::api_group_unavailable(
            group,
            tenant,
            policy,
            crate::trace::stamp_in(&span, crate::record::COMPONENT),
        );
        let digest = group.digest();
        if ledger.worth_recording(key, &decision, &digest, false) {
            recorder
                .record(key, &decision, &digest, None, std::time::Instant::now())
                .instrument(span)
                .await?;
        }
    }
    Ok(())
}

async fn ensure_namespace(host: &Client, tenant: &Tenant, host_ns: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(host.clone());
    if namespaces.get_opt(host_ns).await?.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": host_ns,
            "labels": {provenance::MANAGED: "true", provenance::TENANT: tenant.name()},
            "annotations": {CREATED_ANNOTATION: crate::record::COMPONENT},
        }
    }))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating host namespace {host_ns}")),
    }
}

async fn read_kubeconfig(host: &Client, tenant: &Tenant) -> anyhow::Result<String> {
    let r = &tenant.spec.control_plane.kubeconfig_secret;
    let secret = Api::<Secret>::namespaced(host.clone(), &r.namespace)
        .get(&r.name)
        .await
        .with_context(|| format!("reading kubeconfig Secret {}/{}", r.namespace, r.name))?;
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .with_context(|| format!("Secret {}/{} has no key {}", r.namespace, r.name, r.key))?;
    String::from_utf8(data.0.clone()).context("the kubeconfig is not UTF-8")
}

/// A client for a kubeconfig (YAML), at `context` or its current context; checks reachability.
pub async fn connect(kubeconfig: &str, context: Option<&str>) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).context("parsing the kubeconfig")?;
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .context("loading the kubeconfig")?;
    // No transparent retries: kube retries a 503 up to 15 times, minutes apart at the end, which
    // stalled a Tenant's reconcile on the discovery of one unavailable aggregated API. The syncer
    // retries on its own terms (watch backoff, Deferred and Failed decisions retried with backoff,
    // a quicker reconcile while a group is unavailable).
    config.default_retry = false;
    let client = crate::clients::client(config, crate::clients::TENANT_IDLE)?;
    client
        .apiserver_version()
        .await
        .context("reaching the tenant control plane")?;
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(uid: &str, generation: i64) -> Tenant {
        serde_json::from_value(json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "uid": uid, "generation": generation,
                         "finalizers": [FINALIZER]},
            "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": "tenantplane-system", "name": "acme", "key": "config"}}},
        }))
        .expect("a valid Tenant")
    }

    #[test]
    fn a_status_write_does_not_reconcile_the_tenant_again_but_a_spec_change_or_deletion_does() {
        let before = tenant("u1", 1);
        let mut status_written = before.clone();
        status_written.status = Some(Default::default());
        status_written.metadata.resource_version = Some("42".into());
        assert_eq!(reconcile_inputs(&before), reconcile_inputs(&status_written));

        let spec_changed = tenant("u1", 2);
        let recreated = tenant("u2", 1);
        let mut deleting = before.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let mut finalizer_removed = before.clone();
        finalizer_removed.metadata.finalizers = None;
        for changed in [spec_changed, recreated, deleting, finalizer_removed] {
            assert_ne!(reconcile_inputs(&before), reconcile_inputs(&changed));
        }
    }

    #[test]
    fn a_failing_tenant_is_retried_with_exponential_backoff_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=8).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
    }
}
