//! An OTLP endpoint that refuses connections never blocks the code that makes spans: twenty
//! thousand spans (ten times the batch queue) are created while nothing can be exported, the
//! excess is dropped by the bounded queue, and shutdown still returns.

use tenantplane_telemetry::{LogFormat, OtlpSettings, init_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_dropped_not_queued_forever_when_the_collector_is_down() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let telemetry = init_with(
        "exporter-down-test",
        LogFormat::Text,
        "info",
        &OtlpSettings {
            endpoint: Some(format!("http://{closed}")),
            protocol: "grpc".into(),
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..20_000 {
        let span = tracing::info_span!("sync.decision", i);
        let _entered = span.enter();
        assert!(
            tenantplane_telemetry::current_trace_ids().is_some(),
            "spans are still traced"
        );
    }
    drop(telemetry);
}
