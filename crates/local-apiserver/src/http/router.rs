//! The HTTP face of the server: Kubernetes REST paths (`/api`, `/apis`,
//! discovery, collections, objects, the status and scale subresources, `?watch=true`
//! streams) mapped onto the [`Store`], with the request parameters of
//! [`params`](crate::http::params). Authentication is not checked: every
//! request is accepted, as befits a local test server (only a SelfSubjectReview
//! looks at its bearer token: [`authentication`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::admission::tokens::{Issuer, TOKEN_REQUEST_API_VERSION};
use crate::admission::validating_policy;
use crate::crd::validation as crd_validation;
use crate::http::openapi::OpenApiCache;
use crate::http::params::{
    decode_body, decode_body_of, decode_yaml, delete_options, field_manager, flag, list_options,
    parse_rv, wants_metadata_only,
};
use crate::http::requests::{RecordedRequest, RequestLog};
use crate::http::watch::{partial_metadata, watch_stream};
use crate::http::{authentication, discovery, reviews, scale};
use crate::storage::aggregation;
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::patch::PatchKind;
use crate::storage::resources::{AUTHENTICATION_GROUP, CRD_GROUP, CRD_PLURAL, ResourceType};
use crate::storage::store::{ListPage, Store, WriteOptions};

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
    pub requests: Arc<RequestLog>,
    /// Issues and authenticates service account tokens.
    pub tokens: Arc<Issuer>,
    /// The OpenAPI documents of the served resources, built on first use after each change.
    pub openapi: Arc<OpenApiCache>,
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

/// An error leaves the server as the Kubernetes `Status` it stands for.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
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
        let doc = store.with_registry(|r| discovery::aggregated(r, segments == ["api"]));
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
            aggregation::UNAVAILABLE_BODY,
        )
            .into_response();
    }
    let discovery = match segments.as_slice() {
        [] => Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        ),
        ["api"] => Some(discovery::core_versions()),
        ["apis"] => Some(store.with_registry(discovery::group_list)),
        ["api", version] => store.with_registry(|r| discovery::resource_list(r, "", version)),
        ["apis", group] => store.with_registry(|r| discovery::group(r, group)),
        ["apis", group, version] => {
            store.with_registry(|r| discovery::resource_list(r, group, version))
        }
        ["version"] => Some(version_info()),
        ["openapi", "v3", document @ ..] if method == Method::GET => {
            let documents = store.with_registry(|r| app.openapi.documents(r));
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

/// Kinds whose objects are stored but whose behaviour is not enforced: every admission kind but
/// ValidatingAdmissionPolicy and its binding (see `admission`).
fn not_enforced_warning(rt: &ResourceType) -> Option<&'static str> {
    (rt.group == validating_policy::GROUP
        && ![validating_policy::POLICIES, validating_policy::BINDINGS].contains(&rt.plural.as_str()))
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
        let answered = if rt.group == AUTHENTICATION_GROUP {
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
            for text in crd_validation::warnings(new, old_crd.as_ref()) {
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
        (Method::GET, None) if target.watch_prefix || flag(query, "watch") => watch_stream(
            store,
            &app.shutdown,
            headers,
            &rt,
            target.namespace.as_deref(),
            query,
        ),
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
