//! Tenant-side admission: the Tenant's SyncPolicy Reject rules, compiled into
//! ValidatingAdmissionPolicies and bindings ([`CompiledPolicy::tenant_admission`]), kept in the
//! tenant control plane so that the tenant's own API server refuses at apply time what the host
//! side would refuse.
//!
//! Each reconcile of a Tenant compiles its policy, applies the objects whose copy in the tenant
//! control plane does not carry their digest, and deletes the tenantplane objects of the Tenant
//! (`tenantplane.io/managed=true`, `tenantplane.io/tenant=<name>`) the policy no longer compiles:
//! each apply and delete a recorded decision in a span of its own, after the decision that the
//! policy was compiled, as the host's isolation objects are ([`crate::isolation::apply`]). A
//! control plane that does not serve `admissionregistration.k8s.io/v1`
//! ValidatingAdmissionPolicy gets the Tenant condition `TenantAdmission=False` and keeps syncing,
//! refused on the host side only. Deleting the Tenant removes the objects ([`remove`]).

use std::time::Instant;

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;
use tenantplane_api::{SyncPolicy, Tenant, admission, conditions, provenance};
use tenantplane_core::decision::{Decision, HostAction, Outcome, PolicyRef, Stamp, Subject};
use tenantplane_core::translate::{DESIRED_DIGEST, digest};
use tenantplane_core::{CompiledPolicy, MappingVersion};
use tracing::Instrument as _;

use crate::isolation::{Change, Cluster, IsolationRef, Resolver, Verdict, Write, desired, write};
use crate::record::{COMPONENT, DecisionRecorder, TenantLedger};
use crate::trace;

/// The tenant control plane, as named in write spans and ledger keys.
const TENANT: Cluster = Cluster {
    name: "tenant",
    ledger_prefix: "tenant-admission",
};

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

    fn key(&self) -> String {
        format!("{}:SyncPolicy/{}", TENANT.ledger_prefix, self.policy)
    }

    /// A decision about `target` (an object in the tenant control plane) enforcing `rule`, or
    /// about the compilation as a whole when `target` is `None`.
    fn decision(
        &self,
        target: Option<&IsolationRef>,
        rule: Option<String>,
        verdict: &Verdict,
        input_digest: &str,
        stamp: Stamp,
    ) -> Decision {
        Decision {
            id: stamp.id,
            time: stamp.time,
            tenant: self.tenant.clone(),
            subject: Subject {
                api_version: format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
                kind: "SyncPolicy".into(),
                namespace: String::new(),
                name: self.policy.clone(),
                uid: self.uid.clone(),
                resource_version: self.resource_version.clone(),
            },
            target: target.map(IsolationRef::target),
            outcome: verdict.outcome,
            action: verdict.action,
            policy: Some(PolicyRef {
                name: self.policy.clone(),
                revision: self.revision.clone(),
                rule,
            }),
            profile: None,
            reason: verdict.reason.into(),
            message: verdict.message.clone(),
            field_path: None,
            stripped_keys: Vec::new(),
            input_digest: input_digest.to_string(),
            mapping_version: self.mapping.to_string(),
            closes: None,
            tokens: Vec::new(),
            component: stamp.component,
            component_version: stamp.component_version,
            trace_id: stamp.trace_id,
            span_id: stamp.span_id,
        }
    }
}

/// What a reconcile did in the tenant control plane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Objects created or updated.
    pub applied: usize,
    /// Objects deleted.
    pub pruned: usize,
    /// Objects already as compiled.
    pub unchanged: usize,
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

/// Keeps the tenant control plane's admission equal to the compiled policy, in a span of its
/// own, and sets the `TenantAdmission` condition. A failure is reported on the condition and
/// logged, and does not stop the sync (the host side refuses regardless); the next reconcile
/// tries again.
pub async fn reconcile(
    client: &Client,
    recorder: &DecisionRecorder,
    ledger: &TenantLedger,
    source: &Source,
    compiled: &CompiledPolicy,
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
        let admission = compiled.tenant_admission(&source.tenant);
        match apply(client, recorder, source, &admission).await {
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
    let none = tenantplane_core::TenantAdmission {
        policy: source.policy.clone(),
        revision: source.revision.clone(),
        objects: Vec::new(),
        rules: Vec::new(),
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

/// Applies what is not in place and deletes what is no longer compiled (see the module
/// documentation).
async fn apply(
    client: &Client,
    recorder: &DecisionRecorder,
    source: &Source,
    admission: &tenantplane_core::TenantAdmission,
) -> anyhow::Result<Applied> {
    let started = Instant::now();
    let input = digest(&json!(admission));
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
    let mut result = Applied::default();
    let mut changes: Vec<(Change, Option<String>)> = Vec::new();
    for object in &admission.objects {
        let r = crate::isolation::ref_of(object).context("a compiled object without identity")?;
        let api: Api<DynamicObject> = resolver.api(client, &r.api_version, &r.kind, None).await?;
        let (applied, d) = desired(object);
        let current = existing
            .iter()
            .find(|(kind, m)| *kind == r.kind && m.metadata.name.as_deref() == Some(&r.name));
        let annotation = |key: &str| {
            object.pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))
        };
        let rule = annotation(provenance::SYNC_POLICY_RULE)
            .and_then(|v| v.as_str())
            .map(str::to_string);
        if current.is_some_and(|(_, m)| {
            m.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_DIGEST))
                == Some(&d)
        }) {
            result.unchanged += 1;
            continue;
        }
        let action = annotation(provenance::ADMISSION_ACTIONS)
            .and_then(|v| v.as_str())
            .unwrap_or("Deny");
        changes.push((
            Change {
                target: r.clone(),
                api,
                verdict: Verdict::applied(
                    current.is_some(),
                    String::new(),
                    "CompiledFromSyncPolicy",
                    format!(
                        "{} {} enforces rule {} of SyncPolicy {} (revision {}) at admission in \
                         the tenant control plane ({action})",
                        r.kind,
                        r.name,
                        rule.as_deref().unwrap_or_default(),
                        source.policy,
                        source.revision
                    ),
                ),
                write: Write::Apply(applied),
                cluster: TENANT,
            },
            rule,
        ));
    }
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
        let rule = m
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(provenance::SYNC_POLICY_RULE))
            .cloned();
        changes.push((
            Change {
                target: IsolationRef {
                    api_version: admission::API_VERSION.into(),
                    kind: kind.to_string(),
                    namespace: None,
                    name: name.clone(),
                },
                api,
                verdict: Verdict::pruned(
                    String::new(),
                    format!(
                        "SyncPolicy {} (revision {}) no longer compiles {kind} {name} for the \
                         tenant control plane: deleted",
                        source.policy, source.revision
                    ),
                ),
                write: Write::Delete(m.metadata.uid.clone()),
                cluster: TENANT,
            },
            rule,
        ));
    }
    if changes.is_empty() {
        return Ok(result);
    }
    let compilation = source.decision(
        None,
        None,
        &Verdict {
            outcome: Outcome::Synced,
            action: HostAction::None,
            field_path: String::new(),
            reason: "SyncPolicyCompiledForAdmission",
            message: format!(
                "SyncPolicy {} (revision {}) compiled for the tenant control plane's admission: \
                 {} objects, {} to write, {} unchanged",
                source.policy,
                source.revision,
                admission.objects.len(),
                changes.len(),
                result.unchanged
            ),
        },
        &input,
        trace::stamp_in(&tracing::Span::current(), COMPONENT),
    );
    recorder
        .record(&source.key(), &compilation, &input, None, started)
        .await?;
    for (change, rule) in changes {
        let span = trace::follow_up_span(&compilation);
        let decision = source.decision(
            Some(&change.target),
            rule,
            &change.verdict,
            &input,
            trace::stamp_in(&span, COMPONENT),
        );
        write(recorder, &input, &change, &decision, started)
            .instrument(span)
            .await?;
        match change.verdict.outcome {
            Outcome::Deleted => result.pruned += 1,
            _ => result.applied += 1,
        }
    }
    Ok(result)
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
        reconcile(&client, &recorder, &ledger, &source, &policy).await;
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
