//! Without an OTLP endpoint no exporter is built and decisions carry no trace ids; a bad log
//! filter is refused with its text.

use tenantplane_telemetry::{LogFormat, OtlpSettings, init_with};

#[test]
fn no_endpoint_means_no_exporter_and_no_trace_ids() {
    let bad = init_with(
        "quiet",
        LogFormat::Text,
        "tenantplane=[",
        &OtlpSettings::default(),
    )
    .unwrap_err();
    assert!(
        bad.to_string().contains("log filter \"tenantplane=[\""),
        "{bad}"
    );
    let telemetry = init_with("quiet", LogFormat::Json, "info", &OtlpSettings::default()).unwrap();
    assert!(!telemetry.exporting());
    let span = tracing::info_span!("sync.decision");
    let _entered = span.enter();
    assert_eq!(tenantplane_telemetry::current_trace_ids(), None);
    assert!(
        init_with("again", LogFormat::Text, "info", &OtlpSettings::default()).is_err(),
        "installed once per process"
    );
}
