//! Isolation: compile the Tenant's IsolationProfile (the isolation-compiler service, or the same
//! library in-process), apply the compiled objects to the host, prune what is no longer compiled,
//! and remember what was applied on the host namespace so that a restarted syncer prunes too.
//! Every object applied or pruned is a recorded decision ([`apply`]).

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context as _;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt as _};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, Tenant, provenance};
use tenantplane_client::{ClientConfig, ClientError};
use tenantplane_core::MappingVersion;
use tenantplane_core::decision::{
    Decision, HostAction, HostTarget, Outcome, ProfileRef, Stamp, Subject,
};
use tenantplane_core::translate::{DESIRED_DIGEST, digest};
use tracing::Instrument as _;

use crate::metrics::SyncMetrics;
use crate::record::{COMPONENT, DecisionRecorder};
use crate::trace;
use crate::writer::{self, Writer};

/// A cluster compiled objects are written to: the prefix of the ledger keys of the decisions
/// about its objects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cluster {
    pub(crate) ledger_prefix: &'static str,
}

/// The host cluster, where isolation objects go.
const HOST: Cluster = Cluster {
    ledger_prefix: "isolation",
};

/// Annotation on the host namespace: the isolation objects last applied (JSON list of refs).
pub const APPLIED_ANNOTATION: &str = "tenantplane.io/isolation-applied";

/// Identity of an isolation object.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct IsolationRef {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for IsolationRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.name)
    }
}

impl IsolationRef {
    /// The decision target this object is.
    pub fn target(&self) -> HostTarget {
        HostTarget {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone().unwrap_or_default(),
            name: self.name.clone(),
        }
    }

    fn to_object_ref(&self) -> tenantplane_isolation::ObjectRef {
        tenantplane_isolation::ObjectRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    fn from_object_ref(r: tenantplane_isolation::ObjectRef) -> Self {
        IsolationRef {
            api_version: r.api_version,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
        }
    }
}

/// A compilation: objects to apply and previously applied objects to delete.
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    /// Objects, ready to apply, each with the profile fields that produced it.
    pub objects: Vec<tenantplane_isolation::CompiledObject>,
    /// Objects to prune.
    pub prune: Vec<IsolationRef>,
}

/// Compiles IsolationProfiles.
pub trait IsolationService: Send + Sync + std::fmt::Debug + 'static {
    /// Compiles `profile` for `tenant`; `previously_applied` is what the last compilation applied.
    fn compile<'a>(
        &'a self,
        tenant: &'a Tenant,
        profile: &'a IsolationProfile,
        previously_applied: &'a [IsolationRef],
    ) -> BoxFuture<'a, Result<Compiled, String>>;
}

/// The isolation compiler library run in-process (same computation as the service).
#[derive(Debug, Default)]
pub struct InProcessIsolation;

impl IsolationService for InProcessIsolation {
    fn compile<'a>(
        &'a self,
        tenant: &'a Tenant,
        profile: &'a IsolationProfile,
        previously_applied: &'a [IsolationRef],
    ) -> BoxFuture<'a, Result<Compiled, String>> {
        Box::pin(async move {
            let c = tenantplane_isolation::compile(tenant, profile).map_err(|e| e.to_string())?;
            let previous: Vec<tenantplane_isolation::ObjectRef> = previously_applied
                .iter()
                .map(IsolationRef::to_object_ref)
                .collect();
            let prune = c
                .prune(&previous)
                .into_iter()
                .map(IsolationRef::from_object_ref)
                .collect();
            Ok(Compiled {
                objects: c.objects,
                prune,
            })
        })
    }
}

/// The ref of a compiled object.
pub fn ref_of(object: &Value) -> Option<IsolationRef> {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Some(IsolationRef {
        api_version: s("/apiVersion")?,
        kind: s("/kind")?,
        namespace: s("/metadata/namespace"),
        name: s("/metadata/name")?,
    })
}

/// What the host namespace says was applied last.
pub fn previously_applied(namespace: &Value) -> Vec<IsolationRef> {
    namespace
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// Resolves kinds against the host's discovery, caching answers.
#[derive(Debug, Default)]
pub struct Resolver {
    cache: HashMap<(String, String), (ApiResource, Scope)>,
}

impl Resolver {
    /// The API of `api_version`/`kind` in the host, for `namespace` when namespaced.
    pub async fn api(
        &mut self,
        client: &Client,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let key = (api_version.to_string(), kind.to_string());
        if !self.cache.contains_key(&key) {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let (ar, caps) = discovery::pinned_kind(client, &gvk)
                .await
                .with_context(|| format!("the host serves no {api_version} {kind}"))?;
            self.cache.insert(key.clone(), (ar, caps.scope));
        }
        let (ar, scope) = &self.cache[&key];
        Ok(match (scope, namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
            _ => Api::all_with(client.clone(), ar),
        })
    }
}

/// The IsolationProfile a compilation came from and the Tenant it is for: the subject of every
/// isolation decision.
#[derive(Debug, Clone)]
pub struct Source {
    /// The Tenant.
    pub tenant: String,
    /// Its host namespace.
    pub host_namespace: String,
    /// The IsolationProfile's name.
    pub profile: String,
    /// Its `metadata.generation`.
    pub generation: i64,
    /// Its uid.
    pub uid: String,
    /// Its resourceVersion.
    pub resource_version: String,
    /// `sha256:` of the profile (the decisions' input digest).
    pub digest: String,
    /// The tenant's mapping scheme, recorded in the decisions.
    pub mapping: MappingVersion,
}

impl Source {
    /// The source of compiling `profile` for `tenant`.
    pub fn new(tenant: &Tenant, profile: &IsolationProfile) -> anyhow::Result<Source> {
        Ok(Source {
            tenant: tenant.name_any(),
            host_namespace: tenant.host_namespace(),
            profile: profile.name_any(),
            generation: profile.metadata.generation.unwrap_or_default(),
            uid: profile.uid().unwrap_or_default(),
            resource_version: profile.resource_version().unwrap_or_default(),
            digest: digest(&serde_json::to_value(profile)?),
            mapping: tenant.mapping_version(),
        })
    }

    /// The ledger key of the Tenant's isolation decision.
    fn key(&self) -> String {
        format!("isolation:IsolationProfile/{}", self.profile)
    }

    /// A decision about `target` (the compiled host object), or about the compilation as a
    /// whole when `target` is `None`.
    fn decision(&self, target: Option<&IsolationRef>, verdict: &Verdict, stamp: Stamp) -> Decision {
        Decision {
            id: stamp.id,
            time: stamp.time,
            tenant: self.tenant.clone(),
            subject: Subject {
                api_version: format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
                kind: "IsolationProfile".into(),
                namespace: String::new(),
                name: self.profile.clone(),
                uid: self.uid.clone(),
                resource_version: self.resource_version.clone(),
            },
            target: target.map(IsolationRef::target),
            outcome: verdict.outcome,
            action: verdict.action,
            policy: None,
            profile: Some(ProfileRef {
                name: self.profile.clone(),
                generation: self.generation,
                field_path: verdict.field_path.clone(),
                rule: None,
            }),
            reason: verdict.reason.into(),
            message: verdict.message.clone(),
            field_path: None,
            stripped_keys: Vec::new(),
            input_digest: self.digest.clone(),
            mapping_version: self.mapping.to_string(),
            component: stamp.component,
            component_version: stamp.component_version,
            trace_id: stamp.trace_id,
            span_id: stamp.span_id,
            closes: None,
            tokens: Vec::new(),
        }
    }
}

/// What applying a compilation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Objects created or updated.
    pub applied: usize,
    /// Objects deleted.
    pub pruned: usize,
    /// Objects already as compiled: nothing written, nothing recorded.
    pub unchanged: usize,
}

/// A write a decision about a compiled object leads to (isolation objects in the host, and
/// admission policies in a tenant control plane: [`crate::tenant_admission`]).
#[derive(Debug)]
pub(crate) enum Write {
    /// Server-side apply of the compiled object (the decision id is added to it).
    Apply(Value),
    /// JSON merge patch of an object that must exist (it is never created this way), the
    /// decision id added to it: the labels tenantplane keeps on an object that is not its own.
    Merge(Value),
    /// Delete the object, with its uid as precondition.
    Delete(Option<String>),
}

/// What an isolation decision says, whoever it is about.
#[derive(Debug)]
pub(crate) struct Verdict {
    pub(crate) outcome: Outcome,
    pub(crate) action: HostAction,
    /// The profile fields (or the SyncPolicy rule) that produced the object.
    pub(crate) field_path: String,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Verdict {
    /// Applying a compiled object: an update of the one at its name when `exists`, a create
    /// otherwise.
    pub(crate) fn applied(
        exists: bool,
        field_path: String,
        reason: &'static str,
        message: String,
    ) -> Verdict {
        Verdict {
            outcome: Outcome::Synced,
            action: if exists {
                HostAction::Update
            } else {
                HostAction::Create
            },
            field_path,
            reason,
            message,
        }
    }

    /// Deleting an object its source no longer compiles.
    pub(crate) fn pruned(field_path: String, message: String) -> Verdict {
        Verdict {
            outcome: Outcome::Deleted,
            action: HostAction::Delete,
            field_path,
            reason: "NoLongerCompiled",
            message,
        }
    }
}

/// One compiled or pruned object that needs a write.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) target: IsolationRef,
    pub(crate) api: Api<DynamicObject>,
    pub(crate) verdict: Verdict,
    pub(crate) write: Write,
    /// The cluster written to.
    pub(crate) cluster: Cluster,
}

/// The compiled object as applied: with the [`DESIRED_DIGEST`] annotation of its content, so
/// that the next reconcile sees it is in place without writing.
pub(crate) fn desired(object: &Value) -> (Value, String) {
    let d = digest(object);
    let mut desired = object.clone();
    if let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        annotations[DESIRED_DIGEST] = json!(d);
    }
    (desired, d)
}

/// Applies a compilation to the host. Each compiled object whose host copy does not carry its
/// digest is applied (server-side apply), each previously applied object no longer compiled and
/// still present is deleted, and each of these is a recorded decision (subject: the
/// IsolationProfile; target: the host object; profile: the fields that produced it) taken in a
/// span of its own, written on the object (`tenantplane.io/decision-id`). Objects already as
/// compiled cost a read, no write and no record. When anything is to be written, the
/// compilation itself is recorded first, in the current span (the one the compile call was made
/// in), and the objects' decision spans are its children. Then the applied set is recorded on
/// the host namespace when it changed (so that a restarted syncer prunes).
pub async fn apply(
    client: &Client,
    writer: &Writer,
    recorder: &DecisionRecorder,
    source: &Source,
    compiled: &Compiled,
    previous: &[IsolationRef],
) -> anyhow::Result<Applied> {
    let started = Instant::now();
    let mut resolver = Resolver::default();
    let mut changes = Vec::new();
    let mut applied_refs = Vec::new();
    let mut result = Applied::default();
    for compiled_object in &compiled.objects {
        let r = ref_of(&compiled_object.object).context("a compiled object without identity")?;
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let (object, digest) = desired(&compiled_object.object);
        let host = api
            .get_metadata_opt(&r.name)
            .await
            .with_context(|| format!("reading {} {}", r.kind, r.name))?;
        let in_place = host.as_ref().is_some_and(|h| {
            h.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_DIGEST))
                == Some(&digest)
        });
        applied_refs.push(r.clone());
        if in_place {
            result.unchanged += 1;
            continue;
        }
        changes.push(Change {
            target: r,
            api,
            verdict: Verdict::applied(
                host.is_some(),
                compiled_object.provenance.field_paths.join(","),
                "CompiledFromProfile",
                compiled_object.provenance.explanation.clone(),
            ),
            write: Write::Apply(object),
            cluster: HOST,
        });
    }
    for r in &compiled.prune {
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let Some(host) = api
            .get_metadata_opt(&r.name)
            .await
            .with_context(|| format!("reading {} {}", r.kind, r.name))?
        else {
            continue;
        };
        let fields = host
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(provenance::ISOLATION_FIELD))
            .cloned()
            .unwrap_or_default();
        changes.push(Change {
            target: r.clone(),
            api,
            verdict: Verdict::pruned(
                fields,
                format!(
                    "IsolationProfile {} (generation {}) no longer compiles {}: deleted",
                    source.profile, source.generation, r
                ),
            ),
            write: Write::Delete(host.metadata.uid),
            cluster: HOST,
        });
    }

    if !changes.is_empty() {
        let compilation = source.decision(
            None,
            &Verdict {
                outcome: Outcome::Synced,
                action: HostAction::None,
                field_path: "spec".into(),
                reason: "IsolationProfileCompiled",
                message: format!(
                    "IsolationProfile {} (generation {}) compiled for host namespace {}: {} \
                     objects, {} to write, {} unchanged",
                    source.profile,
                    source.generation,
                    source.host_namespace,
                    compiled.objects.len(),
                    changes.len(),
                    result.unchanged
                ),
            },
            trace::stamp_in(&tracing::Span::current(), COMPONENT),
        );
        recorder
            .record(&source.key(), &compilation, &source.digest, None, started)
            .await?;
        for change in changes {
            let span = trace::follow_up_span(&compilation);
            let decision = source.decision(
                Some(&change.target),
                &change.verdict,
                trace::stamp_in(&span, COMPONENT),
            );
            write(
                writer,
                recorder,
                &source.digest,
                &change,
                &decision,
                started,
            )
            .instrument(span)
            .await?;
            match change.verdict.outcome {
                Outcome::Deleted => result.pruned += 1,
                _ => result.applied += 1,
            }
        }
    }

    let mut before = previous.to_vec();
    before.sort();
    let mut now = applied_refs.clone();
    now.sort();
    if before != now {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .patch(
                &source.host_namespace,
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

/// Records the decision about one object, then writes it with `writer` (in the decision's span);
/// a failed write is a Failed decision of its own, in a child span. `digest` is the decision's
/// input.
pub(crate) async fn write(
    writer: &Writer,
    recorder: &DecisionRecorder,
    digest: &str,
    change: &Change,
    decision: &Decision,
    started: Instant,
) -> anyhow::Result<()> {
    let key = format!("{}:{}", change.cluster.ledger_prefix, change.target);
    let recorded = recorder
        .record(&key, decision, digest, None, started)
        .await?;
    let r = &change.target;
    let with_decision_id = |object: &Value| {
        let mut object = object.clone();
        object["metadata"]["annotations"][provenance::DECISION_ID] = json!(decision.id);
        object
    };
    let (verb, write) = match &change.write {
        Write::Apply(object) => ("applying", writer::Write::Apply(with_decision_id(object))),
        Write::Merge(patch) => (
            "patching",
            writer::Write::Merge {
                name: r.name.clone(),
                patch: with_decision_id(patch),
            },
        ),
        Write::Delete(uid) => (
            "pruning",
            writer::Write::Delete {
                name: r.name.clone(),
                uid: uid.clone(),
            },
        ),
    };
    let namespace = r.namespace.as_deref().unwrap_or("");
    let Err(e) = writer.write(&change.api, &r.kind, namespace, &write).await else {
        recorder.carried_out(recorded);
        return Ok(());
    };
    let span = trace::follow_up_span(decision);
    let failed =
        crate::reconcile::failed(decision, &e.to_string(), trace::stamp_in(&span, COMPONENT));
    let _ = recorder
        .record(&key, &failed, digest, None, started)
        .instrument(span)
        .await;
    Err(e).with_context(|| format!("{verb} {r}"))
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
        previously_applied: &'a [IsolationRef],
    ) -> BoxFuture<'a, Result<Compiled, String>> {
        Box::pin(async move {
            let previous: Vec<tenantplane_isolation::ObjectRef> = previously_applied
                .iter()
                .map(IsolationRef::to_object_ref)
                .collect();
            let start = std::time::Instant::now();
            let compiled = self
                .client
                .clone()
                .compile(tenant, profile, &previous)
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
            Ok(Compiled {
                objects: compiled.compilation.objects,
                prune: compiled
                    .prune
                    .into_iter()
                    .map(IsolationRef::from_object_ref)
                    .collect(),
            })
        })
    }
}
