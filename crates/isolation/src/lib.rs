//! The isolation compiler: `(Tenant, IsolationProfile)` to the host objects that enforce it.
//!
//! ```text
//!  IsolationProfile ──spec.level──▶ the level's values ──overrides──▶ settings (each value with
//!        │                                                            the field that decided it)
//!  Tenant ──host namespace──────────────────────────────────────────────────┐      │ checks
//!                                                                           ▼      ▼
//!  Compilation: Namespace (Pod Security labels) · NetworkPolicies · ResourceQuota · LimitRange
//!               · ValidatingAdmissionPolicy + Binding pairs, each with its provenance
//!        │
//!        └── prune(previously applied) ──▶ what the syncer removes
//! ```
//!
//! Pure and deterministic: no cluster, no I/O, the same input gives byte-identical output in a
//! stable order with stable names. The isolation-compiler service, the syncer and
//! `tenantplane compile-isolation` all call [`compile`]. docs/isolation.md documents each level
//! object by object and maps them onto the Multi-Tenancy Benchmarks.

mod objects;
mod quantity;
mod settings;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;
use tenantplane_api::{IsolationLevel, IsolationProfile, Tenant};

pub use objects::DEFAULT_SYNCER_USERNAME;

/// What a compilation produced: the host objects, in a stable order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Compilation {
    /// Namespace, NetworkPolicies, ResourceQuota, LimitRange, then admission policy and binding
    /// pairs; only those the settings call for.
    pub objects: Vec<CompiledObject>,
}

/// One host object and why it exists.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CompiledObject {
    /// The full object (apiVersion, kind, metadata with the provenance labels and annotations,
    /// spec), ready to apply.
    pub object: Value,
    /// Why it exists.
    pub provenance: IsolationProvenance,
}

/// Which profile, level and fields produced an object.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IsolationProvenance {
    /// IsolationProfile name.
    pub profile: String,
    /// The profile's `metadata.generation` (0 for a profile read from a file).
    pub generation: i64,
    /// The profile's level.
    pub level: IsolationLevel,
    /// Profile fields that decided the object, sorted (`spec.level` when the level's values did).
    pub field_paths: Vec<String>,
    /// One sentence a person can read: what the object enforces.
    pub explanation: String,
    /// For a ValidatingAdmissionPolicy: the field of the objects it refuses
    /// (`spec.containers[].imagePullPolicy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_field: Option<String>,
}

/// The identity of a host object: what the syncer applies and deletes by.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `v1`, `networking.k8s.io/v1`, ...
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The identity of an object given as JSON; `None` when apiVersion, kind or name is missing.
    pub fn from_object(object: &Value) -> Option<ObjectRef> {
        let text = |v: &Value| v.as_str().map(str::to_string);
        Some(ObjectRef {
            api_version: text(object.get("apiVersion")?)?,
            kind: text(object.get("kind")?)?,
            namespace: object.pointer("/metadata/namespace").and_then(text),
            name: text(object.pointer("/metadata/name")?)?,
        })
    }

    /// The API group (empty for the core group): a version change alone is the same object.
    fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    fn same_object(&self, other: &ObjectRef) -> bool {
        self.group() == other.group()
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.name)
    }
}

impl Compilation {
    /// The identities of the compiled objects, in output order.
    pub fn refs(&self) -> Vec<ObjectRef> {
        self.objects
            .iter()
            .map(|o| ObjectRef::from_object(&o.object).expect("compiled objects are complete"))
            .collect()
    }

    /// The previously applied objects this compilation no longer wants, in their given order,
    /// each once: the syncer deletes them (and records that it did). An object whose apiVersion
    /// alone changed is still wanted. A Namespace is never pruned: it holds the tenant's
    /// workloads, and only its labels are isolation's.
    pub fn prune(&self, previously_applied: &[ObjectRef]) -> Vec<ObjectRef> {
        let wanted = self.refs();
        let mut out: Vec<ObjectRef> = Vec::new();
        for old in previously_applied {
            let gone = !wanted.iter().any(|w| w.same_object(old));
            let is_namespace = old.kind == "Namespace" && old.group().is_empty();
            if gone && !is_namespace && !out.iter().any(|o| o.same_object(old)) {
                out.push(old.clone());
            }
        }
        out
    }
}

/// Bad input: the profile or tenant field at fault and what is wrong with it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct CompileError {
    /// Field path, e.g. `spec.network.allowedEgressCidrs[1]`.
    pub field: String,
    /// What is wrong, and where it helps, how to fix it.
    pub problem: String,
}

impl CompileError {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        CompileError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// Choices that belong to the installation rather than to a profile.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CompileOptions {
    /// The user the syncer acts as: the only one (with Kubernetes' own controllers and kubelets)
    /// allowed to change objects labelled `tenantplane.io/managed=true` in a host namespace.
    /// Defaults to [`DEFAULT_SYNCER_USERNAME`].
    pub syncer_username: String,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            syncer_username: DEFAULT_SYNCER_USERNAME.to_string(),
        }
    }
}

/// Compiles a profile for a tenant with the default [`CompileOptions`].
pub fn compile(tenant: &Tenant, profile: &IsolationProfile) -> Result<Compilation, CompileError> {
    compile_with(tenant, profile, &CompileOptions::default())
}

/// Compiles a profile for a tenant.
pub fn compile_with(
    tenant: &Tenant,
    profile: &IsolationProfile,
    options: &CompileOptions,
) -> Result<Compilation, CompileError> {
    let settings = settings::Settings::of_profile(&profile.spec)?;
    let target = objects::Target::new(tenant, profile, options)?;
    Ok(Compilation {
        objects: target.compile(&settings),
    })
}

/// Reads a Tenant or an IsolationProfile (or any resource) from JSON, naming the field at fault
/// on error: `spec.level: unknown variant `extreme`, expected one of ...`.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, CompileError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        CompileError::new(
            if field == "." { String::new() } else { field },
            e.into_inner().to_string(),
        )
    })
}
