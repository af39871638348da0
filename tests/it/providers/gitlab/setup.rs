//! Setting GitLab up, against the fake GitLab: `pidevops init --gitlab` through the real binary makes each
//! project's webhook once (a second run updates it in place; a hook to another URL is left alone), with our URL
//! and the secret token it wrote to `.env`, never printed; `doctor` fails a token with less than Developer access
//! to a project and warns of a trusted user GitLab does not give Developer access there.

use std::collections::BTreeMap;

use crate::common::server::command;
use crate::common::TestDb;

use super::fake::{FakeGitlab, BOT_ID};

const REPO: &str = "acme/platform/api";
const TOKEN: &str = "glpat-init-never-printed-0123456789";
const HOOK_URL: &str = "https://ops.example/webhooks/gitlab";

fn env_file(path: &std::path::Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

async fn init(fake: &FakeGitlab, dir: &std::path::Path) -> (Option<i32>, String) {
    let work = dir.parent().unwrap();
    let mut cmd = command(&format!("sqlite://{}/x.db", work.display()), work);
    cmd.args([
        "init",
        "--yes",
        "--force",
        "--agent",
        "claude",
        "--public-url",
        "https://ops.example",
        "--gitlab",
        "--gitlab-project",
        REPO,
        "--gitlab-url",
        &fake.url,
    ])
    .arg("--dir")
    .arg(dir)
    .env("GITLAB_TOKEN", TOKEN);
    let output = tokio::process::Command::from(cmd).output().await.unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_gitlab_twice_makes_one_hook_with_our_url_and_token() {
    let fake = FakeGitlab::start().await;
    fake.add_hook(REPO, "https://ci.example/hook");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("ops");

    let (code, first) = init(&fake, &dir).await;
    assert_eq!(code, Some(0), "{first}");
    assert!(
        first.contains(&format!("GitLab webhook of {REPO}: created")),
        "{first}"
    );
    let toml = std::fs::read_to_string(dir.join("pidevops.toml")).unwrap();
    assert!(
        toml.contains(&format!(
            "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"{}/{REPO}.git\"",
            fake.url
        )),
        "{toml}"
    );
    let env = env_file(&dir.join(".env"));
    let secret = env["GITLAB_WEBHOOK_SECRET"].clone();
    assert_eq!(secret.len(), 64);
    assert_eq!(env["GITLAB_URL"], fake.url);

    let (code, second) = init(&fake, &dir).await;
    assert_eq!(code, Some(0), "{second}");
    assert!(
        second.contains(&format!("GitLab webhook of {REPO}: updated")),
        "{second}"
    );
    let hooks = fake.hooks(REPO);
    let ours: Vec<_> = hooks.iter().filter(|h| h.url == HOOK_URL).collect();
    assert_eq!(ours.len(), 1, "one hook however often init runs: {hooks:?}");
    assert_eq!(ours[0].token, secret, "the secret .env holds");
    assert_eq!(
        ours[0].events,
        [
            "push_events",
            "issues_events",
            "note_events",
            "merge_requests_events",
            "pipeline_events",
            "job_events"
        ]
    );
    assert!(ours[0].ssl, "SSL verification on");
    assert_eq!(hooks.len(), 2, "the other URL's hook left alone: {hooks:?}");
    assert_eq!(
        env_file(&dir.join(".env"))["GITLAB_WEBHOOK_SECRET"],
        secret,
        "kept on the second run"
    );
    for printed in [&first, &second] {
        assert!(!printed.contains(TOKEN), "the token was printed");
        assert!(!printed.contains(&secret), "the secret was printed");
    }
}

fn doctor_line(report: &str, label: &str) -> Vec<String> {
    report
        .lines()
        .filter(|l| l.starts_with(label))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn doctor_fails_a_reporter_token_and_warns_of_an_untrusted_listed_user() {
    let db = TestDb::sqlite();
    let fake = FakeGitlab::start().await;
    let mut settings = crate::common::settings(&db);
    fake.point_settings(&mut settings, "glpat-doctor");
    settings.file = format!(
        "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/{REPO}.git\"\n\
         [intake.gitlab]\ntrusted_users = [\"alice\", \"mallory\", \"rita\"]\n"
    )
    .parse()
    .unwrap();
    fake.add_member(REPO, BOT_ID, "pidevops-bot", 20);
    fake.add_member(REPO, 5, "alice", 30);
    fake.add_member(REPO, 7, "rita", 20);

    let (report, _) = pidevops::doctor::diagnose(&settings).await;
    let access = doctor_line(&report, &format!("gitlab access {REPO}"));
    assert_eq!(access.len(), 1, "{report}");
    assert!(
        access[0].contains("FAIL")
            && access[0].contains("Reporter")
            && access[0].contains("pidevops cannot push or open merge requests there"),
        "{report}"
    );
    let trusted = doctor_line(&report, &format!("gitlab trusted {REPO}"));
    assert_eq!(trusted.len(), 2, "mallory and rita, not alice: {report}");
    assert!(trusted.iter().all(|l| l.contains("warn")), "{trusted:?}");
    assert!(
        trusted[0].contains("mallory") && trusted[0].contains("not a member"),
        "{trusted:?}"
    );
    assert!(
        trusted[1].contains("rita") && trusted[1].contains("only Reporter"),
        "{trusted:?}"
    );
    assert!(!report.contains("glpat-doctor"));

    // Developer access: the line passes.
    fake.add_member("acme/platform/api", BOT_ID, "pidevops-bot", 30);
    let (report, _) = pidevops::doctor::diagnose(&settings).await;
    let access = doctor_line(&report, &format!("gitlab access {REPO}"));
    assert!(
        access[0].contains("pass") && access[0].contains("Developer"),
        "{report}"
    );
}
