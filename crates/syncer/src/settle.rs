//! Open host actions an earlier life of the syncer left: settled when a Tenant's runtime starts.
//!
//! The syncer records a decision before its host write (write-ahead), so a syncer that stops
//! between the two leaves a recorded create, update or delete that never happened. The log keeps
//! such decisions open ([`DecisionStore::open_actions`]) until the write is confirmed or a later
//! decision closes them. When a Tenant's runtime starts, before any of its objects is decided,
//! each open action of the Tenant recorded before this process started is compared with the host
//! object it targets:
//!
//! - create or update: the host object carries the decision's id, or the id of a decision
//!   recorded after it, → carried out (confirmed);
//! - delete: the host object is gone, or carries the id of a decision recorded after it, →
//!   carried out;
//! - otherwise → not carried out: a decision of its own closes it (outcome Failed, reason
//!   `NotCarriedOut`, `closes` = its id), and the object is decided again as usual.
//!
//! Actions recorded by this process are not looked at: their writes may be in flight. An action
//! on the tenant control plane (its admission objects) is looked for there, the rest on the host.

use std::sync::Arc;

use anyhow::Context as _;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;
use tenantplane_api::provenance;
use tenantplane_core::decision::{Decision, HostAction, HostTarget};
use tenantplane_decision_log::{DecisionStore, Entry};
use tracing::Instrument as _;

use crate::record::{COMPONENT, DecisionLog};
use crate::{reconcile, trace};

/// What the host shows of an open action.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// The action took effect.
    CarriedOut,
    /// It did not; why, in the closing decision's words.
    NotCarriedOut(String),
}

/// Settles the open actions of `tenant` recorded at or before sequence `before` (the log's head
/// when this process started), reading their targets from `host` or, for the tenant's admission
/// objects, from `tenant_control_plane`. Returns how many were closed as not carried out.
pub async fn settle_tenant(
    log: &Arc<dyn DecisionLog>,
    host: &kube::Client,
    tenant_control_plane: &kube::Client,
    tenant: &str,
    before: u64,
) -> anyhow::Result<usize> {
    let Some(store) = log.store() else {
        return Ok(0);
    };
    let open = store
        .open_actions(Some(tenant.to_string()))
        .await
        .with_context(|| format!("reading the open host actions of tenant {tenant}"))?;
    let mut closed = 0;
    for entry in open.into_iter().filter(|e| e.sequence <= before) {
        let d = &entry.decision;
        let Some(target) = &d.target else {
            log.carried_out(entry.sequence);
            continue;
        };
        let cluster = if crate::tenant_admission::targets_tenant_control_plane(d) {
            tenant_control_plane
        } else {
            host
        };
        let host_object = match get(cluster, target).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(decision.id = %d.id, error = %e,
                    "cannot read the host object of an open action; it stays open");
                continue;
            }
        };
        match found(&*store, &entry, host_object.as_ref()).await? {
            Found::CarriedOut => log.carried_out(entry.sequence),
            Found::NotCarriedOut(why) => {
                let span = trace::follow_up_span(d);
                let closing =
                    reconcile::failure::not_carried_out(d, &why, trace::stamp_in(&span, COMPONENT));
                log.append(&closing).instrument(span).await.map_err(|e| {
                    anyhow::anyhow!("recording that {} was not carried out: {e}", d.id)
                })?;
                tracing::info!(decision.id = %closing.id, closes = %d.id, tenant,
                    "a recorded host action was not carried out: closed");
                closed += 1;
            }
        }
    }
    Ok(closed)
}

/// Whether the open action of `entry` took effect, given the host object at its target now.
async fn found(
    store: &dyn DecisionStore,
    entry: &Entry,
    host: Option<&Value>,
) -> anyhow::Result<Found> {
    let d = &entry.decision;
    let carried = host.and_then(|h| {
        h.pointer(&format!(
            "/metadata/annotations/{}",
            provenance::DECISION_ID.replace('/', "~1")
        ))
        .and_then(Value::as_str)
    });
    if carried == Some(d.id.as_str()) {
        return Ok(Found::CarriedOut);
    }
    // A later decision's id on the host means this one was done with before it was taken.
    if let Some(other) = carried
        && let Some(later) = store.get(other.to_string()).await?
        && later.sequence > entry.sequence
    {
        return Ok(Found::CarriedOut);
    }
    let target = d.target.as_ref().map(|t| place(d, t)).unwrap_or_default();
    Ok(match (d.action, host, carried) {
        (HostAction::Delete, None, _) => Found::CarriedOut,
        (_, None, _) => Found::NotCarriedOut(format!("{target} does not exist")),
        (_, Some(_), Some(other)) => {
            Found::NotCarriedOut(format!("{target} carries decision {other}"))
        }
        (_, Some(_), None) => Found::NotCarriedOut(format!("{target} carries no decision id")),
    })
}

/// Where `decision`'s target `t` is, in words: "host Kind ns/name" or "tenant control plane
/// Kind name".
fn place(decision: &Decision, t: &HostTarget) -> String {
    let cluster = if crate::tenant_admission::targets_tenant_control_plane(decision) {
        "tenant control plane"
    } else {
        "host"
    };
    if t.namespace.is_empty() {
        format!("{cluster} {} {}", t.kind, t.name)
    } else {
        format!("{cluster} {} {}/{}", t.kind, t.namespace, t.name)
    }
}

/// The host object at `target`, if any (its kind found by discovery).
async fn get(cluster: &kube::Client, target: &HostTarget) -> anyhow::Result<Option<Value>> {
    let (group, version) = match target.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", target.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &target.kind);
    let (resource, _) = kube::discovery::pinned_kind(cluster, &gvk)
        .await
        .with_context(|| format!("discovering {}/{}", target.api_version, target.kind))?;
    let api: Api<DynamicObject> = if target.namespace.is_empty() {
        Api::all_with(cluster.clone(), &resource)
    } else {
        Api::namespaced_with(cluster.clone(), &target.namespace, &resource)
    };
    let object = api.get_opt(&target.name).await?;
    Ok(object.map(|o| serde_json::to_value(o).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tenantplane_core::decision::Outcome;

    fn create(id: &str) -> Decision {
        crate::testing::decision(id, Outcome::Synced, "DefaultSync")
    }

    fn host(id: &str) -> Value {
        json!({"metadata": {"annotations": {provenance::DECISION_ID: id}}})
    }

    #[tokio::test]
    async fn an_open_create_is_carried_out_only_when_the_host_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = tenantplane_decision_log::open(&format!(
            "sqlite:{}",
            dir.path().join("l.db").display()
        ))
        .await
        .unwrap();
        let (first, later) = (create("first"), create("later"));
        store
            .append_batch(vec![first.clone(), later.clone()])
            .await
            .unwrap();
        let open = store.open_actions(None).await.unwrap();
        let (first_entry, later_entry) = (&open[0], &open[1]);
        assert_eq!(
            found(&*store, first_entry, Some(&host("first")))
                .await
                .unwrap(),
            Found::CarriedOut
        );
        // The host carries a later decision's id: the first was done with before it.
        assert_eq!(
            found(&*store, first_entry, Some(&host("later")))
                .await
                .unwrap(),
            Found::CarriedOut
        );
        // The host carries an earlier decision's id, or nothing is there: not carried out.
        assert_eq!(
            found(&*store, later_entry, Some(&host("first")))
                .await
                .unwrap(),
            Found::NotCarriedOut(
                "host ConfigMap tenant-acme/cfg-x-web carries decision first".into()
            )
        );
        assert_eq!(
            found(&*store, later_entry, None).await.unwrap(),
            Found::NotCarriedOut("host ConfigMap tenant-acme/cfg-x-web does not exist".into())
        );
    }
}
