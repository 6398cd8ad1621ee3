//! Request parameters decoded the way a real API server reads them: selectors and paging,
//! the field manager, request bodies (JSON, YAML, Kubernetes protobuf) and delete options.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::http::protobuf;
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::events;
use crate::storage::resources::ResourceType;
use crate::storage::selectors::{FieldSelector, LabelSelector};
use crate::storage::store::{DeleteOptions, ListOptions, Propagation};

/// Whether a boolean query parameter is set (`true` or `1`).
pub fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

/// A resourceVersion parameter.
pub fn parse_rv(text: &str) -> ApiResult<u64> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}")))
}

/// The selectors and paging of a list, delete-collection or watch of `rt`.
pub fn list_options(query: &HashMap<String, String>, rt: &ResourceType) -> ApiResult<ListOptions> {
    Ok(ListOptions {
        labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(
            &events::field_selector(rt, query.get("fieldSelector").map_or("", String::as_str))?,
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
pub fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
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

/// A request body holding an object of `rt`.
pub fn decode_body(headers: &HeaderMap, body: &Bytes, rt: &ResourceType) -> ApiResult<Value> {
    // Custom resources have no protobuf form, as on real servers.
    let protobuf = (!rt.custom).then(|| (rt.api_version(), rt.kind.as_str()));
    decode_body_of(headers, body, protobuf)
}

/// A request body in JSON, YAML or, when `protobuf` names the type it holds, Kubernetes
/// protobuf.
pub fn decode_body_of(
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

/// A YAML request body (an apply configuration, say).
pub fn decode_yaml(body: &Bytes) -> ApiResult<Value> {
    serde_norway::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
}

/// The options of a DELETE, from its query and body.
pub fn delete_options(
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

/// Whether the client asked for `PartialObjectMetadata` (metadata-only get,
/// list and watch, as kube-rs `get_metadata`/`list_metadata`/`metadata_watcher` do).
pub fn wants_metadata_only(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| accept.contains("as=PartialObjectMetadata"))
}
