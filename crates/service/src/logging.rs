//! Structured logs to stderr.

use tracing_subscriber::EnvFilter;

use crate::LogFormat;

/// Installs the process-wide tracing subscriber: `filter` in EnvFilter syntax, lines in `format`.
/// A second call (several servers in one test process) keeps the first subscriber.
pub fn init_logging(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init` fails only when a subscriber is already set, which is fine to keep.
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}
