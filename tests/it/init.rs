//! `pidevops init` through the real binary: into an empty directory with `--yes`, then `serve` on what it wrote
//! passes `/health` and takes a delivery signed with the secret it made; no secret is ever printed.

use std::collections::BTreeMap;
use std::process::Stdio;

use crate::common::server::{command, read_log, Server};
use pidevops::ingress::verify::sign_github;

fn env_file(path: &std::path::Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_yes_into_an_empty_directory_then_serve_passes_health_and_takes_a_signed_delivery() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("ops");
    let db = format!("sqlite://{}/init.db", work.path().display());
    // A local repository stands in for GitHub (no GITHUB_TOKEN needed), and the example agent for a real one.
    let repo = work.path().join("demo");
    std::fs::create_dir_all(&repo).unwrap();
    for args in [
        &["init", "--quiet", "-b", "main"][..],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "seed",
        ],
    ] {
        assert!(std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .status()
            .unwrap()
            .success());
    }
    let init = command(&db, work.path())
        .args([
            "init",
            "--yes",
            "--github",
            "--public-url",
            "https://ops.example",
        ])
        .arg("--local")
        .arg(&repo)
        .arg("--agent")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agent.sh"))
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&init.stdout),
        String::from_utf8_lossy(&init.stderr)
    );
    assert!(init.status.success(), "{printed}");
    assert!(
        printed.contains("https://ops.example/webhooks/github"),
        "{printed}"
    );
    assert!(printed.contains("Pull request reviews"), "{printed}");

    let env_path = dir.join(".env");
    assert_eq!(
        std::fs::metadata(&env_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let secrets = env_file(&env_path);
    assert_eq!(
        secrets.keys().collect::<Vec<_>>(),
        ["GITHUB_WEBHOOK_SECRET", "PIDEVOPS_ADMIN_TOKEN"]
    );
    for (name, value) in &secrets {
        assert_eq!(value.len(), 64, "{name}");
        assert!(!printed.contains(value.as_str()), "{name} was printed");
    }

    // A second run does not overwrite what is there.
    let again = command(&db, work.path())
        .args(["init", "--yes", "--local"])
        .arg(&repo)
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists: pass --force"));
    assert_eq!(env_file(&env_path), secrets, "the secrets are kept");

    // Not at a terminal and without --yes: refused, nothing asked.
    let asked = command(&db, work.path())
        .args(["init", "--repo", "acme/web"])
        .arg("--dir")
        .arg(work.path().join("elsewhere"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(asked.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&asked.stderr).contains("pass --yes"));
    assert!(!work.path().join("elsewhere").exists());

    let config = dir.join("pidevops.toml");
    let mut env: Vec<(&str, &str)> = secrets
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("PIDEVOPS_CONFIG", config.to_str().unwrap()));
    let server = Server::start_with(&db, &env).await;
    let client = reqwest::Client::new();
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    let status = health.status();
    let body: serde_json::Value = health.json().await.unwrap();
    assert_eq!(status, 200, "{body:#}\n{}", read_log(server.workdir.path()));

    let body = std::fs::read(
        crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
    )
    .unwrap();
    let delivered = client
        .post(format!("{}/webhooks/github", server.base))
        .header("content-type", "application/json")
        .header("x-github-event", "pull_request")
        .header("x-github-delivery", "init-1")
        .header(
            "x-hub-signature-256",
            sign_github(secrets["GITHUB_WEBHOOK_SECRET"].as_bytes(), &body),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(delivered.status(), 200);
    // The admin token it made opens the API.
    let api = client
        .get(format!("{}/api/tasks", server.base))
        .bearer_auth(&secrets["PIDEVOPS_ADMIN_TOKEN"])
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
}
