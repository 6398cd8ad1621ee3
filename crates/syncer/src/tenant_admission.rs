//! Tenant-side admission: the Tenant's SyncPolicy Reject rules, compiled into
//! ValidatingAdmissionPolicies and bindings ([`CompiledPolicy::tenant_admission`]), joined by its
//! IsolationProfile's admission policies and Pod Security labels
//! ([`TenantAdmission::with_isolation`]), kept in the tenant control plane so that the tenant's
//! own API server refuses at apply time what the host side would refuse.
//!
//! The Pod Security labels go on every namespace of the tenant control plane but kube-system,
//! kube-public and kube-node-lease ([`keep_namespace_labels`], which watches the namespaces, so
//! that a new one is labelled as soon as it appears): a JSON merge patch of the six
//! `pod-security.kubernetes.io/` labels and the `tenantplane.io/isolation-profile` annotation,
//! each a recorded decision; when the Tenant names no profile any more, the labels of the
//! namespaces so annotated are removed.
//!
//! Each reconcile of a Tenant compiles its policy and keeps it in the tenant control plane as a
//! [`CompiledSet`], as the host's isolation objects are: it applies the objects whose copy there
//! does not carry their digest, and deletes the tenantplane objects of the Tenant
//! (`tenantplane.io/managed=true`, `tenantplane.io/tenant=<name>`) the policy no longer compiles,
//! each apply and delete a recorded decision in a span of its own, after the decision that the
//! policy was compiled; a namespace's labels are written the same way, one at a time. A
//! control plane that does not serve `admissionregistration.k8s.io/v1`
//! ValidatingAdmissionPolicy gets the Tenant condition `TenantAdmission=False` and keeps syncing,
//! refused on the host side only. Deleting the Tenant removes the objects ([`remove`]).

use std::time::Instant;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tenantplane_api::{SyncPolicy, Tenant, admission, conditions, provenance};
use tenantplane_core::decision::{Decision, PolicyRef, ProfileRef, Subject};
use tenantplane_core::policy::{EXEMPT_NAMESPACES, TenantIsolation};
use tenantplane_core::translate::digest;
use tenantplane_core::{CompiledPolicy, MappingVersion, TenantAdmission};
use tenantplane_isolation::ObjectRef;
use tracing::Instrument as _;

use crate::compiled_set::{
    Applied, Compiled, CompiledSet, ObjectWrite, Origin, Resolver, Stale, Verdict,
};
use crate::reconcile::compiled;
use crate::record::{COMPONENT, DecisionRecorder};
use crate::tenant_status::TenantLedger;
use crate::trace;
use crate::writer::{Write, Writer};

/// The SyncPolicy a compilation came from: the subject of every tenant-side admission decision.
#[derive(Debug, Clone)]
pub struct Source {
    /// The Tenant.
    pub tenant: String,
    /// The SyncPolicy's name (`tenantplane-default` for the built-in one).
    pub policy: String,
    /// Its content revision.
    pub revision: String,
    /// Its uid (empty for the built-in policy).
    pub uid: String,
    /// Its resourceVersion (empty for the built-in policy).
    pub resource_version: String,
    /// The Tenant's mapping scheme, recorded on each decision (the tenant control plane's
    /// objects are not mapped).
    pub mapping: MappingVersion,
}

/// Whether `decision`'s target is an object in the tenant control plane (an admission object
/// compiled from the Tenant's SyncPolicy) rather than in the host cluster.
pub fn targets_tenant_control_plane(decision: &Decision) -> bool {
    decision.subject.kind == "SyncPolicy"
        && decision.subject.api_version
            == format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION)
}

impl Source {
    /// The source of compiling `compiled` (read from `policy`, or the built-in default when
    /// `None`) for `tenant`.
    pub fn new(tenant: &Tenant, policy: Option<&SyncPolicy>, compiled: &CompiledPolicy) -> Source {
        Source {
            tenant: tenant.metadata.name.clone().unwrap_or_default(),
            policy: compiled.name().to_string(),
            revision: compiled.revision().to_string(),
            uid: policy
                .and_then(|p| p.metadata.uid.clone())
                .unwrap_or_default(),
            resource_version: policy
                .and_then(|p| p.metadata.resource_version.clone())
                .unwrap_or_default(),
            mapping: tenant.mapping_version(),
        }
    }

    /// The subject of the decisions about what it compiled for the tenant control plane, whose
    /// input was digested to `input_digest`.
    fn compiled(&self, input_digest: String) -> compiled::Source {
        compiled::Source {
            tenant: self.tenant.clone(),
            subject: Subject {
                api_version: format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
                kind: "SyncPolicy".into(),
                namespace: String::new(),
                name: self.policy.clone(),
                uid: self.uid.clone(),
                resource_version: self.resource_version.clone(),
            },
            policy: Some(PolicyRef {
                name: self.policy.clone(),
                revision: self.revision.clone(),
                rule: None,
            }),
            input_digest,
            mapping: self.mapping,
            ledger_prefix: "tenant-admission",
        }
    }
}

/// Whether the control plane serves ValidatingAdmissionPolicy and its binding at
/// `admissionregistration.k8s.io/v1`; `Err` says what it serves instead.
pub async fn served(client: &Client) -> Result<(), String> {
    let group = admission::API_VERSION
        .split_once('/')
        .map_or("", |(g, _)| g);
    match crate::discovery::group_version_resources(client, group, "v1").await {
        Ok(resources) => {
            let kinds: Vec<&str> = resources.iter().map(|(ar, _)| ar.kind.as_str()).collect();
            if kinds.contains(&admission::POLICY_KIND) && kinds.contains(&admission::BINDING_KIND) {
                Ok(())
            } else {
                Err(format!(
                    "{} serves no {} (Kubernetes before 1.30, or the API turned off)",
                    admission::API_VERSION,
                    admission::POLICY_KIND
                ))
            }
        }
        Err(unavailable) => Err(format!(
            "{} is not served: {}",
            unavailable.group_version(),
            unavailable.error
        )),
    }
}

/// Keeps the tenant control plane's admission equal to `admission` (the SyncPolicy and the
/// IsolationProfile compiled for it), in a span of its own, and sets the `TenantAdmission`
/// condition. A failure is reported on the condition and logged, and does not stop the sync
/// (the host side refuses regardless); the next reconcile tries again.
pub async fn reconcile(
    client: &Client,
    recorder: &DecisionRecorder,
    ledger: &TenantLedger,
    source: &Source,
    admission: &TenantAdmission,
) {
    let span = trace::evaluation_span(
        &source.tenant,
        &format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
        "SyncPolicy",
        "",
        &source.policy,
    );
    async {
        if let Err(why) = served(client).await {
            ledger.set_condition(
                conditions::TENANT_ADMISSION,
                false,
                "ValidatingAdmissionPolicyNotServed",
                &format!(
                    "the tenant control plane does not enforce SyncPolicy {} at admission: {why}; \
                     its Reject rules are enforced on the host side only, and sync goes on",
                    source.policy
                ),
            );
            return;
        }
        match apply(client, recorder, source, admission).await {
            Ok(done) => {
                let enforced = admission.rules.iter().filter(|r| r.admission_policy.is_some()).count();
                let host_only: Vec<String> = admission
                    .rules
                    .iter()
                    .filter_map(|r| Some(format!("{} ({})", r.rule, r.host_side_only.as_ref()?)))
                    .collect();
                let mut message = format!(
                    "SyncPolicy {} (revision {}): {enforced} of {} Reject rules enforced at \
                     admission in the tenant control plane ({} objects applied, {} pruned, {} \
                     unchanged)",
                    source.policy,
                    source.revision,
                    admission.rules.len(),
                    done.applied,
                    done.pruned,
                    done.unchanged
                );
                if !host_only.is_empty() {
                    message.push_str(&format!("; host side only: {}", host_only.join("; ")));
                }
                if let Some(isolation) = &admission.isolation {
                    message.push_str(&format!(
                        "; IsolationProfile {} (generation {}): {} admission policies, Pod \
                         Security {} on every namespace but {}",
                        isolation.profile,
                        isolation.generation,
                        isolation.policies.len(),
                        isolation.pod_security.as_deref().unwrap_or("privileged"),
                        EXEMPT_NAMESPACES.join(", ")
                    ));
                }
                ledger.set_condition(conditions::TENANT_ADMISSION, true, "Enforced", &message);
            }
            Err(e) => {
                tracing::warn!(tenant = %source.tenant, error = %format!("{e:#}"), "tenant admission");
                ledger.set_condition(
                    conditions::TENANT_ADMISSION,
                    false,
                    "ApplyFailed",
                    &format!("{e:#}; Reject rules are enforced on the host side meanwhile"),
                );
            }
        }
    }
    .instrument(span)
    .await;
}

/// Deletes the Tenant's admission objects from its control plane (the Tenant is being deleted),
/// each deletion a recorded decision.
pub async fn remove(
    client: &Client,
    recorder: &DecisionRecorder,
    source: &Source,
) -> anyhow::Result<usize> {
    served(client).await.map_err(anyhow::Error::msg)?;
    let none = TenantAdmission {
        policy: source.policy.clone(),
        revision: source.revision.clone(),
        objects: Vec::new(),
        rules: Vec::new(),
        isolation: None,
    };
    let span = trace::evaluation_span(
        &source.tenant,
        &format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
        "SyncPolicy",
        "",
        &source.policy,
    );
    Ok(apply(client, recorder, source, &none)
        .instrument(span)
        .await?
        .pruned)
}

/// Applies what is not in place and deletes what is no longer compiled, as a [`CompiledSet`]
/// (see the module documentation).
async fn apply(
    client: &Client,
    recorder: &DecisionRecorder,
    source: &Source,
    admission: &TenantAdmission,
) -> anyhow::Result<Applied> {
    let started = Instant::now();
    let set_source = source.compiled(digest(&json!(admission)));
    let mut resolver = Resolver::default();
    let selector = format!(
        "{}=true,{}={}",
        provenance::MANAGED,
        provenance::TENANT,
        source.tenant
    );
    let mut existing = Vec::new();
    for kind in [admission::POLICY_KIND, admission::BINDING_KIND] {
        let api = resolver
            .api(client, admission::API_VERSION, kind, None)
            .await?;
        let list = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("listing the Tenant's {kind}s in its control plane"))?;
        existing.extend(list.items.into_iter().map(|m| (kind, m)));
    }
    let mut compiled = Vec::new();
    for object in &admission.objects {
        let r = ObjectRef::from_object(object).context("a compiled object without identity")?;
        let api: Api<DynamicObject> = resolver.api(client, &r.api_version, &r.kind, None).await?;
        let held = existing
            .iter()
            .find(|(kind, m)| *kind == r.kind && m.metadata.name.as_deref() == Some(&r.name))
            .map(|(_, m)| m.metadata.clone());
        let annotation = |key: &str| {
            object
                .pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let origin = origin_of(annotation);
        let action = annotation(provenance::ADMISSION_ACTIONS).unwrap_or_else(|| "Deny".into());
        let (reason, message) = match &origin.profile {
            Some(p) => (
                "CompiledFromProfile",
                format!(
                    "{} {} enforces an admission policy of IsolationProfile {} (generation {}) \
                     at admission in the tenant control plane, in every namespace but {} \
                     ({action})",
                    r.kind,
                    r.name,
                    p.name,
                    p.generation,
                    EXEMPT_NAMESPACES.join(", ")
                ),
            ),
            None => (
                "CompiledFromSyncPolicy",
                format!(
                    "{} {} enforces rule {} of SyncPolicy {} (revision {}) at admission in the \
                     tenant control plane ({action})",
                    r.kind,
                    r.name,
                    origin.rule.as_deref().unwrap_or_default(),
                    source.policy,
                    source.revision
                ),
            ),
        };
        compiled.push(Compiled {
            api,
            object: object.clone(),
            held,
            origin,
            reason,
            message,
        });
    }
    let mut stale = Vec::new();
    for (kind, m) in &existing {
        let name = m.metadata.name.clone().unwrap_or_default();
        let wanted = admission
            .objects
            .iter()
            .any(|o| o["kind"] == *kind && o["metadata"]["name"] == name.as_str());
        if wanted {
            continue;
        }
        let api = resolver
            .api(client, admission::API_VERSION, kind, None)
            .await?;
        let text = |key: &str| {
            m.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
        };
        stale.push(Stale {
            api,
            target: ObjectRef {
                api_version: admission::API_VERSION.into(),
                kind: kind.to_string(),
                namespace: None,
                name: name.clone(),
            },
            uid: m.metadata.uid.clone(),
            origin: origin_of(text),
            message: format!(
                "SyncPolicy {} (revision {}) no longer compiles {kind} {name} for the tenant \
                 control plane: deleted",
                source.policy, source.revision
            ),
        });
    }
    let writer = Writer::tenant_control_plane();
    let set = CompiledSet {
        source: &set_source,
        writer: &writer,
        recorder,
        started,
    };
    let compiled_for = format!(
        "SyncPolicy {} (revision {}) compiled for the tenant control plane's admission",
        source.policy, source.revision
    );
    set.apply(
        compiled,
        stale,
        (
            "SyncPolicyCompiledForAdmission",
            compiled_for,
            Origin::default(),
        ),
    )
    .await
}

/// What produced a tenant-side object, by its annotations (`text` reads one): a rule of the
/// SyncPolicy, or the IsolationProfile whose admission policy it copies.
fn origin_of(text: impl Fn(&str) -> Option<String>) -> Origin {
    Origin {
        rule: text(provenance::SYNC_POLICY_RULE),
        profile: profile_of(&text),
    }
}

/// The IsolationProfile a tenant-side object was compiled from, by its annotations (`text`
/// reads one).
fn profile_of(text: &impl Fn(&str) -> Option<String>) -> Option<ProfileRef> {
    Some(ProfileRef {
        name: text(provenance::ISOLATION_PROFILE)?,
        generation: text(provenance::ISOLATION_PROFILE_GENERATION)
            .and_then(|g| g.parse().ok())
            .unwrap_or(0),
        field_path: text(provenance::ISOLATION_FIELD).unwrap_or_default(),
        rule: None,
    })
}

/// Keeps the Pod Security labels of `isolation` on every namespace of the tenant control plane
/// but [`EXEMPT_NAMESPACES`], as long as the Tenant's runtime runs: each namespace as it is
/// listed or changes, new ones as they appear. With no profile, the labels tenantplane set (on
/// the namespaces annotated `tenantplane.io/isolation-profile`) are removed. Each patch is a
/// recorded decision (subject: the SyncPolicy whose tenant-side compilation the profile joins;
/// profile: the fields that set the labels); a failed one is logged and tried again on the
/// namespace's next event or the watch's next list.
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
    use axum::Router;
    use axum::http::header;
    use axum::routing::get;

    use serde_json::Value;

    use super::*;
    use crate::metrics::SyncMetrics;

    /// A control plane whose `admissionregistration.k8s.io/v1` serves webhooks only, as
    /// Kubernetes 1.29 does.
    async fn control_plane_of_kubernetes_1_29() -> Client {
        let resources = json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "admissionregistration.k8s.io/v1",
            "resources": [{"name": "validatingwebhookconfigurations", "singularName": "validatingwebhookconfiguration",
                "namespaced": false, "kind": "ValidatingWebhookConfiguration",
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]})
        .to_string();
        let app = Router::new().route(
            "/apis/admissionregistration.k8s.io/v1",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], resources) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

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

    #[tokio::test]
    async fn a_control_plane_without_validating_admission_policy_gets_a_condition_that_says_so() {
        let client = control_plane_of_kubernetes_1_29().await;
        let ledger = TenantLedger::default();
        let recorder = DecisionRecorder::host_side(ledger.clone(), None, SyncMetrics::default());
        let tenant: Tenant = serde_json::from_value(json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant", "metadata": {"name": "old"},
            "spec": {"controlPlane": {"kubeconfigSecret": {"namespace": "ns", "name": "old", "key": "config"}}},
        }))
        .unwrap();
        let policy = CompiledPolicy::builtin_default();
        let source = Source::new(&tenant, None, &policy);
        reconcile(
            &client,
            &recorder,
            &ledger,
            &source,
            &policy.tenant_admission("old"),
        )
        .await;
        let condition = ledger
            .condition(conditions::TENANT_ADMISSION)
            .expect("the condition");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "ValidatingAdmissionPolicyNotServed")
        );
        assert_eq!(
            condition.message,
            "the tenant control plane does not enforce SyncPolicy tenantplane-default at admission: \
             admissionregistration.k8s.io/v1 serves no ValidatingAdmissionPolicy (Kubernetes before \
             1.30, or the API turned off); its Reject rules are enforced on the host side only, and \
             sync goes on"
        );
        assert_eq!(
            ledger.counts(),
            Default::default(),
            "nothing was applied, nothing recorded"
        );
    }
}
