//! Clusters the CLI talks to: a client from a kubeconfig file and context, and the current host
//! state read from a live cluster, read-only, for collision prediction (the metadata of every
//! object of the input kinds in the tenant's host namespace), for drift (the content of
//! tenantplane's objects there, Secrets aside: their data stays in the cluster) and for the world
//! of the tenant's pods (the cluster IPs of the host Services there).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use tenantplane_api::{IsolationProfile, provenance};
use tenantplane_core::collision::HostObjectMeta;
use tenantplane_core::planner::HostState;

/// Lists the objects of each `(apiVersion, kind)` in `namespace`: their metadata, and the whole
/// of tenantplane's objects but Secrets (whose metadata only is listed). A kind the host cluster
/// does not serve has no objects there, so it is skipped.
pub async fn read(
    kubeconfig: &Path,
    context: Option<&str>,
    namespace: &str,
    kinds: &BTreeSet<(String, String)>,
) -> anyhow::Result<(HostState, HostContent)> {
    let config = config(Some(kubeconfig), context).await?;
    let cluster = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("building the host cluster client")?;
    let mut host = HostState::default();
    let mut content = HostContent::default();
    for (api_version, kind) in kinds {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok(found) => found,
            // Not served by the host cluster: nothing of that kind can be at a target name.
            Err(kube::Error::Discovery(_)) => continue,
            Err(kube::Error::Api(status)) if status.is_not_found() => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("discovering {api_version} {kind} on the host cluster {cluster}")
                });
            }
        };
        if caps.scope == kube::discovery::Scope::Cluster {
            // Never synced: no host object of that kind is at a target name in the namespace.
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let listing = || format!("listing {kind} in {namespace} on the host cluster {cluster}");
        let metas: Vec<ObjectMeta> = if api_version == "v1" && kind == "Secret" {
            let list = api.list_metadata(&ListParams::default()).await;
            let list = list.with_context(listing)?;
            list.items.into_iter().map(|i| i.metadata).collect()
        } else {
            let list = api
                .list(&ListParams::default())
                .await
                .with_context(listing)?;
            for item in &list.items {
                if item.labels().contains_key(provenance::TENANT) {
                    let mut object = serde_json::to_value(item)?;
                    object["apiVersion"] = api_version.as_str().into();
                    object["kind"] = kind.as_str().into();
                    content.insert(kind.clone(), item.name_any(), object);
                }
            }
            list.items.into_iter().map(|i| i.metadata).collect()
        };
        for meta in metas {
            host.insert(HostObjectMeta {
                api_version: api_version.clone(),
                kind: kind.clone(),
                namespace: namespace.to_string(),
                name: meta.name.unwrap_or_default(),
                labels: meta.labels.unwrap_or_default(),
                annotations: meta.annotations.unwrap_or_default(),
            });
        }
    }
    Ok((host, content))
}

/// The content of tenantplane's host objects in a tenant's host namespace, by kind and name:
/// what drift is found on.
#[derive(Debug, Default)]
pub struct HostContent(HashMap<(String, String), serde_json::Value>);

impl HostContent {
    /// Keeps `object`, the `kind` at `name`.
    pub fn insert(&mut self, kind: String, name: String, object: serde_json::Value) {
        self.0.insert((kind, name), object);
    }

    /// The object of `kind` at `name`, if its content is known.
    pub fn get(&self, kind: &str, name: &str) -> Option<&serde_json::Value> {
        self.0.get(&(kind.to_string(), name.to_string()))
    }
}

/// The cluster IP of each Service of `namespace` that has one, by name.
pub async fn service_addresses(
    kubeconfig: &Path,
    context: Option<&str>,
    namespace: &str,
) -> anyhow::Result<HashMap<String, String>> {
    let config = config(Some(kubeconfig), context).await?;
    let cluster = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("building the host cluster client")?;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client, namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| {
            format!("listing Services in {namespace} on the host cluster {cluster}")
        })?;
    Ok(services
        .items
        .into_iter()
        .filter_map(|s| Some((s.metadata.name?, s.spec?.cluster_ip?)))
        .collect())
}

/// The IsolationProfile `name` of the host cluster, if it exists.
pub async fn read_profile(
    kubeconfig: &Path,
    context: Option<&str>,
    name: &str,
) -> anyhow::Result<Option<IsolationProfile>> {
    let config = config(Some(kubeconfig), context).await?;
    let cluster = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("building the host cluster client")?;
    Api::<IsolationProfile>::all(client)
        .get_opt(name)
        .await
        .with_context(|| format!("reading IsolationProfile {name} from the host cluster {cluster}"))
}

/// A client for the cluster of `kubeconfig` (default: `KUBECONFIG` or `~/.kube/config`) at
/// `context` (default: its current context).
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(config(kubeconfig, context).await?)
        .context("building a Kubernetes client")
}

/// The client configuration of [`client`].
async fn config(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))
        }
        None => kube::Config::from_kubeconfig(&options)
            .await
            .context("no kubeconfig given and no usable KUBECONFIG or ~/.kube/config"),
    }
}
