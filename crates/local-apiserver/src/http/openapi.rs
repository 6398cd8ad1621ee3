//! OpenAPI v3 (`/openapi/v3` and one document per group/version), shaped like
//! kube-apiserver's: `components.schemas` keyed by definition name
//! (`io.k8s.api.core.v1.Pod`), `x-kubernetes-group-version-kind` on each kind's schema,
//! `$ref`s to `#/components/schemas/...` (wrapped in `allOf` where they carry a
//! description), and paths whose operations name their kind. That is what `kubectl explain`
//! walks, and what kubectl reads to learn that the server does field validation
//! (`fieldValidation` on each PATCH).
//!
//! Built-in schemas come from k8s-openapi's `schemars` implementations (generated from
//! Kubernetes' own OpenAPI, so descriptions and required fields are upstream's); a custom
//! resource's schema is its CRD version's `openAPIV3Schema` with `apiVersion`, `kind` and
//! `metadata` added, as kube-apiserver publishes it. Documents are built once per registry
//! change (built-in ones once per process) and served as stored bytes.
//!
//! PATCH operations list no request body: k8s-openapi's schemas carry no
//! `x-kubernetes-patch-merge-key`, so kubectl's client-side apply keeps using its compiled-in
//! strategic-merge metadata for built-ins instead of computing patches from these schemas.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex};

use axum::body::Bytes;
use k8s_openapi::Resource;
use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, coordination,
    core, discovery, events, networking, node, policy, rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use crate::storage::resources::{Registry, ResourceType};

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// A group (empty for the core group) and a version.
type GroupVersion = (String, String);

/// A kind's schema from k8s-openapi, with its group, version and kind.
struct BuiltinSchema {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    schema: SchemaFn,
}

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

macro_rules! builtin_schemas {
    ($($ty:ty),* $(,)?) => {
        [$(BuiltinSchema {
            group: <$ty as Resource>::GROUP,
            version: <$ty as Resource>::VERSION,
            kind: <$ty as Resource>::KIND,
            schema: schema_of::<$ty>,
        }),*]
    };
}

/// The k8s-openapi type of every built-in kind the server serves.
static BUILTIN_SCHEMAS: &[BuiltinSchema] = &builtin_schemas![
    core::v1::Namespace,
    core::v1::Pod,
    core::v1::Service,
    core::v1::Endpoints,
    core::v1::ConfigMap,
    core::v1::Secret,
    core::v1::PersistentVolumeClaim,
    core::v1::ServiceAccount,
    core::v1::Event,
    core::v1::ResourceQuota,
    core::v1::LimitRange,
    events::v1::Event,
    networking::v1::Ingress,
    networking::v1::NetworkPolicy,
    node::v1::RuntimeClass,
    coordination::v1::Lease,
    admissionregistration::v1::ValidatingAdmissionPolicy,
    admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    apps::v1::Deployment,
    apps::v1::StatefulSet,
    apps::v1::DaemonSet,
    apps::v1::ReplicaSet,
    apps::v1::ControllerRevision,
    batch::v1::Job,
    batch::v1::CronJob,
    policy::v1::PodDisruptionBudget,
    rbac::v1::Role,
    rbac::v1::RoleBinding,
    rbac::v1::ClusterRole,
    rbac::v1::ClusterRoleBinding,
    autoscaling::v2::HorizontalPodAutoscaler,
    discovery::v1::EndpointSlice,
    apiregistration::v1::APIService,
    authorization::v1::SelfSubjectAccessReview,
    authorization::v1::SelfSubjectRulesReview,
    authorization::v1::SubjectAccessReview,
    authorization::v1::LocalSubjectAccessReview,
    authentication::v1::TokenReview,
    authentication::v1::SelfSubjectReview,
    apiextensions::v1::CustomResourceDefinition,
];

/// One group/version document, serialized, with the hash its URL carries.
#[derive(Debug)]
struct Document {
    json: Bytes,
    hash: String,
}

impl Document {
    fn new(value: &Value) -> Arc<Self> {
        let text = value.to_string();
        let mut hasher = std::hash::DefaultHasher::new();
        text.hash(&mut hasher);
        Arc::new(Self {
            hash: format!("{:016X}", hasher.finish()),
            json: Bytes::from(text),
        })
    }
}

/// Every document the server publishes for one state of the registry.
#[derive(Debug)]
pub struct OpenApiDocuments {
    root: Bytes,
    /// Keyed by `api/v1` or `apis/{group}/{version}`.
    documents: HashMap<String, Arc<Document>>,
}

/// The documents of the registry's latest revision, built on first use after each change of
/// the served resources.
#[derive(Debug, Default)]
pub struct OpenApiCache(Mutex<Option<(u64, Arc<OpenApiDocuments>)>>);

impl OpenApiCache {
    /// The OpenAPI v3 documents for the resources `registry` serves.
    pub fn documents(&self, registry: &Registry) -> Arc<OpenApiDocuments> {
        // A panic while building leaves the slot as it was: still usable.
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some((revision, documents)) if *revision == registry.revision() => documents.clone(),
            _ => {
                let documents = Arc::new(build(registry));
                *slot = Some((registry.revision(), documents.clone()));
                documents
            }
        }
    }
}

impl OpenApiDocuments {
    /// `/openapi/v3` (`[]`) or one group/version (`["api", "v1"]`, `["apis", group, version]`).
    pub fn get(&self, path: &[&str]) -> Option<Bytes> {
        if path.is_empty() {
            return Some(self.root.clone());
        }
        self.documents
            .get(&path.join("/"))
            .map(|document| document.json.clone())
    }
}

fn document_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Built-in group/version documents, unchanging: built once per process.
static BUILTIN_DOCUMENTS: LazyLock<HashMap<GroupVersion, Arc<Document>>> = LazyLock::new(|| {
    by_group_version(&Registry::default())
        .into_iter()
        .map(|(key, types)| (key, Document::new(&group_version_document(&types))))
        .collect()
});

/// The schemas of every built-in kind, of the types they use and of the other types the
/// server reads (DeleteOptions, Scale, TokenRequest), keyed by definition name (`io.k8s.api.core.v1.Volume`):
/// what `http/protobuf.rs` derives Go's JSON rules from. Built once per process.
pub(crate) fn builtin_definitions() -> &'static Map<String, Value> {
    static DEFINITIONS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
        let mut generator = generator();
        for builtin in BUILTIN_SCHEMAS {
            (builtin.schema)(&mut generator);
        }
        generator.subschema_for::<DeleteOptions>();
        generator.subschema_for::<autoscaling::v1::Scale>();
        generator.subschema_for::<authentication::v1::TokenRequest>();
        generator.take_definitions(true)
    });
    &DEFINITIONS
}

fn generator() -> SchemaGenerator {
    SchemaSettings::openapi3()
        .with(|settings| settings.meta_schema = None)
        .into_generator()
}

/// The served types grouped by group/version.
fn by_group_version(registry: &Registry) -> BTreeMap<GroupVersion, Vec<&ResourceType>> {
    let mut grouped: BTreeMap<GroupVersion, Vec<&ResourceType>> = BTreeMap::new();
    for t in registry.types() {
        grouped
            .entry((t.group.clone(), t.version.clone()))
            .or_default()
            .push(t);
    }
    grouped
}

fn build(registry: &Registry) -> OpenApiDocuments {
    let mut documents = HashMap::new();
    let mut root = Map::new();
    for ((group, version), types) in by_group_version(registry) {
        let builtin = BUILTIN_DOCUMENTS.get(&(group.clone(), version.clone()));
        let document = match builtin {
            Some(document) if types.iter().all(|t| !t.custom) => document.clone(),
            _ => Document::new(&group_version_document(&types)),
        };
        let key = document_key(&group, &version);
        root.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", document.hash)}),
        );
        documents.insert(key, document);
    }
    OpenApiDocuments {
        root: Bytes::from(json!({"paths": root}).to_string()),
        documents,
    }
}

/// The document of one group/version: paths and schemas of its kinds.
fn group_version_document(types: &[&ResourceType]) -> Value {
    let mut generator = generator();
    let mut kinds = Vec::new();
    let mut custom = Vec::new();
    for t in types {
        if t.custom {
            custom.push(*t);
            continue;
        }
        let Some(builtin) = BUILTIN_SCHEMAS
            .iter()
            .find(|b| b.group == t.group && b.version == t.version && b.kind == t.kind)
        else {
            continue;
        };
        let reference = (builtin.schema)(&mut generator);
        if let Some(name) = reference
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
        {
            kinds.push((*t, name.to_string()));
        }
    }
    let object_meta = if custom.is_empty() {
        None
    } else {
        Some(generator.subschema_for::<ObjectMeta>().to_value())
    };
    let mut schemas = generator.take_definitions(true);
    for t in custom {
        let name = custom_schema_name(t);
        schemas.insert(name.clone(), custom_schema(t, object_meta.as_ref()));
        kinds.push((t, name));
    }
    let mut paths = Map::new();
    for (t, name) in &kinds {
        if let Some(Value::Object(schema)) = schemas.get_mut(name) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": t.group, "kind": t.kind, "version": t.version}]),
            );
        }
        kind_paths(&mut paths, t, name);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (tenantplane-local-apiserver)", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// kube-apiserver's name for a custom resource's schema: the group reversed, the version
/// and the kind (`io.tenantplane.example.v1.Widget`).
fn custom_schema_name(t: &ResourceType) -> String {
    let mut group: Vec<&str> = t.group.split('.').collect();
    group.reverse();
    format!("{}.{}.{}", group.join("."), t.version, t.kind)
}

/// A custom resource's published schema: its `openAPIV3Schema` (any object when it has
/// none) with the `apiVersion`, `kind` and `metadata` every object has.
fn custom_schema(t: &ResourceType, object_meta: Option<&Value>) -> Value {
    let mut schema = t
        .schema
        .as_deref()
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    schema["properties"]["apiVersion"] = json!({
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
        "type": "string",
    });
    schema["properties"]["kind"] = json!({
        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
        "type": "string",
    });
    if let Some(reference) = object_meta {
        schema["properties"]["metadata"] = json!({
            "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            "allOf": [reference],
        });
    }
    schema
}

/// The operations of one kind: enough for kubectl to find the kind of a resource (the
/// `x-kubernetes-group-version-kind` of an operation on its path) and the query parameters
/// PATCH accepts.
fn kind_paths(paths: &mut Map<String, Value>, t: &ResourceType, schema_name: &str) {
    let prefix = if t.group.is_empty() {
        format!("/api/{}", t.version)
    } else {
        format!("/apis/{}/{}", t.group, t.version)
    };
    let collection = if t.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", t.plural)
    } else {
        format!("{prefix}/{}", t.plural)
    };
    let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let response = json!({"200": {
        "description": "OK",
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema_name}")}}},
    }});
    let operation = |action: &str, verb: &str| {
        json!({
            "operationId": format!("{verb}{}", t.kind),
            "responses": response,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        })
    };
    if t.is_review() {
        paths.insert(collection, json!({"post": operation("post", "create")}));
        return;
    }
    paths.insert(
        collection.clone(),
        json!({"get": operation("list", "list"), "post": operation("post", "create")}),
    );
    let mut patch = operation("patch", "patch");
    patch["parameters"] = ["dryRun", "fieldManager", "fieldValidation", "force"]
        .iter()
        .map(|name| json!({"name": name, "in": "query", "schema": {"type": "string"}}))
        .collect();
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({"get": operation("get", "read"), "patch": patch}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_kind_has_a_schema_of_its_group_version() {
        for t in Registry::default().types() {
            assert!(
                BUILTIN_SCHEMAS
                    .iter()
                    .any(|b| b.group == t.group && b.version == t.version && b.kind == t.kind),
                "{}/{} {}",
                t.group,
                t.version,
                t.kind
            );
        }
    }

    #[test]
    fn documents_resolve_their_refs() {
        let parse =
            |document: &Document| -> Value { serde_json::from_slice(&document.json).unwrap() };
        for ((group, version), document) in BUILTIN_DOCUMENTS.iter() {
            let text = String::from_utf8(document.json.to_vec()).unwrap();
            let document = parse(document);
            let schemas = document["components"]["schemas"].as_object().unwrap();
            for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
                let name = &reference[..reference.find('"').unwrap()];
                assert!(schemas.contains_key(name), "{group}/{version}: {name}");
            }
        }
        let core = parse(&BUILTIN_DOCUMENTS[&(String::new(), "v1".to_string())]);
        let pod = &core["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );
        // A described reference is wrapped in allOf, as kube-apiserver publishes it.
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
    }
}
