//! `pidevops init` through the real binary: into an empty directory with `--yes`, then `serve` on what it wrote
//! passes `/health` and takes a delivery signed with the secret it made; no secret is ever printed.

use std::collections::BTreeMap;
use std::process::Stdio;

use crate::common::server::{command, read_log, Server};
use pidevops::providers::github::webhook::sign_github;

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

mod hooks {
    //! `init --create-hooks` against the fake GitHub: the hook GitHub needs, made once and updated after; hooks to
    //! other URLs left alone; a token without admin rights named precisely with the files still written; neither
    //! the token nor the secret ever printed.

    use super::env_file;
    use crate::common::server::command;
    use crate::providers::github::fake::{Failure, FakeGithub};

    const TOKEN: &str = "ghp_init_hooks_token_never_printed_0123456789";
    const HOOK_URL: &str = "https://ops.example/webhooks/github";
    const OTHER_URL: &str = "https://ci.example/hook";

    struct Run {
        code: Option<i32>,
        printed: String,
    }

    async fn init(github: &FakeGithub, dir: &std::path::Path, args: &[&str], token: bool) -> Run {
        let work = dir.parent().unwrap();
        let mut cmd = command(&format!("sqlite://{}/x.db", work.display()), work);
        cmd.args([
            "init",
            "--yes",
            "--force",
            "--public-url",
            "https://ops.example",
        ])
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env("GITHUB_API_URL", &github.url);
        if token {
            cmd.env("GITHUB_TOKEN", TOKEN);
        }
        let output = tokio::process::Command::from(cmd).output().await.unwrap();
        Run {
            code: output.status.code(),
            printed: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    fn assert_no_secret(run: &Run, dir: &std::path::Path) {
        assert!(!run.printed.contains(TOKEN), "the token was printed");
        if let Ok(text) = std::fs::read_to_string(dir.join(".env")) {
            assert!(!text.contains(TOKEN), "the token went into .env");
        }
        for (name, value) in env_file(&dir.join(".env")) {
            assert!(!run.printed.contains(&value), "{name} was printed");
        }
    }

    const EVENTS: [&str; 9] = [
        "issues",
        "issue_comment",
        "pull_request",
        "pull_request_review",
        "pull_request_review_comment",
        "check_suite",
        "check_run",
        "workflow_run",
        "push",
    ];

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn creates_each_repositorys_hook_once_and_updates_it_on_a_second_run() {
        let github = FakeGithub::start().await;
        github.add_hook("acme/api", OTHER_URL);
        let other = github.hooks("acme/api");
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("ops");
        let repos = ["--repo", "acme/api", "--repo", "acme/web", "--create-hooks"];

        let first = init(&github, &dir, &repos, true).await;
        assert_eq!(first.code, Some(0), "{}", first.printed);
        assert!(
            first
                .printed
                .contains("GitHub webhook of acme/api: created (id 2)"),
            "{}",
            first.printed
        );
        assert!(dir.join("pidevops.toml").is_file());
        let secret = env_file(&dir.join(".env"))["GITHUB_WEBHOOK_SECRET"].clone();
        for repo in ["acme/api", "acme/web"] {
            let ours: Vec<_> = github
                .hooks(repo)
                .into_iter()
                .filter(|h| h.url == HOOK_URL)
                .collect();
            assert_eq!(ours.len(), 1, "{repo}: {ours:?}");
            assert_eq!(ours[0].content_type, "json");
            assert_eq!(ours[0].secret.as_deref(), Some(secret.as_str()));
            assert_eq!(ours[0].events, EVENTS);
            assert!(ours[0].active);
        }
        assert_no_secret(&first, &dir);
        let calls = github.calls();
        assert!(
            calls
                .iter()
                .all(|c| c.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))),
            "every call carries the token: {calls:?}"
        );

        // Someone changes the hook on GitHub; the next init puts it back, in place.
        let ours = github.hooks("acme/web")[0].id;
        let patched = reqwest::Client::new()
            .patch(format!("{}/repos/acme/web/hooks/{ours}", github.url))
            .json(&serde_json::json!({ "events": ["push"], "config": { "secret": "stale" } }))
            .send()
            .await
            .unwrap();
        assert_eq!(patched.status(), 200);
        let second = init(&github, &dir, &repos, true).await;
        assert_eq!(second.code, Some(0), "{}", second.printed);
        assert!(
            second
                .printed
                .contains("GitHub webhook of acme/web: updated"),
            "{}",
            second.printed
        );
        let web = github.hooks("acme/web");
        assert_eq!(web.len(), 1, "updated, not duplicated: {web:?}");
        assert_eq!(web[0].events, EVENTS);
        assert_eq!(web[0].secret.as_deref(), Some(secret.as_str()));
        let api = github.hooks("acme/api");
        assert_eq!(api.len(), 2, "{api:?}");
        assert_eq!(api[0], other[0], "the hook to another URL is left alone");
        assert!(!github
            .calls()
            .iter()
            .any(|c| c.method == "DELETE" || c.path.ends_with("/hooks/1")));
        assert_no_secret(&second, &dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_admin_rights_is_named_precisely_and_the_files_are_still_written() {
        let github = FakeGithub::start().await;
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("ops");
        // Listing the hooks: GitHub answers 404 to a token that may read the repository but not administer it.
        github.fail_next(reqwest::Method::GET, Failure::Status(404));
        let run = init(
            &github,
            &dir,
            &["--repo", "acme/api", "--repo", "acme/web", "--create-hooks"],
            true,
        )
        .await;
        assert_eq!(run.code, Some(1), "{}", run.printed);
        assert!(
            run.printed.contains("GitHub webhook of acme/api NOT created: listing the repository's webhooks: GitHub answered 404")
                && run.printed.contains("admin rights on the repository")
                && run.printed.contains("admin:repo_hook"),
            "{}",
            run.printed
        );
        assert!(
            run.printed.contains("GitHub webhook of acme/web: created"),
            "the next repository is still done: {}",
            run.printed
        );
        assert!(run
            .printed
            .contains("payload URL  https://ops.example/webhooks/github"));
        assert!(dir.join("pidevops.toml").is_file() && dir.join(".env").is_file());
        assert!(github.hooks("acme/api").is_empty());
        assert_no_secret(&run, &dir);

        github.fail_next(reqwest::Method::POST, Failure::Status(403));
        let run = init(
            &github,
            &dir,
            &["--repo", "acme/api", "--create-hooks"],
            true,
        )
        .await;
        assert_eq!(run.code, Some(1), "{}", run.printed);
        assert!(
            run.printed
                .contains("creating the webhook: GitHub answered 403")
                && run.printed.contains("admin rights"),
            "{}",
            run.printed
        );
        assert_no_secret(&run, &dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn yes_makes_no_hook_unless_asked_and_the_flag_without_a_token_writes_nothing() {
        let github = FakeGithub::start().await;
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("ops");
        let run = init(&github, &dir, &["--repo", "acme/api"], true).await;
        assert_eq!(run.code, Some(0), "{}", run.printed);
        assert!(github.calls().is_empty(), "{:?}", github.calls());
        assert_no_secret(&run, &dir);

        let fresh = work.path().join("fresh");
        let run = init(
            &github,
            &fresh,
            &["--repo", "acme/api", "--create-hooks"],
            false,
        )
        .await;
        assert_eq!(run.code, Some(2), "{}", run.printed);
        assert!(
            run.printed.contains("--create-hooks needs GITHUB_TOKEN"),
            "{}",
            run.printed
        );
        assert!(!fresh.exists(), "nothing written");
        assert!(github.calls().is_empty());
    }
}
