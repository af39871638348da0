//! Logs and metrics. Logs go to stderr (stdout belongs to CLI output such as `pidevops events`); metrics are
//! recorded in-process and rendered at scrape time without I/O.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{fmt, EnvFilter};

/// How log lines are written (`LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// Installs the global subscriber once; later calls (tests building several apps) are no-ops.
pub fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

/// The process-wide Prometheus recorder. Installed on first use; every app in the process shares it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ];
            let sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &latency)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("pidevops_append_batch_size".into()),
                        &sizes,
                    )
                })
                .expect("bucket lists are non-empty constants");
            match builder.install_recorder() {
                Ok(handle) => handle,
                // Another recorder is already installed (an embedding program's); render ours anyway so /metrics
                // still answers, even if it stays empty.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}

/// An error and its causes on one line, each cause once: a cause whose words its parent already says (a
/// `thiserror` variant that prints its source, as `StoreError::Database` does) is not said again. What `main`
/// prints for a failed command.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if said.last().is_some_and(|last| last.contains(text.as_str())) {
            continue;
        }
        said.push(text);
    }
    said.join(": ")
}

#[cfg(test)]
mod error_chain_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("database error: {0}")]
    struct Wraps(#[from] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let error = anyhow::Error::from(Wraps(io)).context("connecting to postgres://db/x");
        assert_eq!(
            format!("{error:#}"),
            "connecting to postgres://db/x: database error: Connection refused: Connection refused"
        );
        assert_eq!(
            error_chain(&error),
            "connecting to postgres://db/x: database error: Connection refused"
        );
    }
}
