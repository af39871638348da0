//! Dispatch settings from `pidevops.toml`: whether runs are on, how many at once, where each repository is
//! cloned from, and the watchdog's and retries' timing. Pure; every mistake names its key.
//!
//! ```toml
//! [dispatch]
//! agent = "claude"            # the default profile (see profiles.rs)
//! max_concurrent = 2          # runs at once, across all replicas and workers
//! per_repo = 1                # runs at once in one repository, unless the repository says otherwise
//! heartbeat_s = 30            # how often a run reports it is alive; silent for 3 of these = lost
//! retry_backoff_s = 60        # first retry's delay; doubles per attempt, plus up to 20 % jitter
//! worktree_ttl_h = 24         # finished runs' worktrees are removed after this
//! checkpoint_every_s = 300    # a running agent's worktree is saved this often (and at each turn's end)
//! executor = "local"          # "local": serve runs agents; "workers": `pidevops worker` processes do (NATS_URL)
//! containment = "required"    # agents must run contained (namespaces, else landlock); "best-effort" opts out
//! bwrap = "bwrap"             # the bubblewrap program (a path, or a name on PATH)
//! readable = ["/opt/tools"]   # more paths agents may read (and run), beyond the system and their own
//! tmp_size_mib = 512          # each agent's private /tmp and TMPDIR (each a tmpfs under bubblewrap)
//! home_size_mib = 1024        # each agent's HOME (a tmpfs under bubblewrap)
//! memory_max_mib = 4096       # each agent's memory, where cgroup v2 delegation lets pidevops set it
//! output_max_mib = 256        # what an agent may print in one run; past it, stopped (`flooded`)
//! log_keep_mib = 4            # agent.log keeps this much of the start and of the end of the output
//! min_free_disk_mib = 1024    # nothing is claimed while WORKSPACE_ROOT's volume has less free
//!
//! [repos."acme/api"]
//! url = "https://github.com/acme/api.git"   # default: https://github.com/<owner>/<name>.git
//! base = "main"                             # the branch each attempt starts from
//! max_concurrent = 2
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::file::{DispatchTable, ReviewPolicy, ScopePolicy, Tables};
use super::repo_env::RepoEnv;
use crate::tasks::RepoName;

/// How many attempts may run at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub global: usize,
    pub per_repo_default: usize,
    pub per_repo: BTreeMap<RepoName, usize>,
}

impl Limits {
    pub fn for_repo(&self, repo: &RepoName) -> usize {
        self.per_repo
            .get(repo)
            .copied()
            .unwrap_or(self.per_repo_default)
    }
}

/// Where a repository's code comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoSource {
    pub url: String,
    pub base: String,
    /// `[repos."o/n"] forge` where set; else read from the URL.
    pub forge: Option<super::file::Forge>,
    /// `[repos."o/n"] provider`: the code host its reviews go to (GitHub's pull requests, GitLab's merge requests).
    pub host: super::file::CodeHost,
    /// `[repos."o/n"] delete_branch = false`: pidevops's git keeps `pidevops/<task>` once it landed the task.
    pub keeps_branches: bool,
}

impl RepoSource {
    /// Whether cloning and pushing need `GITHUB_TOKEN`: an https URL on GitHub. Local paths and `file://` (tests,
    /// self-hosted mirrors) and ssh URLs (the machine's own keys) do not.
    pub fn needs_github_token(&self) -> bool {
        let url = self.url.to_ascii_lowercase();
        self.host == super::file::CodeHost::Github
            && (url.starts_with("https://github.com/") || url.starts_with("http://github.com/"))
    }

    /// Whether cloning and pushing need `GITLAB_TOKEN`: a GitLab-hosted repository's http(s) URL (ssh uses the
    /// machine's own keys; the token goes only to `GITLAB_URL`'s host, see `dispatch::workspace::git`).
    pub fn needs_gitlab_token(&self) -> bool {
        let url = self.url.to_ascii_lowercase();
        self.on_gitlab() && (url.starts_with("https://") || url.starts_with("http://"))
    }

    /// Whether the repository is GitLab-hosted (`provider = "gitlab"`): its tasks land through their merge
    /// requests, never by pidevops's own git, and never through GitHub.
    pub fn on_gitlab(&self) -> bool {
        self.host == super::file::CodeHost::Gitlab
    }

    /// Whether the remote is GitHub: `forge = "github"`, or unset and a github.com URL (https, ssh or
    /// `git@github.com:`). Its tasks land through their pull requests; any other remote (a path, `file://`,
    /// another host) is landed by pidevops's own git.
    pub fn on_github(&self) -> bool {
        if self.on_gitlab() {
            return false;
        }
        match self.forge {
            Some(super::file::Forge::Github) => return true,
            Some(super::file::Forge::Git) => return false,
            None => {}
        }
        let url = self.url.to_ascii_lowercase();
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        let authority = rest.split(['/', ':']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        host == "github.com"
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Executor {
    /// `serve` runs agents itself.
    Local,
    /// `pidevops worker` processes pull run requests from JetStream.
    Workers,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DispatchConfig {
    /// `None` when runs are on; otherwise why they are off (for `/health` and `doctor`).
    pub off: Option<String>,
    pub limits: Limits,
    pub heartbeat: Duration,
    pub retry_backoff: Duration,
    /// The longest one run's report of its provider's limit pauses its profile (`limit_unverified_s`).
    pub limit_unverified: Duration,
    pub worktree_ttl: Duration,
    /// How often a running agent's worktree is saved (`checkpoint_every_s`), besides each turn's end.
    pub checkpoint_every: Duration,
    pub executor: Executor,
    pub repos: BTreeMap<RepoName, RepoSource>,
    pub containment: ContainmentPolicy,
    /// The bubblewrap program: a path, or a name looked up on PATH.
    pub bwrap: String,
    /// Extra paths agents may read, beyond the system and their own directories.
    pub readable: Vec<PathBuf>,
    /// Each repository's setup, hooks, secrets and check (see `repo_env.rs`); absent: the agent alone.
    pub environments: BTreeMap<RepoName, RepoEnv>,
    /// `[repos."o/n"] scope` where set (default: enforce).
    pub scope: BTreeMap<RepoName, ScopePolicy>,
    /// `[repos."o/n"] review` where set (default: off).
    pub review: BTreeMap<RepoName, ReviewPolicy>,
    /// `[repos."o/n"] allow_hosts` where set: what its agents and hooks may reach through the egress proxy.
    pub allow_hosts: BTreeMap<RepoName, AllowHosts>,
    /// `[budgets]`: what runs may spend.
    pub budgets: crate::budgets::BudgetsConfig,
    /// What one agent may take of the machine: memory, `/tmp`, output, and the disk left before a claim.
    pub bounds: AgentBounds,
}

/// What one agent may take of the machine, in bytes (`[dispatch]`'s `*_mib` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentBounds {
    /// The size of its private `/tmp` and of its TMPDIR, each a tmpfs.
    pub tmp_size: u64,
    /// The size of its HOME tmpfs.
    pub home_size: u64,
    /// Its memory limit, where a cgroup can hold it (see `dispatch::cgroup`).
    pub memory_max: u64,
    /// What it may print in one run before it is stopped.
    pub output_max: u64,
    /// How much of the start and of the end of its output `agent.log` keeps.
    pub log_keep: u64,
    /// Free space below which nothing is claimed on the workspace volume.
    pub min_free_disk: u64,
}

impl Default for AgentBounds {
    fn default() -> Self {
        Self::from_table(&DispatchTable::default()).unwrap_or(Self {
            tmp_size: 512 << 20,
            home_size: 1024 << 20,
            memory_max: 4096 << 20,
            output_max: 256 << 20,
            log_keep: 4 << 20,
            min_free_disk: 1024 << 20,
        })
    }
}

impl AgentBounds {
    fn from_table(dispatch: &DispatchTable) -> Result<Self, String> {
        let mib = |key: &str, n: i64, min: i64, max: i64| -> Result<u64, String> {
            u64::try_from(n)
                .ok()
                .filter(|_| (min..=max).contains(&n))
                .map(|n| n << 20)
                .ok_or_else(|| format!("dispatch.{key} must be a whole number from {min} to {max}"))
        };
        // Ceilings are sanity, not policy: 1 TiB of memory or /tmp, 64 GiB of output.
        let bounds = Self {
            tmp_size: mib("tmp_size_mib", dispatch.tmp_size_mib, 1, 1 << 20)?,
            home_size: mib("home_size_mib", dispatch.home_size_mib, 1, 1 << 20)?,
            memory_max: mib("memory_max_mib", dispatch.memory_max_mib, 64, 1 << 20)?,
            output_max: mib("output_max_mib", dispatch.output_max_mib, 1, 1 << 16)?,
            log_keep: mib("log_keep_mib", dispatch.log_keep_mib, 1, 1024)?,
            min_free_disk: mib("min_free_disk_mib", dispatch.min_free_disk_mib, 0, 1 << 30)?,
        };
        Ok(bounds)
    }
}

/// Whether agents may run when nothing can contain them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentPolicy {
    /// The default: without containment the dispatcher is unarmed and says why.
    Required,
    /// Run agents uncontained where nothing else works, and say so in `/health`.
    BestEffort,
}

impl DispatchConfig {
    pub const DEFAULT_BASE: &'static str = "main";

    /// A run silent for this long is lost.
    pub fn lost_after(&self) -> Duration {
        self.heartbeat * 3
    }

    /// Where `repo` is cloned from.
    pub fn source(&self, repo: &RepoName) -> RepoSource {
        self.repos
            .get(repo)
            .cloned()
            .unwrap_or_else(|| Self::default_source(repo))
    }

    /// Whether `repo`'s attempts must stay within their task's scope.
    pub fn scope_policy(&self, repo: &RepoName) -> ScopePolicy {
        self.scope.get(repo).copied().unwrap_or_default()
    }

    /// Whether a reviewer agent reads `repo`'s attempts before their pull request.
    pub fn review_policy(&self, repo: &RepoName) -> ReviewPolicy {
        self.review.get(repo).copied().unwrap_or_default()
    }

    /// What `repo`'s agents and hooks may reach besides the model API (nothing listed, for most).
    pub fn allow_hosts(&self, repo: &RepoName) -> AllowHosts {
        self.allow_hosts.get(repo).cloned().unwrap_or_default()
    }

    /// What `repo`'s runs do besides the agent (nothing, for most).
    pub fn environment(&self, repo: &RepoName) -> Option<&RepoEnv> {
        self.environments.get(repo)
    }

    /// The delay before attempt `next` (2, 3, …) may start, jittered by a fraction in `0.0..0.2` that the caller
    /// derives from the task, so every replica and every restart computes the same time.
    pub fn backoff(&self, next: u32, jitter: f64) -> Duration {
        if next <= 1 {
            return Duration::ZERO;
        }
        let base = crate::domain::backoff::Backoff {
            first: self.retry_backoff,
            max_doublings: 10,
            cap: Duration::MAX,
        }
        .after(next - 1);
        base.mul_f64(1.0 + jitter.clamp(0.0, 0.2))
    }

    /// `[dispatch]` and `[repos."owner/name"]` url, base and max_concurrent; every mistake names its key.
    pub fn from_tables(tables: &Tables) -> Result<Self, String> {
        let off = match &tables.dispatch {
            None => Some(
                "no [dispatch] in pidevops.toml: tasks wait in todo until it is configured"
                    .to_owned(),
            ),
            Some(dispatch) if !dispatch.enabled => {
                Some("dispatch.enabled = false in pidevops.toml".to_owned())
            }
            Some(_) => None,
        };
        let defaults = DispatchTable::default();
        let dispatch = tables.dispatch.as_ref().unwrap_or(&defaults);
        let count = |key: &str, n: i64| -> Result<usize, String> {
            usize::try_from(n)
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| format!("dispatch.{key} must be a whole number from 1 to 1000"))
        };
        let seconds = |key: &str, s: f64, scale: f64| -> Result<Duration, String> {
            Some(s)
                .filter(|s| s.is_finite() && *s > 0.0 && *s * scale < 1e9)
                .map(|s| Duration::from_secs_f64(s * scale))
                .ok_or_else(|| format!("dispatch.{key} must be a positive number"))
        };
        let bwrap = Some(dispatch.bwrap.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or("dispatch.bwrap must be a program name or path")?;
        let readable = dispatch
            .readable
            .iter()
            .map(|p| {
                Some(PathBuf::from(p))
                    .filter(|p| p.is_absolute())
                    .ok_or_else(|| format!("dispatch.readable: {p:?} is not an absolute path"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut limits = Limits {
            global: count("max_concurrent", dispatch.max_concurrent)?,
            per_repo_default: count("per_repo", dispatch.per_repo)?,
            per_repo: BTreeMap::new(),
        };
        let mut repos = BTreeMap::new();
        let mut environments = BTreeMap::new();
        let mut scope = BTreeMap::new();
        let mut allow_hosts = BTreeMap::new();
        let mut review = BTreeMap::new();
        for (name, repo) in &tables.repos {
            let key = format!("repos.\"{name}\"");
            let parsed = name
                .parse::<RepoName>()
                .map_err(|e| format!("[{key}]: {e}"))?;
            let text = |field: &str, value: &Option<String>| -> Result<Option<String>, String> {
                match value {
                    None => Ok(None),
                    Some(v) => Some(v.trim())
                        .filter(|s| !s.is_empty())
                        .map(|s| Some(s.to_owned()))
                        .ok_or_else(|| format!("{key}.{field} must be a non-empty string")),
                }
            };
            let url = text("url", &repo.url)?;
            let base = text("base", &repo.base)?;
            if let Some(base) = &base {
                // The base is handed to git as a ref name: refuse what could be read as an option or a range.
                if base.starts_with('-')
                    || base.contains("..")
                    || !base
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
                {
                    return Err(format!("{key}.base {base:?} is not a plain branch name"));
                }
            }
            if let Some(url) = &url {
                if url.starts_with('-') {
                    return Err(format!("{key}.url must not start with '-'"));
                }
            }
            if let Some(max) = repo.max_concurrent {
                let max = usize::try_from(max)
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| {
                        format!("{key}.max_concurrent must be a whole number from 1 to 1000")
                    })?;
                limits.per_repo.insert(parsed.clone(), max);
            }
            if let Some(env) = RepoEnv::from_table(&key, repo)? {
                environments.insert(parsed.clone(), env);
            }
            if let Some(policy) = repo.scope {
                scope.insert(parsed.clone(), policy);
            }
            if let Some(policy) = repo.review {
                review.insert(parsed.clone(), policy);
            }
            if let Some(hosts) = &repo.allow_hosts {
                allow_hosts.insert(parsed.clone(), AllowHosts::parse(&key, hosts)?);
            }
            if url.is_some() || base.is_some() || repo.forge.is_some() || repo.provider.is_some() {
                let default = Self::default_source(&parsed);
                repos.insert(
                    parsed,
                    RepoSource {
                        url: url.unwrap_or(default.url),
                        base: base.unwrap_or(default.base),
                        forge: repo.forge,
                        host: repo.provider.unwrap_or_default(),
                        keeps_branches: repo.delete_branch == Some(false),
                    },
                );
            }
        }
        Ok(Self {
            off,
            limits,
            heartbeat: seconds("heartbeat_s", dispatch.heartbeat_s, 1.0)?,
            retry_backoff: seconds("retry_backoff_s", dispatch.retry_backoff_s, 1.0)?,
            limit_unverified: seconds("limit_unverified_s", dispatch.limit_unverified_s, 1.0)?,
            worktree_ttl: seconds("worktree_ttl_h", dispatch.worktree_ttl_h, 3600.0)?,
            checkpoint_every: seconds("checkpoint_every_s", dispatch.checkpoint_every_s, 1.0)?,
            executor: dispatch.executor,
            repos,
            containment: dispatch.containment,
            bwrap,
            readable,
            environments,
            scope,
            review,
            allow_hosts,
            budgets: super::file::budgets_config(tables)?,
            bounds: AgentBounds::from_table(dispatch)?,
        })
    }

    fn default_source(repo: &RepoName) -> RepoSource {
        RepoSource {
            url: format!("https://github.com/{}.git", repo.as_str()),
            base: Self::DEFAULT_BASE.to_owned(),
            forge: None,
            host: super::file::CodeHost::Github,
            keeps_branches: false,
        }
    }
}

/// `[repos."o/n"] allow_hosts`, read: the names, and whether it asked for the package registries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowHosts {
    pub hosts: Vec<super::allow_hosts::HostRule>,
    pub registries: bool,
}

impl AllowHosts {
    fn parse(key: &str, hosts: &[String]) -> Result<Self, String> {
        use super::allow_hosts::{HostRule, REGISTRIES};
        let mut out = Self::default();
        for host in hosts {
            if host.trim() == REGISTRIES {
                out.registries = true;
                continue;
            }
            out.hosts
                .push(HostRule::parse(host).map_err(|e| format!("{key}.allow_hosts: {e}"))?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_remotes_are_told_from_the_others() {
        let on_github = |url: &str| {
            RepoSource {
                url: url.to_owned(),
                base: "main".to_owned(),
                forge: None,
                host: crate::config::file::CodeHost::Github,
                keeps_branches: false,
            }
            .on_github()
        };
        for url in [
            "https://github.com/acme/api.git",
            "git@github.com:acme/api.git",
            "ssh://git@github.com/acme/api.git",
            "https://x-access-token@GitHub.com/acme/api",
        ] {
            assert!(on_github(url), "{url}");
        }
        for url in [
            "file:///srv/git/api.git",
            "/srv/git/api.git",
            "https://git.example.com/github.com/api.git",
            "git@gitlab.com:acme/api.git",
            "https://github.com.example.org/acme/api.git",
        ] {
            assert!(!on_github(url), "{url}");
        }
        // Said outright, `forge` wins over the URL: a local stand-in for GitHub, an Enterprise host, a github.com
        // mirror landed by pidevops's git.
        let config = parse(
            "[repos.\"acme/ghe\"]\nurl = \"https://git.corp.example/acme/ghe.git\"\nforge = \"github\"\n\
             [repos.\"acme/mirror\"]\nurl = \"https://github.com/acme/mirror.git\"\nforge = \"git\"\n\
             [repos.\"acme/default\"]\nforge = \"github\"",
        )
        .unwrap();
        assert!(config.source(&"acme/ghe".parse().unwrap()).on_github());
        assert!(!config.source(&"acme/mirror".parse().unwrap()).on_github());
        let default = config.source(&"acme/default".parse().unwrap());
        assert!(default.on_github());
        assert_eq!(default.url, "https://github.com/acme/default.git");
        assert!(parse("[repos.\"acme/x\"]\nforge = \"gitlab\"")
            .unwrap_err()
            .contains("forge"));
        // A GitLab-hosted repository lands through its merge request: neither GitHub's nor pidevops's git.
        let config = parse(
            "[repos.\"g/s/app\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/g/s/app.git\"\n\
             [repos.\"g/s/ssh\"]\nprovider = \"gitlab\"\nurl = \"git@gitlab.example.com:g/s/ssh.git\"",
        )
        .unwrap();
        let gitlab = config.source(&"g/s/app".parse().unwrap());
        assert!(gitlab.on_gitlab() && !gitlab.on_github());
        assert!(gitlab.needs_gitlab_token() && !gitlab.needs_github_token());
        assert!(!config
            .source(&"g/s/ssh".parse().unwrap())
            .needs_gitlab_token());
        assert!(!config.source(&"acme/ghe".parse().unwrap()).on_gitlab());
    }

    fn parse(text: &str) -> Result<DispatchConfig, String> {
        text.parse::<crate::config::FileConfig>()
            .map(|file| file.dispatch)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn without_a_dispatch_table_runs_are_off_and_say_why() {
        let config = parse("").unwrap();
        assert!(config.off.unwrap().contains("no [dispatch]"));
        assert!(parse("[dispatch]\nenabled = false").unwrap().off.is_some());
        assert!(parse("[dispatch]").unwrap().off.is_none());
    }

    #[test]
    fn repositories_name_their_source_limit_and_base() {
        let config = parse(
            r#"
            [dispatch]
            max_concurrent = 4
            per_repo = 2
            heartbeat_s = 0.5
            [repos."acme/api"]
            url = "file:///srv/git/api.git"
            base = "develop"
            max_concurrent = 3
            [repos."acme/web"]
            approval = "auto"
            "#,
        )
        .unwrap();
        let api: RepoName = "acme/api".parse().unwrap();
        let web: RepoName = "acme/web".parse().unwrap();
        assert_eq!(config.limits.global, 4);
        assert_eq!(config.limits.per_repo_default, 2);
        assert_eq!(config.limits.per_repo.get(&api), Some(&3));
        assert_eq!(config.source(&api).url, "file:///srv/git/api.git");
        assert_eq!(config.source(&api).base, "develop");
        assert!(!config.source(&api).needs_github_token());
        assert_eq!(config.source(&web).url, "https://github.com/acme/web.git");
        assert!(config.source(&web).needs_github_token());
        assert!(config.source(&web).on_github());
        assert!(!config.source(&api).on_github());
        assert_eq!(config.heartbeat, Duration::from_millis(500));
        assert_eq!(config.lost_after(), Duration::from_millis(1500));
    }

    #[test]
    fn an_agents_bounds_are_read_in_mebibytes_with_defaults() {
        let config =
            parse("[dispatch]\ntmp_size_mib = 64\nhome_size_mib = 128\nmin_free_disk_mib = 0")
                .unwrap();
        assert_eq!(config.bounds.tmp_size, 64 << 20);
        assert_eq!(config.bounds.home_size, 128 << 20);
        assert_eq!(config.bounds.min_free_disk, 0);
        assert_eq!(config.bounds.output_max, 256 << 20);
        assert_eq!(config.bounds.log_keep, 4 << 20);
        assert_eq!(config.bounds.memory_max, 4096 << 20);
        assert_eq!(AgentBounds::default().min_free_disk, 1024 << 20);
    }

    #[test]
    fn mistakes_name_their_key() {
        for (text, key) in [
            ("[dispatch]\nmax_concurrent = 0", "dispatch.max_concurrent"),
            ("[dispatch]\nheartbeat_s = -1", "dispatch.heartbeat_s"),
            (
                "[dispatch]\nexecutor = \"cloud\"",
                "[dispatch] executor: expected \"local\" or \"workers\", found \"cloud\"",
            ),
            (
                "[dispatch]\nenabled = \"yes\"",
                "[dispatch] enabled: expected true or false, found the string \"yes\"",
            ),
            (
                "[dispatch]\ncontainment = \"off\"",
                "[dispatch] containment: expected \"required\" or \"best-effort\", found \"off\"",
            ),
            ("[dispatch]\nreadable = [\"relative\"]", "dispatch.readable"),
            ("[dispatch]\nbwrap = \"\"", "dispatch.bwrap"),
            ("[dispatch]\ntmp_size_mib = 0", "dispatch.tmp_size_mib"),
            ("[dispatch]\nhome_size_mib = 0", "dispatch.home_size_mib"),
            ("[dispatch]\nmemory_max_mib = 8", "dispatch.memory_max_mib"),
            ("[dispatch]\noutput_max_mib = -1", "dispatch.output_max_mib"),
            ("[dispatch]\nlog_keep_mib = 0", "dispatch.log_keep_mib"),
            (
                "[dispatch]\nmin_free_disk_mib = -5",
                "dispatch.min_free_disk_mib",
            ),
            (
                "[repos.\"a/b\"]\nbase = \"--upload-pack=x\"",
                "repos.\"a/b\".base",
            ),
            (
                "[repos.\"a/b\"]\nbase = \"main..evil\"",
                "repos.\"a/b\".base",
            ),
            (
                "[repos.\"a/b\"]\nurl = \"-oProxyCommand=x\"",
                "repos.\"a/b\".url",
            ),
            (
                "[repos.\"a/b\"]\nmax_concurrent = 0",
                "repos.\"a/b\".max_concurrent",
            ),
            (
                "dispatch = 3",
                "[dispatch]: expected a table, found the whole number 3",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn backoff_doubles_per_attempt_with_bounded_jitter() {
        let config = parse("[dispatch]\nretry_backoff_s = 10").unwrap();
        assert_eq!(config.backoff(1, 0.1), Duration::ZERO);
        assert_eq!(config.backoff(2, 0.0), Duration::from_secs(10));
        assert_eq!(config.backoff(3, 0.0), Duration::from_secs(20));
        assert_eq!(config.backoff(4, 0.5), Duration::from_secs(48));
        assert_eq!(config.backoff(60, 0.0), Duration::from_secs(10 * 1024));
    }
}
