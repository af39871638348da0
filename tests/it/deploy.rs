//! What `deploy/` ships for operators names only what the service exports: every metric in the Grafana dashboard
//! and the Prometheus alerts is one the code records (a `metrics::counter!` / `gauge!` / `histogram!` in `src/`),
//! and the real `/metrics` of a running app carries the loop metrics they lean on.

use std::collections::{BTreeMap, BTreeSet};
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

/// `NAME="${NAME:-default}"` lines of deploy/install-runtime.sh whose name ends in `_VERSION`: its pins.
fn script_pins() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("deploy/install-runtime.sh")).unwrap();
    let pin = regex::Regex::new(r#"(?m)^([A-Z_]+_VERSION)="\$\{([A-Z_]+):-([^}"]+)\}"$"#).unwrap();
    pin.captures_iter(&text)
        .map(|c| {
            assert_eq!(&c[1], &c[2], "{} defaults from another variable", &c[1]);
            (c[1].to_owned(), c[3].to_owned())
        })
        .collect()
}

/// One `FROM … AS name` stage of the Dockerfile: what it is built from and its instructions (continuations joined).
struct Stage {
    from: String,
    lines: Vec<String>,
}

fn stages(dockerfile: &str) -> BTreeMap<String, Stage> {
    let joined = dockerfile.replace("\\\n", " ");
    let mut stages = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "FROM" {
            assert!(
                words.len() == 4 && words[2] == "AS",
                "every stage is named: {line}"
            );
            let name = words[3].to_owned();
            stages.insert(
                name.clone(),
                Stage {
                    from: words[1].to_owned(),
                    lines: Vec::new(),
                },
            );
            current = Some(name);
        } else if let Some(name) = &current {
            stages.get_mut(name).unwrap().lines.push(line.to_owned());
        }
    }
    stages
}

/// The instructions of `name` and of the stages it is built from, first ancestor first.
fn lineage<'a>(stages: &'a BTreeMap<String, Stage>, name: &str) -> Vec<&'a str> {
    let stage = stages
        .get(name)
        .unwrap_or_else(|| panic!("no stage {name}"));
    let mut lines = match stages.get(&stage.from) {
        Some(_) => lineage(stages, &stage.from),
        None => Vec::new(),
    };
    lines.extend(stage.lines.iter().map(String::as_str));
    lines
}

/// The uid of the last `USER` of `lines`.
fn user(lines: &[&str]) -> Option<u32> {
    let last = lines.iter().rev().find_map(|l| l.strip_prefix("USER "))?;
    last.trim().split(':').next()?.parse().ok()
}

/// Both images ship pidevops-bridge beside pidevops (the dispatcher looks for it there; without it every sandbox
/// with a network of its own fails), built in the builder stage.
#[test]
fn both_images_ship_the_bridge_beside_pidevops() {
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let stages = stages(&dockerfile);
    let builder = lineage(&stages, "builder");
    assert!(
        builder
            .iter()
            .any(|l| l.starts_with("RUN rm -rf")
                && l.ends_with("--bin pidevops --bin pidevops-bridge")),
        "the builder's last build makes both binaries: {builder:#?}"
    );
    for image in ["slim", "runtime"] {
        let lines = lineage(&stages, image);
        assert!(
            lines.contains(
                &"COPY --from=builder /build/target/release/pidevops /build/target/release/pidevops-bridge /usr/local/bin/"
            ),
            "{image}: {lines:#?}"
        );
    }
}

#[test]
fn the_dockerfile_installs_through_the_script_with_its_pins_as_build_arguments() {
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let pins = script_pins();
    for name in [
        "CLAUDE_CODE_VERSION",
        "CODEX_VERSION",
        "OPENCODE_VERSION",
        "PI_VERSION",
        "NODE_VERSION",
    ] {
        assert!(pins.contains_key(name), "the script pins {name}: {pins:?}");
    }
    let arg = regex::Regex::new(r"(?m)^ARG ([A-Z_]+)=(\S+)$").unwrap();
    let args: BTreeMap<String, String> = arg
        .captures_iter(&dockerfile)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect();
    assert_eq!(
        args, pins,
        "the Dockerfile's build arguments are the script's pins, with the same defaults"
    );

    let stages = stages(&dockerfile);
    let last = dockerfile
        .lines()
        .rev()
        .find(|l| l.starts_with("FROM "))
        .unwrap();
    assert!(
        last.ends_with(" AS runtime"),
        "runtime is the last stage, the one built by default (and by Railway): {last}"
    );
    let script = "/usr/local/lib/pidevops/install-runtime.sh";
    let runs_script = |lines: &[&str], agents: &str| {
        lines.iter().any(|l| {
            l.starts_with("RUN ") && l.contains(&format!("INSTALL_AGENTS={agents} {script}"))
        })
    };
    for (name, agents) in [("runtime", true), ("slim", false)] {
        let lines = lineage(&stages, name);
        assert!(
            lines
                .iter()
                .any(|l| *l == format!("COPY deploy/install-runtime.sh {script}")),
            "{name} copies the script"
        );
        assert!(runs_script(&lines, "0"), "{name} installs the slim runtime");
        assert_eq!(
            runs_script(&lines, "1"),
            agents,
            "{name} installs the agent CLIs: {agents}"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("RUN ") && l.contains("apt-get install")),
            "{name}: packages are installed by the script only, so CI installs what the image does"
        );
        let uid = user(&lines).unwrap_or_else(|| panic!("{name} sets USER"));
        assert_ne!(uid, 0, "{name} runs as a non-root user");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ENV ") && l.contains("WORKSPACE_ROOT=/app/data/")),
            "{name}: WORKSPACE_ROOT is under the /app/data volume"
        );
        assert!(
            !lines.iter().any(|l| l.starts_with("VOLUME")),
            "{name}: Railway refuses a Dockerfile with VOLUME"
        );
        assert!(
            lines.contains(&r#"ENTRYPOINT ["pidevops"]"#),
            "{name} runs pidevops"
        );
    }
    assert!(
        lineage(&stages, "runtime")
            .iter()
            .any(|l| l.starts_with("ENV PATH=/opt/pidevops-agents/bin:")),
        "the agent CLIs come first on the runtime's PATH"
    );
    // Each build argument reaches the script: declared in a stage that runs the script with agents.
    let agents_stage = stages
        .iter()
        .find(|(_, s)| runs_script(&s.lines.iter().map(String::as_str).collect::<Vec<_>>(), "1"))
        .map(|(n, _)| n)
        .unwrap();
    for name in pins.keys() {
        assert!(
            stages[agents_stage]
                .lines
                .contains(&format!("ARG {name}={}", pins[name])),
            "{name} is an ARG of the {agents_stage} stage, which runs the script"
        );
    }
    // railway.toml and railway.ts build this Dockerfile.
    for file in ["railway.toml", ".railway/railway.ts"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(text.contains("deploy/Dockerfile"), "{file}");
    }
}

/// Where the CLIs are: `PIDEVOPS_AGENT_CLIS`, else where deploy/install-runtime.sh puts them.
fn agent_clis() -> PathBuf {
    std::env::var_os("PIDEVOPS_AGENT_CLIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pidevops-agents/bin"))
}

#[test]
fn each_pinned_cli_answers_its_version_after_the_install_script() {
    let pins = script_pins();
    let dir = agent_clis();
    let mut cli_pins = vec![
        ("claude", "CLAUDE_CODE_VERSION"),
        ("codex", "CODEX_VERSION"),
        ("opencode", "OPENCODE_VERSION"),
        ("pi", "PI_VERSION"),
    ];
    if std::env::var_os("PIDEVOPS_AGENT_CLIS").is_none() {
        cli_pins.push(("node", "NODE_VERSION")); // the script's own Node, beside the CLIs
    }
    let missing: Vec<&str> = cli_pins
        .iter()
        .map(|(cli, _)| *cli)
        .filter(|cli| !dir.join(cli).is_file())
        .collect();
    if !missing.is_empty() {
        let message = format!(
            "{} missing in {}: run deploy/install-runtime.sh (as root), or set PIDEVOPS_AGENT_CLIS",
            missing.join(", "),
            dir.display()
        );
        assert!(!crate::common::in_ci(), "{message}");
        eprintln!("\n*** SKIPPED each_pinned_cli_answers_its_version_after_the_install_script: {message} ***\n");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let semver = regex::Regex::new(r"\d+\.\d+\.\d+").unwrap();
    for (cli, pin) in cli_pins {
        // Nothing of ours: the CLIs' directory first on PATH (node for the scripts among them), a HOME of their own.
        let output = std::process::Command::new(dir.join(cli))
            .arg("--version")
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .env("HOME", home.path())
            .output()
            .unwrap_or_else(|e| panic!("{cli}: {e}"));
        // pi prints its version on stderr, the others on stdout.
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success(),
            "{cli} --version: {}\n{printed}",
            output.status
        );
        let version = semver.find(&printed).map(|m| m.as_str().to_owned());
        assert_eq!(
            version.as_deref(),
            Some(pins[pin].as_str()),
            "{cli} --version printed {printed:?}; {pin} is {}",
            pins[pin]
        );
    }
}

/// deploy/start.sh (`pidevops-start`, Railway's start command): started as root it hands the data directory and
/// WORKSPACE_ROOT to uid 10001 and runs pidevops as that user, never as root; started as anyone else, as it is.
#[test]
fn pidevops_start_runs_pidevops_as_uid_10001_when_started_as_root() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    // uid 10001 runs the stand-in pidevops from here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let stand_in = bin.join("pidevops");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\necho \"$(id -u):$(id -g):$(id -G) $HOME $*\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let output = std::process::Command::new(root().join("deploy/start.sh"))
        .args(["serve", "--flag"])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("PIDEVOPS_DATA_DIR", &data)
        .env("WORKSPACE_ROOT", data.join("workspaces"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // /proc/self belongs to the process's effective uid.
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    if me == 0 {
        assert_eq!(
            printed.trim(),
            "10001:10001:10001 /home/pidevops serve --flag"
        );
        for made in [data.clone(), data.join("workspaces")] {
            let meta = std::fs::metadata(&made).unwrap();
            assert_eq!(
                (meta.uid(), meta.gid()),
                (10001, 10001),
                "{}",
                made.display()
            );
        }
    } else {
        assert!(
            printed.starts_with(&format!("{me}:")) && printed.trim_end().ends_with(" serve --flag"),
            "not root: pidevops runs as it is: {printed}"
        );
        assert!(!data.exists(), "not root: nothing is made");
    }
    // Railway starts it so, and the images carry it.
    for file in ["railway.toml", ".railway/railway.ts"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(text.contains("pidevops-start serve"), "{file}");
    }
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains("COPY deploy/start.sh /usr/local/bin/pidevops-start"));
}

/// The deployed NATS (`deploy/nats/nats.conf`, as docker-compose and Railway run it) refuses strangers, and a
/// worker's credentials reach the run queue only: through pidevops's own clients, the service publishes events and
/// run requests and a worker takes and acks a request; the worker's attempts to publish or read events, and to
/// publish run requests, change nothing; an anonymous client and a wrong password are refused.
#[tokio::test]
async fn the_deployed_nats_refuses_strangers_and_keeps_workers_to_the_run_queue() {
    use crate::common::nats_server::NatsServer;
    use pidevops::bus::work::WorkQueue;
    use pidevops::bus::{BusConfig, JetstreamBus};
    use pidevops::dispatch::dispatcher::RunRequest;
    use pidevops::eventlog::{EventLog, EventStore};
    use std::time::Duration;

    const SERVE: &str = "serve0123456789abcdef";
    const WORKER: &str = "worker0123456789abcdef";
    let nats = NatsServer::start_configured(
        &root().join("deploy/nats/nats.conf"),
        &[
            ("NATS_SERVE_PASSWORD", SERVE),
            ("NATS_WORKER_PASSWORD", WORKER),
        ],
        ("pidevops", SERVE),
    )
    .await;
    let (serve_url, worker_url) = (
        nats.url_as("pidevops", SERVE),
        nats.url_as("worker", WORKER),
    );

    // Strangers: no credentials, or a wrong password.
    assert!(async_nats::connect(nats.url()).await.is_err());
    assert!(nats.client_as("worker", "guess").await.is_err());
    assert!(
        JetstreamBus::connect(&nats.url_as("pidevops", "guess"), BusConfig::default())
            .await
            .is_err(),
        "a wrong password must be refused"
    );
    assert!(
        JetstreamBus::connect(&nats.url(), BusConfig::default())
            .await
            .is_err(),
        "an anonymous relay must be refused"
    );

    // The service: the events stream and the run queue, with the deployment's default names.
    let db = TestDb::sqlite();
    let store = EventStore::connect(&db.url, 2).await.expect("connect");
    store.migrate().await.expect("migrate");
    let stop = tokio_util::sync::CancellationToken::new();
    let (log, _task) = EventLog::start(store, Duration::from_secs(5), stop.clone());
    let runs = pidevops::startup::run_queue_config(&BusConfig::default());
    let events = JetstreamBus::connect(&serve_url, BusConfig::default())
        .await
        .expect("the service's relay connects");
    let serve_queue = WorkQueue::connect(Some(&serve_url), runs.clone(), log.clone())
        .await
        .expect("the service's run queue connects");
    let request = RunRequest {
        task: pidevops::tasks::TaskId::new(std::num::NonZeroU64::MIN),
        run: pidevops::tasks::RunId(uuid::Uuid::now_v7()),
        attempt: 1,
    };
    serve_queue
        .publish("run", "deploy-test-run-1", &request)
        .await
        .expect("the service publishes a run request");

    // The worker takes it and acks it.
    let worker_queue = WorkQueue::connect(Some(&worker_url), runs.clone(), log.clone())
        .await
        .expect("a worker connects to the run queue with its own credentials");
    let taken = worker_queue
        .pull::<RunRequest>(1, Duration::from_secs(10))
        .await
        .expect("the worker pulls");
    assert_eq!(taken.len(), 1, "{}", nats.log());
    assert_eq!(taken[0].payload().run, request.run);
    for delivery in taken {
        delivery.ack().await.expect("the worker acks");
    }

    // What a worker must not do: forge run requests or events, read the events stream, make a consumer on it.
    assert!(
        worker_queue
            .publish("run", "forged-by-a-worker", &request)
            .await
            .is_err(),
        "a worker must not publish run requests"
    );
    let client = nats.client_as("worker", WORKER).await.expect("connect");
    // A refused request is never answered: a short wait is enough to see that nothing came back.
    let refused = |answer: Result<bool, tokio::time::error::Elapsed>| answer.unwrap_or(true);
    let jetstream = async_nats::jetstream::new(client.clone());
    assert!(
        refused(
            tokio::time::timeout(Duration::from_secs(2), async {
                jetstream.get_stream("PIDEVOPS_EVENTS").await.is_err()
            })
            .await
        ),
        "a worker must not reach the events stream"
    );
    let forged = jetstream
        .publish("pidevops.events.github.issues", "forged".into())
        .await;
    if let Ok(ack) = forged {
        assert!(
            tokio::time::timeout(Duration::from_secs(2), ack)
                .await
                .map_or(true, |acked| acked.is_err()),
            "a worker's event must not be stored"
        );
    }
    assert!(
        refused(
            tokio::time::timeout(Duration::from_secs(2), async {
                jetstream
                    .create_consumer_on_stream(
                        async_nats::jetstream::consumer::pull::Config {
                            durable_name: Some("snoop".into()),
                            ..Default::default()
                        },
                        "PIDEVOPS_EVENTS",
                    )
                    .await
                    .is_err()
            })
            .await
        ),
        "a worker must not read the events stream"
    );
    let mut sniffer = client
        .subscribe("pidevops.events.>")
        .await
        .expect("subscribe is sent");
    let admin = nats.client_as("pidevops", SERVE).await.expect("connect");
    admin
        .publish("pidevops.events.github.ping", "seen?".into())
        .await
        .expect("publish");
    admin.flush().await.expect("flush");
    assert!(
        tokio::time::timeout(
            Duration::from_secs(1),
            futures::StreamExt::next(&mut sniffer)
        )
        .await
        .is_err(),
        "a worker's subscription to the events must deliver nothing"
    );

    // Nothing the worker tried landed: the events stream holds no message, the run queue none.
    let admin_js = async_nats::jetstream::new(admin);
    let mut stream = admin_js
        .get_stream("PIDEVOPS_EVENTS")
        .await
        .expect("the events stream");
    assert_eq!(stream.info().await.expect("info").state.messages, 1);
    let mut queue = admin_js.get_stream("PIDEVOPS_RUNS").await.expect("runs");
    assert_eq!(queue.info().await.expect("info").state.messages, 0);
    drop(events);
    stop.cancel();
    let violations = nats.log();
    for denied in [
        "Subject \"pidevops.runs.run\"",
        "Subject \"$JS.API.STREAM.INFO.PIDEVOPS_EVENTS\"",
        "Subject \"pidevops.events.github.issues\"",
        "Subject \"$JS.API.CONSUMER.CREATE.PIDEVOPS_EVENTS.snoop\"",
        "Subscription Violation - User \"worker\", Subject \"pidevops.events.>\"",
    ] {
        assert!(
            violations.contains(denied),
            "{denied} was not refused:\n{violations}"
        );
    }
}
