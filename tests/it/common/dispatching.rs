//! The app as the dispatch suites set it up, once instead of in each: [`TestApp::dispatching`] runs a whole
//! `pidevops.toml` with its workspaces under a folder; [`TestApp::with_agent`] is the common case built for you:
//! a local remote standing in for GitHub ([`Remote`]), one agent profile (`fake`) running a shell script written
//! in a scratch folder, [`dispatch_file`]'s configuration (auto approval, fast heartbeats, scopes off) with what a
//! suite adds, and the dispatcher on.

use std::path::{Path, PathBuf};

use pidevops::config::Settings;

use super::agents::{agent, bash_agent, dispatch_file, Remote};
use super::{TestApp, TestDb};
use crate::providers::github::fake::FakeGithub;
use crate::providers::linear::fake::{FakeLinear, LINEAR_KEY};

/// The token the app is given for the fake GitHub.
pub const GITHUB_TOKEN: &str = "ghp_fake_token_for_the_fake_github";

impl TestApp {
    /// The app with `file` as its `pidevops.toml` and its workspaces under `root`.
    pub async fn dispatching(db: &TestDb, file: toml::Table, root: &Path) -> TestApp {
        TestApp::dispatching_github(db, file, root, None).await
    }

    /// [`TestApp::dispatching`], calling GitHub's API at the fake (with [`GITHUB_TOKEN`]) when one is given.
    pub async fn dispatching_github(
        db: &TestDb,
        file: toml::Table,
        root: &Path,
        github: Option<&FakeGithub>,
    ) -> TestApp {
        let mut settings = super::settings(db);
        settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
        settings.workspace_root = root.to_owned();
        if let Some(github) = github {
            use_github(&mut settings, github);
        }
        TestApp::spawn(settings).await
    }

    /// An app dispatching to a local remote with one agent profile, `fake`, running the script `name` whose body
    /// is `body` (`/bin/sh`; [`WithAgent::bash`] for bash): see [`WithAgent`] for what can be added.
    pub fn with_agent(name: &str, body: &str) -> WithAgent {
        let (name, body) = (name.to_owned(), body.to_owned());
        Self::with_agent_from(move |dir, bash| {
            if bash {
                bash_agent(dir, &name, &body)
            } else {
                agent(dir, &name, &body)
            }
        })
    }

    /// [`TestApp::with_agent`] with the script written by `write` into the scratch folder (given the folder and
    /// whether [`WithAgent::bash`] was asked for): [`super::agents::claude_like_agent`], say.
    pub fn with_agent_from(
        write: impl FnOnce(&Path, bool) -> PathBuf + Send + 'static,
    ) -> WithAgent {
        WithAgent {
            write: Box::new(write),
            bash: false,
            contained: false,
            workspaces: None,
            profile: String::new(),
            edits: Vec::new(),
            settings: Vec::new(),
        }
    }
}

type ScriptWriter = Box<dyn FnOnce(&Path, bool) -> PathBuf + Send>;
type FileEdit = Box<dyn FnOnce(&mut toml::Table, &Scene<'_>) + Send>;
type SettingsEdit = Box<dyn FnOnce(&mut Settings) + Send>;

/// What a configuration edit may read: the remote and the scratch folder the agent's script is in.
pub struct Scene<'a> {
    pub remote: &'a Remote,
    pub scratch: &'a Path,
}

/// The builder [`TestApp::with_agent`] returns; [`WithAgent::spawn`] starts the app.
pub struct WithAgent {
    write: ScriptWriter,
    bash: bool,
    contained: bool,
    workspaces: Option<PathBuf>,
    profile: String,
    edits: Vec<FileEdit>,
    settings: Vec<SettingsEdit>,
}

impl WithAgent {
    /// The script runs under bash, with `set -eu`.
    pub fn bash(mut self) -> Self {
        self.bash = true;
        self
    }

    /// The scratch folder (the script, the workspaces) lives outside `/tmp`, so a contained agent's refusals
    /// are seen ([`super::contained_scratch`]).
    pub fn contained(mut self) -> Self {
        self.contained = true;
        self
    }

    /// The workspaces under `root` (a volume of the test's own) instead of `<scratch>/ws`.
    pub fn workspaces(mut self, root: &Path) -> Self {
        self.workspaces = Some(root.to_owned());
        self
    }

    /// More of the profile: TOML lines under `[agents.fake]`.
    pub fn profile(mut self, lines: &str) -> Self {
        self.profile.push_str(lines);
        self.profile.push('\n');
        self
    }

    /// Merges `toml` into the file: a table's keys go into the table of that name (made if missing), any other
    /// value is set.
    pub fn config(self, toml: &str) -> Self {
        let extra: toml::Table = toml.parse().unwrap_or_else(|e| panic!("{e}\n{toml}"));
        self.edit(move |file, _| merge(file, extra))
    }

    /// Edits the file as built, with the remote and the scratch folder at hand.
    pub fn edit(
        mut self,
        edit: impl FnOnce(&mut toml::Table, &Scene<'_>) + Send + 'static,
    ) -> Self {
        self.edits.push(Box::new(edit));
        self
    }

    /// Edits the settings (credentials, API addresses, allowed chats) before the app starts.
    pub fn settings(mut self, edit: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.settings.push(Box::new(edit));
        self
    }

    /// Calls GitHub's API at the fake, with [`GITHUB_TOKEN`].
    pub fn github(self, github: &FakeGithub) -> Self {
        let github = github.clone();
        self.settings(move |s| use_github(s, &github))
    }

    /// Calls Linear's API at the fake, with its key.
    pub fn linear(self, linear: &FakeLinear) -> Self {
        let url = linear.url.clone();
        self.settings(move |s| {
            s.providers.set("LINEAR_API_KEY", Some(LINEAR_KEY)).unwrap();
            s.providers.set("LINEAR_API_URL", Some(&url)).unwrap();
        })
    }

    /// Writes the script, builds the file and starts the app, its workspaces in `<scratch>/ws` unless
    /// [`WithAgent::workspaces`] said elsewhere. Bind the
    /// [`Rig`] for the whole test (`let (app, _rig) = …`, never `_`): the remote and the folder go with it.
    pub async fn spawn(self, db: &TestDb) -> (TestApp, Rig) {
        let remote = Remote::new();
        let scratch = if self.contained {
            super::contained_scratch()
        } else {
            tempfile::tempdir().unwrap()
        };
        let script = (self.write)(scratch.path(), self.bash);
        let mut file = dispatch_file(&remote, &script, &self.profile);
        let scene = Scene {
            remote: &remote,
            scratch: scratch.path(),
        };
        for edit in self.edits {
            edit(&mut file, &scene);
        }
        let mut settings = super::settings(db);
        settings.file = pidevops::config::FileConfig::try_from(file.clone())
            .unwrap_or_else(|e| panic!("{e}\n{file}"));
        settings.workspace_root = self.workspaces.unwrap_or_else(|| scratch.path().join("ws"));
        for edit in self.settings {
            edit(&mut settings);
        }
        let app = TestApp::spawn(settings).await;
        (
            app,
            Rig {
                remote,
                script,
                file,
                scratch,
            },
        )
    }
}

/// The settings call GitHub's API at the fake, with [`GITHUB_TOKEN`].
pub fn use_github(settings: &mut Settings, github: &FakeGithub) {
    github.point_settings(settings, GITHUB_TOKEN);
}

/// A table's keys into the table of that name, any other value set.
pub fn merge(file: &mut toml::Table, extra: toml::Table) {
    for (key, value) in extra {
        match (file.get_mut(&key), value) {
            (Some(toml::Value::Table(into)), toml::Value::Table(from)) => merge(into, from),
            (_, value) => {
                file.insert(key, value);
            }
        }
    }
}

/// What an app from [`TestApp::with_agent`] runs on: keep it for the whole test (the remote and the scratch
/// folder go when it is dropped).
pub struct Rig {
    pub remote: Remote,
    /// The agent's script.
    pub script: PathBuf,
    /// The `pidevops.toml` it runs.
    pub file: toml::Table,
    pub scratch: tempfile::TempDir,
}
