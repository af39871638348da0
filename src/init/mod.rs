//! `pidevops init`: a working `pidevops.toml` and a `.env` of fresh secrets, from a few answers (asked at a
//! terminal, or given as flags with `--yes`), then the exact webhook URLs and events to set up on each provider.
//!
//! The rendering is pure ([`render_toml`], [`instructions`]); the file checks that what it renders reads as a valid
//! configuration before anything is written. Secrets go to `.env` only (mode 0600) and are never printed: an
//! existing `.env` keeps every value it has (a webhook may already be signed with it) and gains what it lacks.
//! With `GITHUB_TOKEN` set it can also create each repository's GitHub webhook ([`hooks`]); with `--gitlab`, the
//! GitLab projects and, with `GITLAB_TOKEN`, their webhooks ([`gitlab`]).

pub mod gitlab;
pub mod hooks;

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::config::FileConfig;
use crate::tasks::RepoName;

/// The flags of `pidevops init`; what is missing is asked at a terminal, or defaulted with `--yes`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct InitArgs {
    /// Where to write `pidevops.toml` and `.env`.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// A GitHub repository to work on (`owner/name`); repeat for more.
    #[arg(long = "repo", value_name = "OWNER/NAME")]
    pub repos: Vec<String>,
    /// A local git repository to work on instead of GitHub (cloned from and pushed to by path; no account needed).
    #[arg(long, value_name = "PATH")]
    pub local: Option<PathBuf>,
    /// The agent: a preset (claude, pi, opencode, codex) or a command of your own (its words split on spaces;
    /// the prompt arrives on its standard input).
    #[arg(long, value_name = "PROFILE|COMMAND")]
    pub agent: Option<String>,
    /// Receive GitHub webhooks (a secret is made).
    #[arg(long)]
    pub github: bool,
    /// Work on GitLab projects and receive their webhooks (a secret is made; with GITLAB_TOKEN and --public-url,
    /// each project's webhook is made or updated).
    #[arg(long)]
    pub gitlab: bool,
    /// A GitLab project to work on (`group/…/name`); repeat for more.
    #[arg(long = "gitlab-project", value_name = "GROUP/…/NAME")]
    pub gitlab_projects: Vec<String>,
    /// The GitLab instance (default: GITLAB_URL, else https://gitlab.com).
    #[arg(long, value_name = "URL")]
    pub gitlab_url: Option<String>,
    /// Receive Linear webhooks (a secret is made).
    #[arg(long)]
    pub linear: bool,
    /// Receive Telegram updates by webhook (a secret is made).
    #[arg(long)]
    pub telegram: bool,
    /// The URL the providers reach this service at (for the webhook URLs printed).
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Where new tasks wait: `manual` (approve each) or `auto`. Default: auto with --local, else manual.
    #[arg(long, value_name = "auto|manual")]
    pub approval: Option<String>,
    /// Create (or update) each --repo's GitHub webhook through the API with GITHUB_TOKEN, which needs admin rights
    /// on the repository; asked at a terminal when the token is set.
    #[arg(long)]
    pub create_hooks: bool,
    /// Ask nothing: take the flags and the defaults.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Replace an existing pidevops.toml.
    #[arg(long)]
    pub force: bool,
}

/// What `init` was told, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answers {
    pub repos: Vec<RepoName>,
    pub local: Option<LocalRepo>,
    pub agent: Agent,
    pub github: bool,
    pub linear: bool,
    pub telegram: bool,
    pub public_url: String,
    pub auto_approve: bool,
    pub gitlab: Option<gitlab::GitlabAnswers>,
}

/// A repository on this machine, named `local/<directory>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalRepo {
    pub name: RepoName,
    pub path: PathBuf,
    pub base: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agent {
    Preset(String),
    Command(Vec<String>),
}

impl Agent {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let presets: Vec<String> = crate::config::profiles::presets()
            .into_iter()
            .map(|p| p.name)
            .collect();
        let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
        match words.as_slice() {
            [] => bail!(
                "--agent: give a preset ({}) or a command",
                presets.join(", ")
            ),
            [one] if presets.contains(one) => Ok(Agent::Preset(one.clone())),
            _ => Ok(Agent::Command(words)),
        }
    }
}

/// The `.env` variable of each provider's webhook secret, and the admin token's.
pub const ADMIN_TOKEN: &str = "PIDEVOPS_ADMIN_TOKEN";
const GITHUB_SECRET: &str = "GITHUB_WEBHOOK_SECRET";
const LINEAR_SECRET: &str = "LINEAR_WEBHOOK_SECRET";
const TELEGRAM_SECRET: &str = "TELEGRAM_WEBHOOK_SECRET";

/// A TOML string literal (basic string, escaped).
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// `pidevops.toml` for `answers`.
pub fn render_toml(answers: &Answers) -> String {
    let mut out =
        String::from("# Written by `pidevops init`; every key is in docs/configuration.md.\n\n");
    out.push_str(&format!(
        "[board]\napproval = {}\n\n",
        quoted(if answers.auto_approve {
            "auto"
        } else {
            "manual"
        })
    ));
    let agent_name = match &answers.agent {
        Agent::Preset(name) => name.clone(),
        Agent::Command(_) => "local".to_owned(),
    };
    out.push_str(&format!("[dispatch]\nagent = {}\n\n", quoted(&agent_name)));
    if let Agent::Command(words) = &answers.agent {
        let command: Vec<String> = words.iter().map(|w| quoted(w)).collect();
        out.push_str(&format!(
            "[agents.local]\ncommand = [{}]\nstdin = \"prompt\"\n\n",
            command.join(", ")
        ));
    }
    for repo in &answers.repos {
        out.push_str(&format!("[repos.{}]\n\n", quoted(repo.as_str())));
    }
    if let Some(gitlab) = &answers.gitlab {
        out.push_str(&gitlab::render(gitlab));
    }
    if let Some(local) = &answers.local {
        out.push_str(&format!(
            "[repos.{}]\nurl = {}\nbase = {}\n\n",
            quoted(local.name.as_str()),
            quoted(&format!("file://{}", local.path.display())),
            quoted(&local.base)
        ));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// The secrets `.env` should hold for `answers`.
pub fn wanted_secrets(answers: &Answers) -> Vec<&'static str> {
    let mut names = vec![ADMIN_TOKEN];
    for (on, name) in [
        (answers.github, GITHUB_SECRET),
        (answers.linear, LINEAR_SECRET),
        (answers.telegram, TELEGRAM_SECRET),
        (answers.gitlab.is_some(), gitlab::SECRET),
    ] {
        if on {
            names.push(name);
        }
    }
    names
}

/// What to do next: start the service, and set up each provider's webhook (no secret printed: they are in `.env`).
pub fn instructions(answers: &Answers, dir: &Path) -> String {
    let url = answers.public_url.trim_end_matches('/');
    let mut out = format!(
        "Start it:\n  cd {} && set -a && . ./.env && set +a && pidevops serve\n",
        dir.display()
    );
    if answers.github {
        let events: Vec<&str> = hooks::EVENTS.iter().map(|(_, shown)| *shown).collect();
        out.push_str(&format!(
            "\nGitHub, for each repository (Settings → Webhooks → Add webhook):\n  payload URL  {url}/webhooks/github\n  \
             content type application/json; secret: GITHUB_WEBHOOK_SECRET from .env\n  events       {}\n",
            events.join(", ")
        ));
    }
    if answers.linear {
        out.push_str(&format!(
            "\nLinear (Settings → API → Webhooks → New webhook):\n  URL          {url}/webhooks/linear\n  \
             resources    Issues, Comments (and Agent session events for the agent app); its signing secret \
             goes in .env as LINEAR_WEBHOOK_SECRET\n"
        ));
    }
    if answers.gitlab.is_some() {
        out.push_str(&gitlab::instructions(url));
    }
    if answers.telegram {
        out.push_str(&format!(
            "\nTelegram (with TELEGRAM_BOT_TOKEN set):\n  set -a && . ./.env && set +a && curl \
             \"https://api.telegram.org/bot$TELEGRAM_BOT_TOKEN/setWebhook\" -d url={url}/webhooks/telegram -d \
             secret_token=\"$TELEGRAM_WEBHOOK_SECRET\" -d 'allowed_updates=[\"message\",\"edited_message\",\
             \"callback_query\"]'\n"
        ));
    }
    if let Some(local) = &answers.local {
        out.push_str(&format!(
            "\nA first task, in another terminal:\n  pidevops task new {} \"<what to do>\"\n  git -C {} log \
             pidevops/T-1\n",
            local.name,
            local.path.display()
        ));
    }
    out
}

/// The local repository at `path`: its name and the branch its HEAD is on.
fn local_repo(path: &Path) -> anyhow::Result<LocalRepo> {
    let path = std::fs::canonicalize(path)
        .with_context(|| format!("--local {}: no such directory", path.display()))?;
    let head = std::process::Command::new("git")
        .arg("-C")
        .arg(&path)
        .args(["symbolic-ref", "--short", "HEAD"])
        .output()
        .context("running git")?;
    if !head.status.success() {
        bail!(
            "--local {}: not a git repository with a branch checked out ({})",
            path.display(),
            String::from_utf8_lossy(&head.stderr).trim()
        );
    }
    let base = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let dir_name = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".git").to_owned())
        .unwrap_or_default();
    let name: String = dir_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = format!("local/{}", name.trim_matches('.'))
        .parse::<RepoName>()
        .map_err(|e| anyhow::anyhow!("--local {}: {e}", path.display()))?;
    Ok(LocalRepo { name, path, base })
}

/// Asks `question` at the terminal; an empty answer takes `default`.
fn ask(input: &mut impl BufRead, question: &str, default: &str) -> anyhow::Result<String> {
    eprint!("{question} [{default}]: ");
    std::io::stderr().flush().ok();
    let mut line = String::new();
    input.read_line(&mut line).context("reading the answer")?;
    let line = line.trim();
    Ok(if line.is_empty() {
        default.to_owned()
    } else {
        line.to_owned()
    })
}

/// Repository names as given (`flag` names them in an error).
fn repo_names(names: &[String], flag: &str) -> anyhow::Result<Vec<RepoName>> {
    names
        .iter()
        .map(|r| {
            r.parse::<RepoName>()
                .map_err(|e| anyhow::anyhow!("{flag} {r:?}: {e}"))
        })
        .collect()
}

fn yes(answer: &str) -> bool {
    matches!(answer.to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The answers from the flags, asking at the terminal for what they leave open (unless `--yes`).
pub fn answers(
    args: &InitArgs,
    input: &mut impl BufRead,
    interactive: bool,
) -> anyhow::Result<Answers> {
    let mut repos = args.repos.clone();
    let mut agent = args.agent.clone();
    let (mut github, mut linear, mut telegram) = (args.github, args.linear, args.telegram);
    let mut public_url = args.public_url.clone();
    if interactive {
        if repos.is_empty() && args.local.is_none() {
            let answer = ask(
                input,
                "GitHub repositories to work on (owner/name, comma-separated)",
                "",
            )?;
            repos = answer
                .split(',')
                .map(|r| r.trim().to_owned())
                .filter(|r| !r.is_empty())
                .collect();
        }
        if agent.is_none() {
            let presets: Vec<&str> = crate::config::presets::PRESETS
                .iter()
                .map(|p| p.name)
                .collect();
            agent = Some(ask(
                input,
                &format!("Agent ({}, or a command)", presets.join(", ")),
                "claude",
            )?);
        }
        if !(github || linear || telegram) {
            github = yes(&ask(
                input,
                "Receive GitHub webhooks? (y/n)",
                if repos.is_empty() { "n" } else { "y" },
            )?);
            linear = yes(&ask(input, "Receive Linear webhooks? (y/n)", "n")?);
            telegram = yes(&ask(input, "Receive Telegram updates? (y/n)", "n")?);
        }
        if public_url.is_none() && (github || linear || telegram) {
            public_url = Some(ask(
                input,
                "The URL providers reach this service at",
                "https://<host>",
            )?);
        }
    } else if !(args.repos.is_empty() || linear || telegram) {
        // Scripted: GitHub repositories want GitHub's webhooks unless another provider was named.
        github = true;
    }
    let repos = repo_names(&repos, "--repo")?;
    let local = args.local.as_deref().map(local_repo).transpose()?;
    let gitlab = gitlab::answers(args, input, interactive)?;
    if repos.is_empty() && local.is_none() && gitlab.is_none() {
        bail!(
            "no repository: name one with --repo owner/name, --gitlab-project group/…/name, or --local <path to \
             a git repository>"
        );
    }
    let auto_approve = match args.approval.as_deref() {
        None => local.is_some(),
        Some("auto") => true,
        Some("manual") => false,
        Some(other) => bail!("--approval {other:?}: expected auto or manual"),
    };
    Ok(Answers {
        repos,
        local,
        agent: Agent::parse(agent.as_deref().unwrap_or("claude"))?,
        github,
        linear,
        telegram,
        public_url: public_url.unwrap_or_else(|| "https://<host>".to_owned()),
        auto_approve,
        gitlab,
    })
}

/// `KEY=value` lines of an existing `.env`, in order (comments and blank lines dropped): `config::read_env_file`.
fn read_env_file(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    Ok(crate::config::read_env_file(path)
        .with_context(|| format!("reading {}", path.display()))?
        .unwrap_or_default())
}

/// Writes `.env` with every secret `answers` wants: kept where it already has one, made where it has not. Mode
/// 0600, written whole to a temporary file and renamed, so a reader never sees half of it. Returns the names made.
fn write_env(path: &Path, answers: &Answers) -> anyhow::Result<Vec<&'static str>> {
    let existing = read_env_file(path)?;
    let have: BTreeMap<&str, &str> = existing
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut lines: Vec<String> = existing.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut made = Vec::new();
    for name in wanted_secrets(answers) {
        if !have.contains_key(name) {
            lines.push(format!(
                "{name}={}",
                hex::encode(rand::random::<[u8; 32]>())
            ));
            made.push(name);
        }
    }
    // Not a secret, but what `serve` must read to reach a self-managed instance.
    if let Some(gitlab) = answers
        .gitlab
        .as_ref()
        .filter(|g| g.url != gitlab::DEFAULT_URL && !have.contains_key("GITLAB_URL"))
    {
        lines.push(format!("GITLAB_URL={}", gitlab.url));
    }
    let temporary = path.with_extension("pidevops-init");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("writing {}", temporary.display()))?;
    // A file left by an earlier run keeps its mode: make sure.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all((lines.join("\n") + "\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(made)
}

/// What `init` did: what to print, and whether all of it was done (false: a webhook it was asked to create is not).
pub struct Done {
    pub text: String,
    pub complete: bool,
}

/// Runs `pidevops init` with `GITHUB_TOKEN` and `GITHUB_API_URL` from `env`.
pub async fn run(args: &InitArgs, process_env: &crate::config::Env) -> anyhow::Result<Done> {
    let interactive = !args.yes;
    if interactive && !std::io::stdin().is_terminal() {
        bail!("stdin is not a terminal: pass --yes with the flags (pidevops init --help)");
    }
    let mut args = args.clone();
    if args.gitlab_url.is_none() {
        args.gitlab_url = process_env.get("GITLAB_URL").map(str::to_owned);
    }
    let args = &args;
    let answers = answers(args, &mut std::io::stdin().lock(), interactive)?;
    let github = hooks::GithubAccess::from_env(process_env);
    // Asked and checked before anything is written.
    let hook_url = hooks::wanted(
        args,
        &answers,
        github.token.is_some(),
        &mut std::io::stdin().lock(),
        interactive,
    )?;
    let toml = render_toml(&answers);
    // What init writes must be what serve accepts.
    toml.parse::<FileConfig>()
        .map_err(|e| anyhow::anyhow!("the configuration init made is refused (a bug): {e}"))?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let config = args.dir.join("pidevops.toml");
    if config.exists() && !args.force {
        bail!("{} exists: pass --force to replace it", config.display());
    }
    std::fs::write(&config, &toml).with_context(|| format!("writing {}", config.display()))?;
    let env = args.dir.join(".env");
    let made = write_env(&env, &answers)?;
    let mut out = format!("Wrote {}.\n", config.display());
    out.push_str(&match made.as_slice() {
        [] => format!(
            "{} already holds every secret; none was changed.\n",
            env.display()
        ),
        names => format!(
            "Wrote {} (mode 0600) with new {}: they are not printed; read them there.\n",
            env.display(),
            names.join(", ")
        ),
    });
    if let Agent::Preset(name) = &answers.agent {
        if crate::dispatch::sandbox::find_program(name, std::env::var("PATH").ok().as_deref())
            .is_none()
        {
            out.push_str(&format!(
                "Note: `{name}` is not on PATH here; the dispatcher stays unarmed (and /health fails) until it is.\n"
            ));
        }
    }
    if !answers.repos.is_empty() {
        out.push_str(
            "Note: GitHub repositories are cloned, pushed and get pull requests with GITHUB_TOKEN (docs/providers.md): \
             add it to .env; until then the dispatcher stays unarmed.\n",
        );
    }
    let mut complete = true;
    if let Some(url) = hook_url {
        let secret = read_env_file(&env)?
            .into_iter()
            .find(|(k, _)| k == GITHUB_SECRET)
            .map(|(_, v)| secrecy::SecretString::from(v))
            .with_context(|| format!("{} has no {GITHUB_SECRET}", env.display()))?;
        let (text, all) = hooks::create(&answers, &github, &url, &secret).await;
        out.push_str(&text);
        complete = all;
    }
    let gitlab_token = process_env
        .get("GITLAB_TOKEN")
        .map(|t| secrecy::SecretString::from(t.to_owned()));
    if let (Some(gitlab), Some(token), Some(url)) = (
        &answers.gitlab,
        &gitlab_token,
        hooks::delivery_url(&answers.public_url, "gitlab"),
    ) {
        let secret = gitlab::secret_of(&read_env_file(&env)?)?;
        let (text, all) = gitlab::create_hooks(gitlab, token, &url, &secret).await;
        out.push_str(&text);
        complete &= all;
    }
    out.push('\n');
    out.push_str(&instructions(&answers, &args.dir));
    Ok(Done {
        text: out,
        complete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(dir: &Path) -> PathBuf {
        let repo = dir.join("my repo");
        std::fs::create_dir_all(&repo).unwrap();
        let git = |args: &[&str]| {
            assert!(std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(args)
                .status()
                .unwrap()
                .success());
        };
        git(&["init", "--quiet", "-b", "trunk"]);
        repo
    }

    #[test]
    fn scripted_answers_render_a_configuration_serve_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let args = InitArgs {
            repos: vec!["acme/api".into()],
            local: Some(local(dir.path())),
            agent: Some("./examples/agent.sh --fast".into()),
            yes: true,
            ..InitArgs::default()
        };
        let answers = answers(&args, &mut std::io::empty(), false).unwrap();
        assert!(answers.github, "GitHub repositories want GitHub's webhooks");
        let local = answers.local.clone().unwrap();
        assert_eq!(local.name.as_str(), "local/my-repo");
        assert_eq!(local.base, "trunk");
        assert!(answers.auto_approve, "a local tour approves by itself");
        let toml = render_toml(&answers);
        let file = toml.parse::<FileConfig>().expect("valid");
        assert_eq!(
            file.dispatch.source(&local.name).url,
            format!("file://{}", local.path.display())
        );
        assert_eq!(file.dispatch.source(&local.name).base, "trunk");
        assert_eq!(file.profiles.default_profile().name, "local");
        assert_eq!(
            file.profiles.default_profile().command,
            vec!["./examples/agent.sh", "--fast"]
        );
        assert!(toml.contains("[repos.\"acme/api\"]"), "{toml}");
        assert_eq!(wanted_secrets(&answers), vec![ADMIN_TOKEN, GITHUB_SECRET]);
    }

    #[test]
    fn a_terminal_session_asks_for_what_the_flags_leave_open() {
        let mut input =
            std::io::Cursor::new("acme/api, acme/web\ncodex\ny\ny\nn\nhttps://ops.example\n");
        let answers = answers(&InitArgs::default(), &mut input, true).unwrap();
        assert_eq!(answers.repos.len(), 2);
        assert_eq!(answers.agent, Agent::Preset("codex".into()));
        assert!(answers.github && answers.linear && !answers.telegram);
        assert!(!answers.auto_approve);
        let text = instructions(&answers, Path::new("/srv/pidevops"));
        assert!(
            text.contains("https://ops.example/webhooks/github"),
            "{text}"
        );
        assert!(
            text.contains("https://ops.example/webhooks/linear"),
            "{text}"
        );
        assert!(!text.contains("webhooks/telegram"), "{text}");
    }

    #[test]
    fn bad_answers_are_refused_with_the_flag_named() {
        let none = answers(
            &InitArgs {
                yes: true,
                ..InitArgs::default()
            },
            &mut std::io::empty(),
            false,
        );
        assert!(none.unwrap_err().to_string().contains("no repository"));
        let bad = InitArgs {
            repos: vec!["not a repo".into()],
            yes: true,
            ..InitArgs::default()
        };
        assert!(answers(&bad, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string()
            .contains("--repo"));
        let approval = InitArgs {
            repos: vec!["acme/api".into()],
            approval: Some("sometimes".into()),
            yes: true,
            ..InitArgs::default()
        };
        let error = answers(&approval, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--approval"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let not_git = InitArgs {
            local: Some(dir.path().to_owned()),
            yes: true,
            ..InitArgs::default()
        };
        let error = answers(&not_git, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a git repository"), "{error}");
    }

    #[test]
    fn an_existing_env_keeps_its_secrets_and_gains_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join(".env");
        std::fs::write(
            &env,
            "# mine\nGITHUB_WEBHOOK_SECRET=kept-as-it-was\nOTHER=1\n",
        )
        .unwrap();
        std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o644)).unwrap();
        let args = InitArgs {
            repos: vec!["acme/api".into()],
            yes: true,
            ..InitArgs::default()
        };
        let answers = answers(&args, &mut std::io::empty(), false).unwrap();
        let made = write_env(&env, &answers).unwrap();
        assert_eq!(made, vec![ADMIN_TOKEN]);
        let values: BTreeMap<String, String> = read_env_file(&env).unwrap().into_iter().collect();
        assert_eq!(values["GITHUB_WEBHOOK_SECRET"], "kept-as-it-was");
        assert_eq!(values["OTHER"], "1");
        assert_eq!(values[ADMIN_TOKEN].len(), 64);
        assert_eq!(
            std::fs::metadata(&env).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            write_env(&env, &answers).unwrap(),
            Vec::<&str>::new(),
            "a second run changes nothing"
        );
    }
}
