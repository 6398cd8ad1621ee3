//! The DecisionLog gRPC service on a loopback server: Get, Query with filters and pages, and
//! Watch resuming without loss across a server restart.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use tenantplane_decision_log::grpc::{DecisionLogService, filter_to_proto};
use tenantplane_decision_log::{DecisionStore, Filter, ObjectFilter, Retention};
use tenantplane_proto::decisions::v1 as pb;
use tenantplane_proto::decisions::v1::decision_log_client::DecisionLogClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// A server on a loopback port, stopped by [`Server::stop`].
struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Server {
    async fn start(store: Arc<dyn DecisionStore>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = DecisionLogService::new(store)
            .with_poll_interval(Duration::from_millis(50))
            .into_server();
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
                .unwrap();
        });
        Server { addr, stop, task }
    }

    async fn client(&self) -> DecisionLogClient<Channel> {
        DecisionLogClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    /// Stops serving; waits for the clients' connections to close (drop them first).
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn DecisionStore> {
    let url = format!("sqlite:{}", dir.path().join("decisions.db").display());
    tenantplane_decision_log::open(&url).await.unwrap()
}

#[tokio::test]
async fn get_and_query_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let appended = store
        .append_batch(common::decisions(0, 30, 3))
        .await
        .unwrap();
    let server = Server::start(store).await;
    let mut client = server.client().await;

    let got = client
        .get(pb::GetRequest {
            id: appended[4].id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.sequence, 5);
    assert_eq!(got.hash, appended[4].hash);
    assert_eq!(got.decision.unwrap().message, "decision 4 for tenant-1");
    let missing = client
        .get(pb::GetRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // tenant-1 holds decisions 1, 4, ..., 28 (sequences 2, 5, ..., 29): pages of 4.
    let filter = filter_to_proto(&Filter {
        tenant: Some("tenant-1".into()),
        ..Filter::default()
    });
    let mut seen = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .query(pb::QueryRequest {
                filter: Some(filter.clone()),
                page_size: 4,
                page_token: page_token.clone(),
                newest_first: false,
            })
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entries.iter().map(|e| e.sequence));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(seen, (0..10).map(|i| 3 * i + 2).collect::<Vec<_>>());

    let by_subject = client
        .query(pb::QueryRequest {
            filter: Some(filter_to_proto(&Filter {
                subject: ObjectFilter::parse("ConfigMap/default/cm-2"),
                ..Filter::default()
            })),
            page_size: 0,
            page_token: String::new(),
            newest_first: true,
        })
        .await
        .unwrap()
        .into_inner();
    let sequences: Vec<u64> = by_subject.entries.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, vec![9, 8, 7]);

    let bad = client
        .query(pb::QueryRequest {
            page_token: "x".into(),
            ..pb::QueryRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    drop(client);
    server.stop().await;
}

/// Receives `n` entries from a Watch stream.
async fn receive(stream: &mut tonic::Streaming<pb::Entry>, n: usize) -> Vec<pb::Entry> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("a Watch entry within 10s")
            .expect("the stream is open")
            .expect("an entry");
        out.push(next);
    }
    out
}

#[tokio::test]
async fn watch_resumes_without_loss_across_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();

    // Server A: watch from the beginning while decisions are appended.
    let store_a = sqlite(&dir).await;
    store_a
        .append_batch(common::decisions(0, 10, 3))
        .await
        .unwrap();
    let server_a = Server::start(store_a.clone()).await;
    let mut stream = server_a
        .client()
        .await
        .watch(pb::WatchRequest {
            filter: None,
            start: Some(pb::watch_request::Start::AfterSequence(0)),
        })
        .await
        .unwrap()
        .into_inner();
    let mut received = receive(&mut stream, 10).await;
    for from in [10, 30] {
        store_a
            .append_batch(common::decisions(from, 20, 3))
            .await
            .unwrap();
    }
    received.extend(receive(&mut stream, 25).await);
    let last_id = received
        .last()
        .unwrap()
        .decision
        .as_ref()
        .unwrap()
        .id
        .clone();

    // Stop A while the client is behind; more decisions land while nobody serves.
    drop(stream);
    server_a.stop().await;
    drop(store_a);
    let store_b = sqlite(&dir).await;
    store_b
        .append_batch(common::decisions(50, 15, 3))
        .await
        .unwrap();

    // Server B on the same file: resume after the last id received.
    let server_b = Server::start(store_b.clone()).await;
    let mut stream = server_b
        .client()
        .await
        .watch(pb::WatchRequest {
            filter: None,
            start: Some(pb::watch_request::Start::AfterId(last_id)),
        })
        .await
        .unwrap()
        .into_inner();
    received.extend(receive(&mut stream, 30).await);
    // And live appends keep flowing.
    store_b
        .append_batch(common::decisions(65, 5, 3))
        .await
        .unwrap();
    received.extend(receive(&mut stream, 5).await);

    let sequences: Vec<u64> = received.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=70).collect::<Vec<_>>());
    for pair in received.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
    }
    drop(stream);
    server_b.stop().await;
}

#[tokio::test]
async fn watch_filters_and_refuses_a_start_removed_by_retention() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    store
        .append_batch(common::decisions(0, 30, 3))
        .await
        .unwrap();
    let server = Server::start(store.clone()).await;
    let mut client = server.client().await;

    // From now on (no start), only tenant-2's decisions.
    let mut stream = client
        .watch(pb::WatchRequest {
            filter: Some(filter_to_proto(&Filter {
                tenant: Some("tenant-2".into()),
                ..Filter::default()
            })),
            start: None,
        })
        .await
        .unwrap()
        .into_inner();
    store
        .append_batch(common::decisions(30, 9, 3))
        .await
        .unwrap();
    let got: Vec<u64> = receive(&mut stream, 3)
        .await
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(got, vec![33, 36, 39]);

    let keep_10 = Retention {
        max_age: None,
        max_links: Some(10),
    };
    store
        .retain(keep_10, k8s_openapi::jiff::Timestamp::now())
        .await
        .unwrap();
    let gone = client
        .watch(pb::WatchRequest {
            filter: None,
            start: Some(pb::watch_request::Start::AfterSequence(5)),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::OutOfRange);
    // Sequence 0 means everything kept.
    let mut all = client
        .watch(pb::WatchRequest {
            filter: None,
            start: Some(pb::watch_request::Start::AfterSequence(0)),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(receive(&mut all, 1).await[0].sequence, 30);
    drop((all, stream, client));
    server.stop().await;
}
