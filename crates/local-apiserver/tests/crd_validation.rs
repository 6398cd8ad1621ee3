//! CustomResourceDefinition validation: the local server refuses the CRDs a
//! real kube-apiserver refuses (non-structural schemas, CEL rules that do not
//! compile or whose estimated cost is over budget), with the same field paths
//! and messages, and warns of unrecognized formats. Runs against the local
//! server, or against a real cluster when `TENANTPLANE_E2E_KUBECONFIG` is set.
//!
//! Most requests are dry runs: validation runs in full and nothing is left on
//! the cluster.

mod support;

use axum::http::{Method, Request};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::client::Body;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::{Target, eventually, status};

/// A namespaced `Widget` CRD in a group of its own with this schema.
fn crd(group: &str, schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}}],
        },
    })
}

/// An object schema with these properties under `spec`.
fn with_spec(properties: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}})
}

/// A list of at most 64 CIDRs checked by `self.all(c, isCIDR(c))`, the items
/// with `max_length` if given.
fn cidrs(max_length: Option<u64>) -> Value {
    let mut items = json!({"type": "string"});
    if let Some(max) = max_length {
        items["maxLength"] = json!(max);
    }
    with_spec(json!({"cidrs": {
        "type": "array",
        "maxItems": 64,
        "items": items,
        "x-kubernetes-validations": [{"rule": "self.all(c, isCIDR(c))", "message": "must be CIDRs"}],
    }}))
}

fn unique_group(prefix: &str) -> String {
    format!("{prefix}{}.semantics.tenantplane.io", std::process::id())
}

/// What a CRD write answered: status code, `Warning` headers and body.
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Answer {
    /// The `(field, message)` of each cause of a failure.
    fn causes(&self) -> Vec<(String, String)> {
        self.body
            .pointer("/details/causes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let text = |k: &str| {
                    c.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                (text("field"), text("message"))
            })
            .collect()
    }
}

/// POSTs a CRD (as a dry run unless `dry_run` is false), keeping the warnings
/// kube-rs would only log.
async fn post_crd(client: &Client, crd: &Value, dry_run: bool) -> Answer {
    let mut uri = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".to_string();
    if dry_run {
        uri.push_str("?dryRun=All");
    }
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(crd).unwrap()))
        .unwrap();
    let response = client.send(request).await.expect("the request is answered");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let bytes = response.into_body().collect_bytes().await.expect("a body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        code,
        warnings,
        body,
    }
}

const COST_HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

#[tokio::test]
async fn a_rule_over_the_cost_budget_is_refused_with_its_factor() {
    let target = Target::start().await;
    let group = unique_group("cost");
    let answer = post_crd(&target.client, &crd(&group, cidrs(None)), true).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(answer.body["reason"], "Invalid");
    let field = "spec.validation.openAPIV3Schema.properties[spec].properties[cidrs].x-kubernetes-validations[0].rule";
    let message =
        format!("Forbidden: estimated rule cost exceeds budget by factor of 2.0x {COST_HINT}");
    assert_eq!(answer.causes(), vec![(field.to_string(), message.clone())]);
    assert_eq!(
        answer.body["message"],
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"widgets.{group}\" is invalid: {field}: {message}"
        )
    );
    assert_eq!(
        answer.body["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
}

#[tokio::test]
async fn bounding_the_strings_brings_the_rule_within_budget() {
    let target = Target::start().await;
    let group = unique_group("bounded");
    // 43 characters: the longest IPv6 CIDR.
    let answer = post_crd(&target.client, &crd(&group, cidrs(Some(43))), true).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
}

#[tokio::test]
async fn non_structural_schemas_are_refused() {
    let target = Target::start().await;
    let group = unique_group("structural");
    let untyped = with_spec(json!({"name": {"description": "a field without a type"}}));
    let answer = post_crd(&target.client, &crd(&group, untyped), true).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(
        answer.causes(),
        vec![(
            "spec.validation.openAPIV3Schema.properties[spec].properties[name].type".to_string(),
            "Required value: must not be empty for specified object fields".to_string()
        )]
    );

    let both = with_spec(json!({"labels": {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": {"type": "string"},
    }}));
    let answer = post_crd(&target.client, &crd(&group, both), true).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(
        answer.causes(),
        vec![(
            "spec.validation.openAPIV3Schema.properties[spec].properties[labels].additionalProperties".to_string(),
            "Forbidden: additionalProperties and properties are mutual exclusive".to_string()
        )]
    );
}

#[tokio::test]
async fn an_unrecognized_format_is_accepted_with_a_warning() {
    let target = Target::start().await;
    let group = unique_group("format");
    let schema = with_spec(json!({
        "replicas": {"type": "integer", "format": "uint32"},
        "limit": {"type": "integer", "format": "uint32"},
        "when": {"type": "string", "format": "date-time"},
    }));
    let answer = post_crd(&target.client, &crd(&group, schema), true).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        vec![r#"299 - "unrecognized format \"uint32\"""#]
    );
}

#[tokio::test]
async fn a_rule_that_does_not_compile_is_refused() {
    let target = Target::start().await;
    let group = unique_group("compile");
    let schema = with_spec(json!({"cidr": {
        "type": "string",
        "maxLength": 43,
        "x-kubernetes-validations": [{"rule": "isCIDRX(self)"}],
    }}));
    let answer = post_crd(&target.client, &crd(&group, schema), true).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    let causes = answer.causes();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        causes[0].0,
        "spec.validation.openAPIV3Schema.properties[spec].properties[cidr].x-kubernetes-validations[0].rule"
    );
    assert!(
        causes[0]
            .1
            .contains("compilation failed: ERROR: <input>:1:8: undeclared reference to 'isCIDRX'"),
        "{causes:?}"
    );

    let not_bool = with_spec(json!({"size": {
        "type": "integer",
        "x-kubernetes-validations": [{"rule": "self + 1"}],
    }}));
    let answer = post_crd(&target.client, &crd(&group, not_bool), true).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert!(
        answer.causes()[0]
            .1
            .ends_with(": cel expression must evaluate to a bool"),
        "{:?}",
        answer.causes()
    );
}

#[tokio::test]
async fn an_update_adding_an_expensive_rule_is_refused_and_changes_nothing() {
    let target = Target::start().await;
    let group = unique_group("update");
    let created = post_crd(&target.client, &crd(&group, cidrs(Some(43))), false).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let name = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(target.client.clone());
    let patch =
        json!({"spec": {"versions": [crd(&group, cidrs(None))["spec"]["versions"][0].clone()]}});
    let refused = crds
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let refused = status(refused);
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains("factor of 2.0x"),
        "{}",
        refused.message
    );
    let stored = crds.get(&name).await.unwrap();
    let items = &stored.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
        .properties
        .as_ref()
        .unwrap()["spec"]
        .properties
        .as_ref()
        .unwrap()["cidrs"]
        .items;
    let items = serde_json::to_value(items).unwrap();
    assert_eq!(
        items["maxLength"], 43,
        "the refused update left the CRD as it was"
    );
    crds.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("the CRD is gone", || {
        let (crds, name) = (crds.clone(), name.clone());
        async move { crds.get_opt(&name).await.unwrap().is_none() }
    })
    .await;
}

/// Outcome expected for `deploy/crds/tenantplane.io.yaml` as committed.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Installed,
    Refused,
}

/// Dry-run creates every CRD of a manifest and asserts they all install, or
/// that at least one is refused (422).
async fn assert_crds_install(client: &Client, path: &str, expected: Outcome) -> Vec<Answer> {
    let text = std::fs::read_to_string(path).expect("reading the CRD manifest");
    let mut answers = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let crd: Value = serde::Deserialize::deserialize(document).expect("a YAML document");
        if crd.is_null() {
            continue;
        }
        answers.push(post_crd(client, &crd, true).await);
    }
    assert!(!answers.is_empty(), "{path} holds CRDs");
    // 409: it exists already, so its validation passed.
    let installed = answers.iter().all(|a| a.code == 201 || a.code == 409);
    let outcome = if installed {
        Outcome::Installed
    } else {
        Outcome::Refused
    };
    let summary: Vec<String> = answers
        .iter()
        .map(|a| format!("{} {}", a.code, a.body["message"]))
        .collect();
    assert_eq!(outcome, expected, "{summary:#?}");
    answers
}

/// The project's own CRDs, as committed, install as a real kube-apiserver installs them: every
/// CEL rule within the cost budget (a rule over it once made the real server refuse the
/// IsolationProfile CRD), and no format the server does not know (it warns of those).
#[tokio::test]
async fn the_project_crds_install_without_warnings() {
    let target = Target::start().await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/tenantplane.io.yaml"
    );
    let answers = assert_crds_install(&target.client, path, Outcome::Installed).await;
    let warnings: Vec<&String> = answers.iter().flat_map(|a| &a.warnings).collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}
