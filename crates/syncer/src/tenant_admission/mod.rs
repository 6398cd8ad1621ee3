//! Tenant-side admission: the Tenant's SyncPolicy Reject rules, compiled into
//! ValidatingAdmissionPolicies and bindings ([`CompiledPolicy::tenant_admission`]), joined by its
//! IsolationProfile's admission policies and Pod Security labels
//! ([`TenantAdmission::with_isolation`]), kept in the tenant control plane so that the tenant's
//! own API server refuses at apply time what the host side would refuse.
//!
//! The Pod Security labels go on every namespace of the tenant control plane but kube-system,
//! kube-public and kube-node-lease (`namespace_labels`, which watches the namespaces, so
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
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;
use tenantplane_api::{SyncPolicy, Tenant, admission, conditions, provenance};
use tenantplane_core::decision::{Decision, PolicyRef, ProfileRef, Subject};
use tenantplane_core::policy::EXEMPT_NAMESPACES;
use tenantplane_core::translate::digest;
use tenantplane_core::{CompiledPolicy, MappingVersion, TenantAdmission};
use tenantplane_isolation::ObjectRef;
use tracing::Instrument as _;

use crate::compiled_set::{Applied, Compiled, CompiledSet, Origin, Resolver, Stale};
use crate::reconcile::compiled;
use crate::record::DecisionRecorder;
use crate::tenant_status::TenantLedger;
use crate::trace;
use crate::writer::Writer;
use tenantplane_api::tenant::DriftPolicy;

mod drift_watch;
mod namespace_labels;

pub use drift_watch::watch_admission_objects;
pub use namespace_labels::{keep_namespace_labels, remove_namespace_labels};

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
    /// What the Tenant does about drift of the objects (edited in its control plane).
    pub drift: DriftPolicy,
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
            drift: tenant.spec.drift,
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
/// (the host side refuses regardless); the next reconcile tries again. Whether the control plane
/// serves admission policies at all.
pub async fn reconcile(
    client: &Client,
    recorder: &DecisionRecorder,
    ledger: &TenantLedger,
    source: &Source,
    admission: &TenantAdmission,
) -> bool {
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
            return false;
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
        true
    }
    .instrument(span)
    .await
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

/// The label selector of the tenantplane objects of the Tenant `tenant` in its control plane.
fn selector(tenant: &str) -> String {
    format!(
        "{}=true,{}={tenant}",
        provenance::MANAGED,
        provenance::TENANT
    )
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
    let selector = selector(&source.tenant);
    let mut existing = Vec::new();
    for kind in [admission::POLICY_KIND, admission::BINDING_KIND] {
        let api = resolver
            .api(client, admission::API_VERSION, kind, None)
            .await?;
        let list = api
            .list(&ListParams::default().labels(&selector))
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
            .map(|(_, m)| {
                // A list's items lack the apiVersion and kind a replace needs.
                let mut held = serde_json::to_value(m).expect("an object serializes");
                held["apiVersion"] = json!(r.api_version);
                held["kind"] = json!(r.kind);
                held
            });
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
        drift: source.drift,
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

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::http::header;
    use axum::routing::get;

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
