//! Isolation: compile the Tenant's IsolationProfile (the isolation-compiler service, or the same
//! library in-process), apply the compiled objects to the host, prune what is no longer compiled,
//! and remember what was applied on the host namespace so that a restarted syncer prunes too.

use std::collections::HashMap;

use anyhow::Context as _;
use futures::future::BoxFuture;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_client::{ClientConfig, ClientError};

use crate::metrics::SyncMetrics;
use crate::tenant::FIELD_MANAGER;

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

impl IsolationRef {
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
    /// Objects, ready to apply.
    pub objects: Vec<Value>,
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
                objects: c.objects.into_iter().map(|o| o.object).collect(),
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

/// Applies a compilation to the host: every object by server-side apply, then prunes, then
/// records the applied set on the host namespace. Returns (applied, pruned) counts.
pub async fn apply(
    client: &Client,
    host_namespace: &str,
    compiled: &Compiled,
) -> anyhow::Result<(usize, usize)> {
    let mut resolver = Resolver::default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut applied = Vec::new();
    for object in &compiled.objects {
        let r = ref_of(object).context("a compiled object without identity")?;
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        api.patch(&r.name, &params, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {} {}", r.kind, r.name))?;
        applied.push(r);
    }
    let mut pruned = 0;
    for r in &compiled.prune {
        let api = resolver
            .api(client, &r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        match api.delete(&r.name, &DeleteParams::default()).await {
            Ok(_) => pruned += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("pruning {} {}", r.kind, r.name)),
        }
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            host_namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                APPLIED_ANNOTATION: serde_json::to_string(&applied)?,
            }}})),
        )
        .await
        .context("recording the applied isolation objects on the host namespace")?;
    Ok((applied.len(), pruned))
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
                objects: compiled
                    .compilation
                    .objects
                    .into_iter()
                    .map(|o| o.object)
                    .collect(),
                prune: compiled
                    .prune
                    .into_iter()
                    .map(IsolationRef::from_object_ref)
                    .collect(),
            })
        })
    }
}
