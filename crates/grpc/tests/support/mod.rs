//! Servers on loopback sockets and the example documents the tests send them.

#![allow(dead_code, reason = "each test file uses a part of the support module")]

use std::path::Path;

use serde_json::Value;
use tenantplane_grpc::{IsolationService, PlannerService};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Channel, Server};

/// Starts the Planner and IsolationCompiler services on a loopback port; a channel to them.
pub async fn serve() -> Channel {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(PlannerService::new().into_server())
            .add_service(IsolationService::default().into_server())
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The text of a file under the workspace's examples/.
pub fn example(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The documents of an example file, as JSON values.
pub fn example_documents(path: &str) -> Vec<Value> {
    tenantplane_core::documents::parse(path, &example(path))
        .into_iter()
        .map(|d| d.unwrap().value)
        .collect()
}

/// JSON bytes of a value, as the wire carries Kubernetes objects.
pub fn json(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}
