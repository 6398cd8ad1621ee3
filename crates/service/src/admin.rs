//! The admin HTTP port: `/live` (the process answers), `/ready` (the gRPC port serves, no
//! shutdown has begun and the service's own readiness probe, if any, passes) and `/metrics`
//! (Prometheus text exposition).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::server::ReadinessProbe;

/// What the admin handlers read.
#[derive(Clone, Debug)]
pub(crate) struct AdminState {
    pub(crate) registry: Arc<Registry>,
    pub(crate) ready: Arc<AtomicBool>,
    pub(crate) probe: Option<ReadinessProbe>,
}

/// The admin router.
pub(crate) fn router(state: AdminState) -> Router {
    Router::new()
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    if !state.ready.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n");
    }
    match &state.probe {
        Some(probe) if !probe.passes().await => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        _ => (StatusCode::OK, "ready\n"),
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}\n"),
        ),
    }
}
