//! The Pod Security labels of a Tenant's IsolationProfile on the namespaces of its control
//! plane, but kube-system, kube-public and kube-node-lease: kept as namespaces are listed, change
//! or appear, removed (from the namespaces tenantplane annotated) when the Tenant names no
//! profile or is deleted; each patch a recorded decision written through the compiled set.

use std::time::Instant;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tenantplane_api::provenance;
use tenantplane_core::decision::ProfileRef;
use tenantplane_core::policy::TenantIsolation;
use tenantplane_core::translate::digest;
use tenantplane_isolation::ObjectRef;
use tracing::Instrument as _;

use super::Source;
use crate::compiled_set::{CompiledSet, ObjectWrite, Origin, Verdict};
use crate::record::{COMPONENT, DecisionRecorder};
use crate::trace;
use crate::writer::{Write, Writer};

/// Keeps the Pod Security labels of `isolation` on every namespace of the tenant control plane but
/// [`EXEMPT_NAMESPACES`](tenantplane_core::policy::EXEMPT_NAMESPACES), as long as the Tenant's
/// runtime runs: each namespace as it is listed or changes, new ones as they appear. With no
/// profile, the labels tenantplane set (on the namespaces annotated
/// `tenantplane.io/isolation-profile`) are removed. Each patch is a recorded decision (subject: the
/// SyncPolicy whose tenant-side compilation the profile joins; profile: the fields that set the
/// labels); a failed one is logged and tried again on the namespace's next event or the watch's
/// next list.
pub async fn keep_namespace_labels(
    client: Client,
    recorder: DecisionRecorder,
    source: Source,
    isolation: Option<TenantIsolation>,
) {
    let namespaces = Api::<Namespace>::all(client.clone());
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<Namespace>(&()));
    let mut events = watcher(namespaces, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let namespace = match event {
            Ok(watcher::Event::Apply(ns) | watcher::Event::InitApply(ns)) => ns,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(tenant = %source.tenant, error = %e, "watching the tenant's namespaces");
                continue;
            }
        };
        label_namespace(&api, &recorder, &source, isolation.as_ref(), &namespace).await;
    }
}

/// Removes the Pod Security labels this Tenant put on the namespaces of its control plane (it
/// is being deleted), each removal a recorded decision.
pub async fn remove_namespace_labels(
    client: &Client,
    recorder: &DecisionRecorder,
    source: &Source,
) -> anyhow::Result<()> {
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing the namespaces of the tenant control plane")?;
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<Namespace>(&()));
    for namespace in &namespaces.items {
        label_namespace(&api, recorder, source, None, namespace).await;
    }
    Ok(())
}

/// Brings one namespace's Pod Security labels to `isolation`'s (see [`label_patch`]), a
/// recorded decision when it writes; a failure is logged.
async fn label_namespace(
    api: &Api<DynamicObject>,
    recorder: &DecisionRecorder,
    source: &Source,
    isolation: Option<&TenantIsolation>,
    namespace: &Namespace,
) {
    let Some((patch, verdict)) = label_patch(&source.tenant, namespace, isolation) else {
        return;
    };
    let started = Instant::now();
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let target = ObjectRef {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: None,
        name: name.clone(),
    };
    let origin = Origin {
        rule: None,
        profile: isolation.map(|i| ProfileRef {
            name: i.profile.clone(),
            generation: i.generation,
            field_path: i.pod_security_fields.clone(),
            rule: None,
        }),
    };
    // The decision's span, about its subject: the SyncPolicy whose tenant-side compilation the
    // profile joins.
    let span = trace::evaluation_span(
        &source.tenant,
        &format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
        "SyncPolicy",
        "",
        &source.policy,
    );
    let set_source = source.compiled(digest(&patch));
    let decision = set_source.decision(
        Some(&target),
        &origin,
        &verdict,
        trace::stamp_in(&span, COMPONENT),
    );
    let write = ObjectWrite {
        write: Write::Merge {
            name: name.clone(),
            patch,
        },
        target,
        api: api.clone(),
        origin,
        verdict,
    };
    let set = CompiledSet {
        source: &set_source,
        writer: &Writer::tenant_control_plane(),
        recorder,
        started,
        drift: source.drift,
    };
    if let Err(e) = set.write(&write, &decision).instrument(span).await {
        tracing::warn!(tenant = %source.tenant, namespace = %name, error = %format!("{e:#}"),
            "keeping the Pod Security labels of a tenant namespace");
    }
}

/// The merge patch that brings `namespace`'s Pod Security labels to `isolation`'s (or removes
/// those tenantplane set, without a profile), and the verdict of writing it; `None` when the
/// namespace is as it should be, or exempt.
fn label_patch(
    tenant: &str,
    namespace: &Namespace,
    isolation: Option<&TenantIsolation>,
) -> Option<(serde_json::Value, Verdict)> {
    let name = namespace.metadata.name.as_deref()?;
    if namespace.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let labels = namespace.metadata.labels.clone().unwrap_or_default();
    let annotation = |key: &str| {
        namespace
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
    };
    let (marker, ours) = (
        annotation(provenance::ISOLATION_PROFILE),
        annotation(provenance::TENANT) == Some(&tenant.to_string()),
    );
    match isolation.filter(|i| i.covers(name)) {
        Some(i) => {
            let in_place = ours
                && marker == Some(&i.profile)
                && i.pod_security_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v));
            if in_place {
                return None;
            }
            let patch = json!({"metadata": {
                "labels": i.pod_security_labels,
                "annotations": {provenance::ISOLATION_PROFILE: i.profile, provenance::TENANT: tenant},
            }});
            let modes: Vec<String> = ["enforce", "audit", "warn"]
                .iter()
                .filter_map(|mode| {
                    let key = format!("pod-security.kubernetes.io/{mode}");
                    let level = i.pod_security_labels.get(&key)?;
                    let version = i.pod_security_labels.get(&format!("{key}-version"));
                    Some(format!(
                        "{mode} {level}:{}",
                        version.map_or("latest", String::as_str)
                    ))
                })
                .collect();
            let verdict = Verdict::applied(
                true,
                "CompiledFromProfile",
                format!(
                    "namespace {name} of the tenant control plane carries the Pod Security labels \
                     of IsolationProfile {} (generation {}), as the host namespace does: {}",
                    i.profile,
                    i.generation,
                    modes.join(", ")
                ),
            );
            Some((patch, verdict))
        }
        None => {
            let profile = marker.filter(|_| ours)?;
            let removed: serde_json::Map<String, serde_json::Value> = labels
                .keys()
                .filter(|k| k.starts_with("pod-security.kubernetes.io/"))
                .map(|k| (k.clone(), serde_json::Value::Null))
                .collect();
            let patch = json!({"metadata": {
                "labels": removed,
                "annotations": {provenance::ISOLATION_PROFILE: null, provenance::TENANT: null},
            }});
            let verdict = Verdict::applied(
                true,
                "NoLongerCompiled",
                format!(
                    "the Pod Security labels of IsolationProfile {profile} are removed from \
                     namespace {name} of the tenant control plane: the Tenant no longer puts \
                     them there"
                ),
            );
            Some((patch, verdict))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use tenantplane_api::Tenant;
    use tenantplane_core::CompiledPolicy;

    fn namespace(name: &str, labels: Value, annotations: Value) -> Namespace {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}}),
        )
        .unwrap()
    }

    #[test]
    fn tenant_namespaces_but_the_system_ones_get_the_profiles_pod_security_labels() {
        let tenant: Tenant = serde_json::from_value(json!({
            "metadata": {"name": "acme"},
            "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": "ns", "name": "acme"}}},
        }))
        .unwrap();
        let profile = serde_json::from_value(
            json!({"metadata": {"name": "strict", "generation": 4}, "spec": {"level": "restricted"}}),
        )
        .unwrap();
        let boundary = tenantplane_core::boundary::Boundary::compile(&tenant, &profile).unwrap();
        let isolation = CompiledPolicy::builtin_default()
            .tenant_admission("acme")
            .with_isolation("acme", &boundary, None)
            .isolation
            .unwrap();
        let (patch, verdict) = label_patch(
            "acme",
            &namespace("shop", json!({}), json!({})),
            Some(&isolation),
        )
        .expect("an unlabelled namespace is labelled");
        assert_eq!(
            patch["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({provenance::ISOLATION_PROFILE: "strict", provenance::TENANT: "acme"})
        );
        assert_eq!(verdict.reason, "CompiledFromProfile");
        assert!(
            verdict.message.ends_with(
                "enforce restricted:v1.34, audit restricted:v1.34, warn restricted:v1.34"
            ),
            "{}",
            verdict.message
        );
        let labelled = namespace(
            "shop",
            patch["metadata"]["labels"].clone(),
            patch["metadata"]["annotations"].clone(),
        );
        assert!(
            label_patch("acme", &labelled, Some(&isolation)).is_none(),
            "in place"
        );
        let system = namespace("kube-system", json!({}), json!({}));
        assert!(label_patch("acme", &system, Some(&isolation)).is_none());

        // Without the profile, the labels this Tenant set go; another Tenant's stay.
        let (removal, verdict) = label_patch("acme", &labelled, None).unwrap();
        assert_eq!(
            removal["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            Value::Null
        );
        assert_eq!(verdict.reason, "NoLongerCompiled");
        assert!(label_patch("other", &labelled, None).is_none());
    }
}
