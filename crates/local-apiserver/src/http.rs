//! The HTTP face of the server: Kubernetes REST paths (`/api`, `/apis`,
//! discovery, collections, objects, the status subresource, `?watch=true`
//! streams) mapped onto the [`Store`], and request parameters
//! (selectors, paging, dry run, field manager, delete options) decoded the
//! way a real API server reads them. Authentication is not checked: every
//! request is accepted, as befits a local test server (only a SelfSubjectReview
//! looks at its bearer token: `src/authentication.rs`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::authentication;
use crate::error::{ApiError, ApiResult};
use crate::patch::PatchKind;
use crate::protobuf;
use crate::requests::RecordedRequest;
use crate::resources::{CRD_GROUP, CRD_PLURAL, ResourceType};
use crate::reviews;
use crate::scale;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{
    Change, DeleteOptions, EventType, ListOptions, ListPage, Propagation, Store, WriteOptions,
};
use crate::tokens::{Issuer, TOKEN_REQUEST_API_VERSION};

/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// Content type of aggregated discovery responses.
const AGGREGATED_DISCOVERY_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Shared state of the HTTP handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    /// Flips to true on shutdown so open watches end.
    pub shutdown: watch::Receiver<bool>,
    /// Where resource requests are recorded, once recording is switched on.
    pub requests: Arc<crate::requests::RequestLog>,
    /// Issues and authenticates service account tokens.
    pub tokens: Arc<Issuer>,
}

/// Largest request body accepted, as on real API servers (3 MiB).
const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// The router: one fallback handler that parses Kubernetes paths itself.
pub fn router(state: AppState) -> Router {
    Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY))
        .with_state(state)
}

/// A JSON response with the given status.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A resource request decoded from its path.
#[derive(Debug)]
struct ResourcePath {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    watch_prefix: bool,
}

fn parse_resource_path(segments: &[&str]) -> Option<ResourcePath> {
    let (group, version, mut rest) = match segments {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let watch_prefix = rest.first() == Some(&"watch");
    if watch_prefix {
        rest = &rest[1..];
    }
    let mut namespace = None;
    if let ["namespaces", ns, resource, ..] = rest
        && *resource != "status"
        && *resource != "finalize"
    {
        namespace = Some(ns.to_string());
        rest = &rest[2..];
    }
    let (plural, name, subresource) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.to_string()), None),
        [plural, name, sub] => (plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    Some(ResourcePath {
        group,
        version,
        plural: plural.to_string(),
        namespace,
        name,
        subresource,
        watch_prefix,
    })
}

async fn handle(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = &app.store;
    let aggregated = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| accept.contains("as=APIGroupDiscoveryList"));
    if aggregated
        && method == Method::GET
        && let ["api"] | ["apis"] = segments.as_slice()
    {
        let doc = store.with_registry(|r| r.aggregated_discovery(segments == ["api"]));
        let mut response = json_response(StatusCode::OK, &doc);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(AGGREGATED_DISCOVERY_TYPE),
        );
        return response;
    }
    if let ["apis", group, version, ..] = segments.as_slice()
        && store.with_registry(|r| r.is_unavailable(group, version))
    {
        // As kube-apiserver answers for an APIService whose service does not answer.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            crate::aggregation::UNAVAILABLE_BODY,
        )
            .into_response();
    }
    let discovery = match segments.as_slice() {
        [] => Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        ),
        ["api"] => Some(store.with_registry(|r| r.core_versions())),
        ["apis"] => Some(store.with_registry(|r| r.group_list())),
        ["api", version] => store.with_registry(|r| r.resource_list("", version)),
        ["apis", group] => store.with_registry(|r| r.group(group)),
        ["apis", group, version] => store.with_registry(|r| r.resource_list(group, version)),
        ["version"] => Some(version_info()),
        ["openapi", "v3", document @ ..] if method == Method::GET => {
            let documents = store.with_registry(|r| r.openapi());
            return match documents.get(document) {
                Some(json) => {
                    let mut response = (StatusCode::OK, json).into_response();
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    response
                }
                None => ApiError::unknown_path(&path).into_response(),
            };
        }
        ["healthz"] | ["livez"] | ["readyz"] => {
            return (StatusCode::OK, "ok").into_response();
        }
        _ => None,
    };
    if let Some(doc) = discovery {
        if method != Method::GET {
            return ApiError::method_not_allowed(format!("{method} is not supported on {path}"))
                .into_response();
        }
        return json_response(StatusCode::OK, &doc);
    }
    let Some(target) = parse_resource_path(&segments) else {
        return ApiError::unknown_path(&path).into_response();
    };
    app.requests
        .record(|| recorded_requests(store, &method, &headers, &query, &target));
    match serve_resource(&app, &method, &headers, &query, &body, target).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

/// The authorization checks a real API server makes for a resource request: its verb, plus
/// `create` for a server-side apply that creates the object (the API server requires both).
fn recorded_requests(
    store: &Store,
    method: &Method,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    target: &ResourcePath,
) -> Vec<RecordedRequest> {
    let request = |verb: &str| RecordedRequest {
        user: headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        verb: verb.to_string(),
        api_group: target.group.clone(),
        resource: target.plural.clone(),
        subresource: target.subresource.clone(),
        namespace: target.namespace.clone(),
        label_selector: query.get("labelSelector").cloned(),
    };
    let mut checks = vec![request(authorization_verb(method, target, query))];
    let apply = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/apply-patch"));
    if *method == Method::PATCH
        && apply
        && let Some(name) = &target.name
        && let Ok(rt) = store.resource(&target.group, &target.version, &target.plural)
        && store
            .get(&rt, target.namespace.as_deref().unwrap_or_default(), name)
            .is_err()
    {
        checks.push(request("create"));
    }
    checks
}

/// The verb Kubernetes authorization sees for a resource request.
fn authorization_verb(
    method: &Method,
    target: &ResourcePath,
    query: &HashMap<String, String>,
) -> &'static str {
    let named = target.name.is_some();
    match *method {
        Method::GET | Method::HEAD if target.watch_prefix || flag(query, "watch") => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": "v1.34.0-tenantplane-local",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none (tenantplane-local-apiserver, test and demo infrastructure)",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

fn parse_rv(text: &str) -> ApiResult<u64> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}")))
}

fn list_options(query: &HashMap<String, String>, rt: &ResourceType) -> ApiResult<ListOptions> {
    Ok(ListOptions {
        labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(
            &crate::events::field_selector(
                rt,
                query.get("fieldSelector").map_or("", String::as_str),
            )?,
            &rt.kind,
        )?,
        limit: match query.get("limit") {
            Some(l) => match l.parse::<usize>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => return Err(ApiError::bad_request(format!("invalid limit: {l:?}"))),
            },
            None => None,
        },
        continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

/// Default field manager: the user agent's program name, as real servers do.
fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|m| !m.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn decode_body(headers: &HeaderMap, body: &Bytes, rt: &ResourceType) -> ApiResult<Value> {
    // Custom resources have no protobuf form, as on real servers.
    let protobuf = (!rt.custom).then(|| (rt.api_version(), rt.kind.as_str()));
    decode_body_of(headers, body, protobuf)
}

/// A request body in JSON, YAML or, when `protobuf` names the type it holds, Kubernetes
/// protobuf.
fn decode_body_of(
    headers: &HeaderMap,
    body: &Bytes,
    protobuf: Option<(String, &str)>,
) -> ApiResult<Value> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/json" | "" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
        "application/yaml" | "application/apply-patch+yaml" => decode_yaml(body),
        media if protobuf::is_protobuf(media) => match protobuf {
            Some((api_version, kind)) => protobuf::decode(body, &api_version, kind),
            None => Err(ApiError::unsupported_media_type(content_type)),
        },
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

fn decode_yaml(body: &Bytes) -> ApiResult<Value> {
    serde_norway::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
}

fn delete_options(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<DeleteOptions> {
    let protobuf_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| protobuf::is_protobuf(t.split(';').next().unwrap_or("").trim()));
    let options: Value = if body.is_empty() {
        json!({})
    } else if protobuf_body {
        protobuf::decode(body, "meta.k8s.io/v1", "DeleteOptions")?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = query
        .get("propagationPolicy")
        .map(String::as_str)
        .or_else(|| options.get("propagationPolicy").and_then(Value::as_str));
    let orphan = options.get("orphanDependents").and_then(Value::as_bool) == Some(true)
        || query.get("orphanDependents").is_some_and(|v| v == "true");
    let propagation = match policy {
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some("Background") => Propagation::Background,
        None if orphan => Propagation::Orphan,
        None => Propagation::Background,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported propagationPolicy {other:?}: must be Orphan, Background or Foreground"
            )));
        }
    };
    let precondition = |field: &str| {
        options
            .pointer(&format!("/preconditions/{field}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let dry_run = query.get("dryRun").is_some_and(|v| v == "All")
        || options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        propagation,
        precondition_uid: precondition("uid"),
        precondition_resource_version: precondition("resourceVersion"),
        dry_run,
    })
}

/// A list item as real servers encode it: built-in kinds are typed lists
/// whose items carry no `apiVersion` or `kind` (the list says them once);
/// custom resources are unstructured and keep theirs.
fn list_item(rt: &ResourceType, mut object: Value) -> Value {
    if !rt.custom
        && let Value::Object(fields) = &mut object
    {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    object
}

fn list_response(rt: &ResourceType, page: ListPage) -> Value {
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = page.continue_token {
        metadata["continue"] = json!(token);
    }
    json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": metadata,
        "items": page.items,
    })
}

/// Whether the client asked for `PartialObjectMetadata` (metadata-only get,
/// list and watch, as kube-rs `get_metadata`/`list_metadata`/`metadata_watcher` do).
fn wants_metadata_only(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| accept.contains("as=PartialObjectMetadata"))
}

/// An object reduced to its metadata.
fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// Kinds whose objects are stored but whose behaviour is not enforced: every admission kind but
/// ValidatingAdmissionPolicy and its binding (see `admission`).
fn not_enforced_warning(rt: &ResourceType) -> Option<&'static str> {
    (rt.group == crate::admission::GROUP
        && ![crate::admission::POLICIES, crate::admission::BINDINGS].contains(&rt.plural.as_str()))
    .then_some(
        "299 - \"tenantplane-local-apiserver stores this admission configuration but does not enforce it\"",
    )
}

async fn serve_resource(
    app: &AppState,
    method: &Method,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &Bytes,
    target: ResourcePath,
) -> ApiResult<Response> {
    let store = &app.store;
    let rt = store.resource(&target.group, &target.version, &target.plural)?;
    if rt.namespaced && target.name.is_some() && target.namespace.is_none() {
        return Err(ApiError::unknown_path(&format!(
            "{} is namespaced: use /namespaces/{{namespace}}/{}",
            rt.plural, rt.plural
        )));
    }
    if !rt.namespaced && target.namespace.is_some() {
        return Err(ApiError::unknown_path(&format!(
            "{} is not namespaced",
            rt.plural
        )));
    }
    if rt.is_review() {
        if *method != Method::POST || target.name.is_some() {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource: {} are create-only",
                rt.plural
            )));
        }
        let review = decode_body(headers, body, &rt)?;
        let namespace = target.namespace.as_deref().unwrap_or_default();
        let answered = if rt.group == crate::tokens::GROUP {
            authentication::answer(&app.tokens, store, &rt, headers, review)?
        } else {
            reviews::answer(&rt, namespace, review)?
        };
        return Ok(json_response(StatusCode::CREATED, &answered));
    }
    if let (Some("token"), Some(name), Some(namespace)) = (
        target.subresource.as_deref(),
        target.name.as_deref(),
        target.namespace.as_deref(),
    ) && rt.issues_tokens()
    {
        if *method != Method::POST {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let protobuf = Some((TOKEN_REQUEST_API_VERSION.to_string(), "TokenRequest"));
        let request = decode_body_of(headers, body, protobuf)?;
        let answered = app.tokens.request(store, namespace, name, request)?;
        return Ok(json_response(StatusCode::CREATED, &answered));
    }
    let status_only = match target.subresource.as_deref() {
        None => false,
        Some("status") if rt.has_status => true,
        Some("scale") if scale::has_scale(&rt) => false,
        Some(sub) => {
            return Err(ApiError::unknown_path(&format!(
                "{}/{sub} is not served by this local test server",
                rt.plural
            )));
        }
    };
    if target.watch_prefix && (*method != Method::GET || target.name.is_some()) {
        return Err(ApiError::unknown_path(
            "the legacy /watch/ prefix is served for collections only: use ?watch=true&fieldSelector=metadata.name=NAME",
        ));
    }
    let namespace = target.namespace.clone().unwrap_or_default();
    let write = WriteOptions {
        manager: field_manager(query, headers),
        dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
        force: flag(query, "force"),
    };
    // A CRD write answers with warnings for the unrecognized formats it introduces.
    let crd_write = rt.group == CRD_GROUP && rt.plural == CRD_PLURAL && !status_only;
    let old_crd = match (crd_write, method.clone(), target.name.as_deref()) {
        (true, Method::PUT | Method::PATCH, Some(name)) => store.get(&rt, "", name).ok(),
        _ => None,
    };
    let with_crd_warnings = |mut response: Response, new: &Value| {
        if crd_write {
            for text in crate::crd_validation::warnings(new, old_crd.as_ref()) {
                let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
                if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
                    response.headers_mut().append(header::WARNING, value);
                }
            }
        }
        response
    };
    if let (Some("scale"), Some(name)) = (target.subresource.as_deref(), target.name.as_deref()) {
        let request = match *method {
            Method::GET => scale::Request::Get,
            Method::PUT => scale::Request::Update(decode_body(headers, body, &rt)?),
            Method::PATCH => scale::Request::Patch(
                PatchKind::from_content_type(
                    headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or(""),
                )?,
                body,
            ),
            _ => {
                return Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on {}/scale",
                    rt.plural
                )));
            }
        };
        let scale = scale::serve(store, &rt, &namespace, name, request, &write)?;
        return Ok(json_response(StatusCode::OK, &scale));
    }
    let ok = |code: StatusCode, value: &Value| {
        let mut response = json_response(code, value);
        if let Some(warning) = not_enforced_warning(&rt)
            && *method != Method::GET
        {
            response
                .headers_mut()
                .insert(header::WARNING, HeaderValue::from_static(warning));
        }
        response
    };
    match (method.clone(), target.name.as_deref()) {
        (Method::GET, None) if target.watch_prefix || flag(query, "watch") => {
            watch_stream(app, headers, &rt, target.namespace.as_deref(), query)
        }
        (Method::GET, None) => {
            let options = list_options(query, &rt)?;
            if query.get("resourceVersionMatch").map(String::as_str) == Some("Exact")
                && let Some(rv) = query.get("resourceVersion")
            {
                let rv = parse_rv(rv)?;
                if rv != store.resource_version() {
                    store.check_not_compacted(rv)?;
                    return Err(ApiError::gone(format!(
                        "resourceVersionMatch=Exact for {rv} is not served by this local test server: only the latest state is kept"
                    )));
                }
            }
            let mut page = store.list(&rt, target.namespace.as_deref(), &options)?;
            if wants_metadata_only(headers) {
                page.items = page.items.iter().map(partial_metadata).collect();
                let mut list = list_response(&rt, page);
                list["kind"] = json!("PartialObjectMetadataList");
                list["apiVersion"] = json!("meta.k8s.io/v1");
                return Ok(ok(StatusCode::OK, &list));
            }
            page.items = page.items.into_iter().map(|o| list_item(&rt, o)).collect();
            Ok(ok(StatusCode::OK, &list_response(&rt, page)))
        }
        (Method::GET, Some(name)) => {
            let object = store.get(&rt, &namespace, name)?;
            if wants_metadata_only(headers) {
                return Ok(ok(StatusCode::OK, &partial_metadata(&object)));
            }
            Ok(ok(StatusCode::OK, &object))
        }
        (Method::POST, None) => {
            if rt.namespaced && target.namespace.is_none() {
                return Err(ApiError::method_not_allowed(format!(
                    "create {} requires a namespace in the path",
                    rt.plural
                )));
            }
            let object = decode_body(headers, body, &rt)?;
            let created = store.create(&rt, &namespace, object, &write)?;
            Ok(with_crd_warnings(
                ok(StatusCode::CREATED, &created),
                &created,
            ))
        }
        (Method::PUT, Some(name)) => {
            let object = decode_body(headers, body, &rt)?;
            let updated = store.update(&rt, &namespace, name, object, status_only, &write)?;
            Ok(with_crd_warnings(ok(StatusCode::OK, &updated), &updated))
        }
        (Method::PATCH, Some(name)) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)?;
            let patch = if kind == PatchKind::Apply {
                if query.get("fieldManager").is_none_or(String::is_empty) {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        "fieldManager",
                        "Required value: is required for apply patch",
                    ));
                }
                decode_yaml(body)?
            } else {
                serde_json::from_slice(body).map_err(|e| {
                    ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                })?
            };
            let patched = store.patch(&rt, &namespace, name, kind, &patch, status_only, &write)?;
            let code = if patched.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_crd_warnings(
                ok(code, &patched.object),
                &patched.object,
            ))
        }
        (Method::DELETE, Some(name)) => {
            let options = delete_options(query, headers, body)?;
            Ok(ok(
                StatusCode::OK,
                &store.delete(&rt, &namespace, name, &options)?,
            ))
        }
        (Method::DELETE, None) => {
            let options = delete_options(query, headers, body)?;
            let list = list_options(query, &rt)?;
            let mut page =
                store.delete_collection(&rt, target.namespace.as_deref(), &list, &options)?;
            page.items = page.items.into_iter().map(|o| list_item(&rt, o)).collect();
            Ok(ok(StatusCode::OK, &list_response(&rt, page)))
        }
        (method, _) => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on this path of {}",
            rt.plural
        ))),
    }
}

/// The parameters of one watch.
#[derive(Debug)]
struct WatchFilter {
    rt: ResourceType,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    metadata_only: bool,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// The event type a watcher sees for a change, if any: a modification
    /// that moves an object into or out of the selection becomes ADDED or
    /// DELETED.
    fn event_type(&self, change: &Change) -> Option<EventType> {
        if change.key != self.rt.storage_key()
            || self
                .namespace
                .as_ref()
                .is_some_and(|ns| *ns != change.namespace)
        {
            return None;
        }
        let now = self.matches(&change.object);
        match (change.event, &change.previous) {
            (EventType::Modified, Some(previous)) => match (self.matches(previous), now) {
                (true, true) => Some(EventType::Modified),
                (false, true) => Some(EventType::Added),
                (true, false) => Some(EventType::Deleted),
                (false, false) => None,
            },
            (event, _) if now => Some(event),
            _ => None,
        }
    }

    /// The encoded event a watcher sends for a change, if any. The common
    /// case (the change as stored, in the version it was written) is encoded
    /// once and shared by every watcher.
    fn event_line(&self, change: &Change) -> Option<Bytes> {
        let event = self.event_type(change)?;
        let api_version = self.rt.api_version();
        let as_stored = event == change.event
            && !self.metadata_only
            && change.object.get("apiVersion").and_then(Value::as_str)
                == Some(api_version.as_str())
            && change.object.get("kind").and_then(Value::as_str) == Some(self.rt.kind.as_str());
        if as_stored {
            let encoded = change
                .encoded
                .get_or_init(|| line(event.as_str(), &change.object));
            return Some(encoded.clone());
        }
        let mut object = crate::events::view(&self.rt, change.object.clone());
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(self.rt.kind);
        if self.metadata_only {
            object = partial_metadata(&object);
        }
        Some(line(event.as_str(), &object))
    }

    fn bookmark(&self, resource_version: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": resource_version.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({
                "kind": self.rt.kind,
                "apiVersion": self.rt.api_version(),
                "metadata": metadata,
            }),
        )
    }
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event_type, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn watch_stream(
    app: &AppState,
    headers: &HeaderMap,
    rt: &ResourceType,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    let options = list_options(query, rt)?;
    let filter = WatchFilter {
        rt: rt.clone(),
        namespace: namespace.map(str::to_string),
        labels: options.labels,
        fields: options.fields,
        metadata_only: wants_metadata_only(headers),
    };
    let bookmarks = flag(query, "allowWatchBookmarks");
    let initial_events = flag(query, "sendInitialEvents");
    let from = match query.get("resourceVersion").filter(|v| !v.is_empty()) {
        Some(rv) if !initial_events => Some(parse_rv(rv)?),
        _ => None,
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(1024);
    let start = match app.store.watch(rt, namespace, from) {
        Ok(start) => start,
        Err(err) if err.code == 410 => {
            // Real servers answer an expired watch with an ERROR event.
            let bytes = line("ERROR", &err.to_status());
            return Ok(stream_response(Body::from(bytes)));
        }
        Err(err) => return Err(err),
    };
    let mut shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        let send = |bytes: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(bytes)).await.is_ok() }
        };
        let mut last_rv = start.after;
        for change in &start.initial {
            if let Some(encoded) = filter.event_line(change)
                && !send(encoded).await
            {
                return;
            }
        }
        if initial_events && bookmarks && !send(filter.bookmark(last_rv, true)).await {
            return;
        }
        let mut live = start.live;
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                () = &mut deadline => return,
                _ = ticker.tick(), if bookmarks => {
                    if !send(filter.bookmark(last_rv, false)).await {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Ok(change) => {
                        if change.resource_version <= start.after {
                            continue;
                        }
                        last_rv = change.resource_version;
                        if let Some(encoded) = filter.event_line(&change)
                            && !send(encoded).await {
                                return;
                            }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let err = ApiError::gone("the watch fell too far behind; list again and restart the watch");
                        let _ = send(line("ERROR", &err.to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(stream_response(Body::from_stream(ReceiverStream::new(rx))))
}

fn stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
