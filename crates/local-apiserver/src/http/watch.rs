//! `?watch=true` streams: the initial events (the current state, or the changes after the
//! resourceVersion to resume from), then every change a watcher's selectors see, with
//! bookmarks when asked for, as newline-delimited JSON watch events.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::http::params::{flag, list_options, parse_rv, wants_metadata_only};
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::events;
use crate::storage::resources::ResourceType;
use crate::storage::selectors::{FieldSelector, LabelSelector};
use crate::storage::store::{Change, EventType, Store};

/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// An object reduced to its metadata.
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
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
        let mut object = events::view(&self.rt, change.object.clone());
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

/// A `?watch=true` stream of `rt` in `namespace` (all when None), ended by `shutdown`.
pub fn watch_stream(
    store: &Store,
    shutdown: &watch::Receiver<bool>,
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
    let start = match store.watch(rt, namespace, from) {
        Ok(start) => start,
        Err(err) if err.code == 410 => {
            // Real servers answer an expired watch with an ERROR event.
            let bytes = line("ERROR", &err.to_status());
            return Ok(stream_response(Body::from(bytes)));
        }
        Err(err) => return Err(err),
    };
    let mut shutdown = shutdown.clone();
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
