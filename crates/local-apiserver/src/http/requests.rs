//! Opt-in recording of resource requests as Kubernetes authorization sees them (user, verb, API
//! group, resource, subresource, namespace), so that a test can compare what a client really did
//! with the RBAC rules written for it. A server-side apply that creates its object is recorded
//! as `patch` and `create`, the two checks a real API server makes. Off until [`LocalApiServer::record_requests`] is called;
//! discovery and other non-resource paths are not recorded.
//!
//! [`LocalApiServer::record_requests`]: crate::LocalApiServer::record_requests

use std::sync::Mutex;

/// One resource request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordedRequest {
    /// The user the client impersonates (`Impersonate-User`), as kubeconfig's `as:` sets it.
    pub user: Option<String>,
    /// The authorization verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// API group, empty for the core group.
    pub api_group: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// Namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// The `labelSelector` query parameter, when given.
    pub label_selector: Option<String>,
}

/// The recorded requests; `None` while recording is off.
#[derive(Debug, Default)]
pub struct RequestLog {
    requests: Mutex<Option<Vec<RecordedRequest>>>,
}

impl RequestLog {
    /// Starts recording (keeps what was recorded so far).
    pub fn start(&self) {
        self.requests
            .lock()
            .expect("request log lock")
            .get_or_insert_with(Vec::new);
    }

    /// Records the authorization checks of one request when recording is on; `checks` is only
    /// called then.
    pub fn record(&self, checks: impl FnOnce() -> Vec<RecordedRequest>) {
        if let Some(requests) = self.requests.lock().expect("request log lock").as_mut() {
            requests.extend(checks());
        }
    }

    /// Everything recorded so far, in arrival order.
    pub fn snapshot(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .expect("request log lock")
            .clone()
            .unwrap_or_default()
    }
}
