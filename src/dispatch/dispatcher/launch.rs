//! The agent's command line and environment, and how it is contained here (bubblewrap, or Landlock and a
//! reaper, or nothing when the policy allows it).

use std::sync::Arc;

use anyhow::Context;

use super::Dispatcher;
use crate::config::dispatch::ContainmentPolicy;
use crate::config::profiles::ModelRoute;
use crate::config::profiles::{AgentProfile, LiveInput, Network, RunInputs};
use crate::dispatch::cgroup::{MemoryBound, RunCgroup};
use crate::dispatch::egress::gateway::Gateway;
use crate::dispatch::egress::policy::{Policy, PACKAGE_REGISTRIES};
use crate::dispatch::egress::routes::{
    OperatorFiles, MAX_CONFIG_BYTES, OPENCODE_FILE_VAR, PI_DIR_VAR,
};
use crate::dispatch::egress::{Endpoint, Proxy, Refusals};
use crate::dispatch::runner::{ChildSetup, Launch};
use crate::dispatch::sandbox::{AgentView, BwrapNet, Confinement, Containment, Scratch};
use crate::dispatch::sessions::SessionPlan;
use crate::dispatch::workspace::Prepared;
use crate::tasks::{RunId, Task};

/// What an agent may change in its worktree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// All of it: the agent's work is what it leaves there.
    Worktree,
    /// Nothing but `.pidevops/` (a reviewer: its verdict).
    ReadOnly,
}

impl Dispatcher {
    /// The agent's command line and environment. The environment is built from nothing: a few neutral variables,
    /// the run's own HOME and TMPDIR, the variables the profile names (never a pidevops secret: `profiles`
    /// refuses those at start-up) and the fixed values it sets; for a CLI that keeps its session (`session`), its
    /// home, and the session it resumes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch(
        &self,
        task: &Task,
        run: RunId,
        profile: &AgentProfile,
        prepared: &Prepared,
        prompt: &str,
        access: Access,
        session: Option<&SessionPlan>,
    ) -> anyhow::Result<Launch> {
        let dirs = &prepared.dirs;
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let mut argv = profile.argv(&RunInputs {
            prompt,
            prompt_file: &path(&dirs.prompt),
            workspace: &path(&dirs.worktree),
            task_id: &task.id().to_string(),
        });
        let mut env = self.neutral_env(&dirs.home, &dirs.tmp);
        let passed: Vec<(String, String)> = profile
            .env
            .iter()
            .filter_map(|name| {
                self.inner
                    .env
                    .get(name)
                    .map(|value| (name.clone(), value.to_owned()))
            })
            .collect();
        env.extend(passed.iter().cloned());
        let net = self.agent_network(profile, &passed, task.repo())?;
        // Fixed switches (`set_env`): `profiles` refuses PATH, HOME, TMPDIR and any name `env` passes.
        env.extend(
            profile
                .set_env
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        let (mut writable, readable) = match access {
            Access::Worktree => (
                vec![dirs.worktree.clone(), dirs.home.clone(), dirs.tmp.clone()],
                vec![dirs.prompt.clone()],
            ),
            // A reviewer reads the work and writes only its verdict (bound over the read-only worktree).
            Access::ReadOnly => (
                vec![
                    dirs.worktree.join(crate::dispatch::agent_files::AGENT_DIR),
                    dirs.home.clone(),
                    dirs.tmp.clone(),
                ],
                vec![dirs.prompt.clone(), dirs.worktree.clone()],
            ),
        };
        if let Some(plan) = session {
            env.push((
                crate::dispatch::sessions::home_var(plan.store).to_owned(),
                path(&plan.home),
            ));
            writable.push(plan.home.clone());
            if let Some(id) = plan.resume {
                argv = crate::dispatch::sessions::resume_argv(plan.store, argv, id).with_context(
                    || format!("agent profile {}: resuming its session", profile.name),
                )?;
            }
        }
        let (argv, child) = self.contain(
            &format!("agent profile {}", profile.name),
            prepared,
            argv,
            &mut env,
            writable,
            readable,
            net,
        )?;
        tracing::info!(task = %task.id(), %run, profile = %profile.name, program = %argv.first().map(String::as_str).unwrap_or(""), "starting the agent");
        Ok(Launch {
            argv,
            env,
            cwd: dirs.worktree.clone(),
            log: dirs.log.clone(),
            timeout: profile.timeout,
            no_output_timeout: profile.no_output_timeout,
            stdin: profile.prompt_on_stdin.then(|| dirs.prompt.clone()),
            child,
            meter: None,
            // The prompt is its first message; the attempt swaps in a channel it can add follow-ups to.
            live: (profile.live_input != LiveInput::None)
                .then(|| crate::dispatch::live::channel(profile.live_input, prompt).1),
            output: (&self.inner.config.bounds).into(),
        })
    }

    /// An agent's network: its profile's `network`, and for `proxy` the model API its key is for (the gateway
    /// holds the key; the agent gets a placeholder, pointed at the gateway by its profile's route) and what its
    /// repository's `allow_hosts` lists.
    fn agent_network(
        &self,
        profile: &AgentProfile,
        passed: &[(String, String)],
        repo: &crate::tasks::RepoName,
    ) -> anyhow::Result<NetPlan> {
        let gateway = match profile.network {
            Network::Proxy => {
                let operator = operator_files(profile.model_route, passed)
                    .with_context(|| format!("agent profile {}", profile.name))?;
                Gateway::for_run(
                    profile.model_route,
                    &profile.env,
                    passed,
                    &profile.command,
                    &operator,
                )
                .map_err(|e| anyhow::anyhow!("agent profile {}: {e}", profile.name))?
            }
            Network::None | Network::Host => None,
        };
        let allow = self.inner.config.allow_hosts(repo);
        let mut allowed = allow.hosts;
        if allow.registries {
            allowed.extend(registries());
        }
        Ok(NetPlan {
            network: profile.network,
            policy: Policy {
                model: match &gateway {
                    Some(gateway) => Some(gateway.host()),
                    None => Gateway::direct_model_host(passed),
                },
                allowed,
            },
            gateway,
        })
    }

    /// A repository's hook: its own network and the proxy, with `allow_hosts` and the package registries, no
    /// model API and no key.
    pub(super) fn hook_network(&self, repo: &crate::tasks::RepoName) -> NetPlan {
        let mut allowed = self.inner.config.allow_hosts(repo).hosts;
        allowed.extend(registries());
        NetPlan {
            network: Network::Proxy,
            policy: Policy {
                model: None,
                allowed,
            },
            gateway: None,
        }
    }

    /// The variables every process of a run gets, and nothing else of ours: PATH and LANG (the service's, or
    /// plain defaults), its own HOME and TMPDIR, a dumb terminal.
    pub(super) fn neutral_env(
        &self,
        home: &std::path::Path,
        tmp: &std::path::Path,
    ) -> Vec<(String, String)> {
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        vec![
            (
                "PATH".to_owned(),
                self.inner
                    .env
                    .get("PATH")
                    .unwrap_or(crate::dispatch::preflight::AGENT_DEFAULT_PATH)
                    .to_owned(),
            ),
            ("HOME".to_owned(), path(home)),
            ("TMPDIR".to_owned(), path(tmp)),
            (
                "LANG".to_owned(),
                self.inner.env.get("LANG").unwrap_or("C.UTF-8").to_owned(),
            ),
            ("TERM".to_owned(), "dumb".to_owned()),
        ]
    }

    /// The view of the machine of an agent, or of a repository's command run like one (`who`; see `hooks.rs`):
    /// `writable` (its own directories), `readable` (the prompt), its program, the read-only system; and how it is
    /// held to it here: the argv wrapped in bubblewrap, or Landlock rules and a reaper for the child.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn contain(
        &self,
        who: &str,
        prepared: &Prepared,
        mut argv: Vec<String>,
        env: &mut Vec<(String, String)>,
        writable: Vec<std::path::PathBuf>,
        mut readable: Vec<std::path::PathBuf>,
        net: NetPlan,
    ) -> anyhow::Result<(Vec<String>, ChildSetup)> {
        let dirs = &prepared.dirs;
        let root = self.inner.workspaces.root();
        let network = net.network;
        let mut writable = writable;
        let proxy = match self.start_proxy(who, prepared, net, env, &mut argv)? {
            Some((proxy, made)) => {
                // What it made for the process (pi's agent directory in HOME) is the process's own.
                writable.extend(made);
                Some(Arc::new(proxy))
            }
            None => None,
        };
        let env: &[(String, String)] = env;
        let agent_path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        readable.extend(AgentView::system_readable());
        // Its own repository's history, borrowed read-only by the repository `hand_to_agent` made.
        readable.push(dirs.mirror.join("objects"));
        // Its program (a script anywhere, or a CLI under /usr), and what its PATH names, but never anything
        // that holds the workspaces or lies inside them.
        let outside_root = |p: &std::path::Path| !root.starts_with(p) && !p.starts_with(root);
        if let Some(program) = argv
            .first()
            .and_then(|p| crate::dispatch::sandbox::find_program(p, agent_path))
        {
            let canonical = program.canonicalize().ok();
            readable.extend(
                [Some(program), canonical]
                    .into_iter()
                    .flatten()
                    .filter(|p| outside_root(p)),
            );
        }
        readable.extend(
            agent_path
                .unwrap_or_default()
                .split(':')
                .map(std::path::PathBuf::from)
                .filter(|p| p.is_absolute() && p.is_dir() && outside_root(p)),
        );
        readable.extend(
            self.inner
                .config
                .readable
                .iter()
                .filter(|p| outside_root(p))
                .cloned(),
        );
        // Its own cgroup with its memory limit, where one can be set; made before it starts, gone after.
        let cgroup = match &self.inner.memory {
            MemoryBound::Cgroup { parent, limit } => {
                Some(Arc::new(RunCgroup::create(parent, *limit).with_context(
                    || format!("making the cgroup of the {who} under {}", parent.display()),
                )?))
            }
            MemoryBound::NotBounded { .. } => None,
        };
        // Inside its own network namespace the bridge (pidevops-bridge) listens where the agent's proxy variables
        // point and runs the agent.
        let bridged = self.bridged(proxy.as_deref(), &argv, &mut readable)?;
        let mut view = AgentView {
            writable,
            readable,
            // SAFETY: geteuid has no preconditions and cannot fail.
            drop_capabilities: unsafe { nix::libc::geteuid() } == 0,
            tmp_size: Some(self.inner.config.bounds.tmp_size),
            scratch: Vec::new(),
        };
        match &self.inner.containment {
            Containment::Namespaces { bwrap } => {
                // TMPDIR and HOME are scratch nobody reads after the process: each a sized tmpfs rather than a
                // directory on the workspace volume (memory the agent fills is bounded; the repository's check
                // gets a HOME of its own, not one the agent left things in).
                let bounds = &self.inner.config.bounds;
                let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
                for (name, size) in [("TMPDIR", bounds.tmp_size), ("HOME", bounds.home_size)] {
                    let Some(dir) = var(name) else { continue };
                    view.scratch.extend(
                        view.writable
                            .extract_if(.., |p| p.as_os_str() == dir)
                            .map(|path| Scratch { path, size }),
                    );
                }
                let (argv, net) = match (&bridged, network) {
                    (Some((wrapped, socket)), _) => (
                        wrapped,
                        BwrapNet::Own {
                            proxy_socket: Some(socket.as_path()),
                        },
                    ),
                    (None, Network::Host) => (&argv, BwrapNet::Host),
                    (None, _) => (&argv, BwrapNet::Own { proxy_socket: None }),
                };
                Ok((
                    crate::dispatch::sandbox::bwrap_argv(bwrap, &view, &dirs.worktree, argv, net),
                    ChildSetup {
                        // bubblewrap's init is the reaper's to kill when bubblewrap exits: its own
                        // `--die-with-parent` leaves it running if bubblewrap dies just as the agent starts.
                        reaper: true,
                        cgroup,
                        egress: proxy,
                        ..ChildSetup::default()
                    },
                ))
            }
            Containment::Landlock { .. } => {
                let ports: Option<Vec<u16>> = match (network, proxy.as_deref()) {
                    (Network::Host, _) => None,
                    (_, Some(proxy)) => Some(vec![proxy.endpoint.agent_port()]),
                    (_, None) => Some(Vec::new()),
                };
                let confinement = Confinement::new(&view, ports.as_deref())
                    .with_context(|| format!("preparing the Landlock rules of the {who}"))?
                    .map(Arc::new);
                Ok((
                    argv,
                    ChildSetup {
                        confinement,
                        reaper: true,
                        drop_capabilities: view.drop_capabilities,
                        cgroup,
                        egress: proxy,
                    },
                ))
            }
            Containment::None { why } => {
                anyhow::ensure!(
                    self.inner.config.containment == ContainmentPolicy::BestEffort,
                    "no containment for the agent ({why}) and dispatch.containment is \"required\""
                );
                tracing::warn!(%who, "running uncontained (dispatch.containment = \"best-effort\")");
                Ok((
                    argv,
                    ChildSetup {
                        drop_capabilities: view.drop_capabilities,
                        cgroup,
                        egress: proxy,
                        ..ChildSetup::default()
                    },
                ))
            }
        }
    }

    /// The run's egress proxy for `network = "proxy"` (none otherwise), and what points the process at it: the
    /// proxy variables, and for the model gateway the placeholder key and the gateway where its CLI reads its
    /// endpoint (a variable, its configuration, pi's directory in its HOME, its command line).
    /// In a sandbox with its own network and an egress proxy: the argv that runs the bridge (made readable),
    /// which then runs `argv`, and the proxy's socket it forwards to.
    fn bridged(
        &self,
        proxy: Option<&Proxy>,
        argv: &[String],
        readable: &mut Vec<std::path::PathBuf>,
    ) -> anyhow::Result<Option<(Vec<String>, std::path::PathBuf)>> {
        let (Containment::Namespaces { .. }, Some(proxy)) = (&self.inner.containment, proxy) else {
            return Ok(None);
        };
        let Endpoint::Unix(socket) = &proxy.endpoint else {
            anyhow::bail!("the egress proxy of a sandbox listens on a Unix socket");
        };
        if let Some(why) = crate::dispatch::egress::bridge_missing() {
            anyhow::bail!("the sandbox's network bridge cannot run: {why}");
        }
        let bridge = crate::dispatch::egress::bridge_program()
            .context("finding pidevops-bridge, the sandbox's bridge")?;
        let canonical = bridge.canonicalize().ok();
        readable.extend([Some(bridge.clone()), canonical].into_iter().flatten());
        let mut wrapped = vec![
            bridge.to_string_lossy().into_owned(),
            "--socket".to_owned(),
            crate::dispatch::egress::SOCKET_IN_SANDBOX.to_owned(),
            "--port".to_owned(),
            crate::dispatch::egress::BRIDGE_PORT.to_string(),
            "--".to_owned(),
        ];
        wrapped.extend(argv.iter().cloned());
        Ok(Some((wrapped, socket.clone())))
    }

    fn start_proxy(
        &self,
        who: &str,
        prepared: &Prepared,
        net: NetPlan,
        env: &mut Vec<(String, String)>,
        argv: &mut Vec<String>,
    ) -> anyhow::Result<Option<(Proxy, Vec<std::path::PathBuf>)>> {
        if net.network != Network::Proxy {
            return Ok(None);
        }
        let mut made = Vec::new();
        let socket = match &self.inner.containment {
            Containment::Namespaces { .. } => {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(prepared.dirs.dir.join(format!("egress-{n}.sock")))
            }
            // Landlock lets the agent connect to one loopback port; uncontained, the proxy still keeps the key.
            Containment::Landlock { .. } | Containment::None { .. } => None,
        };
        let gateway = net.gateway.clone();
        let proxy = Proxy::start(
            net.policy,
            net.gateway,
            socket.as_deref(),
            self.refusals_of(prepared),
        )
        .with_context(|| format!("starting the egress proxy of the {who}"))?;
        let url = proxy.endpoint.agent_url();
        let mut set = |name: &str, value: String| {
            env.retain(|(k, _)| k != name);
            env.push((name.to_owned(), value));
        };
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            set(name, url.clone());
        }
        // The gateway is on loopback: reached directly, not through the proxy.
        for name in ["NO_PROXY", "no_proxy"] {
            set(name, "127.0.0.1,localhost,::1".to_owned());
        }
        if let Some(gateway) = gateway {
            let pointed = gateway.point(&url, argv);
            for (name, value) in pointed.env {
                set(&name, value);
            }
            if !pointed.pi_files.is_empty() {
                let dir = pi_agent_dir(&prepared.dirs.home, &pointed.pi_files)
                    .with_context(|| format!("writing pi's agent directory for the {who}"))?;
                set(PI_DIR_VAR, dir.to_string_lossy().into_owned());
                made.push(dir);
            }
        }
        Ok(Some((proxy, made)))
    }
}

/// The operator's CLI configuration a route reads the real endpoint from: the files the profile's passed
/// variables name, read here by pidevops (the agent gets what routes.rs makes of them, never these files'
/// keys), each at most [`MAX_CONFIG_BYTES`].
fn operator_files(route: ModelRoute, passed: &[(String, String)]) -> anyhow::Result<OperatorFiles> {
    let value = |name: &str| {
        passed
            .iter()
            .find(|(n, v)| n == name && !v.trim().is_empty())
            .map(|(_, v)| std::path::PathBuf::from(v.trim()))
    };
    let read = |path: &std::path::Path, required: bool| -> anyhow::Result<Option<String>> {
        use std::io::Read;
        let file = match std::fs::File::open(path) {
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            opened => opened.with_context(|| format!("reading {}", path.display()))?,
        };
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {} (UTF-8 text)", path.display()))?;
        anyhow::ensure!(
            text.len() as u64 <= MAX_CONFIG_BYTES,
            "{} is over {MAX_CONFIG_BYTES} bytes",
            path.display()
        );
        Ok(Some(text))
    };
    let mut files = OperatorFiles::default();
    match route {
        ModelRoute::PiModels => {
            if let Some(dir) = value(PI_DIR_VAR) {
                files.pi_models = read(&dir.join("models.json"), false)?;
                files.pi_settings = read(&dir.join("settings.json"), false)?;
            }
        }
        ModelRoute::OpencodeConfig => {
            if let Some(path) = value(OPENCODE_FILE_VAR) {
                files.opencode_file = read(&path, true)?;
            }
        }
        ModelRoute::BaseUrlVariable | ModelRoute::CodexConfig => {}
    }
    Ok(files)
}

/// pi's agent directory for one process: a new directory in the run's HOME (made here, so nothing the agent left
/// there is followed) with `files` (never an auth.json).
fn pi_agent_dir(
    home: &std::path::Path,
    files: &[(&'static str, String)],
) -> anyhow::Result<std::path::PathBuf> {
    use std::io::Write;
    let dir = home.join(format!(".pi-agent-{:016x}", rand::random::<u64>()));
    std::fs::create_dir(&dir).with_context(|| format!("making {}", dir.display()))?;
    for (name, text) in files {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("writing {name} in {}", dir.display()))?;
    }
    Ok(dir)
}

impl Dispatcher {
    /// The run's refusals, which every proxy of the run (agent, hooks, reviewer) adds to.
    fn refusals_of(&self, prepared: &Prepared) -> Arc<Refusals> {
        self.inner
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(prepared.dirs.dir.clone())
            .or_default()
            .clone()
    }

    /// What the run's proxies refused, once its processes are done (forgotten here).
    pub(super) fn take_refusals(
        &self,
        prepared: &Prepared,
    ) -> Vec<crate::domain::runs::RefusedEgress> {
        self.inner
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&prepared.dirs.dir)
            .map(|r| r.list())
            .unwrap_or_default()
    }
}

/// A contained process's network: what its profile asks for, what its proxy allows, and its model gateway.
#[derive(Debug)]
pub(super) struct NetPlan {
    pub network: Network,
    pub policy: Policy,
    pub gateway: Option<Gateway>,
}

fn registries() -> impl Iterator<Item = crate::config::allow_hosts::HostRule> {
    PACKAGE_REGISTRIES
        .iter()
        .map(|host| crate::config::allow_hosts::HostRule::Exact((*host).to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed(list: &[(&str, &std::path::Path)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), v.display().to_string()))
            .collect()
    }

    #[test]
    fn the_operators_files_are_read_only_as_the_route_needs_them_and_bounded() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        std::fs::write(dir.join("models.json"), "{\"providers\":{}}").unwrap();
        std::fs::write(dir.join("auth.json"), "{\"anthropic\":{\"key\":\"sk-x\"}}").unwrap();
        let pi = operator_files(ModelRoute::PiModels, &passed(&[(PI_DIR_VAR, dir)])).unwrap();
        assert_eq!(pi.pi_models.as_deref(), Some("{\"providers\":{}}"));
        assert_eq!(pi.pi_settings, None, "a missing settings.json is no error");
        assert_eq!(
            operator_files(ModelRoute::CodexConfig, &passed(&[(PI_DIR_VAR, dir)])).unwrap(),
            OperatorFiles::default()
        );
        // OPENCODE_CONFIG names a file OpenCode must read: a missing one is an error naming it.
        let missing = dir.join("nope.json");
        let refused = operator_files(
            ModelRoute::OpencodeConfig,
            &passed(&[(OPENCODE_FILE_VAR, &missing)]),
        )
        .unwrap_err();
        assert!(format!("{refused:#}").contains("nope.json"), "{refused:#}");
        let huge = dir.join("huge.json");
        std::fs::write(&huge, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let refused = operator_files(
            ModelRoute::OpencodeConfig,
            &passed(&[(OPENCODE_FILE_VAR, &huge)]),
        )
        .unwrap_err();
        assert!(format!("{refused:#}").contains("is over"), "{refused:#}");
    }

    #[test]
    fn pis_directory_is_new_and_holds_only_the_files_given() {
        let home = tempfile::tempdir().unwrap();
        let files = [("models.json", "{}".to_owned())];
        let first = pi_agent_dir(home.path(), &files).unwrap();
        let second = pi_agent_dir(home.path(), &files).unwrap();
        assert_ne!(first, second);
        assert!(first.starts_with(home.path()));
        let names: Vec<_> = std::fs::read_dir(&first)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("models.json")]);
        assert_eq!(
            std::fs::read_to_string(first.join("models.json")).unwrap(),
            "{}"
        );
    }
}
