//! A collector that accepts connections and never answers (the slow or hung case, worse than a
//! refused connection): making spans never waits for it, memory stays bounded because the batch
//! queue drops what it cannot hold, and shutdown returns after the export timeout.

use std::time::Duration;

use tenantplane_telemetry::{LogFormat, OtlpSettings, init_with};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_collector_neither_blocks_nor_grows_memory() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accept and hold every connection without reading or writing.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let telemetry = init_with(
        "hung-collector-test",
        LogFormat::Text,
        "info",
        &OtlpSettings {
            endpoint: Some(format!("http://{addr}")),
            protocol: "grpc".into(),
            ..Default::default()
        },
    )
    .unwrap();
    // 2 KiB of attributes per span: 100,000 spans kept would be over 200 MiB.
    let payload = "x".repeat(2048);
    let warm = |n: usize| {
        for i in 0..n {
            let span = tracing::info_span!("tenantplane.sync.decision", i, payload = %payload);
            let _entered = span.enter();
        }
    };
    warm(5_000);
    let before = rss_kib();
    warm(100_000);
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "memory grew by {grown_mib} MiB for 100,000 spans the collector never took"
    );
    // Shutdown gives up on the hung export instead of hanging (OTLP export timeout, 10 s).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(telemetry);
        let _ = done_tx.send(());
    });
    assert!(
        done_rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "shutdown hung on a collector that never answers"
    );
}
