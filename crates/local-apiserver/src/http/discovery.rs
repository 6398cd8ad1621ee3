//! Discovery, rendered from the resource table: `/api`, `/apis`, `/apis/{group}`, the
//! group/version resource lists, and aggregated discovery (`apidiscovery.k8s.io/v2`, which
//! clients ask for with an `Accept` of `...;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`),
//! with kube-apiserver's verbs, short names, `all` category and subresources.

use serde_json::{Value, json};

use crate::http::scale;
use crate::storage::resources::{AUTHENTICATION_GROUP, Registry, ResourceType};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `kubectl get all` lists the kinds in the `all` category (as kube-apiserver puts them).
fn categories(t: &ResourceType) -> Option<[&'static str; 1]> {
    let all = match t.group.as_str() {
        "" => matches!(t.plural.as_str(), "pods" | "services"),
        "apps" => t.plural != "controllerrevisions",
        "batch" => true,
        "autoscaling" => t.plural == "horizontalpodautoscalers",
        _ => false,
    };
    (all && !t.custom).then_some(["all"])
}

/// The verbs discovery lists: reviews are create-only.
fn verbs(t: &ResourceType) -> &'static [&'static str] {
    if t.is_review() { &["create"] } else { &VERBS }
}

/// One subresource as discovery lists it, with the kind it answers with.
struct Subresource {
    name: &'static str,
    group: String,
    version: String,
    kind: String,
    verbs: &'static [&'static str],
}

/// The subresources discovery lists: `status`, `scale` and `token` where served.
fn subresources(t: &ResourceType) -> Vec<Subresource> {
    let mut subresources = Vec::new();
    if t.has_status {
        subresources.push(Subresource {
            name: "status",
            group: t.group.clone(),
            version: t.version.clone(),
            kind: t.kind.clone(),
            verbs: &["get", "patch", "update"],
        });
    }
    if scale::has_scale(t) {
        subresources.push(Subresource {
            name: "scale",
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
            verbs: &["get", "patch", "update"],
        });
    }
    if t.issues_tokens() {
        subresources.push(Subresource {
            name: "token",
            group: AUTHENTICATION_GROUP.into(),
            version: "v1".into(),
            kind: "TokenRequest".into(),
            verbs: &["create"],
        });
    }
    subresources
}

fn discovery_entries(t: &ResourceType) -> Vec<Value> {
    let mut entries = vec![json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": verbs(t),
        "shortNames": t.short_names,
    })];
    if let Some(categories) = categories(t) {
        entries[0]["categories"] = json!(categories);
    }
    for sub in subresources(t) {
        let mut entry = json!({
            "name": format!("{}/{}", t.plural, sub.name),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": sub.kind,
            "verbs": sub.verbs,
        });
        // Legacy discovery names the group version only where it is not the resource's.
        if sub.group != t.group || sub.version != t.version {
            entry["group"] = json!(sub.group);
            entry["version"] = json!(sub.version);
        }
        entries.push(entry);
    }
    entries
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// The served API groups (the core group aside) with their versions, in the table's order,
/// those of unavailable APIServices included.
fn groups(registry: &Registry) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for t in registry.types().iter().filter(|t| !t.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) => {
                if !versions.contains(&t.version) {
                    versions.push(t.version.clone());
                }
            }
            None => groups.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    for (group, version) in registry.unavailable() {
        match groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, versions)) => {
                if !versions.contains(version) {
                    versions.push(version.clone());
                }
            }
            None => groups.push((group.clone(), vec![version.clone()])),
        }
    }
    groups
}

fn group_document(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

/// `GET /apis`.
pub fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = groups(registry)
        .iter()
        .map(|(g, v)| group_document(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`.
pub fn group(registry: &Registry, group: &str) -> Option<Value> {
    let (name, versions) = groups(registry).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_document(&name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` and `GET /apis/{group}/{version}`.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    if !registry.serves_group_version(group, version) {
        return None;
    }
    let resources: Vec<Value> = registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .flat_map(discovery_entries)
        .collect();
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// The aggregated document for `/api` (`core`) or `/apis`.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let mut items: Vec<Value> = Vec::new();
    let mut groups: Vec<String> = if core {
        vec![String::new()]
    } else {
        groups(registry).into_iter().map(|(g, _)| g).collect()
    };
    groups.dedup();
    for group in groups {
        let mut versions: Vec<String> = registry
            .types()
            .iter()
            .filter(|t| t.group == group)
            .map(|t| t.version.clone())
            .collect();
        versions.dedup();
        for (g, version) in registry.unavailable() {
            if *g == group && !versions.contains(version) {
                versions.push(version.clone());
            }
        }
        let versions: Vec<Value> = versions
            .iter()
            .map(|version| {
                if registry.is_unavailable(&group, version) {
                    return json!({"version": version, "freshness": "Stale"});
                }
                let resources: Vec<Value> = registry
                    .types()
                    .iter()
                    .filter(|t| t.group == group && t.version == *version)
                    .map(aggregated_entry)
                    .collect();
                json!({"version": version, "resources": resources, "freshness": "Current"})
            })
            .collect();
        items.push(json!({"metadata": {"name": group}, "versions": versions}));
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_entry(t: &ResourceType) -> Value {
    let response_kind = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let mut entry = json!({
        "resource": t.plural,
        "responseKind": response_kind,
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": verbs(t),
        "shortNames": t.short_names,
    });
    if let Some(categories) = categories(t) {
        entry["categories"] = json!(categories);
    }
    let subresources: Vec<Value> = subresources(t)
        .into_iter()
        .map(|sub| {
            json!({
                "subresource": sub.name,
                "responseKind": {"group": sub.group, "version": sub.version, "kind": sub.kind},
                "verbs": sub.verbs,
            })
        })
        .collect();
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}
