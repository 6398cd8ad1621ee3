//! The admin server: `/live` (the process runs) and `/ready` (every tenant has listed its watches).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::controller::Context;

/// Serves /live and /ready until the listener fails.
pub async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Context>) {
    let app = Router::new()
        .route("/live", get(|| async { "ok" }))
        .route(
            "/ready",
            get(|State(ctx): State<Arc<Context>>| async move {
                if ctx.all_ready().await {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "listing")
                }
            }),
        )
        .with_state(ctx);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "admin server stopped");
    }
}
