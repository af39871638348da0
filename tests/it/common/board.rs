//! The task board as tests make and read it, shared by the areas instead of a copy in each: a task made through
//! the board ([`NewTask`]) and taken to review without an agent ([`to_review`]), its row and its runs in the read
//! models (brought to the log's head first, or as they are now), the events of a stream or a run, and dispatcher
//! ticks driven by hand ([`dispatcher_ticks`]). Reading waits for nothing (a test that waits polls these inside
//! `within` / `eventually`) but [`first_run_ended`], which waits on its condition.

use std::time::Duration;

use pidevops::board::{Board, Draft};
use pidevops::domain::runs::RunEvent;
use pidevops::eventlog::{EventStore, StoredEvent};
use pidevops::projectors::runs::{self, RunRow, Which};
use pidevops::projectors::tasks::{self as task_rows, TaskRow};
use pidevops::tasks::{
    AgentName, ApprovalPolicy, Command, GithubRef, Links, RepoName, RunId, Spec, TaskId,
};

use super::agents::REPO;
use super::{within, TestApp};

/// A task to make through the board, as the API would: on [`REPO`], scope none, done when "it is written", the
/// repository's default agent, a fresh intake key. Each part can be set; [`NewTask::create`] makes it.
#[derive(Clone, Debug)]
pub struct NewTask {
    repo: String,
    title: String,
    scope: String,
    done_when: String,
    links: Links,
    agent: Option<String>,
    approval: Option<ApprovalPolicy>,
    key: Option<String>,
}

/// A [`NewTask`] titled `title`.
pub fn new_task(title: &str) -> NewTask {
    NewTask {
        repo: REPO.to_owned(),
        title: title.to_owned(),
        scope: String::new(),
        done_when: "it is written".to_owned(),
        links: Links::default(),
        agent: None,
        approval: None,
        key: None,
    }
}

impl NewTask {
    pub fn repo(mut self, repo: &str) -> Self {
        self.repo = repo.to_owned();
        self
    }

    pub fn scope(mut self, scope: &str) -> Self {
        self.scope = scope.to_owned();
        self
    }

    pub fn done_when(mut self, done_when: &str) -> Self {
        self.done_when = done_when.to_owned();
        self
    }

    pub fn links(mut self, links: Links) -> Self {
        self.links = links;
        self
    }

    /// The agent profile it asks for.
    pub fn agent(mut self, agent: &str) -> Self {
        self.agent = Some(agent.to_owned());
        self
    }

    /// Its approval policy (default: the repository's).
    pub fn approval(mut self, approval: ApprovalPolicy) -> Self {
        self.approval = Some(approval);
        self
    }

    /// Its intake key (default: a fresh `test:<uuid>`). Making a task twice with one key makes it once.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The draft the board is given.
    pub fn draft(&self) -> Draft {
        Draft {
            agent: self
                .agent
                .as_deref()
                .map(|a| a.parse::<AgentName>().unwrap()),
            approval: self.approval,
            ..Draft::new(
                self.repo.parse::<RepoName>().unwrap(),
                Spec::new(&self.title, &self.scope, &self.done_when).unwrap(),
                self.links.clone(),
            )
        }
    }

    /// Makes it through the app's board (as the API does) and returns its id. With a fresh key, asserts it is
    /// new.
    pub async fn create(self, app: &TestApp) -> TaskId {
        self.create_on(&app.state.board).await
    }

    /// [`NewTask::create`] on a board of the test's own (no [`TestApp`]).
    pub async fn create_on(self, board: &Board) -> TaskId {
        let key = self
            .key
            .clone()
            .unwrap_or_else(|| format!("test:{}", uuid::Uuid::now_v7()));
        let (outcome, created) = board.create(self.draft(), &key, "api", None).await.unwrap();
        assert!(
            created || self.key.is_some(),
            "{key} made a new task: {outcome:?}"
        );
        outcome.task.id()
    }
}

/// Takes `id` to review as an attempt would, with no agent: `Start`, then `SubmitForReview` of its branch with
/// `pr` and an empty report (both by "test"). Returns the run.
pub async fn to_review(app: &TestApp, id: TaskId, pr: Option<GithubRef>) -> RunId {
    let run = RunId(uuid::Uuid::now_v7());
    let submit = Command::SubmitForReview {
        run,
        branch: id.branch(),
        pr,
        report: Default::default(),
    };
    for command in [Command::Start { run }, submit] {
        app.state
            .board
            .execute(id, &command, "test")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", command.name()));
    }
    run
}

/// Records that `run` (started by [`to_review`]) pushed `commit` for `id`, as a worker records a run's start and
/// its success: what reactions hold a CI result or an approval to (the commit pidevops last pushed).
pub async fn pushed(app: &TestApp, id: TaskId, run: RunId, commit: &str) {
    use pidevops::domain::runs as run_events;
    use pidevops::domain::{EventType, NewEvent, Source};
    let at = chrono::Utc::now();
    let started = RunEvent::Started {
        at,
        run,
        task: id,
        attempt: 1,
        profile: "claude".into(),
        worker: "worker-test".into(),
        log: format!("/srv/pidevops/runs/{id}/{run}/agent.log"),
    };
    let succeeded = RunEvent::Succeeded {
        at,
        run,
        task: id,
        attempt: 1,
        branch: id.branch(),
        commit: commit.into(),
        duration_s: 1.0,
        tail: String::new(),
        report: Box::default(),
        usage: None,
        reviewer_usage: None,
    };
    for (version, event, key) in [
        (1, started, format!("run:{run}:1")),
        (2, succeeded, run_events::end_key(run)),
    ] {
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&event).unwrap()),
        );
        new.stream = Some((run_events::stream(run), version));
        app.state.log.append(new).await.unwrap();
    }
}

/// Runs `times` ticks of the dispatcher, the read models brought to the log's head before each: what it would
/// claim, it has claimed after (for a test that asserts a task was held back).
pub async fn dispatcher_ticks(app: &TestApp, times: usize) {
    for _ in 0..times {
        app.project().await;
        app.tick("dispatcher").await;
    }
}

/// The task's row, the read models brought to the log's head first (the row of a task just made may lag); it
/// must be on the board.
pub async fn row(app: &TestApp, id: TaskId) -> TaskRow {
    app.project().await;
    row_now(app, id)
        .await
        .unwrap_or_else(|| panic!("{id} is on the board"))
}

/// The task's row as the read model has it now, if it is there yet.
pub async fn row_now(app: &TestApp, id: TaskId) -> Option<TaskRow> {
    row_in(app.state.log.store(), id).await
}

/// [`row_now`] from a store (a test without a [`TestApp`]: the real binary, a replica).
pub async fn row_in(store: &EventStore, id: TaskId) -> Option<TaskRow> {
    task_rows::get(store, id).await.unwrap()
}

/// The task's runs, oldest first, the read models brought to the log's head first.
pub async fn runs(app: &TestApp, id: TaskId) -> Vec<RunRow> {
    app.project().await;
    runs_now(app, id).await
}

/// The task's runs, oldest first, as the runs read model has them now.
pub async fn runs_now(app: &TestApp, id: TaskId) -> Vec<RunRow> {
    runs_in(app.state.log.store(), id).await
}

/// The task's first run once it has ended (waited for up to `limit`, the read models brought to the log's head on
/// each look).
pub async fn first_run_ended(app: &TestApp, id: TaskId, limit: Duration) -> RunRow {
    within(limit, &format!("{id}'s first run ends"), || async {
        runs(app, id)
            .await
            .first()
            .is_some_and(|r| r.state != "running")
    })
    .await;
    runs(app, id).await.remove(0)
}

/// [`runs_now`] from a store.
pub async fn runs_in(store: &EventStore, id: TaskId) -> Vec<RunRow> {
    runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap()
}

/// Every event of `stream` (`run:<id>`, `task:<id>`, `limits`, …), in log order.
pub async fn events_in(app: &TestApp, stream: &str) -> Vec<StoredEvent> {
    app.state.log.store().read_stream(stream).await.unwrap()
}

/// Every event of type `event_type` in the log, in log order, whatever its stream.
pub async fn events_of_type(app: &TestApp, event_type: &str) -> Vec<StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

/// A run's events (its stream `run:<run>`), read as run events, in order.
pub async fn run_events(app: &TestApp, run: &str) -> Vec<RunEvent> {
    events_in(app, &format!("run:{run}"))
        .await
        .iter()
        .filter_map(|e| serde_json::from_slice::<RunEvent>(&e.body).ok())
        .collect()
}

/// A run's outcome (its one terminal event); the run must have ended.
pub async fn outcome(app: &TestApp, run: &str) -> RunEvent {
    run_events(app, run)
        .await
        .into_iter()
        .find(RunEvent::is_terminal)
        .unwrap_or_else(|| panic!("run {run} has an outcome"))
}

/// The outcomes of a task's runs, in log order.
pub async fn outcomes(app: &TestApp, id: TaskId) -> Vec<RunEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| {
            e.event_type.starts_with("run.")
                && e.stream.as_deref().is_some_and(|s| s.starts_with("run:"))
        })
        .filter_map(|e| serde_json::from_slice::<RunEvent>(&e.body).ok())
        .filter(|e| e.task() == id && e.is_terminal())
        .collect()
}
