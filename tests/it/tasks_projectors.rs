//! The task board's read models against real databases: incremental = rebuild = `tasks::replay` of every stream
//! (whole tables compared), filters and order, timelines, link lookups, and a bad task event stopping the
//! projector exactly there.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::common::TestDb;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use futures::future::BoxFuture;
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore, StoredEvent};
use pidevops::projectors::tasks::{
    self, link_keys, summarize, LinkKind, TaskFilter, TaskRow, TasksProjector, TimelineEntry,
};
use pidevops::projectors::{Bodies, Projection, Projector, ProjectorTx, Step};
use pidevops::tasks::{
    decide, replay, ApprovalPolicy, BranchName, Column, Command, GithubRef, LinearIssue, Links,
    MaxAttempts, NewTask, Priority, Reason, RepoName, RetryCause, RunId, Spec, Task, TaskEvent,
    TaskId, TelegramMessage, GITHUB_ISSUE, LINEAR_ISSUE, TELEGRAM,
};
use tokio_util::sync::CancellationToken;

per_backend!(
    incremental_equals_rebuild_equals_replay_of_every_stream,
    filters_order_timelines_and_link_lookups,
    an_undecodable_task_event_stops_the_projector_there,
    an_event_evolve_refuses_stops_the_projector_there,
    other_events_bodies_are_never_read,
    a_batch_wider_than_one_statement_is_written_whole,
);

pub(crate) async fn open(db: &TestDb) -> (EventStore, EventLog, CancellationToken) {
    let store = EventStore::connect(&db.url, 8).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(30), stop.clone());
    (store, log, stop)
}

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).single().unwrap()
}

pub(crate) fn id(n: u64) -> TaskId {
    format!("T-{n}").parse().unwrap()
}

/// The command side, as the contract says it writes: decide, then append each event to `task:<id>`.
#[derive(Default)]
pub(crate) struct Board {
    tasks: HashMap<TaskId, (i64, Option<Task>)>,
    webhooks: u64,
}

impl Board {
    pub(crate) async fn run(
        &mut self,
        log: &EventLog,
        task: TaskId,
        command: Command,
        minute: i64,
    ) {
        self.run_as(log, task, command, minute, "api").await
    }

    pub(crate) async fn run_as(
        &mut self,
        log: &EventLog,
        task: TaskId,
        command: Command,
        minute: i64,
        actor: &str,
    ) {
        let now = base() + chrono::Duration::minutes(minute);
        let (version, state) = self.tasks.remove(&task).unwrap_or((0, None));
        let events = decide(state.as_ref(), &command, now)
            .unwrap_or_else(|e| panic!("{task}: {} refused: {e}", command.name()));
        let mut state = state;
        let mut version = version;
        for event in events {
            // A webhook caused it, as intake and reactions will record.
            let cause = self.webhook(log).await;
            version += 1;
            append_task_event(log, task, version, &event, Some((cause, actor))).await;
            state = Some(pidevops::tasks::evolve(state, &event).unwrap());
        }
        self.tasks.insert(task, (version, state));
    }

    /// A webhook-like event between task events; its id is the cause of the next task event.
    async fn webhook(&mut self, log: &EventLog) -> uuid::Uuid {
        self.webhooks += 1;
        let kinds = ["push", "pull_request", "issues"];
        let kind = kinds[(self.webhooks % 3) as usize];
        let event = NewEvent::new(
            Source::Github,
            EventType::new(Source::Github, &[kind]),
            format!("wh-{}", self.webhooks),
            "application/json",
            Bytes::from(format!(
                "{{\"webhook\":{},\"padding\":\"{}\"}}",
                self.webhooks,
                "x".repeat(200)
            )),
        );
        log.append(event).await.unwrap().event_id
    }
}

fn task_event(
    task: TaskId,
    version: i64,
    event_type: &str,
    body: Vec<u8>,
    meta: Option<(uuid::Uuid, &str)>,
) -> NewEvent {
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(event_type.to_owned()),
        format!("{task}/{version}"),
        "application/json",
        Bytes::from(body),
    );
    new.stream = Some((task.stream(), version));
    if let Some((cause, actor)) = meta {
        new.meta
            .insert("cause_event_id".into(), cause.to_string().into());
        new.meta.insert("actor".into(), actor.into());
    }
    new
}

async fn append_task_event(
    log: &EventLog,
    task: TaskId,
    version: i64,
    event: &TaskEvent,
    meta: Option<(uuid::Uuid, &str)>,
) {
    let body = serde_json::to_vec(event).unwrap();
    log.append(task_event(task, version, event.kind(), body, meta))
        .await
        .unwrap();
}

fn spec(title: &str) -> Spec {
    Spec::new(title, "src/", "the tests pass").unwrap()
}

fn repo(n: u64) -> RepoName {
    if n.is_multiple_of(2) {
        "acme/api"
    } else {
        "acme/web"
    }
    .parse()
    .unwrap()
}

pub(crate) fn new_task(
    n: u64,
    priority: Priority,
    links: Links,
    approval: ApprovalPolicy,
) -> Command {
    Command::Create(Box::new(NewTask {
        id: id(n),
        repo: repo(n),
        spec: spec(&format!("Task number {n}")),
        priority,
        links,
        approval,
        max_attempts: MaxAttempts::new(2).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    }))
}

fn pr(n: u64) -> GithubRef {
    GithubRef::new("acme/api".parse().unwrap(), n).unwrap()
}

fn run_id(n: u128) -> RunId {
    RunId(uuid::Uuid::from_u128(n))
}

fn reason(text: &str) -> Reason {
    Reason::new(text).unwrap()
}

/// Part one of the scenario: eight tasks created from every channel, some moving along.
pub(crate) async fn part_one(board: &mut Board, log: &EventLog) {
    let linear = |n: u128, ident: &str| {
        Links::default().with(
            LINEAR_ISSUE,
            &LinearIssue::new(uuid::Uuid::from_u128(n), ident).unwrap(),
        )
    };
    let github = |n: u64| {
        Links::default().with(
            GITHUB_ISSUE,
            &GithubRef::new("acme/web".parse().unwrap(), n).unwrap(),
        )
    };
    let telegram =
        |m: i64| Links::default().with(TELEGRAM, &TelegramMessage::new(-100, m).unwrap());
    use ApprovalPolicy::{Auto, Manual};
    let creations = [
        (1, Priority::Normal, linear(1, "ENG-1"), Manual, "linear"),
        (2, Priority::Urgent, github(2), Auto, "github"),
        (3, Priority::Low, telegram(3), Manual, "telegram"),
        (4, Priority::High, Links::default(), Auto, "api"),
        (5, Priority::Normal, linear(5, "ENG-5"), Auto, "linear"),
        (6, Priority::Urgent, Links::default(), Manual, "cli"),
        (7, Priority::Normal, github(7), Manual, "github"),
        (8, Priority::High, telegram(8), Auto, "telegram"),
    ];
    for (minute, (n, priority, links, approval, actor)) in creations.into_iter().enumerate() {
        board
            .run_as(
                log,
                id(n),
                new_task(n, priority, links, approval),
                minute as i64,
                actor,
            )
            .await;
    }
    board.run(log, id(1), Command::Approve, 10).await;
    board
        .run(log, id(2), Command::Start { run: run_id(21) }, 11)
        .await;
    board
        .run(
            log,
            id(3),
            Command::Reject {
                reason: reason("duplicate"),
            },
            12,
        )
        .await;
    board
        .run(log, id(4), Command::Start { run: run_id(41) }, 13)
        .await;
}

/// Part two: runs fail, get flagged, are reviewed, finish; links and priorities change.
pub(crate) async fn part_two(board: &mut Board, log: &EventLog) {
    board
        .run(
            log,
            id(2),
            Command::SubmitForReview {
                run: run_id(21),
                branch: BranchName::try_from("pidevops/T-2".to_owned()).unwrap(),
                pr: Some(pr(20)),
                report: Default::default(),
            },
            20,
        )
        .await;
    board
        .run(
            log,
            id(4),
            Command::Retry {
                cause: RetryCause::RunFailed { run: run_id(41) },
                reason: reason("timed out"),
            },
            21,
        )
        .await;
    board
        .run(log, id(4), Command::Start { run: run_id(42) }, 22)
        .await;
    // The last attempt fails: retried + flagged needs-human.
    board
        .run(
            log,
            id(4),
            Command::Retry {
                cause: RetryCause::RunFailed { run: run_id(42) },
                reason: reason("tests still red"),
            },
            23,
        )
        .await;
    board.run(log, id(2), Command::Complete, 24).await;
    board.run(log, id(3), Command::Archive, 25).await;
    board
        .run(
            log,
            id(5),
            Command::Reprioritize {
                priority: Priority::Urgent,
            },
            26,
        )
        .await;
    board
        .run(
            log,
            id(6),
            Command::AttachLinks {
                links: Links::default().with(
                    GITHUB_ISSUE,
                    &GithubRef::new("acme/api".parse().unwrap(), 66).unwrap(),
                ),
            },
            27,
        )
        .await;
    board
        .run(
            log,
            id(7),
            Command::FlagNeedsHuman {
                reason: reason("unclear scope"),
            },
            28,
        )
        .await;
    board
        .run(
            log,
            id(8),
            Command::AttachFollowUp {
                text: pidevops::tasks::FollowUpText::new("also the footer\nsecond line").unwrap(),
                origin: None,
                send_back: true,
            },
            29,
        )
        .await;
}

/// Part three: more of the same on tasks that already have rows (the stream-replay path for a fresh projector).
pub(crate) async fn part_three(board: &mut Board, log: &EventLog) {
    board.run(log, id(4), Command::ClearNeedsHuman, 30).await;
    board
        .run(log, id(4), Command::Start { run: run_id(43) }, 31)
        .await;
    board.run(log, id(2), Command::Archive, 32).await;
    board
        .run(
            log,
            id(6),
            Command::Cancel {
                reason: reason("not needed"),
            },
            33,
        )
        .await;
    board
        .run(log, id(1), Command::Start { run: run_id(11) }, 34)
        .await;
}

/// The expected read models, from the log alone: every task stream replayed with `tasks::replay`.
struct Expected {
    rows: Vec<TaskRow>,
    timelines: BTreeMap<TaskId, Vec<TimelineEntry>>,
    links: Vec<(String, String, String, i64)>,
}

async fn expected(store: &EventStore) -> Expected {
    let all = store.read_after(0, 1_000_000).await.unwrap();
    let mut streams: BTreeMap<TaskId, Vec<(StoredEvent, TaskEvent)>> = BTreeMap::new();
    for e in all {
        let Some(stream) = e.stream.clone() else {
            continue;
        };
        let Some(task) = stream.strip_prefix("task:") else {
            continue;
        };
        let event: TaskEvent = serde_json::from_slice(&e.body).unwrap();
        streams
            .entry(task.parse().unwrap())
            .or_default()
            .push((e, event));
    }
    let mut rows = Vec::new();
    let mut timelines = BTreeMap::new();
    let mut links: BTreeMap<(String, String), (String, i64)> = BTreeMap::new();
    for (task_id, events) in &streams {
        let task = replay(events.iter().map(|(_, e)| e)).unwrap().unwrap();
        let (first, _) = &events[0];
        let actor = first.meta.text("actor");
        let actor = actor.as_deref();
        let TaskEvent::Created(created) = &events[0].1 else {
            panic!("{task_id} does not start with task.created");
        };
        let (last, _) = events.last().unwrap();
        rows.push(TaskRow {
            id: *task_id,
            number: task_id.number() as i64,
            column: task.column(),
            title: task.title(),
            repo: task.repo().as_str().to_owned(),
            priority: task.priority(),
            needs_human: task.needs_human().is_some(),
            needs_human_reason: task.needs_human().map(|n| n.reason.as_str().to_owned()),
            attempts: task.attempts() as i64,
            max_attempts: task.max_attempts().get() as i64,
            source: tasks::source_of(actor, &created.links).to_owned(),
            links: task.links().clone(),
            created_at: task.created_at(),
            updated_at: task.updated_at(),
            version: events.len() as i64,
            last_position: last.position,
            state: serde_json::to_value(&task).unwrap(),
            behind: None,
        });
        let mut timeline = Vec::new();
        for (stored, event) in events {
            timeline.push(TimelineEntry {
                position: stored.position,
                stream_version: stored.stream_version.unwrap(),
                event_type: event.kind().to_owned(),
                at: event.at(),
                summary: summarize(event),
                cause_event_id: stored.meta.text("cause_event_id"),
                actor: stored.meta.text("actor"),
            });
            let mut brought = match event {
                TaskEvent::Created(c) => link_keys(&c.links),
                TaskEvent::LinksAttached { links, .. } => link_keys(links),
                TaskEvent::SubmittedForReview { pr: Some(pr), .. } => {
                    vec![(LinkKind::GithubPr, pr.to_string())]
                }
                _ => Vec::new(),
            };
            for (kind, value) in brought.drain(..) {
                let claim = (task_id.to_string(), stored.position);
                links
                    .entry((kind.as_str().to_owned(), value))
                    .and_modify(|held| {
                        if claim.1 < held.1 {
                            *held = claim.clone()
                        }
                    })
                    .or_insert(claim);
            }
        }
        timelines.insert(*task_id, timeline);
    }
    rows.sort_by_key(|r| r.id);
    Expected {
        rows,
        timelines,
        links: links
            .into_iter()
            .map(|((k, v), (t, p))| (k, v, t, p))
            .collect(),
    }
}

/// The read models as stored: every row of every table.
async fn actual(store: &EventStore) -> Expected {
    let mut rows = tasks::list(store, &TaskFilter::default()).await.unwrap();
    rows.sort_by_key(|r| r.id);
    let mut timelines = BTreeMap::new();
    for row in &rows {
        timelines.insert(row.id, tasks::timeline(store, row.id).await.unwrap());
    }
    Expected {
        rows,
        timelines,
        links: stored_links(store).await,
    }
}

async fn stored_links(store: &EventStore) -> Vec<(String, String, String, i64)> {
    const LINKS: &str =
        "SELECT kind, value, task_id, position FROM task_links ORDER BY kind, value";
    match store {
        EventStore::Postgres(s) => sqlx::query_as(LINKS).fetch_all(s.pool()).await.unwrap(),
        EventStore::Sqlite(s) => sqlx::query_as(LINKS).fetch_all(s.pool()).await.unwrap(),
    }
}

/// [`assert_same`] without the timelines (the task's stream, read one task at a time): for boards too large to
/// read that way in a test.
async fn assert_same_rows_and_links(store: &EventStore, expected: &Expected, what: &str) {
    let mut rows = tasks::list(store, &TaskFilter::default()).await.unwrap();
    rows.sort_by_key(|r| r.id);
    assert_eq!(rows.len(), expected.rows.len(), "{what}: task count");
    for (a, e) in rows.iter().zip(&expected.rows) {
        assert_eq!(a, e, "{what}: the row of {}", e.id);
    }
    assert_eq!(stored_links(store).await, expected.links, "{what}: links");
}

fn assert_same(actual: &Expected, expected: &Expected, what: &str) {
    assert_eq!(actual.rows.len(), expected.rows.len(), "{what}: task count");
    for (a, e) in actual.rows.iter().zip(&expected.rows) {
        assert_eq!(a, e, "{what}: the row of {}", e.id);
    }
    assert_eq!(actual.timelines, expected.timelines, "{what}: timelines");
    assert_eq!(actual.links, expected.links, "{what}: links");
}

pub(crate) async fn run_to_head(projection: &Projection) {
    let mut steps = 0;
    while !matches!(projection.step(7).await.unwrap(), Step::CaughtUp { .. }) {
        steps += 1;
        assert!(steps < 10_000, "never caught up");
    }
}

async fn incremental_equals_rebuild_equals_replay_of_every_stream(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    let mut board = Board::default();
    // Small batches, interleaved with appends: the incremental path.
    let projection = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 7);
    part_one(&mut board, &log).await;
    run_to_head(&projection).await;
    part_two(&mut board, &log).await;
    run_to_head(&projection).await;
    // A fresh projector (a restart: nothing in memory) continues where the checkpoint is, replaying streams.
    part_three(&mut board, &log).await;
    let restarted = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 5);
    run_to_head(&restarted).await;
    let oracle = expected(&store).await;
    assert_eq!(oracle.rows.len(), 8);
    assert_same(&actual(&store).await, &oracle, "incremental");
    let (_, position) = pidevops::projectors::read_row(&store, tasks::NAME)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(position, store.head().await.unwrap());

    // The board side agrees with the oracle too (decide/evolve in memory == replay of the log).
    for row in &oracle.rows {
        let (_, task) = &board.tasks[&row.id];
        assert_eq!(
            serde_json::to_value(task.as_ref().unwrap()).unwrap(),
            row.state
        );
    }

    let rebuilt =
        Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 10_000);
    rebuilt.rebuild(|_| {}).await.unwrap();
    assert_same(&actual(&store).await, &oracle, "rebuild from zero");
    stop.cancel();
}

/// More task rows and links in one batch than one statement may bind (SQLite's 32,766 parameters: 1,820 task rows
/// of 18 columns, 8,191 links of 4), so every write and the restart's version check and stream replay run in
/// several statements. The result must be the oracle's, as for any batch.
async fn a_batch_wider_than_one_statement_is_written_whole(db: TestDb) {
    const TASKS: u64 = 3_000;
    let _cores = crate::common::heavy().await;
    let (store, log, stop) = open(&db).await;
    let links = |n: u64| {
        Links::default()
            .with(
                LINEAR_ISSUE,
                &LinearIssue::new(uuid::Uuid::from_u128(u128::from(n)), &format!("ENG-{n}"))
                    .unwrap(),
            )
            .with(GITHUB_ISSUE, &GithubRef::new(repo(n), n).unwrap())
            .with(
                TELEGRAM,
                &TelegramMessage::new(-100, i64::try_from(n).unwrap()).unwrap(),
            )
    };
    let append_all =
        |version: i64, command: &dyn Fn(u64) -> Command, state: &mut HashMap<TaskId, Task>| {
            let mut appends = Vec::new();
            for n in 1..=TASKS {
                let events = decide(state.get(&id(n)), &command(n), base()).unwrap();
                assert_eq!(events.len(), 1, "one event per task and command");
                let next = pidevops::tasks::evolve(state.remove(&id(n)), &events[0]).unwrap();
                state.insert(id(n), next);
                let body = serde_json::to_vec(&events[0]).unwrap();
                appends.push(log.append(task_event(id(n), version, events[0].kind(), body, None)));
            }
            appends
        };
    let mut state = HashMap::new();
    for appended in futures::future::join_all(append_all(
        1,
        &|n| new_task(n, Priority::Normal, links(n), ApprovalPolicy::Manual),
        &mut state,
    ))
    .await
    {
        appended.unwrap();
    }
    let projection =
        Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 100_000);
    assert!(matches!(
        projection.step(100_000).await.unwrap(),
        Step::Applied { .. }
    ));
    let oracle = expected(&store).await;
    assert_eq!(oracle.rows.len(), TASKS as usize);
    assert_eq!(oracle.links.len(), 3 * TASKS as usize);
    assert_same_rows_and_links(&store, &oracle, "one wide batch of new tasks").await;

    // A restart (nothing cached) meets every task again in one batch: their stored versions and streams are read
    // in chunks too.
    for appended in
        futures::future::join_all(append_all(2, &|_| Command::Approve, &mut state)).await
    {
        appended.unwrap();
    }
    let restarted =
        Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 100_000);
    assert!(matches!(
        restarted.step(100_000).await.unwrap(),
        Step::Applied { .. }
    ));
    let oracle = expected(&store).await;
    assert!(
        oracle.rows.iter().all(|row| row.column == Column::Todo),
        "every task approved"
    );
    assert_same_rows_and_links(&store, &oracle, "one wide batch after a restart").await;
    stop.cancel();
}

async fn filters_order_timelines_and_link_lookups(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    let mut board = Board::default();
    part_one(&mut board, &log).await;
    part_two(&mut board, &log).await;
    let projection = Projection::new(store.clone(), Arc::new(TasksProjector::default()));
    projection.tick().await.unwrap();

    let ids = |rows: Vec<TaskRow>| rows.iter().map(|r| r.id.number()).collect::<Vec<_>>();
    let list = |filter: TaskFilter| {
        let store = store.clone();
        async move { ids(tasks::list(&store, &filter).await.unwrap()) }
    };
    // Urgent first, then high, normal, low; within a priority the oldest first.
    assert_eq!(
        list(TaskFilter::default()).await,
        vec![2, 5, 6, 4, 8, 1, 7, 3]
    );
    assert_eq!(
        list(TaskFilter {
            column: Some(Column::Todo),
            ..TaskFilter::default()
        })
        .await,
        vec![5, 4, 8, 1]
    );
    assert_eq!(
        list(TaskFilter {
            repo: Some("acme/api".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![2, 6, 4, 8]
    );
    assert_eq!(
        list(TaskFilter {
            source: Some("linear".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![5, 1]
    );
    // `cli` is not a channel: the task came through the API.
    assert_eq!(
        list(TaskFilter {
            source: Some("api".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![6, 4]
    );
    assert_eq!(
        list(TaskFilter {
            needs_human: Some(true),
            ..TaskFilter::default()
        })
        .await,
        vec![4, 7]
    );
    assert_eq!(
        list(TaskFilter {
            needs_human: Some(false),
            column: Some(Column::Todo),
            source: Some("telegram".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![8]
    );
    assert_eq!(
        list(TaskFilter {
            limit: Some(2),
            ..TaskFilter::default()
        })
        .await,
        vec![2, 5]
    );

    let four = tasks::get(&store, id(4)).await.unwrap().unwrap();
    assert_eq!(
        (four.column, four.attempts, four.max_attempts),
        (Column::Todo, 2, 2)
    );
    assert!(four.needs_human);
    assert!(four
        .needs_human_reason
        .as_deref()
        .unwrap()
        .contains("tests still red"));
    assert_eq!(four.state["spec"]["task"], "Task number 4");
    assert!(tasks::get(&store, id(99)).await.unwrap().is_none());

    let timeline = tasks::timeline(&store, id(4)).await.unwrap();
    let types: Vec<&str> = timeline.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        vec![
            "task.created",
            "task.approved",
            "task.started",
            "task.retried",
            "task.started",
            "task.retried",
            "task.flagged_needs_human",
        ]
    );
    assert!(timeline.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(
        timeline
            .iter()
            .map(|e| e.stream_version)
            .collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>()
    );
    assert_eq!(
        timeline[3].summary,
        "attempt 1 failed (run failed): timed out"
    );
    assert!(timeline.iter().all(|e| e.cause_event_id.is_some()));
    assert!(tasks::timeline(&store, id(99)).await.unwrap().is_empty());
    // The timeline is read from the log but stops where the task's row is: an event the projector has not
    // applied yet shows in neither, then in both.
    board
        .run(
            &log,
            id(4),
            Command::Reprioritize {
                priority: Priority::Low,
            },
            40,
        )
        .await;
    assert_eq!(tasks::timeline(&store, id(4)).await.unwrap(), timeline);
    projection.tick().await.unwrap();
    let caught_up = tasks::timeline(&store, id(4)).await.unwrap();
    assert_eq!(caught_up.len(), 8);
    assert_eq!(caught_up[..7], timeline[..]);
    assert_eq!(caught_up[7].summary, "priority low");
    assert_eq!(tasks::get(&store, id(4)).await.unwrap().unwrap().version, 8);

    let lookup = |kind, value: String| {
        let store = store.clone();
        async move { tasks::task_for_link(&store, kind, &value).await.unwrap() }
    };
    assert_eq!(
        lookup(LinkKind::LinearIssue, uuid::Uuid::from_u128(5).to_string()).await,
        Some(id(5))
    );
    assert_eq!(
        lookup(LinkKind::GithubIssue, "acme/web#7".into()).await,
        Some(id(7))
    );
    assert_eq!(
        lookup(LinkKind::GithubIssue, "acme/api#66".into()).await,
        Some(id(6)),
        "a link attached later"
    );
    assert_eq!(
        lookup(LinkKind::GithubPr, "acme/api#20".into()).await,
        Some(id(2)),
        "the pull request of a submission"
    );
    assert_eq!(
        lookup(LinkKind::TelegramMessage, "-100:8".into()).await,
        Some(id(8))
    );
    assert_eq!(lookup(LinkKind::GithubPr, "acme/web#7".into()).await, None);
    stop.cancel();
}

/// Appends tasks 1..=3 (created), then `bad` for task 2, then more good events. Returns the bad event's position.
async fn with_a_bad_event(
    log: &EventLog,
    store: &EventStore,
    event_type: &str,
    bad: Vec<u8>,
) -> i64 {
    let mut board = Board::default();
    for n in 1..=3 {
        board
            .run(
                log,
                id(n),
                new_task(
                    n,
                    Priority::Normal,
                    Links::default(),
                    ApprovalPolicy::Manual,
                ),
                n as i64,
            )
            .await;
    }
    log.append(task_event(id(2), 2, event_type, bad, None))
        .await
        .unwrap();
    let position = store.head().await.unwrap();
    board.run(log, id(1), Command::Approve, 10).await;
    board.run(log, id(3), Command::Approve, 11).await;
    position
}

async fn assert_stops_at(store: &EventStore, bad: i64, needle: &str) {
    let projection =
        Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 1000);
    let error = projection.tick().await.unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!("stuck at position {bad}")),
        "{message}"
    );
    assert!(message.contains(needle), "the cause is named: {message}");
    let (_, position) = pidevops::projectors::read_row(store, tasks::NAME)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        position,
        bad - 1,
        "everything before the bad event is applied"
    );
    let rows = tasks::list(store, &TaskFilter::default()).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows
        .iter()
        .all(|r| r.column == Column::Triage && r.version == 1));
    // And it stays there: a rebuild stops at the same event.
    let rebuilt = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 1000);
    let error = rebuilt.rebuild(|_| {}).await.unwrap_err();
    assert!(
        matches!(error, pidevops::projectors::ProjectionError::Failed { first, last, .. } if first <= bad && bad <= last),
        "{error}"
    );
    // Replay decodes on its read-ahead side; the cause still names the event and what is wrong with it.
    let message = error.to_string();
    assert!(
        message.contains(&format!("event at position {bad}")) && message.contains(needle),
        "{message}"
    );
}

async fn an_undecodable_task_event_stops_the_projector_there(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    // `approved` without its `at`.
    let bad = with_a_bad_event(
        &log,
        &store,
        "task.approved",
        br#"{"type":"approved","automatic":false}"#.to_vec(),
    )
    .await;
    assert_stops_at(&store, bad, "not a task event").await;
    stop.cancel();
}

async fn an_event_evolve_refuses_stops_the_projector_there(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    // Completing a task still in triage: valid JSON, impossible history.
    let completed = TaskEvent::Completed { at: base() };
    let bad = with_a_bad_event(
        &log,
        &store,
        completed.kind(),
        serde_json::to_vec(&completed).unwrap(),
    )
    .await;
    assert_stops_at(&store, bad, "cannot apply task.completed").await;
    stop.cancel();
}

/// Records what bodies the runtime hands over, asking only for task streams.
#[derive(Default)]
struct BodySpy {
    seen: std::sync::Mutex<Vec<(String, Option<String>, usize)>>,
}

impl Projector for BodySpy {
    fn name(&self) -> &'static str {
        "body_spy"
    }
    fn version(&self) -> i64 {
        1
    }
    fn bodies(&self) -> Bodies {
        Bodies::Streams {
            source: tasks::SOURCE,
            stream_prefix: tasks::STREAM_PREFIX,
        }
    }
    fn reset<'a>(&'a self, _tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn apply<'a>(
        &'a self,
        _tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        let mut seen = self.seen.lock().unwrap();
        for e in events {
            seen.push((e.source.clone(), e.stream.clone(), e.body.len()));
        }
        Box::pin(async { Ok(()) })
    }
}

async fn other_events_bodies_are_never_read(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    let mut board = Board::default();
    part_one(&mut board, &log).await;
    // A pidevops event on another stream, and a provider event that names a task stream: neither is ours.
    let mut other = task_event(id(1), 1, "run.started", b"{\"run\":1}".to_vec(), None);
    other.stream = Some(("run:R-1".into(), 1));
    other.dedup_key = "run-1".into();
    log.append(other).await.unwrap();
    let mut spoof = NewEvent::new(
        Source::Linear,
        EventType::new(Source::Linear, &["Issue"]),
        "spoof",
        "application/json",
        Bytes::from_static(b"{\"not\":\"ours\"}"),
    );
    spoof.stream = Some(("task:T-900".into(), 1));
    log.append(spoof).await.unwrap();

    let spy = Arc::new(BodySpy::default());
    let projection = Projection::with_batch(store.clone(), spy.clone(), 10);
    projection.tick().await.unwrap();
    let seen = spy.seen.lock().unwrap().clone();
    assert_eq!(seen.len() as i64, store.head().await.unwrap());
    let mut task_events = 0;
    for (source, stream, body) in &seen {
        let ours =
            source == "pidevops" && stream.as_deref().is_some_and(|s| s.starts_with("task:"));
        if ours {
            task_events += 1;
            assert!(*body > 0, "a task event arrives with its body");
        } else {
            assert_eq!(*body, 0, "{source} {stream:?}: a body read for nothing");
        }
    }
    assert!(task_events >= 8);

    // The tasks projector skips them (no error, no row for T-900).
    let tasks_projection = Projection::new(store.clone(), Arc::new(TasksProjector::default()));
    tasks_projection.tick().await.unwrap();
    assert!(tasks::get(&store, id(900)).await.unwrap().is_none());
    assert_eq!(
        tasks::list(&store, &TaskFilter::default())
            .await
            .unwrap()
            .len(),
        8
    );
    stop.cancel();
}
