//! Semantics suite through kube-rs (Api, watcher, reflector, discovery).
//! Runs against the local server, or against a real cluster when
//! `TENANTPLANE_E2E_KUBECONFIG` is set: the assertions are the same, so a
//! divergence between the two shows up as a failure here.

mod support;

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::discovery::Discovery;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::{Target, eventually, status};

/// Leaves out the ConfigMap a real cluster's controller-manager publishes in
/// every namespace (`kube-root-ca.crt`), which tests listing a namespace's
/// ConfigMaps did not create.
const NOT_ROOT_CA: &str = "metadata.name!=kube-root-ca.crt";

fn config_map(name: &str, data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .expect("config map")
}

fn data_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

#[tokio::test]
async fn create_get_list_delete_assigns_server_fields() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);

    let created = api
        .create(
            &PostParams::default(),
            &config_map("one", &[("k", "v")], &[]),
        )
        .await
        .unwrap();
    assert!(!created.uid().unwrap_or_default().is_empty());
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(!created.resource_version().unwrap_or_default().is_empty());
    assert_eq!(created.namespace().as_deref(), Some(ns.as_str()));

    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let generated = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = generated.name_any();
    assert!(
        name.starts_with("gen-") && name.len() > "gen-".len(),
        "{name}"
    );

    let fetched = api.get("one").await.unwrap();
    assert_eq!(fetched.uid(), created.uid());
    assert_eq!(data_of(&fetched)["k"], "v");

    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(names.contains(&"one".to_string()) && names.contains(&name));

    api.delete("one", &DeleteParams::default()).await.unwrap();
    let missing = status(api.get("one").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn errors_carry_kubernetes_status_codes_and_reasons() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("dup", &[], &[]))
        .await
        .unwrap();

    let exists = status(
        api.create(&PostParams::default(), &config_map("dup", &[], &[]))
            .await,
    );
    assert_eq!(
        (exists.code, exists.reason.as_str()),
        (409, "AlreadyExists")
    );

    let invalid = status(
        api.create(&PostParams::default(), &config_map("Not_Valid", &[], &[]))
            .await,
    );
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));

    let elsewhere: Api<ConfigMap> = Api::namespaced(target.client.clone(), "tp-no-such-namespace");
    let no_ns = status(
        elsewhere
            .create(&PostParams::default(), &config_map("x", &[], &[]))
            .await,
    );
    assert_eq!((no_ns.code, no_ns.reason.as_str()), (404, "NotFound"));

    let bad_selector = status(api.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!(
        (bad_selector.code, bad_selector.reason.as_str()),
        (400, "BadRequest")
    );

    let unknown = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nothing.tenantplane.io", "v1", "Nothing"),
        "nothings",
    );
    let unknown_api: Api<DynamicObject> = Api::all_with(target.client.clone(), &unknown);
    // A real server answers a group it does not serve from its HTTP router,
    // with a plain-text body: only the code is comparable.
    let not_served = status(unknown_api.list(&ListParams::default()).await);
    assert_eq!(not_served.code, 404);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn stale_resource_version_update_is_a_conflict() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let original = api
        .create(
            &PostParams::default(),
            &config_map("cas", &[("n", "0")], &[]),
        )
        .await
        .unwrap();

    let mut first = original.clone();
    first.data = Some(BTreeMap::from([("n".into(), "1".into())]));
    let updated = api
        .replace("cas", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(updated.resource_version(), original.resource_version());

    let mut stale = original.clone();
    stale.data = Some(BTreeMap::from([("n".into(), "2".into())]));
    let conflict = status(api.replace("cas", &PostParams::default(), &stale).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(data_of(&api.get("cas").await.unwrap())["n"], "1");
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cms: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &config_map("p", &[("a", "1"), ("b", "2")], &[]),
    )
    .await
    .unwrap();

    let merged = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        data_of(&merged),
        BTreeMap::from([("b".into(), "2".into()), ("c".into(), "3".into())])
    );

    let ops = serde_json::from_value(json!([
        {"op": "add", "path": "/data/d", "value": "4"},
        {"op": "remove", "path": "/data/b"}
    ]))
    .unwrap();
    let patched = cms
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    assert_eq!(
        data_of(&patched),
        BTreeMap::from([("c".into(), "3".into()), ("d".into(), "4".into())])
    );
    let failing_test = serde_json::from_value(json!([
        {"op": "test", "path": "/data/c", "value": "not-3"}
    ]))
    .unwrap();
    let failed = status(
        cms.patch(
            "p",
            &PatchParams::default(),
            &Patch::Json::<()>(failing_test),
        )
        .await,
    );
    assert_eq!(failed.code, 422);

    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "sidecar:1"}
        ]}
    }))
    .unwrap();
    create_pod(&target.client, &ns, &pod).await;
    let patched = pods
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [
                {"name": "app", "image": "app:2"}
            ]}})),
        )
        .await
        .unwrap();
    let containers = patched.spec.unwrap().containers;
    assert_eq!(containers.len(), 2, "strategic merge keeps the sidecar");
    assert_eq!(containers[0].image.as_deref(), Some("app:2"));
    assert_eq!(containers[0].env.as_ref().map(Vec::len), Some(1));

    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let account: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "builder"},
        "secrets": [{"name": "a"}, {"name": "b"}],
    }))
    .unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let patched = accounts
        .patch(
            "builder",
            &PatchParams::default(),
            &Patch::Strategic(json!({"secrets": [{"name": "c"}, {"name": "b"}]})),
        )
        .await
        .unwrap();
    let secrets: Vec<String> = patched
        .secrets
        .iter()
        .flatten()
        .filter_map(|s| s.name.clone())
        .collect();
    assert_eq!(
        secrets,
        ["c", "a", "b"],
        "merged by name: a new item first, the server's items in their order"
    );

    let unmergeable = status(
        pods.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restartPolicy": "Never"}})),
        )
        .await,
    );
    assert_eq!(
        (unmergeable.code, unmergeable.reason.as_str()),
        (422, "Invalid")
    );
    assert!(
        unmergeable
            .message
            .starts_with("Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{}",
        unmergeable.message
    );
    target.cleanup(&ns).await;
}

/// Pods need the namespace's default ServiceAccount, which a real cluster's
/// controller-manager creates shortly after the namespace; without one (an
/// API server alone) the test creates it.
async fn create_pod(client: &Client, namespace: &str, pod: &Pod) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for _ in 0..100 {
        match pods.create(&PostParams::default(), pod).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
                let default: ServiceAccount =
                    serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
                // Already there (created by a controller meanwhile) is fine.
                let _ = accounts.create(&PostParams::default(), &default).await;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating pod: {e}"),
        }
    }
    panic!("the pod could not be created");
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_conflicts() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let applied = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data});

    let first = api
        .patch(
            "ssa",
            &PatchParams::apply("alice"),
            &Patch::Apply(applied(
                json!({"owner": "alice", "shared": "x", "temp": "t"}),
            )),
        )
        .await
        .unwrap();
    let managers: Vec<String> = first
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["alice"]);

    let conflict = status(
        api.patch(
            "ssa",
            &PatchParams::apply("bob"),
            &Patch::Apply(applied(json!({"owner": "bob"}))),
        )
        .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    let causes = conflict.details.unwrap().causes;
    assert!(
        causes.iter().any(|c| c.field.contains("data.owner")),
        "{causes:?}"
    );

    // Same value: shared ownership, no conflict.
    api.patch(
        "ssa",
        &PatchParams::apply("bob"),
        &Patch::Apply(applied(json!({"shared": "x"}))),
    )
    .await
    .unwrap();

    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(applied(json!({"owner": "bob", "shared": "x"}))),
        )
        .await
        .unwrap();
    assert_eq!(data_of(&forced)["owner"], "bob");

    // alice stops applying `temp` (and `owner`, now bob's): temp is removed.
    let after = api
        .patch(
            "ssa",
            &PatchParams::apply("alice"),
            &Patch::Apply(applied(json!({"shared": "x"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        data_of(&after),
        BTreeMap::from([
            ("owner".into(), "bob".into()),
            ("shared".into(), "x".into())
        ])
    );
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "web"), ("tier", "back")]),
        ("c", vec![("app", "db")]),
    ] {
        api.create(&PostParams::default(), &config_map(name, &[], &labels))
            .await
            .unwrap();
    }
    let names = |lp: ListParams| {
        let api = api.clone();
        async move {
            let mut names: Vec<String> = api
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        names(ListParams::default().labels("app=web")).await,
        ["a", "b"]
    );
    assert_eq!(
        names(ListParams::default().labels("app=web,tier!=back")).await,
        ["a"]
    );
    assert_eq!(
        names(ListParams::default().labels("tier in (back,x)")).await,
        ["b"]
    );
    assert_eq!(
        names(ListParams::default().labels("!tier").fields(NOT_ROOT_CA)).await,
        ["c"]
    );
    assert_eq!(
        names(ListParams::default().fields("metadata.name=c")).await,
        ["c"]
    );
    assert_eq!(
        names(ListParams::default().fields(&format!(
            "metadata.namespace={ns},metadata.name!=a,{NOT_ROOT_CA}"
        )))
        .await,
        ["b", "c"]
    );

    let all: Api<ConfigMap> = Api::all(target.client.clone());
    let across = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={ns},{NOT_ROOT_CA}")))
        .await
        .unwrap();
    assert_eq!(across.items.len(), 3);

    let mut paged = Vec::new();
    let mut lp = ListParams::default().fields(NOT_ROOT_CA).limit(2);
    loop {
        let page = api.list(&lp).await.unwrap();
        paged.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
            _ => break,
        }
    }
    paged.sort();
    assert_eq!(paged, ["a", "b", "c"]);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_and_sends_bookmarks() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("before", &[], &[]))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();

    api.create(&PostParams::default(), &config_map("after", &[], &[]))
        .await
        .unwrap();
    api.patch(
        "after",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    api.delete("after", &DeleteParams::default()).await.unwrap();

    let mut stream = api
        .watch(&WatchParams::default().fields(NOT_ROOT_CA), &rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream.try_next().await.unwrap().expect("watch ended early") {
            WatchEvent::Added(o) => seen.push(("ADDED", o.name_any())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.name_any())),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.name_any())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "after".to_string()),
            ("MODIFIED", "after".to_string()),
            ("DELETED", "after".to_string())
        ]
    );

    // Streaming list: current objects, then a bookmark marking their end.
    let mut initial = api
        .watch(&WatchParams::streaming_lists().fields(NOT_ROOT_CA), "")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    loop {
        match initial
            .try_next()
            .await
            .unwrap()
            .expect("watch ended early")
        {
            WatchEvent::Added(o) => added.push(o.name_any()),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, ["before"]);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn watcher_and_reflector_follow_changes() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &config_map("seed", &[], &[("app", "r")]),
    )
    .await
    .unwrap();

    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels("app=r");
    let stream = reflector(writer, watcher(api.clone(), config)).applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 1);

    for name in ["r1", "r2"] {
        api.create(
            &PostParams::default(),
            &config_map(name, &[], &[("app", "r")]),
        )
        .await
        .unwrap();
    }
    api.create(
        &PostParams::default(),
        &config_map("other", &[], &[("app", "x")]),
    )
    .await
    .unwrap();
    api.delete("seed", &DeleteParams::default()).await.unwrap();
    // Relabelling out of the selection is a deletion for the watcher.
    api.patch(
        "r2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .unwrap();
    eventually("the reflector holds exactly r1", || {
        let reader = reader.clone();
        async move {
            let mut names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
            names.sort();
            names == ["r1"]
        }
    })
    .await;
    driver.abort();
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn finalizers_defer_deletion_until_removed() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let mut cm = config_map("held", &[], &[]);
    cm.metadata.finalizers = Some(vec!["tenantplane.io/test".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();

    api.delete("held", &DeleteParams::default()).await.unwrap();
    let terminating = api.get("held").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    let more = status(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["tenantplane.io/test", "tenantplane.io/new"]}}),
            ),
        )
        .await,
    );
    assert_eq!(more.code, 422);

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("the object is gone once its finalizers are", || {
        let api = api.clone();
        async move { api.get_opt("held").await.unwrap().is_none() }
    })
    .await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_contents() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let cms: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    cms.create(&PostParams::default(), &config_map("inside", &[], &[]))
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(target.client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();

    let refused = status(
        cms.create(&PostParams::default(), &config_map("late", &[], &[]))
            .await,
    );
    assert!(
        [403, 404].contains(&refused.code),
        "creating in a terminating namespace: {refused:?}"
    );
    eventually("the namespace and its contents are gone", || {
        let (namespaces, cms, ns) = (namespaces.clone(), cms.clone(), ns.clone());
        async move {
            namespaces.get_opt(&ns).await.unwrap().is_none()
                && cms.get_opt("inside").await.unwrap().is_none()
        }
    })
    .await;
    target.cleanup(&ns).await;
}

fn owned_by(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut cm = config_map(name, &[], &[]);
    cm.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.name_any(),
            "uid": owner.uid().unwrap(),
        }))
        .unwrap(),
    ]);
    cm
}

#[tokio::test]
async fn owner_reference_garbage_collection_and_orphaning() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let owner = api
        .create(&PostParams::default(), &config_map("owner", &[], &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &owned_by("child", &owner))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the dependent is collected", || {
        let api = api.clone();
        async move { api.get_opt("child").await.unwrap().is_none() }
    })
    .await;

    let owner = api
        .create(&PostParams::default(), &config_map("owner2", &[], &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &owned_by("orphan", &owner))
        .await
        .unwrap();
    api.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    eventually("the orphan loses its owner reference", || {
        let api = api.clone();
        async move {
            api.get_opt("orphan")
                .await
                .unwrap()
                .is_some_and(|o| o.owner_references().is_empty())
        }
    })
    .await;
    target.cleanup(&ns).await;
}

/// A schema that keeps any field (the default for these tests).
fn open_schema() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn crd(group: &str, scope: &str, schema: Value) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": schema}
            }]
        }
    }))
    .unwrap()
}

async fn install_crd(client: &Client, group: &str, scope: &str, schema: Value) -> ApiResource {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd(group, scope, schema))
        .await
        .unwrap();
    let name = format!("widgets.{group}");
    eventually("the CRD is established", || {
        let (crds, name) = (crds.clone(), name.clone());
        async move {
            crds.get(&name)
                .await
                .unwrap()
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        }
    })
    .await;
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Widget"), "widgets")
}

fn unique_group(prefix: &str) -> String {
    format!("{prefix}{}.semantics.tenantplane.io", std::process::id())
}

#[tokio::test]
async fn custom_resources_with_status_subresource_and_generation() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let group = unique_group("ns");
    let resource = install_crd(&target.client, &group, "Namespaced", open_schema()).await;
    let discovery = Discovery::new(target.client.clone()).run().await.unwrap();
    assert!(
        discovery.has_group(&group),
        "the CRD's group is discoverable"
    );

    let api: Api<DynamicObject> = Api::namespaced_with(target.client.clone(), &ns, &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"),
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
        "status": {"ready": true}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &widget).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let list = get_json(
        &target.client,
        &format!("/apis/{group}/v1/namespaces/{ns}/widgets"),
        "application/json",
    )
    .await;
    assert_eq!(
        (&list["items"][0]["apiVersion"], &list["items"][0]["kind"]),
        (&json!(format!("{group}/v1")), &json!("Widget")),
        "custom resources are listed as they are stored, with apiVersion and kind"
    );
    let mut badly_named = widget.clone();
    badly_named.metadata.name = Some("Not_Valid".into());
    let refused = status(api.create(&PostParams::default(), &badly_named).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.details.unwrap().causes[0].field,
        "metadata.name",
        "custom resource names are DNS subdomains"
    );
    assert!(
        created.data.get("status").is_none(),
        "status is ignored on create"
    );

    let relabelled = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        relabelled.metadata.generation,
        Some(1),
        "metadata changes keep generation"
    );
    let resized = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        resized.metadata.generation,
        Some(2),
        "spec changes bump generation"
    );

    let with_status = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"size": 99}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["ready"], json!(true));
    assert_eq!(
        with_status.data["spec"]["size"],
        json!(2),
        "status writes ignore spec"
    );
    assert_eq!(with_status.metadata.generation, Some(2));

    let main_write = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": false}})),
        )
        .await
        .unwrap();
    assert_eq!(
        main_write.data["status"]["ready"],
        json!(true),
        "main writes ignore status"
    );

    let strategic = status(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await,
    );
    assert_eq!(strategic.code, 415);

    let crds: Api<CustomResourceDefinition> = Api::all(target.client.clone());
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
    eventually("the custom resource API goes away with its CRD", || {
        let api = api.clone();
        async move {
            matches!(api.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 404)
        }
    })
    .await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn cluster_scoped_custom_resources() {
    let target = Target::start().await;
    let group = unique_group("cluster");
    let resource = install_crd(&target.client, &group, "Cluster", open_schema()).await;
    let api: Api<DynamicObject> = Api::all_with(target.client.clone(), &resource);
    let applied = json!({
        "apiVersion": format!("{group}/v1"),
        "kind": "Widget",
        "metadata": {"name": "global"},
        "spec": {"size": 1}
    });
    let created = api
        .patch(
            "global",
            &PatchParams::apply("semantics"),
            &Patch::Apply(applied),
        )
        .await
        .unwrap();
    assert!(created.metadata.namespace.is_none());
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let crds: Api<CustomResourceDefinition> = Api::all(target.client.clone());
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
    let ns = target.namespace().await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn discovery_lists_the_built_in_kinds() {
    let target = Target::start().await;
    let discovery = Discovery::new(target.client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(target.client.clone())
        .run_aggregated()
        .await
        .unwrap();
    for d in [&discovery, &aggregated] {
        for (group, version, kind) in [
            ("", "v1", "Pod"),
            ("", "v1", "Namespace"),
            ("", "v1", "Service"),
            ("", "v1", "Endpoints"),
            ("", "v1", "Secret"),
            ("", "v1", "PersistentVolumeClaim"),
            ("", "v1", "ServiceAccount"),
            ("", "v1", "Event"),
            ("", "v1", "ResourceQuota"),
            ("", "v1", "LimitRange"),
            ("events.k8s.io", "v1", "Event"),
            ("networking.k8s.io", "v1", "Ingress"),
            ("networking.k8s.io", "v1", "NetworkPolicy"),
            ("node.k8s.io", "v1", "RuntimeClass"),
            ("coordination.k8s.io", "v1", "Lease"),
            (
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy",
            ),
            (
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicyBinding",
            ),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        ] {
            assert!(
                d.resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
                    .is_some(),
                "{group}/{version} {kind} is discoverable"
            );
        }
    }
    let version = target.client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    let ns = target.namespace().await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn malformed_and_unsupported_requests_get_kubernetes_errors() {
    use axum::http::{Method, Request};
    let target = Target::start().await;
    let ns = target.namespace().await;
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    let send = |method: Method, path: String, content_type: &str, body: &str| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body.as_bytes().to_vec())
            .unwrap();
        let client = target.client.clone();
        async move { status(client.request_text(request).await) }
    };

    let unsupported = send(Method::POST, collection.clone(), "text/plain", "name: x").await;
    // Codes only where a real server may answer from its HTTP router with a
    // plain-text body (kube-rs then has no reason to report).
    assert_eq!(unsupported.code, 415);

    let malformed = send(
        Method::POST,
        collection.clone(),
        "application/json",
        "{not json",
    )
    .await;
    assert_eq!(
        (malformed.code, malformed.reason.as_str()),
        (400, "BadRequest")
    );

    let wrong_verb = send(Method::PUT, collection.clone(), "application/json", "{}").await;
    assert_eq!(wrong_verb.code, 405);

    let no_subresource = send(
        Method::GET,
        format!("{collection}/anything/scale"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(no_subresource.code, 404);

    let no_group = send(
        Method::GET,
        "/apis/nothing.tenantplane.io/v1".to_string(),
        "application/json",
        "",
    )
    .await;
    assert_eq!(no_group.code, 404);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let created = api
        .create(
            &PostParams::default(),
            &config_map("meta", &[("secret", "x")], &[("app", "m")]),
        )
        .await
        .unwrap();

    let one = api.get_metadata("meta").await.unwrap();
    assert_eq!(one.metadata.uid, created.metadata.uid);
    assert_eq!(
        one.types.map(|t| t.kind).as_deref(),
        Some("PartialObjectMetadata")
    );

    let listed = api
        .list_metadata(&ListParams::default().labels("app=m"))
        .await
        .unwrap();
    let names: Vec<String> = listed.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["meta"]);

    let mut events = api
        .watch_metadata(&WatchParams::default().labels("app=m"), "0")
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.name_any(), "meta"),
        other => panic!("expected the existing object, got {other:?}"),
    }
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn server_side_apply_merges_custom_list_maps_by_key() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let group = unique_group("listmap");
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}
            }
        }}}}
    });
    let resource = install_crd(&target.client, &group, "Namespaced", schema).await;
    let api: Api<DynamicObject> = Api::namespaced_with(target.client.clone(), &ns, &resource);
    let applied = |ports: Value| {
        json!({
            "apiVersion": format!("{group}/v1"),
            "kind": "Widget",
            "metadata": {"name": "ports"},
            "spec": {"ports": ports}
        })
    };
    let port_names = |o: &DynamicObject| -> Vec<String> {
        o.data["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };

    api.patch(
        "ports",
        &PatchParams::apply("web"),
        &Patch::Apply(applied(json!([{"name": "http", "port": 80}]))),
    )
    .await
    .unwrap();
    let both = api
        .patch(
            "ports",
            &PatchParams::apply("metrics"),
            &Patch::Apply(applied(json!([{"name": "metrics", "port": 9090}]))),
        )
        .await
        .unwrap();
    assert_eq!(
        port_names(&both),
        ["http", "metrics"],
        "keyed items from two managers coexist"
    );

    let conflict = status(
        api.patch(
            "ports",
            &PatchParams::apply("metrics"),
            &Patch::Apply(applied(
                json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 8080}]),
            )),
        )
        .await,
    );
    assert_eq!(conflict.code, 409, "another manager's item field conflicts");

    let without_web = api
        .patch(
            "ports",
            &PatchParams::apply("web"),
            &Patch::Apply(applied(json!([]))),
        )
        .await
        .unwrap();
    assert_eq!(
        port_names(&without_web),
        ["metrics"],
        "web's item goes when web stops applying it"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(target.client.clone());
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let owner = api
        .create(&PostParams::default(), &config_map("fg-owner", &[], &[]))
        .await
        .unwrap();
    let mut child = owned_by("fg-child", &owner);
    if let Some(refs) = child.metadata.owner_references.as_mut() {
        refs[0].block_owner_deletion = Some(true);
    }
    child.metadata.finalizers = Some(vec!["tenantplane.io/hold".into()]);
    api.create(&PostParams::default(), &child).await.unwrap();

    api.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually(
        "the owner waits in foregroundDeletion and the child is being deleted",
        || {
            let api = api.clone();
            async move {
                let owner = api.get_opt("fg-owner").await.unwrap();
                let child = api.get_opt("fg-child").await.unwrap();
                owner.is_some_and(|o| {
                    o.metadata.deletion_timestamp.is_some()
                        && o.finalizers().iter().any(|f| f == "foregroundDeletion")
                }) && child.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            }
        },
    )
    .await;

    api.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("owner and child are gone once the child is", || {
        let api = api.clone();
        async move {
            api.get_opt("fg-owner").await.unwrap().is_none()
                && api.get_opt("fg-child").await.unwrap().is_none()
        }
    })
    .await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn dry_run_and_server_defaults() {
    use k8s_openapi::api::core::v1::{Secret, Service};
    let target = Target::start().await;
    let ns = target.namespace().await;

    let cms: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let preview = cms
        .create(&dry, &config_map("dry", &[("k", "v")], &[]))
        .await
        .unwrap();
    assert_eq!(preview.name_any(), "dry");
    assert!(
        cms.get_opt("dry").await.unwrap().is_none(),
        "a dry run stores nothing"
    );

    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), &ns);
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"user": "admin"}}))
            .unwrap();
    let stored = secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));
    assert_eq!(stored.data.unwrap()["user"].0, b"admin");
    assert!(stored.string_data.is_none(), "stringData is write-only");

    let services: Api<Service> = Api::namespaced(target.client.clone(), &ns);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
    }))
    .unwrap();
    let stored = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let spec = stored.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(
        spec.cluster_ip
            .is_some_and(|ip| !ip.is_empty() && ip != "None")
    );
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert!(port.target_port.is_some());
    target.cleanup(&ns).await;
}

/// GETs a path as raw JSON with the given `Accept` header.
async fn get_json(client: &Client, path: &str, accept: &str) -> Value {
    let request = axum::http::Request::builder()
        .uri(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

#[tokio::test]
async fn list_items_carry_no_type_meta_but_gets_and_watch_events_do() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let api: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("typed", &[], &[]))
        .await
        .unwrap();
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");

    let only_ours = format!("{collection}?fieldSelector=metadata.name%3Dtyped");
    let list = get_json(&target.client, &only_ours, "application/json").await;
    assert_eq!(
        (&list["apiVersion"], &list["kind"]),
        (&json!("v1"), &json!("ConfigMapList"))
    );
    let item = &list["items"][0];
    assert_eq!(item["metadata"]["name"], "typed");
    assert!(
        item.get("apiVersion").is_none() && item.get("kind").is_none(),
        "a typed list's items carry no apiVersion or kind: {item}"
    );

    let one = get_json(
        &target.client,
        &format!("{collection}/typed"),
        "application/json",
    )
    .await;
    assert_eq!(
        (&one["apiVersion"], &one["kind"]),
        (&json!("v1"), &json!("ConfigMap"))
    );

    let partial = get_json(
        &target.client,
        &only_ours,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(
        (&partial["apiVersion"], &partial["kind"]),
        (
            &json!("meta.k8s.io/v1"),
            &json!("PartialObjectMetadataList")
        )
    );
    let partial_item = &partial["items"][0];
    assert_eq!(partial_item["metadata"]["name"], "typed");
    assert_eq!(
        (&partial_item["apiVersion"], &partial_item["kind"]),
        (&json!("meta.k8s.io/v1"), &json!("PartialObjectMetadata")),
        "metadata-only list items say what they are"
    );

    let request = axum::http::Request::builder()
        .uri(format!(
            "{only_ours}&watch=true&resourceVersion=0&timeoutSeconds=1"
        ))
        .body(Vec::new())
        .unwrap();
    let stream = target.client.request_text(request).await.unwrap();
    let first: Value = serde_json::from_str(stream.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(
        (&first["object"]["apiVersion"], &first["object"]["kind"]),
        (&json!("v1"), &json!("ConfigMap")),
        "watch events' objects carry apiVersion and kind"
    );
    target.cleanup(&ns).await;
}

fn object_name(reference: Option<&k8s_openapi::api::core::v1::ObjectReference>) -> Option<&str> {
    reference.and_then(|r| r.name.as_deref())
}

/// The names of the objects of `api` that a field selector selects, sorted.
async fn sorted_names<K>(api: Api<K>, field_selector: String) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default().fields(&field_selector))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn core_and_events_api_events_are_one_store() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let target = Target::start().await;
    let ns = target.namespace().await;
    let core: Api<CoreEvent> = Api::namespaced(target.client.clone(), &ns);
    let events: Api<NewEvent> = Api::namespaced(target.client.clone(), &ns);
    let subject =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": ns});
    let time = |text: &str| text.parse::<k8s_openapi::jiff::Timestamp>().unwrap();

    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "old-style"},
        "involvedObject": subject,
        "reason": "Created",
        "message": "written through core/v1",
        "source": {"component": "semantics-test", "host": "node-a"},
        "firstTimestamp": "2024-01-02T03:04:05Z",
        "lastTimestamp": "2024-01-02T03:04:09Z",
        "count": 4,
        "type": "Normal",
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();
    let seen = events.get("old-style").await.unwrap();
    assert_eq!(seen.note.as_deref(), Some("written through core/v1"));
    assert_eq!(object_name(seen.regarding.as_ref()), Some("subject"));
    assert_eq!(seen.reason.as_deref(), Some("Created"));
    assert_eq!(seen.type_.as_deref(), Some("Normal"));
    let source = seen.deprecated_source.clone().unwrap_or_default();
    assert_eq!(
        (source.component.as_deref(), source.host.as_deref()),
        (Some("semantics-test"), Some("node-a"))
    );
    assert_eq!(seen.deprecated_count, Some(4));
    assert_eq!(
        seen.deprecated_first_timestamp.map(|t| t.0),
        Some(time("2024-01-02T03:04:05Z"))
    );
    assert_eq!(
        seen.deprecated_last_timestamp.map(|t| t.0),
        Some(time("2024-01-02T03:04:09Z"))
    );
    assert!(seen.event_time.is_none());

    let since = core
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut core_watch = core
        .watch(&WatchParams::default().timeout(10), &since)
        .await
        .unwrap()
        .boxed();
    let new_style: NewEvent = serde_json::from_value(json!({
        "metadata": {"name": "new-style"},
        "eventTime": "2024-01-02T03:04:05.123456Z",
        "reportingController": "semantics.tenantplane.io/test",
        "reportingInstance": "test-1",
        "action": "Check",
        "reason": "Checked",
        "note": "written through events.k8s.io/v1",
        "type": "Warning",
        "regarding": subject,
        "related": {"apiVersion": "v1", "kind": "Pod", "name": "other", "namespace": ns},
    }))
    .unwrap();
    events
        .create(&PostParams::default(), &new_style)
        .await
        .unwrap();
    let seen = core.get("new-style").await.unwrap();
    assert_eq!(
        seen.message.as_deref(),
        Some("written through events.k8s.io/v1")
    );
    assert_eq!(seen.involved_object.name.as_deref(), Some("subject"));
    assert_eq!(object_name(seen.related.as_ref()), Some("other"));
    assert_eq!(
        seen.reporting_component.as_deref(),
        Some("semantics.tenantplane.io/test")
    );
    assert_eq!(seen.reporting_instance.as_deref(), Some("test-1"));
    assert_eq!(seen.action.as_deref(), Some("Check"));
    assert_eq!(seen.reason.as_deref(), Some("Checked"));
    assert_eq!(seen.type_.as_deref(), Some("Warning"));
    assert_eq!(
        seen.event_time.map(|t| t.0),
        Some(time("2024-01-02T03:04:05.123456Z"))
    );
    assert!(seen.count.is_none() && seen.first_timestamp.is_none());
    let watched = loop {
        match core_watch.try_next().await.unwrap() {
            Some(WatchEvent::Added(e)) if e.name_any() == "new-style" => break e,
            Some(WatchEvent::Bookmark(_) | WatchEvent::Added(_)) => {}
            other => panic!("expected new-style through the core watch, got {other:?}"),
        }
    };
    assert_eq!(watched.message, seen.message);

    let mut events_watch = events
        .watch(
            &WatchParams::default()
                .fields("metadata.name=old-style")
                .timeout(10),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    match events_watch.try_next().await.unwrap() {
        Some(WatchEvent::Added(e)) => {
            assert_eq!(e.note.as_deref(), Some("written through core/v1"));
        }
        other => panic!("expected old-style through the events.k8s.io watch, got {other:?}"),
    }

    let names_core = |selector: &str| sorted_names(core.clone(), selector.to_string());
    let names_events = |selector: &str| sorted_names(events.clone(), selector.to_string());
    let both = ["new-style", "old-style"];
    // Plain lists may hold Events a real cluster's controllers wrote too.
    for listed in [names_core("").await, names_events("").await] {
        assert!(
            both.iter().all(|n| listed.iter().any(|l| l == n)),
            "{listed:?}"
        );
    }
    assert_eq!(names_core("involvedObject.name=subject").await, both);
    assert_eq!(names_events("regarding.name=subject").await, both);
    assert_eq!(
        names_events("regarding.kind=Pod").await,
        Vec::<String>::new()
    );
    assert_eq!(
        names_events("reportingController=semantics.tenantplane.io/test").await,
        ["new-style"]
    );
    assert_eq!(
        names_core("reportingComponent=semantics.tenantplane.io/test").await,
        ["new-style"]
    );
    assert_eq!(names_core("source=semantics-test").await, ["old-style"]);
    assert_eq!(names_events("type=Warning").await, ["new-style"]);
    let unsupported = status(
        events
            .list(&ListParams::default().fields("involvedObject.name=subject"))
            .await,
    );
    assert_eq!(unsupported.code, 400);

    core.patch(
        "old-style",
        &PatchParams::default(),
        &Patch::Merge(json!({"count": 5})),
    )
    .await
    .unwrap();
    assert_eq!(
        events.get("old-style").await.unwrap().deprecated_count,
        Some(5)
    );
    let series = json!({"series": {"count": 2, "lastObservedTime": "2024-01-02T03:05:00.000000Z"}});
    events
        .patch("new-style", &PatchParams::default(), &Patch::Merge(series))
        .await
        .unwrap();
    assert_eq!(
        core.get("new-style")
            .await
            .unwrap()
            .series
            .and_then(|s| s.count),
        Some(2)
    );
    let immutable = status(
        events
            .patch(
                "new-style",
                &PatchParams::default(),
                &Patch::Merge(json!({"note": "rewritten"})),
            )
            .await,
    );
    assert_eq!(
        (immutable.code, immutable.reason.as_str()),
        (422, "Invalid")
    );
    assert!(
        immutable
            .message
            .contains("message: Invalid value: \"rewritten\": field is immutable"),
        "{}",
        immutable.message
    );

    events
        .delete("old-style", &DeleteParams::default())
        .await
        .unwrap();
    let gone = status(core.get("old-style").await);
    assert_eq!(gone.code, 404);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn events_api_validates_more_than_core_events() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let target = Target::start().await;
    let ns = target.namespace().await;
    let core: Api<CoreEvent> = Api::namespaced(target.client.clone(), &ns);
    let events: Api<NewEvent> = Api::namespaced(target.client.clone(), &ns);
    let subject =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": ns});
    let fields = |s: &kube::core::Status| -> Vec<String> {
        s.details
            .as_ref()
            .map(|d| d.causes.iter().map(|c| c.field.clone()).collect())
            .unwrap_or_default()
    };
    // An events.k8s.io/v1 Event with every field that API requires.
    let new_style = |name: &str, event_time: &str| {
        json!({
            "metadata": {"name": name},
            "eventTime": event_time,
            "reportingController": "semantics.tenantplane.io/test",
            "reportingInstance": "test-1",
            "action": "Check",
            "reason": "Checked",
            "type": "Normal",
            "regarding": subject,
        })
    };
    let refused_by_events_api = |event: Value| {
        let events = events.clone();
        async move {
            status(
                events
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(event).unwrap(),
                    )
                    .await,
            )
        }
    };

    let old_style = json!({
        "metadata": {"name": "legacy"},
        "regarding": subject,
        "reason": "Created",
        "note": "no eventTime",
        "type": "Normal",
    });
    let refused = refused_by_events_api(old_style).await;
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    // Both APIs validate the internal Event, whose group is the core one.
    assert_eq!(
        refused.message,
        "Event \"legacy\" is invalid: eventTime: Required value"
    );
    assert_eq!(fields(&refused), ["eventTime"]);
    let details = refused.details.clone().unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("", "Event")
    );

    let accepted: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "involvedObject": subject,
        "reason": "Created",
        "message": "no eventTime",
        "type": "Normal",
    }))
    .unwrap();
    core.create(&PostParams::default(), &accepted)
        .await
        .expect("core/v1 takes Events without eventTime");

    let mut deprecated = new_style("deprecated", "2024-01-02T03:04:05.000000Z");
    deprecated["deprecatedCount"] = json!(3);
    let refused = refused_by_events_api(deprecated).await;
    assert_eq!(fields(&refused), ["count"]);
    assert!(
        refused
            .message
            .ends_with("count: Invalid value: \"\": needs to be unset"),
        "{}",
        refused.message
    );

    let coarse_time = new_style("coarse", "2024-01-02T03:04:05Z");
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"))
        .header("content-type", "application/json")
        .body(coarse_time.to_string().into_bytes())
        .unwrap();
    let refused = status(target.client.request_text(request).await);
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (400, "BadRequest"),
        "eventTime is a MicroTime: six fractional digits"
    );

    let unreported: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "unreported"},
        "involvedObject": subject,
        "eventTime": "2024-01-02T03:04:05.000000Z",
        "reason": "Checked",
        "action": "Check",
        "reportingInstance": "test-1",
    }))
    .unwrap();
    let refused = status(core.create(&PostParams::default(), &unreported).await);
    assert_eq!(refused.code, 422);
    assert_eq!(fields(&refused)[0], "reportingComponent");

    // Names: core/v1 Events only need a URL path segment; events.k8s.io a DNS subdomain.
    let odd_name = json!({
        "metadata": {"name": "Odd_Name:1"},
        "involvedObject": subject,
        "reason": "Created",
    });
    core.create(
        &PostParams::default(),
        &serde_json::from_value(odd_name).unwrap(),
    )
    .await
    .expect("core/v1 Event names are path segments");
    let refused =
        refused_by_events_api(new_style("Odd_Name:2", "2024-01-02T03:04:05.000000Z")).await;
    assert_eq!(fields(&refused), ["metadata.name"]);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn names_are_validated_by_the_rule_of_their_kind() {
    use k8s_openapi::api::core::v1::Service;
    let target = Target::start().await;
    let ns = target.namespace().await;
    let client = target.client.clone();
    let first_cause = |s: &kube::core::Status| {
        let cause = s.details.as_ref().unwrap().causes[0].clone();
        (cause.reason, cause.field, cause.message)
    };

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let dotted: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "tp-semantics.dotted"}})).unwrap();
    let refused = status(namespaces.create(&PostParams::default(), &dotted).await);
    assert_eq!(
        refused.message,
        "Namespace \"tp-semantics.dotted\" is invalid: metadata.name: Invalid value: \"tp-semantics.dotted\": must not contain dots"
    );

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let service = |name: &str, generate: bool| -> Service {
        let key = if generate { "generateName" } else { "name" };
        serde_json::from_value(json!({
            "metadata": {key: name},
            "spec": {"ports": [{"port": 80}]},
        }))
        .unwrap()
    };
    let refused = status(
        services
            .create(&PostParams::default(), &service("api.v2", false))
            .await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "Service \"api.v2\" is invalid: metadata.name: Invalid value: \"api.v2\": must not contain dots"
    );
    assert_eq!(
        first_cause(&refused),
        (
            "FieldValueInvalid".to_string(),
            "metadata.name".to_string(),
            "Invalid value: \"api.v2\": must not contain dots".to_string()
        )
    );
    let details = refused.details.clone().unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("api.v2", "Service")
    );
    let refused = status(
        services
            .create(&PostParams::default(), &service("Web", false))
            .await,
    );
    assert!(
        first_cause(&refused).2.contains("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
        "{}",
        refused.message
    );
    // Kubernetes 1.36 validates Service names as RFC 1123 labels
    // (RelaxedServiceNameValidation): a leading digit is fine.
    services
        .create(&PostParams::default(), &service("1abc", false))
        .await
        .unwrap();
    let generated = services
        .create(&PostParams::default(), &service("web-", true))
        .await
        .unwrap();
    assert!(generated.name_any().starts_with("web-"));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(&PostParams::default(), &config_map("dotted.name", &[], &[]))
        .await
        .expect("ConfigMap names are DNS subdomains");
    let refused = status(
        cms.create(&PostParams::default(), &config_map("Not_Valid", &[], &[]))
            .await,
    );
    assert_eq!(
        refused.message,
        "ConfigMap \"Not_Valid\" is invalid: metadata.name: Invalid value: \"Not_Valid\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    let bad_prefix: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "Bad_"}})).unwrap();
    let refused = status(cms.create(&PostParams::default(), &bad_prefix).await);
    let causes: Vec<String> = refused
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(causes, ["metadata.generateName", "metadata.name"]);
    let nameless: ConfigMap = serde_json::from_value(json!({"metadata": {}})).unwrap();
    let refused = status(cms.create(&PostParams::default(), &nameless).await);
    assert_eq!(
        first_cause(&refused),
        (
            "FieldValueRequired".to_string(),
            "metadata.name".to_string(),
            "Required value: name or generateName is required".to_string()
        )
    );
    target.cleanup(&ns).await;
}

/// A Kubernetes protobuf body (`k8s\0` + runtime.Unknown), encoded with k8s-pb's prost
/// types as client-go would send it.
fn protobuf_body(api_version: &str, kind: &str, message: &impl prost::Message) -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(prost::Message::encode_to_vec(message)),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(prost::Message::encode_to_vec(&envelope));
    body
}

async fn post_protobuf(client: &Client, path: &str, body: Vec<u8>) -> Result<String, kube::Error> {
    let request = axum::http::Request::builder()
        .method(axum::http::Method::POST)
        .uri(path)
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .header("accept", "application/json")
        .body(body)
        .unwrap();
    client.request_text(request).await
}

#[tokio::test]
async fn protobuf_bodies_read_as_the_same_objects_as_json() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    let target = Target::start().await;
    let ns = target.namespace().await;
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        // client-go sends every plain Go field, empty or not.
        namespace: Some(String::new()),
        generate_name: Some(String::new()),
        labels: [("app".to_string(), "demo".to_string())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let config_map = pb::ConfigMap {
        metadata: Some(meta("settings")),
        data: [("mode".to_string(), "fast".to_string())]
            .into_iter()
            .collect(),
        binary_data: [("blob".to_string(), vec![0u8, 1, 2, 255])]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    post_protobuf(
        &target.client,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        protobuf_body("v1", "ConfigMap", &config_map),
    )
    .await
    .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(target.client.clone(), &ns);
    let read = configmaps.get("settings").await.unwrap();
    assert_eq!(data_of(&read)["mode"], "fast");
    assert_eq!(
        read.binary_data.clone().unwrap()["blob"].0,
        vec![0u8, 1, 2, 255],
        "bytes arrive as base64 in JSON"
    );
    assert_eq!(read.labels()["app"], "demo");

    let quantity = |q: &str| Quantity {
        string: Some(q.to_string()),
    };
    let container = pb::Container {
        name: Some("web".into()),
        image: Some("nginx:1.25".into()),
        ports: vec![pb::ContainerPort {
            name: Some("http".into()),
            container_port: Some(8080),
            host_port: Some(0),
            ..Default::default()
        }],
        resources: Some(pb::ResourceRequirements {
            limits: [("cpu".to_string(), quantity("500m"))]
                .into_iter()
                .collect(),
            ..Default::default()
        }),
        env: vec![pb::EnvVar {
            name: Some("MODE".into()),
            value_from: Some(pb::EnvVarSource {
                config_map_key_ref: Some(pb::ConfigMapKeySelector {
                    local_object_reference: Some(pb::LocalObjectReference {
                        name: Some("settings".into()),
                    }),
                    key: Some("mode".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        readiness_probe: Some(pb::Probe {
            handler: Some(pb::ProbeHandler {
                http_get: Some(pb::HttpGetAction {
                    path: Some("/ready".into()),
                    port: Some(IntOrString {
                        r#type: Some(1),
                        int_val: Some(0),
                        str_val: Some("http".into()),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        security_context: Some(pb::SecurityContext {
            // A pointer that is set. (Set to false, it reads as unset on the local server,
            // which can't tell Go pointers from omitempty fields: see its README.)
            allow_privilege_escalation: Some(true),
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let pod = pb::Pod {
        metadata: Some(meta("web")),
        spec: Some(pb::PodSpec {
            containers: vec![container],
            volumes: vec![pb::Volume {
                name: Some("config".into()),
                volume_source: Some(pb::VolumeSource {
                    config_map: Some(pb::ConfigMapVolumeSource {
                        local_object_reference: Some(pb::LocalObjectReference {
                            name: Some("settings".into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            // A plain Go field left false: JSON leaves it out.
            host_network: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    // Pods need the namespace's default ServiceAccount, which a real cluster's controllers
    // create; a cluster without them (or a slow one) gets it here.
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => panic!("creating the default ServiceAccount: {e}"),
    }
    post_protobuf(
        &target.client,
        &format!("/api/v1/namespaces/{ns}/pods"),
        protobuf_body("v1", "Pod", &pod),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), &ns);
    let raw = pods.get("web").await.unwrap();
    let spec = serde_json::to_value(raw.spec.unwrap()).unwrap();
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "nginx:1.25");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    assert_eq!(container["ports"][0].get("hostPort"), None);
    assert_eq!(container["resources"]["limits"]["cpu"], "500m");
    assert_eq!(
        container["env"][0]["valueFrom"]["configMapKeyRef"],
        json!({"name": "settings", "key": "mode"})
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        true
    );
    assert_eq!(container.get("stdin"), None);
    assert_eq!(spec["volumes"][0]["configMap"]["name"], "settings");
    assert_eq!(spec.get("hostNetwork"), None);
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn protobuf_fields_named_after_go_fields_and_embedded_rules_read_as_json() {
    use k8s_pb::api::admissionregistration::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let target = Target::start().await;
    let name = format!("protobuf-policy-{}", std::process::id());
    let policy = pb::ValidatingAdmissionPolicy {
        metadata: Some(ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        }),
        spec: Some(pb::ValidatingAdmissionPolicySpec {
            match_constraints: Some(pb::MatchResources {
                resource_rules: vec![pb::NamedRuleWithOperations {
                    // RuleWithOperations and its Rule are embedded Go structs.
                    rule_with_operations: Some(pb::RuleWithOperations {
                        operations: vec!["CREATE".into()],
                        rule: Some(pb::Rule {
                            api_groups: vec![String::new()],
                            api_versions: vec!["v1".into()],
                            resources: vec!["configmaps".into()],
                            scope: Some("*".into()),
                        }),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            // Variable's and Validation's protobuf fields are named `Name`, `Expression`.
            variables: vec![pb::Variable {
                name: Some("size".into()),
                expression: Some("size(object.data)".into()),
            }],
            validations: vec![pb::Validation {
                expression: Some("variables.size < 10".into()),
                message: Some("too many keys".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = post_protobuf(
        &target.client,
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        protobuf_body(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            &policy,
        ),
    )
    .await
    .unwrap();
    let created: Value = serde_json::from_str(&created).unwrap();
    let spec = &created["spec"];
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["operations"], json!(["CREATE"]));
    assert_eq!(rule["apiGroups"], json!([""]));
    assert_eq!(rule["resources"], json!(["configmaps"]));
    assert_eq!(rule["scope"], "*");
    assert_eq!(
        spec["variables"],
        json!([{"name": "size", "expression": "size(object.data)"}])
    );
    assert_eq!(spec["validations"][0]["expression"], "variables.size < 10");
    let policies: Api<DynamicObject> = Api::all_with(
        target.client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        )),
    );
    policies
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn undecodable_protobuf_bodies_are_bad_requests() {
    let target = Target::start().await;
    let ns = target.namespace().await;
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    let no_prefix = status(post_protobuf(&target.client, &collection, b"{}".to_vec()).await);
    assert_eq!(
        (no_prefix.code, no_prefix.reason.as_str()),
        (400, "BadRequest")
    );
    let mut garbage = b"k8s\0".to_vec();
    garbage.extend([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]);
    let truncated = status(post_protobuf(&target.client, &collection, garbage).await);
    assert_eq!(
        (truncated.code, truncated.reason.as_str()),
        (400, "BadRequest")
    );
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn workload_groups_are_served_with_defaults_status_and_watch() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let target = Target::start().await;
    let ns = target.namespace().await;
    let aggregated = Discovery::new(target.client.clone())
        .run_aggregated()
        .await
        .unwrap();
    for (group, version, kind, status_subresource) in [
        ("apps", "v1", "Deployment", true),
        ("apps", "v1", "StatefulSet", true),
        ("apps", "v1", "DaemonSet", true),
        ("apps", "v1", "ReplicaSet", true),
        ("apps", "v1", "ControllerRevision", false),
        ("batch", "v1", "Job", true),
        ("batch", "v1", "CronJob", true),
        ("policy", "v1", "PodDisruptionBudget", true),
        ("rbac.authorization.k8s.io", "v1", "Role", false),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            false,
        ),
        ("autoscaling", "v2", "HorizontalPodAutoscaler", true),
        ("discovery.k8s.io", "v1", "EndpointSlice", false),
    ] {
        let (_, caps) = aggregated
            .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
            .unwrap_or_else(|| panic!("{group}/{version} {kind} is discoverable"));
        assert!(caps.supports_operation("watch"), "{kind}");
        assert_eq!(
            caps.subresources.iter().any(|(s, _)| s.plural == "status"),
            status_subresource,
            "{kind} status subresource"
        );
    }
    let (_, cluster_role) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
        ))
        .unwrap();
    assert_eq!(cluster_role.scope, kube::discovery::Scope::Cluster);

    let deployments: Api<Deployment> = Api::namespaced(target.client.clone(), &ns);
    let mut watch = deployments
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]},
            },
        },
    }))
    .unwrap();
    let created = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.and_then(|s| s.type_).as_deref(),
        Some("RollingUpdate")
    );
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    loop {
        match watch.next().await {
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            Some(Ok(WatchEvent::Added(added))) => break assert_eq!(added.name_any(), "web"),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    let patched = deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 1, "replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().observed_generation, Some(1));

    let jobs: Api<Job> = Api::namespaced(target.client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "once", "image": "busybox"}],
        }}},
    }))
    .unwrap();
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    let uid = job.uid().unwrap();
    let spec = job.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(6));
    assert_eq!(
        spec.selector.unwrap().match_labels.unwrap()["batch.kubernetes.io/controller-uid"],
        uid
    );

    let name = format!("{ns}-reader");
    let roles: Api<ClusterRole> = Api::all(target.client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    assert_eq!(roles.get(&name).await.unwrap().namespace(), None);
    roles.delete(&name, &DeleteParams::default()).await.unwrap();
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn access_reviews_are_answered_and_not_stored() {
    use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SelfSubjectRulesReview};
    let target = Target::start().await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(target.client.clone());
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}},
    }))
    .unwrap();
    let answered = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert!(answered.status.unwrap().allowed);
    assert_eq!(status(reviews.list(&ListParams::default()).await).code, 405);

    let rules: Api<SelfSubjectRulesReview> = Api::all(target.client.clone());
    let review: SelfSubjectRulesReview =
        serde_json::from_value(json!({"spec": {"namespace": "default"}})).unwrap();
    let answered = rules.create(&PostParams::default(), &review).await.unwrap();
    assert!(!answered.status.unwrap().resource_rules.is_empty());
    let ns = target.namespace().await;
    target.cleanup(&ns).await;
}

#[tokio::test]
async fn openapi_v3_publishes_kind_schemas_per_group_version() {
    let target = Target::start().await;
    let get = |path: String| {
        let client = target.client.clone();
        async move {
            let request = axum::http::Request::get(path).body(Vec::new()).unwrap();
            let text = client.request_text(request).await.unwrap();
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let root = get("/openapi/v3".to_string()).await;
    let url = root["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("apps/v1 is listed")
        .to_string();
    let document = get(url).await;
    let schemas = &document["components"]["schemas"];
    let deployment = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert!(
        deployment["x-kubernetes-group-version-kind"]
            .as_array()
            .unwrap()
            .contains(&json!({"group": "apps", "kind": "Deployment", "version": "v1"}))
    );
    let spec_ref = deployment["properties"]["spec"]["allOf"][0]["$ref"]
        .as_str()
        .unwrap();
    let spec = &schemas[spec_ref.trim_start_matches("#/components/schemas/")];
    assert_eq!(spec["properties"]["replicas"]["type"], "integer");
    let ns = target.namespace().await;
    target.cleanup(&ns).await;
}

/// An APIService whose aggregated API server does not answer (here: names a Service nobody
/// serves) keeps its group in discovery, stale in aggregated discovery, and every request under
/// its group version gets 503, as kube-apiserver answers while a metrics-server is down.
#[tokio::test]
async fn an_unavailable_aggregated_api_is_listed_and_answers_503() {
    let target = Target::start().await;
    // kube retries a 503 up to 15 times, minutes apart: this test wants to see it.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&target.kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    let client = &Client::try_from(config).unwrap();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let group = format!("a{}.semantics.tenantplane.io", &suffix[..8]);
    let name = format!("v1beta1.{group}");
    let api_services: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
            "apiservices",
        ),
    );
    let api_service = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": "v1beta1", "groupPriorityMinimum": 100,
            "versionPriority": 100, "insecureSkipTLSVerify": true,
            "service": {"namespace": "default", "name": "nobody-serves-this", "port": 443}}}))
    .unwrap();
    api_services
        .create(&PostParams::default(), &api_service)
        .await
        .unwrap();
    let listed = || async {
        let groups = get_json(client, "/apis", "application/json").await;
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == json!(group))
    };
    eventually("the group is listed", || async { listed().await }).await;
    let aggregated = get_json(
        client,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
    .await;
    let entry = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == json!(group))
        .cloned()
        .expect("the group in aggregated discovery");
    assert_eq!(entry["versions"][0]["version"], "v1beta1");
    assert_eq!(entry["versions"][0]["freshness"], "Stale");
    for path in [
        format!("/apis/{group}/v1beta1"),
        format!("/apis/{group}/v1beta1/namespaces/default/things"),
    ] {
        let request = axum::http::Request::builder()
            .uri(&path)
            .body(Vec::new())
            .unwrap();
        match client.request_text(request).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 503, "{path}: {status:?}"),
            other => panic!("{path}: expected 503, got {other:?}"),
        }
    }
    api_services
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the group is gone", || async { !listed().await }).await;
}
