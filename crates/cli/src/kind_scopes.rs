//! What the CLI knows of the scopes of the kinds it is asked about: the built-in kinds (from
//! `tenantplane_core::scope`), the CustomResourceDefinitions among explain-sync's inputs, and,
//! given a kubeconfig, a cluster's discovery. A kind known none of these ways has an unknown
//! scope, which explain-sync and `why` report as such.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use kube::core::GroupVersionKind;
use tenantplane_core::documents::Origin;
use tenantplane_core::object::group_of;
use tenantplane_core::scope::{self, BuiltinKind, KindScope, KindScopes};
use tenantplane_core::watch::discovered_scope;

use crate::commands::explain_sync::InputError;

/// What is known of the scopes of the kinds of `documents`: the built-in kinds, then what the
/// discovery of the cluster of `discovery` (kubeconfig, context) says of the others, then what
/// the CustomResourceDefinitions among the documents say (they describe what is about to be
/// applied). A CRD that does not say its group, kind or scope becomes an input error.
pub async fn of_inputs(
    documents: &mut [(Origin, Result<serde_json::Value, InputError>)],
    discovery: Option<(&Path, Option<&str>)>,
) -> anyhow::Result<KindScopes> {
    let mut scopes = KindScopes::new();
    if let Some((kubeconfig, context)) = discovery {
        let client = crate::host_cluster::client(Some(kubeconfig), context).await?;
        discover(&client, &kinds_of(documents), &mut scopes)
            .await
            .with_context(|| format!("discovery with {}", kubeconfig.display()))?;
    }
    learn_from_documents(documents, &mut scopes);
    Ok(scopes)
}

/// Learns the kinds the CustomResourceDefinitions among `documents` define. A CRD that does
/// not say its group, kind or scope becomes an error naming the field (the rest still count).
fn learn_from_documents(
    documents: &mut [(Origin, Result<serde_json::Value, InputError>)],
    scopes: &mut KindScopes,
) {
    for (_, document) in documents.iter_mut() {
        let Ok(value) = document else { continue };
        if !scope::is_crd(value) {
            continue;
        }
        if let Err((field, problem)) = scopes.learn_crd(value) {
            *document = Err(InputError {
                field,
                problem: format!("CustomResourceDefinition: {problem}"),
            });
        }
    }
}

/// The (apiVersion, kind) of each usable document.
pub fn kinds_of(
    documents: &[(Origin, Result<serde_json::Value, InputError>)],
) -> BTreeSet<(String, String)> {
    documents
        .iter()
        .filter_map(|(_, d)| d.as_ref().ok())
        .filter_map(|v| {
            Some((
                v.get("apiVersion")?.as_str()?.to_string(),
                v.get("kind")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Learns, from the discovery of the cluster of `client`, the scope of each of `kinds` that is
/// not built in. A kind the cluster does not serve stays unknown.
async fn discover(
    client: &kube::Client,
    kinds: &BTreeSet<(String, String)>,
    scopes: &mut KindScopes,
) -> anyhow::Result<()> {
    for (api_version, kind) in kinds {
        let group = group_of(api_version);
        if BuiltinKind::get(group, kind).is_some() {
            continue;
        }
        if let Some(found) = discover_kind(client, api_version, kind).await? {
            scopes.learn(group, kind, found);
        }
    }
    Ok(())
}

/// What the discovery of the cluster of `client` says of `api_version` `kind`; `None` when the
/// cluster does not serve it.
pub async fn discover_kind(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<Option<KindScope>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((_, caps)) => Ok(Some(discovered_scope(&caps))),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        Err(e) => Err(e).with_context(|| format!("discovering {api_version} {kind}")),
    }
}
