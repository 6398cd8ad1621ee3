//! Isolation: compile the Tenant's IsolationProfile (the isolation-compiler service, or the same
//! library in-process), keep the compiled objects in its host namespace as a
//! [`CompiledSet`] (applied, pruned, each write a recorded
//! decision), remember what was applied on the host namespace so that a restarted syncer prunes
//! too, and say how it went in the Tenant's `IsolationApplied` condition ([`keep`]).

use std::time::Instant;

use anyhow::Context as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, Tenant, conditions, provenance};
use tenantplane_client::{ClientConfig, ClientError};
use tenantplane_core::decision::{ProfileRef, Subject};
use tenantplane_core::translate::digest;
use tenantplane_isolation::ObjectRef;
use tracing::Instrument as _;

use crate::compiled_set::{Compiled, CompiledSet, Origin, Resolver, Stale};
use crate::metrics::SyncMetrics;
use crate::reconcile::compiled::Source;
use crate::record::DecisionRecorder;
use crate::tenant_status::TenantLedger;
use crate::writer::Writer;

/// Annotation on the host namespace: the isolation objects last applied (JSON list of refs).
pub const APPLIED_ANNOTATION: &str = "tenantplane.io/isolation-applied";

/// A compilation: objects to apply and previously applied objects to delete.
#[derive(Debug, Clone, Default)]
pub struct Compilation {
    /// Objects, ready to apply, each with the profile fields that produced it.
    pub objects: Vec<tenantplane_isolation::CompiledObject>,
    /// Objects to prune.
    pub prune: Vec<ObjectRef>,
}

/// Compiles IsolationProfiles.
pub trait IsolationService: Send + Sync + std::fmt::Debug + 'static {
    /// Compiles `profile` for `tenant`; `previously_applied` is what the last compilation applied.
    fn compile<'a>(
        &'a self,
        tenant: &'a Tenant,
        profile: &'a IsolationProfile,
        previously_applied: &'a [ObjectRef],
    ) -> BoxFuture<'a, Result<Compilation, String>>;
}

/// The isolation compiler library run in-process (same computation as the service).
#[derive(Debug, Default)]
pub struct InProcessIsolation;

impl IsolationService for InProcessIsolation {
    fn compile<'a>(
        &'a self,
        tenant: &'a Tenant,
        profile: &'a IsolationProfile,
        previously_applied: &'a [ObjectRef],
    ) -> BoxFuture<'a, Result<Compilation, String>> {
        Box::pin(async move {
            let c = tenantplane_isolation::compile(tenant, profile).map_err(|e| e.to_string())?;
            let prune = c.prune(previously_applied);
            Ok(Compilation {
                objects: c.objects,
                prune,
            })
        })
    }
}

/// What the host namespace says was applied last.
pub fn previously_applied(namespace: &Value) -> Vec<ObjectRef> {
    namespace
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// Where the Tenant's isolation is kept: the host, its writer, and the recorder and ledger of
/// the Tenant's decisions and conditions.
#[derive(Clone, Copy)]
pub struct Host<'a> {
    /// The host cluster.
    pub client: &'a Client,
    /// Its writer.
    pub writer: &'a Writer,
    /// The recorder of the Tenant controller's decisions.
    pub recorder: &'a DecisionRecorder,
    /// The Tenant's ledger (its `IsolationApplied` condition).
    pub ledger: &'a TenantLedger,
}

impl std::fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("writer", self.writer)
            .field("recorder", self.recorder)
            .finish_non_exhaustive()
    }
}

/// Compiles the Tenant's IsolationProfile with `compiler` and keeps it in its host namespace;
/// returns the profile (`None`: the Tenant names none), for the planner to decide with. The
/// compile call and the decisions are made in a span about the profile: the compiler's server
/// span is its child, and it becomes the compilation's decision span when anything is written.
pub async fn keep(
    tenant: &Tenant,
    compiler: &dyn IsolationService,
    host: Host<'_>,
) -> anyhow::Result<Option<IsolationProfile>> {
    let Some(profile_name) = &tenant.spec.isolation_profile_ref else {
        host.ledger.set_condition(
            conditions::ISOLATION_APPLIED,
            true,
            "NoIsolationProfile",
            "the Tenant names no IsolationProfile: no isolation objects are compiled",
        );
        return Ok(None);
    };
    let profile = match Api::<IsolationProfile>::all(host.client.clone())
        .get_opt(profile_name)
        .await?
    {
        Some(p) => p,
        None => {
            host.ledger.set_condition(
                conditions::ISOLATION_APPLIED,
                false,
                "IsolationProfileNotFound",
                &format!("IsolationProfile {profile_name} does not exist"),
            );
            anyhow::bail!("IsolationProfile {profile_name} does not exist");
        }
    };
    let span = crate::trace::isolation_span(tenant.name(), profile_name);
    compile_and_apply(tenant, compiler, host, &profile)
        .instrument(span)
        .await?;
    Ok(Some(profile))
}

/// Compiles the Tenant's IsolationProfile and applies it, in the span of [`keep`].
async fn compile_and_apply(
    tenant: &Tenant,
    compiler: &dyn IsolationService,
    host: Host<'_>,
    profile: &IsolationProfile,
) -> anyhow::Result<()> {
    let profile_name = profile.name_any();
    let host_ns = tenant.host_namespace();
    let ns = Api::<Namespace>::all(host.client.clone())
        .get(&host_ns)
        .await?;
    let previous = previously_applied(&serde_json::to_value(&ns)?);
    let compiled = match compiler.compile(tenant, profile, &previous).await {
        Ok(c) => c,
        Err(e) => {
            host.ledger
                .set_condition(conditions::ISOLATION_APPLIED, false, "CompileFailed", &e);
            anyhow::bail!("compiling IsolationProfile {profile_name}: {e}");
        }
    };
    let generation = profile.metadata.generation.unwrap_or_default();
    match apply(tenant, profile, host, &compiled, &previous).await {
        Ok(done) => {
            host.ledger.set_condition(
                conditions::ISOLATION_APPLIED,
                true,
                "Applied",
                &format!(
                    "IsolationProfile {profile_name} (generation {generation}): {} objects \
                     applied, {} pruned, {} unchanged",
                    done.applied, done.pruned, done.unchanged
                ),
            );
            Ok(())
        }
        Err(e) => {
            host.ledger.set_condition(
                conditions::ISOLATION_APPLIED,
                false,
                "ApplyFailed",
                &format!("{e:#}"),
            );
            Err(e)
        }
    }
}

/// What the fields `field_path` of `profile` produced.
fn origin(profile: &IsolationProfile, field_path: String) -> Origin {
    Origin {
        rule: None,
        profile: Some(ProfileRef {
            name: profile.name_any(),
            generation: profile.metadata.generation.unwrap_or_default(),
            field_path,
            rule: None,
        }),
    }
}

/// Applies a compilation to the host as a [`CompiledSet`]: each compiled object whose host copy
/// does not carry its digest is applied, each previously applied object no longer compiled and
/// still present is deleted, each of these a recorded decision (subject: the IsolationProfile;
/// target: the host object; profile: the fields that produced it). Then the applied set is
/// recorded on the host namespace when it changed (so that a restarted syncer prunes).
async fn apply(
    tenant: &Tenant,
    profile: &IsolationProfile,
    host: Host<'_>,
    compilation: &Compilation,
    previous: &[ObjectRef],
) -> anyhow::Result<crate::compiled_set::Applied> {
    let started = Instant::now();
    let client = host.client;
    let source = Source {
        tenant: tenant.name_any(),
        subject: Subject {
            api_version: format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
            kind: "IsolationProfile".into(),
            namespace: String::new(),
            name: profile.name_any(),
            uid: profile.uid().unwrap_or_default(),
            resource_version: profile.resource_version().unwrap_or_default(),
        },
        policy: None,
        input_digest: digest(&serde_json::to_value(profile)?),
        mapping: tenant.mapping_version(),
        ledger_prefix: "isolation",
    };
    let generation = profile.metadata.generation.unwrap_or_default();
    let mut resolver = Resolver::default();
    let mut compiled = Vec::new();
    let mut applied_refs = Vec::new();
    for c in &compilation.objects {
        let r = ObjectRef::from_object(&c.object).context("a compiled object without identity")?;
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let held = api
            .get_opt(&r.name)
            .await
            .with_context(|| format!("reading {} {}", r.kind, r.name))?;
        compiled.push(Compiled {
            api,
            object: c.object.clone(),
            held: held.map(|h| serde_json::to_value(h).expect("an object serializes")),
            origin: origin(profile, c.provenance.field_paths.join(",")),
            reason: "CompiledFromProfile",
            message: c.provenance.explanation.clone(),
        });
        applied_refs.push(r);
    }
    let mut stale = Vec::new();
    for r in &compilation.prune {
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let Some(held) = api
            .get_metadata_opt(&r.name)
            .await
            .with_context(|| format!("reading {} {}", r.kind, r.name))?
        else {
            continue;
        };
        let fields = held
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(provenance::ISOLATION_FIELD))
            .cloned()
            .unwrap_or_default();
        stale.push(Stale {
            api,
            target: r.clone(),
            uid: held.metadata.uid,
            origin: origin(profile, fields),
            message: format!(
                "IsolationProfile {} (generation {generation}) no longer compiles {r}: deleted",
                source.subject.name
            ),
        });
    }
    let set = CompiledSet {
        source: &source,
        writer: host.writer,
        recorder: host.recorder,
        started,
        drift: tenant.spec.drift,
    };
    let compiled_for = format!(
        "IsolationProfile {} (generation {generation}) compiled for host namespace {}",
        source.subject.name,
        tenant.host_namespace()
    );
    let result = set
        .apply(
            compiled,
            stale,
            (
                "IsolationProfileCompiled",
                compiled_for,
                origin(profile, "spec".into()),
            ),
        )
        .await?;

    let mut before = previous.to_vec();
    before.sort();
    let mut now = applied_refs.clone();
    now.sort();
    if before != now {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .patch(
                &tenant.host_namespace(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    APPLIED_ANNOTATION: serde_json::to_string(&applied_refs)?,
                }}})),
            )
            .await
            .context("recording the applied isolation objects on the host namespace")?;
    }
    Ok(result)
}

/// The isolation-compiler service over gRPC, through `tenantplane-client` (TLS and mutual TLS,
/// the caller's trace context). Connects lazily and reconnects by itself.
#[derive(Debug, Clone)]
pub struct GrpcIsolation {
    client: tenantplane_client::IsolationClient,
    metrics: SyncMetrics,
}

/// Connects (lazily) to the isolation-compiler service at `url`, plaintext.
pub fn connect(url: &str) -> anyhow::Result<std::sync::Arc<dyn IsolationService>> {
    connect_with(&ClientConfig::new(url), SyncMetrics::default())
}

/// Connects (lazily) to the isolation-compiler service `config` describes, timing calls into
/// `metrics`.
pub fn connect_with(
    config: &ClientConfig,
    metrics: SyncMetrics,
) -> anyhow::Result<std::sync::Arc<dyn IsolationService>> {
    let config = config.clone().with_timeout(crate::planner::CALL_TIMEOUT);
    let channel = tenantplane_client::connect_lazy(&config)?;
    Ok(std::sync::Arc::new(GrpcIsolation {
        client: tenantplane_client::IsolationClient::new(channel),
        metrics,
    }))
}

impl IsolationService for GrpcIsolation {
    fn compile<'a>(
        &'a self,
        tenant: &'a Tenant,
        profile: &'a IsolationProfile,
        previously_applied: &'a [ObjectRef],
    ) -> BoxFuture<'a, Result<Compilation, String>> {
        Box::pin(async move {
            let start = std::time::Instant::now();
            let compiled = self
                .client
                .clone()
                .compile(tenant, profile, previously_applied)
                .await;
            let code = match &compiled {
                Ok(_) => tonic::Code::Ok,
                Err(ClientError::Status(status)) => status.code(),
                Err(ClientError::Connect { .. }) => tonic::Code::Unavailable,
                Err(_) => tonic::Code::Internal,
            };
            self.metrics.rpc(
                "tenantplane.isolation.v1.IsolationCompiler",
                "Compile",
                code,
                start.elapsed(),
            );
            let compiled = compiled.map_err(|e| format!("isolation compiler: {e}"))?;
            Ok(Compilation {
                objects: compiled.compilation.objects,
                prune: compiled.prune,
            })
        })
    }
}
