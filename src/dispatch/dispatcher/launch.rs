//! The agent's command line and environment, and how it is contained here (bubblewrap, or Landlock and a
//! reaper, or nothing when the policy allows it).

use std::sync::Arc;

use anyhow::Context;

use super::Dispatcher;
use crate::config::dispatch::ContainmentPolicy;
use crate::config::profiles::{AgentProfile, LiveInput, RunInputs};
use crate::dispatch::cgroup::{MemoryBound, RunCgroup};
use crate::dispatch::runner::{ChildSetup, Launch};
use crate::dispatch::sandbox::{AgentView, Confinement, Containment};
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
    /// refuses those at start-up) and the fixed values it sets.
    pub(super) fn launch(
        &self,
        task: &Task,
        run: RunId,
        profile: &AgentProfile,
        prepared: &Prepared,
        prompt: &str,
        access: Access,
    ) -> anyhow::Result<Launch> {
        let dirs = &prepared.dirs;
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let argv = profile.argv(&RunInputs {
            prompt,
            prompt_file: &path(&dirs.prompt),
            workspace: &path(&dirs.worktree),
            task_id: &task.id().to_string(),
        });
        let mut env = self.neutral_env(&dirs.home, &dirs.tmp);
        for name in &profile.env {
            if let Some(value) = self.inner.env.get(name) {
                env.push((name.clone(), value.to_owned()));
            }
        }
        // Fixed switches (`set_env`): `profiles` refuses PATH, HOME, TMPDIR and any name `env` passes.
        env.extend(
            profile
                .set_env
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        let (writable, readable) = match access {
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
        let (argv, child) = self.contain(
            &format!("agent profile {}", profile.name),
            prepared,
            argv,
            &env,
            writable,
            readable,
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
                    .unwrap_or("/usr/local/bin:/usr/bin:/bin")
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
    pub(super) fn contain(
        &self,
        who: &str,
        prepared: &Prepared,
        argv: Vec<String>,
        env: &[(String, String)],
        writable: Vec<std::path::PathBuf>,
        mut readable: Vec<std::path::PathBuf>,
    ) -> anyhow::Result<(Vec<String>, ChildSetup)> {
        let dirs = &prepared.dirs;
        let root = self.inner.workspaces.root();
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
                // TMPDIR is scratch nobody reads after the process: a sized tmpfs rather than the workspace
                // volume. HOME stays a directory: the agent's CLI and the repository's check share it.
                let tmpdir = env.iter().find(|(k, _)| k == "TMPDIR").map(|(_, v)| v);
                view.scratch = view
                    .writable
                    .extract_if(.., |p| tmpdir.is_some_and(|t| p.as_os_str() == t.as_str()))
                    .collect();
                Ok((
                    crate::dispatch::sandbox::bwrap_argv(bwrap, &view, &dirs.worktree, &argv),
                    ChildSetup {
                        cgroup,
                        ..ChildSetup::default()
                    },
                ))
            }
            Containment::Landlock { .. } => {
                let confinement = Confinement::new(&view)
                    .with_context(|| format!("preparing the Landlock rules of the {who}"))?
                    .map(Arc::new);
                Ok((
                    argv,
                    ChildSetup {
                        confinement,
                        reaper: true,
                        drop_capabilities: view.drop_capabilities,
                        cgroup,
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
                        ..ChildSetup::default()
                    },
                ))
            }
        }
    }
}
