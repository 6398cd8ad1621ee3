//! The isolation boundary: what the host's admission refuses, under the tenant's compiled
//! IsolationProfile, of a host object the syncer would write.
//!
//! ```text
//!  (Tenant, IsolationProfile) ──tenantplane_isolation::compile──▶ Namespace labels · admission policies
//!                                                                     │ Boundary::compile
//!  host object a decision would write ──as the host stores it──▶ Pod Security (enforce level:version)
//!                                                              ──▶ each ValidatingAdmissionPolicy,
//!                                                                  in binding name order
//!                                    ──▶ admitted, or a ProfileRefusal with the host's own message
//! ```
//!
//! The host checks a pod with Pod Security before any ValidatingAdmissionPolicy (kube-apiserver's
//! plugin order), so the refusal is the first the host would give: the enforce level of the
//! host namespace's labels ([`crate::pod_security`]), then the profile's admission policies
//! ([`crate::policy::validating`]). A policy that judges who writes rather than what is written
//! (`protect-managed`, which reads `request.userInfo`) is not evaluated: the syncer is the
//! writer it admits. Before evaluating, a pod is completed as the host's API server completes a
//! new pod before admission (defaults an admission rule reads, the AppArmor annotations copied
//! into fields): what is judged is what the host will judge.
//!
//! Pod Security judges pods when they are created (on update, kube-apiserver re-evaluates a pod
//! only when an image changes, which tenantplane does not see on the host side): an update is
//! checked by the admission policies alone.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_isolation::{Compilation, CompileError};

use crate::decision::{HostAction, ProfileRef};
use crate::object::group_of;
use crate::pod_security::{Level, LevelVersion, PodSecurityRefusal};
use crate::policy::validating::{AdmissionPolicy, PolicyUnusable, Request};
use crate::scope::BuiltinKind;

/// The reason of a decision refused by the profile's Pod Security level.
pub const POD_SECURITY_FORBIDDEN: &str = "PodSecurityForbidden";
/// The reason of a decision refused by one of the profile's admission policies.
pub const PROFILE_ADMISSION_FORBIDDEN: &str = "ProfileAdmissionForbidden";

/// What the host's admission checks in a tenant's host namespace under its IsolationProfile.
#[derive(Debug)]
pub struct Boundary {
    profile: String,
    generation: i64,
    /// The host namespace's labels, `kubernetes.io/metadata.name` included.
    namespace_labels: BTreeMap<String, String>,
    /// The profile fields that set its Pod Security labels.
    pod_security_fields: String,
    pod_security: Option<Enforced>,
    /// In binding name order, the order kube-apiserver evaluates them in.
    policies: Vec<ProfilePolicy>,
}

/// The Pod Security level the host namespace enforces, and the profile fields that set it.
#[derive(Debug)]
struct Enforced {
    level: LevelVersion,
    fields: String,
}

#[derive(Debug)]
struct ProfilePolicy {
    policy: AdmissionPolicy,
    /// The compiled ValidatingAdmissionPolicy and its binding.
    objects: [Value; 2],
    /// The profile fields that produced it.
    fields: String,
    /// The field of the objects it refuses.
    refused_field: String,
}

/// A host object the host would refuse under the tenant's IsolationProfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileRefusal {
    /// The profile, its generation, the fields and the rule that refuse.
    pub profile: ProfileRef,
    /// [`POD_SECURITY_FORBIDDEN`] or [`PROFILE_ADMISSION_FORBIDDEN`].
    pub reason: &'static str,
    /// The offending field of the object.
    pub field_path: String,
    /// The host API server's message, word for word
    /// (`pods "web-x-shop" is forbidden: violates PodSecurity "restricted:v1.34": ...`).
    pub host_message: String,
}

impl ProfileRefusal {
    /// The decision's message: which profile refuses, and the host's own words.
    pub fn message(&self) -> String {
        format!(
            "the host refuses it under IsolationProfile {} ({}): {}",
            self.profile.name,
            self.profile.rule.as_deref().unwrap_or_default(),
            self.host_message
        )
    }
}

impl Boundary {
    /// The boundary of `tenant` under `profile`, compiled by the isolation compiler.
    pub fn compile(tenant: &Tenant, profile: &IsolationProfile) -> Result<Boundary, CompileError> {
        let compilation = tenantplane_isolation::compile(tenant, profile)?;
        Boundary::of(&tenant.host_namespace(), &compilation)
    }

    /// The boundary the objects of `compilation` set up in `host_namespace`.
    fn of(host_namespace: &str, compilation: &Compilation) -> Result<Boundary, CompileError> {
        let mut namespace_labels =
            BTreeMap::from([(METADATA_NAME.to_string(), host_namespace.to_string())]);
        let mut pod_security = None;
        let mut pod_security_fields = String::new();
        let mut policies = Vec::new();
        let (mut profile, mut generation) = (String::new(), 0);
        for compiled in &compilation.objects {
            let object = &compiled.object;
            let provenance = &compiled.provenance;
            (profile, generation) = (provenance.profile.clone(), provenance.generation);
            let fields = provenance.field_paths.join(",");
            match object["kind"].as_str() {
                Some("Namespace") => {
                    namespace_labels.extend(string_map(&object["metadata"]["labels"]));
                    pod_security_fields.clone_from(&fields);
                    let level = LevelVersion::enforced_by_labels(&namespace_labels);
                    pod_security =
                        (level.level != Level::Privileged).then_some(Enforced { level, fields });
                }
                Some(tenantplane_api::admission::POLICY_KIND) => {
                    let name = &object["metadata"]["name"];
                    let Some(binding) = compilation.objects.iter().find(|b| {
                        b.object["kind"] == tenantplane_api::admission::BINDING_KIND
                            && b.object["spec"]["policyName"] == *name
                    }) else {
                        continue;
                    };
                    let policy = match AdmissionPolicy::compile(object, &binding.object) {
                        Ok(policy) => policy,
                        // About who writes: the syncer is the writer it admits.
                        Err(PolicyUnusable::ReadsBeyondObject { .. }) => continue,
                        Err(e @ PolicyUnusable::Invalid { .. }) => {
                            return Err(CompileError {
                                field: name.as_str().unwrap_or_default().to_string(),
                                problem: e.to_string(),
                            });
                        }
                    };
                    policies.push(ProfilePolicy {
                        policy,
                        objects: [object.clone(), binding.object.clone()],
                        fields,
                        refused_field: provenance.refused_field.clone().unwrap_or_default(),
                    });
                }
                _ => {}
            }
        }
        policies.sort_by(|a, b| a.policy.binding().cmp(b.policy.binding()));
        Ok(Boundary {
            profile,
            generation,
            namespace_labels,
            pod_security_fields,
            pod_security,
            policies,
        })
    }

    /// The profile: its name and generation.
    pub fn profile(&self) -> ProfileRef {
        ProfileRef {
            name: self.profile.clone(),
            generation: self.generation,
            field_path: String::new(),
            rule: None,
        }
    }

    /// The Pod Security level and version the host namespace enforces (none: privileged).
    pub fn pod_security(&self) -> Option<LevelVersion> {
        self.pod_security.as_ref().map(|e| e.level)
    }

    /// The host namespace's Pod Security labels (`pod-security.kubernetes.io/*`), and the profile
    /// fields that set them.
    pub fn pod_security_labels(&self) -> (BTreeMap<String, String>, &str) {
        let labels = self
            .namespace_labels
            .iter()
            .filter(|(k, _)| k.starts_with(POD_SECURITY_LABEL_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (labels, &self.pod_security_fields)
    }

    /// The admission policies the host evaluates (each a ValidatingAdmissionPolicy and its
    /// binding, as compiled), with the profile fields that produced each, in evaluation order.
    pub fn admission_policies(&self) -> impl Iterator<Item = (&[Value; 2], &str)> {
        self.policies
            .iter()
            .map(|p| (&p.objects, p.fields.as_str()))
    }

    /// Whether the host admits `object` (a host object, as translated) when `action` writes it;
    /// otherwise the refusal the host would give first.
    pub fn admit(&self, object: &Value, action: HostAction) -> Result<(), Box<ProfileRefusal>> {
        let operation = match action {
            HostAction::Create => "CREATE",
            HostAction::Update => "UPDATE",
            HostAction::Delete | HostAction::None => return Ok(()),
        };
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = (
            group_of(api_version),
            api_version.rsplit('/').next().unwrap_or_default(),
        );
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let resource = BuiltinKind::get(group, kind).map_or("", |k| k.plural);
        let pod = group.is_empty() && kind == "Pod";
        let mut stored = object.clone();
        if pod {
            complete_pod(&mut stored, action == HostAction::Create);
        }
        if let Some(enforced) = self
            .pod_security
            .as_ref()
            .filter(|_| pod && operation == "CREATE")
        {
            let findings = enforced.level.evaluate(&stored);
            if let Some(first) = findings.first() {
                let (rule, field_path) =
                    (format!("PodSecurity/{}", first.check), first.field.clone());
                let refusal = PodSecurityRefusal {
                    enforced: enforced.level,
                    findings,
                };
                return Err(Box::new(ProfileRefusal {
                    profile: self.refusing(&enforced.fields, rule),
                    reason: POD_SECURITY_FORBIDDEN,
                    field_path,
                    host_message: refusal.message(name),
                }));
            }
        }
        let request = Request {
            operation,
            group,
            version,
            resource,
            object: &stored,
            namespace_labels: &self.namespace_labels,
        };
        for p in &self.policies {
            if let Err(denied) = p.policy.admit(&request) {
                let qualified = match group {
                    "" => resource.to_string(),
                    group => format!("{resource}.{group}"),
                };
                return Err(Box::new(ProfileRefusal {
                    profile: self.refusing(
                        &p.fields,
                        format!("ValidatingAdmissionPolicy/{}", p.policy.name()),
                    ),
                    reason: PROFILE_ADMISSION_FORBIDDEN,
                    field_path: p.refused_field.clone(),
                    host_message: format!("{qualified} \"{name}\" is forbidden: {denied}"),
                }));
            }
        }
        Ok(())
    }

    /// The profile, with the fields and the rule that refuse.
    fn refusing(&self, fields: &str, rule: String) -> ProfileRef {
        ProfileRef {
            field_path: fields.to_string(),
            rule: Some(rule),
            ..self.profile()
        }
    }
}

/// The label every namespace carries with its own name.
const METADATA_NAME: &str = "kubernetes.io/metadata.name";

/// The prefix of the Pod Security labels of a namespace.
const POD_SECURITY_LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Completes a pod as kube-apiserver does before admission, in what admission reads: each
/// container's `imagePullPolicy` (`Always` for an image tagged `latest` or not tagged,
/// `IfNotPresent` otherwise), the host ports of a `hostNetwork` pod (its container ports), and,
/// on create, the container AppArmor profiles of the annotations Kubernetes before 1.30 used
/// (unless the pod-level profile is the same).
pub fn complete_pod(pod: &mut Value, create: bool) {
    let annotations = string_map(&pod["metadata"]["annotations"]);
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let host_network = spec.get("hostNetwork") == Some(&json!(true));
    let windows = spec.get("os").and_then(|os| os.get("name")) == Some(&json!("windows"));
    let pod_app_armor = spec
        .get("securityContext")
        .and_then(|sc| sc.get("appArmorProfile"))
        .cloned();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            if list != "ephemeralContainers" {
                if c.get("imagePullPolicy")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                    let policy = if image_tag(image) == Some("latest") {
                        "Always"
                    } else {
                        "IfNotPresent"
                    };
                    c.insert("imagePullPolicy".into(), json!(policy));
                }
                if host_network && let Some(Value::Array(ports)) = c.get_mut("ports") {
                    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                        if port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0
                            && let Some(container_port) = port.get("containerPort").cloned()
                        {
                            port.insert("hostPort".into(), container_port);
                        }
                    }
                }
            }
            if !create || windows {
                continue;
            }
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let Some(annotation) = annotations.get(&format!(
                "container.apparmor.security.beta.kubernetes.io/{name}"
            )) else {
                continue;
            };
            if c.get("securityContext")
                .and_then(|sc| sc.get("appArmorProfile"))
                .is_some()
            {
                continue;
            }
            let field = match annotation.as_str() {
                "unconfined" => Some(json!({"type": "Unconfined"})),
                "runtime/default" => Some(json!({"type": "RuntimeDefault"})),
                other => other
                    .strip_prefix("localhost/")
                    .filter(|p| !p.is_empty() && p.trim() == *p)
                    .map(|p| json!({"type": "Localhost", "localhostProfile": p})),
            };
            if let Some(field) = field.filter(|f| Some(f) != pod_app_armor.as_ref()) {
                c.entry("securityContext").or_insert_with(|| json!({}))["appArmorProfile"] = field;
            }
        }
    }
}

/// The tag of an image reference (`latest` when it has neither tag nor digest); `None` when it
/// is not a reference the API server can read (`IfNotPresent`, as for any tag but `latest`).
fn image_tag(image: &str) -> Option<&str> {
    let (named, digest) = match image.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (image, None),
    };
    let (first, rest) = named.split_once('/').unwrap_or(("", named));
    let has_domain = first.contains(['.', ':']) || first == "localhost";
    let path = if has_domain { rest } else { named };
    let (repository, tag) = match path.rsplit_once('/') {
        Some((_, last)) => (path, last.split_once(':').map(|(_, tag)| tag)),
        None => (path, path.split_once(':').map(|(_, tag)| tag)),
    };
    let repository = tag.map_or(repository, |tag| {
        &repository[..repository.len() - tag.len() - 1]
    });
    if repository.is_empty() || repository.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    match (tag, digest) {
        (Some(tag), _) => Some(tag),
        (None, Some(_)) => Some(""),
        (None, None) => Some("latest"),
    }
}
