//! What `deploy/` ships for operators names only what the service exports: every metric in the Grafana dashboard
//! and the Prometheus alerts is one the code records (a `metrics::counter!` / `gauge!` / `histogram!` in `src/`),
//! and the real `/metrics` of a running app carries the loop metrics they lean on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::{TestApp, TestDb};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "bin") {
                continue; // the benchmark binaries' own metrics are not the service's
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `pidevops_…` name the service records, with `_bucket`, `_sum` and `_count` for its histograms.
fn recorded() -> BTreeSet<String> {
    let recorder =
        regex::Regex::new(r#"(counter|gauge|histogram)!\(\s*"(pidevops_[a-z0-9_]+)""#).unwrap();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for found in recorder.captures_iter(&text) {
            let name = found[2].to_owned();
            if &found[1] == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            names.insert(name);
        }
    }
    names
}

/// The `pidevops_…` names a file mentions.
fn mentioned(path: &Path) -> BTreeSet<String> {
    let name = regex::Regex::new(r"\bpidevops_[a-z0-9_]+").unwrap();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    name.find_iter(&text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

#[test]
fn the_dashboard_and_the_alerts_name_only_metrics_the_service_records() {
    let recorded = recorded();
    assert!(
        recorded.contains("pidevops_loop_stale")
            && recorded.contains("pidevops_append_duration_seconds_bucket"),
        "the scan finds the service's metrics: {recorded:?}"
    );
    assert!(!recorded.contains("pidevops_no_such_metric"));
    let dashboard = root().join("deploy/grafana/pidevops.json");
    for (path, at_least) in [
        (dashboard.clone(), 12),
        (root().join("deploy/alerts.yml"), 4),
    ] {
        let names = mentioned(&path);
        assert!(names.len() >= at_least, "{}: {names:?}", path.display());
        let unknown: Vec<_> = names.difference(&recorded).collect();
        assert!(
            unknown.is_empty(),
            "{} names metrics the service never records: {unknown:?}",
            path.display()
        );
    }

    // The dashboard's panels all use the provisioned data source, by the uid provisioning gives it.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dashboard).unwrap()).unwrap();
    let provisioned = std::fs::read_to_string(
        root().join("deploy/grafana/provisioning/datasources/prometheus.yml"),
    )
    .unwrap();
    assert!(provisioned.contains("uid: prometheus"), "{provisioned}");
    for panel in json["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "prometheus", "{panel}");
        assert!(!panel["targets"].as_array().unwrap().is_empty(), "{panel}");
    }
}

crate::per_backend!(a_running_app_exports_the_loop_metrics_the_dashboard_reads);

async fn a_running_app_exports_the_loop_metrics_the_dashboard_reads(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    app.tick("database_heartbeat").await;
    let (status, _) = app.health().await;
    assert_eq!(status, 200);
    let scraped = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dashboard = mentioned(&root().join("deploy/grafana/pidevops.json"));
    for name in [
        "pidevops_health_status",
        "pidevops_loop_state",
        "pidevops_loop_stale",
        "pidevops_loop_last_tick_timestamp_seconds",
    ] {
        assert!(dashboard.contains(name), "the dashboard reads {name}");
        assert!(
            scraped.lines().any(|l| l.starts_with(name)),
            "{name} is not in /metrics:\n{scraped}"
        );
    }
    app.stop().await;
}
