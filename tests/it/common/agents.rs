//! Real git remotes (local bare repositories standing in for GitHub) and fake coding agents (shell scripts) for
//! the dispatch suites.

use std::path::{Path, PathBuf};
use std::process::Command as Git;

pub const REPO: &str = "acme/app";

/// A bare repository with one commit on `main`, standing in for GitHub.
pub struct Remote {
    pub dir: tempfile::TempDir,
}

impl Remote {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("seed");
        std::fs::create_dir(&seed).unwrap();
        git(&seed, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(seed.join("README.md"), "# app\n").unwrap();
        git(&seed, &["add", "."]);
        git(&seed, &["commit", "--quiet", "-m", "seed"]);
        git(
            dir.path(),
            &["clone", "--quiet", "--bare", "seed", "remote.git"],
        );
        Self { dir }
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.dir.path().join("remote.git").display())
    }

    /// A branch's commit in the remote, if it exists.
    pub fn branch(&self, name: &str) -> Option<String> {
        let out = Git::new("git")
            .args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{name}"),
            ])
            .current_dir(self.dir.path().join("remote.git"))
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Moves `main` on: a commit adding `path` with `content`, as a teammate's merge would.
    pub fn commit_to_main(&self, path: &str, content: &str) {
        let seed = self.dir.path().join("seed");
        std::fs::write(seed.join(path), content).unwrap();
        git(&seed, &["add", "."]);
        git(&seed, &["commit", "--quiet", "-m", &format!("add {path}")]);
        git(&seed, &["push", "--quiet", "../remote.git", "HEAD:main"]);
    }

    /// Merges `branch` into `main` with a merge commit, as GitHub's merge button does.
    pub fn merge_to_main(&self, branch: &str) {
        let seed = self.dir.path().join("seed");
        git(&seed, &["fetch", "--quiet", "../remote.git", "main"]);
        git(&seed, &["reset", "--quiet", "--hard", "FETCH_HEAD"]);
        git(&seed, &["fetch", "--quiet", "../remote.git", branch]);
        git(
            &seed,
            &[
                "merge",
                "--quiet",
                "--no-ff",
                "-m",
                &format!("Merge {branch}"),
                "FETCH_HEAD",
            ],
        );
        git(&seed, &["push", "--quiet", "../remote.git", "HEAD:main"]);
    }

    /// A file's content on a branch of the remote.
    pub fn show(&self, branch: &str, path: &str) -> Option<String> {
        let out = Git::new("git")
            .args(["show", &format!("{branch}:{path}")])
            .current_dir(self.dir.path().join("remote.git"))
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

pub fn git(cwd: &Path, args: &[&str]) {
    let out = Git::new("git")
        .args(args)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@localhost")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@localhost")
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes an executable shell script: a fake coding agent.
pub fn agent(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Writes an executable bash script with `set -eu`: a fake coding agent that needs bash (its `/dev/tcp`, say).
pub fn bash_agent(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\nset -eu\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `pidevops.toml` for dispatch to `remote` with the agent at `script`.
pub fn dispatch_file(remote: &Remote, script: &Path, profile_extra: &str) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"

        [dispatch]
        agent = "fake"
        max_concurrent = 4
        per_repo = 4
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.fake]
        command = ["{script}", "{{prompt_file}}"]
        {profile_extra}

        # These suites are about running agents, not scopes (tests/it/plans.rs holds attempts to theirs).
        [repos."{REPO}"]
        url = "{url}"
        scope = "off"
        "#,
        script = script.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

/// An agent that prints a Claude Code stream-json session (with hostile markup in what it says, what its tools
/// return and a raw line) and changes the worktree: a file edited, one added with a `<script>` line, one whose
/// name is an `<img onerror>`. For the task page's diff and transcript.
pub fn claude_like_agent(dir: &Path) -> PathBuf {
    agent(
        dir,
        "claude-like.sh",
        r#"cat <<'JSON'
{"type":"system","subtype":"init","cwd":"/work","session_id":"s1","tools":["Bash","Edit"],"model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Fixing the redirect. <script>alert('said')</script> [docs](javascript:alert(1))"}]},"session_id":"s1"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"grep -rn redirect <img src=x onerror=alert(2)>"}}]},"session_id":"s1"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"<a href=\"javascript:alert(3)\">README.md:1</a>","is_error":false}]},"session_id":"s1"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":1200,"num_turns":2,"result":"The redirect keeps the query string.","total_cost_usd":0.05,"session_id":"s1"}
JSON
echo "<script>alert('raw')</script> a line of stderr" >&2
printf '# app\nThe redirect keeps the query string.\n' > README.md
printf 'fn redirect() {}\n<script>alert("patch")</script>\n' > redirect.rs
touch '<img src=x onerror=alert(4)>.txt'"#,
    )
}
