//! Without an OTLP endpoint no exporter is built and decisions carry no trace ids.

use tenantplane_telemetry::{LogFormat, OtlpSettings, init_with};

#[test]
fn no_endpoint_means_no_exporter_and_no_trace_ids() {
    let telemetry = init_with("quiet", LogFormat::Json, &OtlpSettings::default()).unwrap();
    assert!(!telemetry.exporting());
    let span = tracing::info_span!("sync.decision");
    let _entered = span.enter();
    assert_eq!(tenantplane_telemetry::current_trace_ids(), None);
    assert!(
        init_with("again", LogFormat::Text, &OtlpSettings::default()).is_err(),
        "installed once per process"
    );
}
