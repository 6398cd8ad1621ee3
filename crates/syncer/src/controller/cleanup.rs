//! Deleting a Tenant (its finalizer held until this is done): its runtime stopped, its admission
//! objects removed from its control plane, and from the host only what tenantplane owns
//! (`tenantplane.io/managed=true` and `tenantplane.io/tenant=<name>`), each delete through the
//! writer; then the host namespace itself if tenantplane created it.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::discovery::{Scope, verbs};
use kube::runtime::controller::Action;
use tenantplane_api::{SyncPolicy, Tenant, provenance};
use tenantplane_core::CompiledPolicy;

use super::{CREATED_ANNOTATION, Context, Error, connect, read_kubeconfig};
use crate::discovery;
use crate::record::DecisionRecorder;
use crate::tenant_admission;
use crate::tenant_status::TenantLedger;
use crate::writer::Write;

/// Removes the Tenant's admission objects from its control plane, each removal a recorded
/// decision. A control plane that cannot be reached (perhaps gone before its Tenant) is left as
/// it is, with a warning.
async fn remove_tenant_admission(tenant: &Tenant, ctx: &Context) {
    let host = &ctx.shared.host;
    let name = tenant.name_any();
    let removed = async {
        let policy = match &tenant.spec.sync_policy_ref {
            Some(p) => Api::<SyncPolicy>::all(host.clone()).get_opt(p).await?,
            None => None,
        };
        let compiled = match &policy {
            Some(p) => CompiledPolicy::compile(p)?,
            None => CompiledPolicy::builtin_default(),
        };
        let yaml = read_kubeconfig(host, tenant).await?;
        let client = connect(&yaml, tenant.spec.control_plane.context.as_deref()).await?;
        let recorder = DecisionRecorder::host_side(
            TenantLedger::default(),
            ctx.shared.log.clone(),
            ctx.shared.metrics.clone(),
        );
        let source = tenant_admission::Source::new(tenant, policy.as_ref(), &compiled);
        tenant_admission::remove_namespace_labels(&client, &recorder, &source).await?;
        tenant_admission::remove(&client, &recorder, &source).await
    }
    .await;
    match removed {
        Ok(n) => tracing::info!(tenant = %name, removed = n, "tenant admission removed"),
        Err(e) => {
            tracing::warn!(tenant = %name, error = %format!("{e:#}"), "tenant admission left in place")
        }
    }
}

/// Cleans up after a deleted Tenant: stops its runtime, removes its admission objects from its
/// control plane, deletes what tenantplane owns in the host, then the host namespace if
/// tenantplane created it.
pub(super) async fn cleanup(tenant: &Tenant, ctx: &Context) -> Result<Action, Error> {
    let name = tenant.name().to_string();
    let host_ns = tenant.host_namespace();
    ctx.stop_serving(&name).await;
    let host = &ctx.shared.host;
    remove_tenant_admission(tenant, ctx).await;
    let selector = format!(
        "{}=true,{}={}",
        provenance::MANAGED,
        provenance::TENANT,
        name
    );
    let groups = discovery::served_groups(host)
        .await
        .context("discovering the host API for cleanup")?;
    let mut resources = Vec::new();
    for (group, versions) in &groups {
        // The preferred version: a kind is cleaned up once, whatever the versions it is served
        // at. A group that does not answer holds nothing tenantplane wrote (the syncer writes
        // the kinds it synced and compiled, all served by the host API server itself).
        let Some(version) = versions.first() else {
            continue;
        };
        match discovery::group_version_resources(host, group, version).await {
            Ok(found) => resources.extend(found),
            Err(unavailable) => tracing::warn!(
                tenant = %name,
                group = %unavailable.group_version(),
                error = %unavailable.error,
                "host API group unavailable during cleanup"
            ),
        }
    }
    let mut removed = 0usize;
    for (ar, caps) in resources {
        if !caps.supports_operation(verbs::LIST)
            || !caps.supports_operation(verbs::DELETE)
            || ar.plural.contains('/')
            || ar.kind == "Namespace"
            || ar.kind == "Event"
        {
            continue;
        }
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(host.clone(), &host_ns, &ar),
            // Cluster-scoped objects (admission policies) labelled for this tenant.
            Scope::Cluster => Api::all_with(host.clone(), &ar),
        };
        let list = match api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(kind = %ar.kind, error = %e, "cleanup list");
                continue;
            }
        };
        for obj in list {
            let namespace = obj.namespace().unwrap_or_default();
            let delete = Write::Delete {
                name: obj.name_any(),
                uid: obj.uid(),
            };
            ctx.shared
                .host_writer
                .write(&api, &ar.kind, &namespace, &delete)
                .await
                .with_context(|| format!("deleting {} {}", ar.kind, obj.name_any()))?;
            removed += 1;
        }
    }
    let namespaces: Api<Namespace> = Api::all(host.clone());
    if let Some(ns) = namespaces
        .get_opt(&host_ns)
        .await
        .context("reading the host namespace")?
        && ns.annotations().get(CREATED_ANNOTATION).map(String::as_str)
            == Some(crate::record::COMPONENT)
        && ns.labels().get(provenance::TENANT) == Some(&name)
    {
        let api: Api<DynamicObject> =
            Api::all_with(host.clone(), &ApiResource::erase::<Namespace>(&()));
        let delete = Write::Delete {
            name: host_ns.clone(),
            uid: ns.uid(),
        };
        ctx.shared
            .host_writer
            .write(&api, "Namespace", "", &delete)
            .await
            .map_err(anyhow::Error::from)?;
    }
    tracing::info!(tenant = %name, removed, "tenant cleaned up");
    Ok(Action::await_change())
}
