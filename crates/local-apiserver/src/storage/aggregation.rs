//! APIServices: kube-apiserver's aggregation layer as a client sees it when the aggregated API
//! server behind an APIService does not answer.
//!
//! This server runs no aggregated API servers, so every APIService that names a `spec.service`
//! is one whose service is unavailable (a metrics-server that is down, say). As kube-apiserver
//! does for such an APIService, its group version is still listed in discovery (`/apis`,
//! `/apis/{group}`; in aggregated discovery with `freshness: Stale` and no resources), and every
//! request under `/apis/{group}/{version}` is answered `503 service unavailable` in plain text.
//! APIServices without a service (`Local`) describe what the server serves itself and change
//! nothing.

use std::collections::BTreeSet;

use serde_json::Value;

/// The API group of APIServices.
pub const GROUP: &str = "apiregistration.k8s.io";
/// Their plural.
pub const PLURAL: &str = "apiservices";
/// kube-apiserver's body for a request to an unavailable aggregated API.
pub const UNAVAILABLE_BODY: &str = "service unavailable\n";

/// The (group, version) pairs of the APIServices among `objects` whose aggregated API server
/// cannot be reached.
pub fn unavailable<'a>(objects: impl Iterator<Item = &'a Value>) -> BTreeSet<(String, String)> {
    objects
        .filter(|o| o.pointer("/spec/service").is_some_and(|s| !s.is_null()))
        .filter_map(|o| {
            let spec = o.get("spec")?;
            Some((
                spec.get("group")?.as_str()?.to_string(),
                spec.get("version")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The status kube-apiserver gives an APIService: `Local` ones are available, the others (here)
/// are not, their service being nowhere.
pub fn status(api_service: &Value) -> Value {
    let (available, reason, message) = match api_service.pointer("/spec/service") {
        Some(service) if !service.is_null() => (
            "False",
            "ServiceNotFound",
            format!(
                "service/{} in \"{}\" is not present",
                service["name"].as_str().unwrap_or_default(),
                service["namespace"].as_str().unwrap_or_default()
            ),
        ),
        _ => (
            "True",
            "Local",
            "Local APIServices are always available".to_string(),
        ),
    };
    serde_json::json!({"conditions": [{
        "type": "Available", "status": available, "reason": reason, "message": message,
        "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }]})
}
