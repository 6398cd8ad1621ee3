//! What the CLI knows of the scopes of the kinds it is asked about: the built-in kinds (from
//! `tenantplane_core::scope`), the CustomResourceDefinitions among explain-sync's inputs, and,
//! given a kubeconfig, a cluster's discovery. A kind known none of these ways has an unknown
//! scope, which explain-sync and `why` report as such.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use kube::core::GroupVersionKind;
use tenantplane_core::object::group_of;
use tenantplane_core::scope::{self, BuiltinKind, KindScope, KindScopes};
use tenantplane_core::watch::discovered_scope;

use crate::commands::explain_sync::InputError;

/// What is known of the scopes of `kinds` (the kinds of explain-sync's inputs): the built-in
/// kinds, then what the discovery of the cluster of `discovery` (kubeconfig, context) says of the
/// others, then what the CustomResourceDefinitions among the inputs, `crds`, say (they describe
/// what is about to be applied). A CRD that does not say its group, kind or scope teaches nothing
/// ([`crd_error`] is how it is reported).
pub async fn of_inputs(
    kinds: &BTreeSet<(String, String)>,
    crds: &[serde_json::Value],
    discovery: Option<(&Path, Option<&str>)>,
) -> anyhow::Result<KindScopes> {
    let mut scopes = KindScopes::new();
    if let Some((kubeconfig, context)) = discovery {
        let client = crate::host_cluster::client(Some(kubeconfig), context).await?;
        discover(&client, kinds, &mut scopes)
            .await
            .with_context(|| format!("discovery with {}", kubeconfig.display()))?;
    }
    for crd in crds {
        // An invalid CRD is an input error of its own document.
        let _ = scopes.learn_crd(crd);
    }
    Ok(scopes)
}

/// Why a document that is a CustomResourceDefinition teaches no scope: the field it does not say
/// or says wrong. `None` for a valid CRD and for any other document.
pub fn crd_error(document: &serde_json::Value) -> Option<InputError> {
    if !scope::is_crd(document) {
        return None;
    }
    let (field, problem) = KindScopes::new().learn_crd(document).err()?;
    Some(InputError {
        field,
        problem: format!("CustomResourceDefinition: {problem}"),
    })
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
