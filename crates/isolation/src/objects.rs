//! The host objects, built from decided settings: one function per object, each saying which
//! settings (and so which profile fields) produced it and why.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_api::{admission, provenance};

use crate::settings::{LEVEL_FIELD, Quantities, Settings, Sourced, is_dns_label};
use crate::{CompileError, CompileOptions, CompiledObject, IsolationProvenance};

/// The user the syncer runs as in a default installation (its ServiceAccount in
/// `tenantplane-system`).
pub const DEFAULT_SYNCER_USERNAME: &str =
    "system:serviceaccount:tenantplane-system:tenantplane-syncer";

/// Users besides the syncer that may change tenantplane-managed objects: Kubernetes' own
/// controllers (garbage collection, eviction, scheduling preemption) and kubelets, which delete
/// the pods they ran. Without them a managed pod could never be evicted or collected.
const CLUSTER_COMPONENT_USERS: &str = "request.userInfo.username in ['system:kube-controller-manager', 'system:kube-scheduler'] \
     || request.userInfo.username.startsWith('system:serviceaccount:kube-system:') \
     || request.userInfo.username.startsWith('system:node:')";

/// Where the objects go and whose provenance they carry.
pub(crate) struct Target {
    tenant: String,
    namespace: String,
    profile: String,
    generation: i64,
    level: tenantplane_api::IsolationLevel,
    syncer_username: String,
}

/// An object before its provenance is attached.
struct Draft {
    api_version: &'static str,
    kind: &'static str,
    name: String,
    namespaced: bool,
    labels: BTreeMap<String, String>,
    spec: Option<Value>,
    fields: Vec<String>,
    explanation: String,
    refused_field: Option<String>,
}

impl Draft {
    fn new(
        api_version: &'static str,
        kind: &'static str,
        name: impl Into<String>,
        spec: Option<Value>,
    ) -> Draft {
        Draft {
            api_version,
            kind,
            name: name.into(),
            namespaced: true,
            labels: BTreeMap::new(),
            spec,
            fields: Vec::new(),
            explanation: String::new(),
            refused_field: None,
        }
    }

    fn decided_by<'a>(mut self, fields: impl IntoIterator<Item = &'a str>) -> Draft {
        self.fields.extend(fields.into_iter().map(str::to_string));
        self
    }

    fn because(mut self, explanation: impl Into<String>) -> Draft {
        self.explanation = explanation.into();
        self
    }

    fn cluster_scoped(mut self) -> Draft {
        self.namespaced = false;
        self
    }
}

impl Target {
    pub(crate) fn new(
        tenant: &Tenant,
        profile: &IsolationProfile,
        options: &CompileOptions,
    ) -> Result<Target, CompileError> {
        let name = tenant.name();
        if !is_dns_label(name) {
            return Err(CompileError::new(
                "tenant.metadata.name",
                format!("{name:?} is not a Tenant name (a DNS-1123 label, at most 63 characters)"),
            ));
        }
        let namespace = tenant.host_namespace();
        if !is_dns_label(&namespace) {
            return Err(CompileError::new(
                "tenant.spec.hostNamespace",
                format!(
                    "{namespace:?} is not a namespace name (a DNS-1123 label, at most 63 characters)"
                ),
            ));
        }
        let profile_name = profile.metadata.name.clone().unwrap_or_default();
        if profile_name.is_empty() {
            return Err(CompileError::new(
                "metadata.name",
                "an IsolationProfile needs a name: it is recorded on every object it produces",
            ));
        }
        let user = &options.syncer_username;
        if user.is_empty() || user.contains(['\'', '\\', '\n']) {
            return Err(CompileError::new(
                "options.syncerUsername",
                format!("{user:?} is not a Kubernetes user name"),
            ));
        }
        Ok(Target {
            tenant: name.to_string(),
            namespace,
            profile: profile_name,
            generation: profile.metadata.generation.unwrap_or(0),
            level: profile.spec.level,
            syncer_username: user.clone(),
        })
    }

    /// Every object the settings call for, in the documented order.
    pub(crate) fn compile(&self, s: &Settings) -> Vec<CompiledObject> {
        let mut drafts = vec![self.namespace(s)];
        drafts.extend(self.network_policies(s));
        drafts.extend(resource_quota(s));
        drafts.extend(limit_range(s));
        drafts.extend(self.admission(s));
        drafts.into_iter().map(|d| self.finish(d)).collect()
    }

    fn finish(&self, d: Draft) -> CompiledObject {
        let mut field_paths = d.fields;
        field_paths.sort();
        field_paths.dedup();
        let mut labels = d.labels;
        labels.insert(provenance::MANAGED.into(), "true".into());
        labels.insert(provenance::TENANT.into(), self.tenant.clone());
        let annotations = BTreeMap::from([
            (provenance::ISOLATION_PROFILE, self.profile.clone()),
            (
                provenance::ISOLATION_PROFILE_GENERATION,
                self.generation.to_string(),
            ),
            (
                provenance::ISOLATION_LEVEL,
                level_name(self.level).to_string(),
            ),
            (provenance::ISOLATION_FIELD, field_paths.join(",")),
        ]);
        let mut metadata = json!({ "name": d.name, "labels": labels, "annotations": annotations });
        if d.namespaced {
            metadata["namespace"] = json!(self.namespace);
        }
        let mut object = Map::new();
        object.insert("apiVersion".into(), json!(d.api_version));
        object.insert("kind".into(), json!(d.kind));
        object.insert("metadata".into(), metadata);
        if let Some(spec) = d.spec {
            object.insert("spec".into(), spec);
        }
        CompiledObject {
            object: sorted_keys(Value::Object(object)),
            provenance: IsolationProvenance {
                profile: self.profile.clone(),
                generation: self.generation,
                level: self.level,
                field_paths,
                explanation: d.explanation,
                refused_field: d.refused_field,
            },
        }
    }

    fn namespace(&self, s: &Settings) -> Draft {
        let mut d = Draft::new("v1", "Namespace", &self.namespace, None)
            .decided_by([
                &*s.enforce.field,
                &s.audit.field,
                &s.warn.field,
                &s.version.field,
            ])
            .because(format!(
                "Pod Security Admission: enforce {}, audit {}, warn {} (standards {})",
                pss(&s.enforce),
                pss(&s.audit),
                pss(&s.warn),
                s.version.value
            ))
            .cluster_scoped();
        for (mode, level) in [
            ("enforce", &s.enforce),
            ("audit", &s.audit),
            ("warn", &s.warn),
        ] {
            let key = format!("pod-security.kubernetes.io/{mode}");
            d.labels
                .insert(format!("{key}-version"), s.version.value.clone());
            d.labels.insert(key, pss(level).to_string());
        }
        d
    }

    fn network_policies(&self, s: &Settings) -> Vec<Draft> {
        let (ingress, egress) = (s.deny_ingress.value, s.deny_egress.value);
        let network_policy = |name: &str, spec: Value| {
            Draft::new("networking.k8s.io/v1", "NetworkPolicy", name, Some(spec))
        };
        let mut out = Vec::new();
        if ingress || egress {
            let types: Vec<&str> = [(ingress, "Ingress"), (egress, "Egress")]
                .into_iter()
                .filter_map(|(on, t)| on.then_some(t))
                .collect();
            out.push(
                network_policy(
                    "tenantplane-default-deny",
                    json!({ "podSelector": {}, "policyTypes": types }),
                )
                .decided_by([&*s.deny_ingress.field, &s.deny_egress.field])
                .because(format!(
                    "denies all {} traffic of the tenant's pods that no other policy allows",
                    types.join(" and ").to_lowercase()
                )),
            );
        }
        if egress && s.allow_dns.value {
            let dns_port = |protocol| json!({ "protocol": protocol, "port": 53 });
            out.push(
                network_policy(
                    "tenantplane-allow-dns",
                    json!({
                        "podSelector": {},
                        "policyTypes": ["Egress"],
                        "egress": [{
                            "to": [{
                                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } },
                                "podSelector": { "matchLabels": { "k8s-app": "kube-dns" } },
                            }],
                            "ports": [dns_port("UDP"), dns_port("TCP")],
                        }],
                    }),
                )
                .decided_by([&*s.allow_dns.field, &s.deny_egress.field])
                .because("lets the tenant's pods resolve names: egress to the cluster DNS (kube-system, k8s-app=kube-dns) on port 53"),
            );
        }
        if s.allow_intra_tenant.value && (ingress || egress) {
            let same_namespace = json!([{ "podSelector": {} }]);
            let mut spec = json!({ "podSelector": {}, "policyTypes": [] });
            if ingress {
                spec["policyTypes"]
                    .as_array_mut()
                    .expect("array")
                    .push(json!("Ingress"));
                spec["ingress"] = json!([{ "from": same_namespace }]);
            }
            if egress {
                spec["policyTypes"]
                    .as_array_mut()
                    .expect("array")
                    .push(json!("Egress"));
                spec["egress"] = json!([{ "to": same_namespace }]);
            }
            out.push(
                network_policy("tenantplane-allow-intra-tenant", spec)
                    .decided_by([
                        &*s.allow_intra_tenant.field,
                        &s.deny_ingress.field,
                        &s.deny_egress.field,
                    ])
                    .because("lets the tenant's pods reach each other inside the host namespace"),
            );
        }
        if egress && !s.egress_cidrs.value.is_empty() {
            let peers: Vec<Value> = s
                .egress_cidrs
                .value
                .iter()
                .map(|cidr| json!({ "ipBlock": { "cidr": cidr } }))
                .collect();
            out.push(
                network_policy(
                    "tenantplane-allow-egress-cidrs",
                    json!({ "podSelector": {}, "policyTypes": ["Egress"], "egress": [{ "to": peers }] }),
                )
                .decided_by([&*s.egress_cidrs.field])
                .because(format!("allows egress to {}", s.egress_cidrs.value.join(", "))),
            );
        }
        if egress && !s.egress_namespaces.value.is_empty() {
            let peers: Vec<Value> = s
                .egress_namespaces
                .value
                .iter()
                .map(|ns| json!({ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } } }))
                .collect();
            out.push(
                network_policy(
                    "tenantplane-allow-egress-namespaces",
                    json!({ "podSelector": {}, "policyTypes": ["Egress"], "egress": [{ "to": peers }] }),
                )
                .decided_by([&*s.egress_namespaces.field])
                .because(format!(
                    "allows egress to the pods of namespace(s) {}",
                    s.egress_namespaces.value.join(", ")
                )),
            );
        }
        out
    }

    fn admission(&self, s: &Settings) -> Vec<Draft> {
        let pods = |operations: &[&str]| json!([{ "apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": ["pods"] }]);
        let mut out = Vec::from(self.admission_pair(
            "protect-managed",
            json!({
                "resourceRules": [
                    {
                        "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["*"], "scope": "Namespaced",
                    },
                    { "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE", "DELETE"], "resources": ["namespaces"] },
                ],
                "objectSelector": { "matchLabels": { provenance::MANAGED: "true" } },
            }),
            format!("request.userInfo.username == '{}' || {CLUSTER_COMPONENT_USERS}", self.syncer_username),
            format!(
                "objects labelled {}=true are tenantplane's: only the syncer ({}) changes them",
                provenance::MANAGED,
                self.syncer_username
            ),
            LEVEL_FIELD,
            &format!("metadata.labels[{}]", provenance::MANAGED),
            "only the syncer (and Kubernetes' own controllers and kubelets) may create, change or delete tenantplane-managed objects in the host namespace",
        ));
        if s.deny_node_ports.value {
            out.extend(self.admission_pair(
                "no-node-ports",
                json!({
                    "resourceRules": [{
                        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["services"],
                    }],
                }),
                "!has(object.spec.type) || !(object.spec.type in ['NodePort', 'LoadBalancer'])".to_string(),
                "a tenant Service may not open ports on the host's nodes (type NodePort or LoadBalancer)".to_string(),
                &s.deny_node_ports.field,
                "spec.type",
                "refuses Services of type NodePort or LoadBalancer in the host namespace",
            ));
        }
        if let Some(class) = &s.runtime_class.value {
            out.extend(self.admission_pair(
                "runtime-class",
                json!({ "resourceRules": pods(&["CREATE"]) }),
                format!(
                    "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == '{class}'"
                ),
                format!("a tenant pod must run with runtimeClassName {class}"),
                &s.runtime_class.field,
                "spec.runtimeClassName",
                &format!("refuses pods that do not set runtimeClassName: {class}"),
            ));
        }
        if s.image_pull_always.value {
            let always = "all(c, has(c.imagePullPolicy) && c.imagePullPolicy == 'Always')";
            out.extend(self.admission_pair(
                "image-pull-always",
                json!({ "resourceRules": pods(&["CREATE", "UPDATE"]) }),
                format!("object.spec.containers.{always} && (!has(object.spec.initContainers) || object.spec.initContainers.{always})"),
                "every container of a tenant pod must use imagePullPolicy: Always, so that a private image cached on a node is pulled again with the tenant's own credentials".to_string(),
                &s.image_pull_always.field,
                "spec.containers[].imagePullPolicy",
                "refuses pods whose containers do not use imagePullPolicy: Always",
            ));
        }
        out
    }

    /// A ValidatingAdmissionPolicy named `tenantplane-<tenant>-<purpose>` (cluster-unique) with one
    /// validation, refusing objects for their field `refuses`, and its binding, scoped to the
    /// host namespace.
    #[expect(
        clippy::too_many_arguments,
        reason = "each admission policy is one call that reads as its table row"
    )]
    fn admission_pair(
        &self,
        purpose: &str,
        match_constraints: Value,
        expression: String,
        message: String,
        field: &str,
        refuses: &str,
        explanation: &str,
    ) -> [Draft; 2] {
        let name = format!("tenantplane-{}-{purpose}", self.tenant);
        let validation = admission::Validation {
            expression,
            message,
            reason: "Forbidden",
        };
        let policy = Draft::new(
            admission::API_VERSION,
            admission::POLICY_KIND,
            &name,
            Some(admission::policy_spec(
                match_constraints,
                &[],
                &[validation],
            )),
        )
        .decided_by([field])
        .because(explanation)
        .cluster_scoped();
        let policy = Draft {
            refused_field: Some(refuses.to_string()),
            ..policy
        };
        let binding = Draft::new(
            admission::API_VERSION,
            admission::BINDING_KIND,
            &name,
            Some(admission::binding_spec(
                &name,
                &["Deny"],
                Some(json!({
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": self.namespace } },
                })),
            )),
        )
        .decided_by([field])
        .because(format!("applies {name} to the host namespace {}", self.namespace))
        .cluster_scoped();
        [policy, binding]
    }
}

fn resource_quota(s: &Settings) -> Option<Draft> {
    if s.quota.is_empty() {
        return None;
    }
    Some(
        Draft::new(
            "v1",
            "ResourceQuota",
            "tenantplane-quota",
            Some(json!({ "hard": values(&s.quota) })),
        )
        .decided_by(s.quota.values().map(|q| q.field.as_str()))
        .because(format!(
            "caps the tenant's use of the host: {}",
            s.quota
                .iter()
                .map(|(k, q)| format!("{k}={}", q.value))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    )
}

fn limit_range(s: &Settings) -> Option<Draft> {
    let parts = [
        ("default", &s.limit_default),
        ("defaultRequest", &s.limit_default_request),
        ("max", &s.limit_max),
    ];
    if parts.iter().all(|(_, q)| q.is_empty()) {
        return None;
    }
    let mut limit = json!({ "type": "Container" });
    for (key, quantities) in parts {
        if !quantities.is_empty() {
            limit[key] = values(quantities);
        }
    }
    Some(
        Draft::new("v1", "LimitRange", "tenantplane-limits", Some(json!({ "limits": [limit] })))
            .decided_by(parts.iter().flat_map(|(_, q)| q.values().map(|v| v.field.as_str())))
            .because("gives every container default requests and limits (so the compute quota can count it) and caps its size"),
    )
}

/// The object with every map's keys in sorted order, whether or not serde_json's
/// `preserve_order` feature is on in the build: output bytes never depend on feature unification.
fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sorted_keys(v))).collect();
            Value::Object(sorted.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

fn values(quantities: &Quantities) -> Value {
    quantities
        .iter()
        .map(|(k, q)| (k.clone(), Value::String(q.value.clone())))
        .collect::<Map<_, _>>()
        .into()
}

fn pss(level: &Sourced<tenantplane_api::isolation_profile::PodSecurityLevel>) -> &'static str {
    use tenantplane_api::isolation_profile::PodSecurityLevel as Pss;
    match level.value {
        Pss::Privileged => "privileged",
        Pss::Baseline => "baseline",
        Pss::Restricted => "restricted",
    }
}

fn level_name(level: tenantplane_api::IsolationLevel) -> &'static str {
    use tenantplane_api::IsolationLevel as L;
    match level {
        L::Baseline => "baseline",
        L::Restricted => "restricted",
        L::Strict => "strict",
    }
}
