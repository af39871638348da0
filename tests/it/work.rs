//! The work-queue conformance suite: the same test bodies against NATS JetStream and the in-process queue, with
//! dead letters checked in a real event log (SQLite for every test; Postgres too for the dead-letter tests).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::common::TestDb;
use pidevops::bus::work::{
    Failed, JetstreamWork, MemoryWork, WorkBackend, WorkError, WorkQueue, WorkQueueConfig,
    DEAD_LETTERED,
};
use pidevops::domain::Source;
use pidevops::eventlog::{EventLog, EventStore, StoredEvent};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Job {
    task: String,
    n: u32,
}

fn job(n: u32) -> Job {
    Job {
        task: format!("T-{n}"),
        n,
    }
}

const ACK_WAIT: Duration = Duration::from_secs(1);

/// Names of the test's own and a short ack wait, so tests are fast and never share state.
fn config() -> WorkQueueConfig {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    WorkQueueConfig {
        stream: format!("PIDEVOPS_WORK_TEST_{tag}"),
        subject_prefix: format!("pidevops_test_{tag}.work"),
        consumer: "workers".to_owned(),
        ack_wait: ACK_WAIT,
        max_deliver: 3,
        backoff: vec![Duration::from_millis(100)],
        max_messages: 100,
        duplicate_window: Duration::from_secs(120),
    }
}

/// One test's world: an event log on its own database, and either NATS or the in-process queue.
struct Env {
    nats: Option<String>,
    log: EventLog,
    store: EventStore,
    stop: CancellationToken,
    memory: Mutex<HashMap<String, MemoryWork>>,
    streams: Mutex<Vec<JetstreamWork>>,
    _db: TestDb,
}

impl Env {
    async fn new(nats: bool, db: TestDb) -> Option<Self> {
        let nats = if nats {
            let url = crate::common::nats_url();
            if let Err(e) = crate::common::nats_client().await {
                if crate::common::in_ci() {
                    panic!(
                        "CI is set and NATS is unreachable at {url}: {e}. Start it (see .ci/run)."
                    );
                }
                eprintln!(
                    "\n*** SKIPPED a NATS-backed test: {e} at {url}. Set PIDEVOPS_TEST_NATS_URL.\n"
                );
                return None;
            }
            Some(url)
        } else {
            None
        };
        let store = EventStore::connect(&db.url, 4).await.expect("connect");
        store.migrate().await.expect("migrate");
        let stop = CancellationToken::new();
        let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
        Some(Self {
            nats,
            log,
            store,
            stop,
            memory: Mutex::new(HashMap::new()),
            streams: Mutex::new(Vec::new()),
            _db: db,
        })
    }

    /// A consumer instance: on NATS a new connection (another worker process would do the same); in process a
    /// clone sharing the queue, the only way two in-process workers can meet.
    async fn open(&self, config: &WorkQueueConfig) -> WorkQueue {
        let backend = match &self.nats {
            Some(url) => {
                let b = JetstreamWork::connect(url, config.clone())
                    .await
                    .expect("JetStream work queue");
                self.streams.lock().unwrap().push(b.clone());
                WorkBackend::Jetstream(b)
            }
            None => {
                let mut memory = self.memory.lock().unwrap();
                let b = memory
                    .entry(config.stream.clone())
                    .or_insert_with(|| MemoryWork::new(config.clone()).expect("memory queue"));
                WorkBackend::Memory(b.clone())
            }
        };
        WorkQueue::new(backend, self.log.clone())
    }

    async fn dead_letters(&self) -> Vec<StoredEvent> {
        self.store
            .read_after(0, 1000)
            .await
            .expect("read the log")
            .into_iter()
            .filter(|e| e.event_type == DEAD_LETTERED)
            .collect()
    }

    async fn finish(self) {
        let streams = std::mem::take(&mut *self.streams.lock().unwrap());
        if let Some(first) = streams.first() {
            first.delete_stream().await.expect("delete the test stream");
        }
        self.stop.cancel();
    }
}

fn body(event: &StoredEvent) -> serde_json::Value {
    serde_json::from_slice(&event.body).expect("a dead letter is JSON")
}

/// Pulls until a delivery arrives or `wait` passes.
async fn pull_one(q: &WorkQueue, wait: Duration) -> Option<pidevops::bus::work::Delivery<Job>> {
    let mut got = q.pull::<Job>(1, wait).await.expect("pull");
    assert!(got.len() <= 1, "asked for one, got {}", got.len());
    got.pop()
}

async fn must_pull(q: &WorkQueue) -> pidevops::bus::work::Delivery<Job> {
    pull_one(q, Duration::from_secs(10))
        .await
        .expect("a delivery within 10 s")
}

/// Runs each listed body against NATS and the in-process queue, with the log on `$db` (sqlite | postgres).
macro_rules! per_queue {
    ($db:ident: $($name:ident),* $(,)?) => {
        mod $db {
            async fn db() -> Option<$crate::common::TestDb> {
                match stringify!($db) {
                    "postgres" => $crate::common::TestDb::postgres().await,
                    _ => Some($crate::common::TestDb::sqlite()),
                }
            }
            mod nats {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let Some(db) = super::db().await else { return };
                        let Some(env) = super::super::Env::new(true, db).await else { return };
                        super::super::$name(&env).await;
                        env.finish().await;
                    }
                )*
            }
            mod memory {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let Some(db) = super::db().await else { return };
                        let Some(env) = super::super::Env::new(false, db).await else { return };
                        super::super::$name(&env).await;
                        env.finish().await;
                    }
                )*
            }
        }
    };
}

per_queue!(sqlite:
    an_acked_message_is_delivered_once,
    a_duplicate_key_is_delivered_once,
    an_unacked_message_comes_back_after_ack_wait_as_attempt_2,
    progress_keeps_a_message_from_being_redelivered,
    nak_redelivers_no_sooner_than_the_delay,
    work_is_split_between_consumers_not_copied,
    a_full_queue_refuses_new_work_with_a_clear_error,
    kinds_and_keys_are_validated,
    dead_lettered_after_max_deliveries_exactly_once,
    fail_on_the_last_attempt_dead_letters_with_the_error,
    a_malformed_payload_is_dead_lettered_not_a_panic,
);

per_queue!(postgres:
    dead_lettered_after_max_deliveries_exactly_once,
    fail_on_the_last_attempt_dead_letters_with_the_error,
    a_malformed_payload_is_dead_lettered_not_a_panic,
);

async fn an_acked_message_is_delivered_once(env: &Env) {
    let config = config();
    let q = env.open(&config).await;
    let published = q.publish("run", "job-1", &job(1)).await.unwrap();
    assert!(!published.duplicate);
    let d = must_pull(&q).await;
    assert_eq!(d.payload(), &job(1));
    assert_eq!((d.attempt(), d.key(), d.kind()), (1, "job-1", "run"));
    assert_eq!(d.sequence(), published.sequence);
    d.ack().await.unwrap();
    // ack() returns once the server applied it: the message is gone at once.
    assert_eq!(q.held().await.unwrap(), 0);
    // Well past ack_wait: an acked message never comes back.
    assert!(pull_one(&q, ACK_WAIT * 2).await.is_none());
    assert!(env.dead_letters().await.is_empty());
}

async fn a_duplicate_key_is_delivered_once(env: &Env) {
    let config = config();
    let q = env.open(&config).await;
    let first = q.publish("run", "same-key", &job(1)).await.unwrap();
    let again = q.publish("run", "same-key", &job(2)).await.unwrap();
    assert!(again.duplicate, "the same key twice is stored once");
    assert_eq!(first.sequence, again.sequence);
    let mut got = q.pull::<Job>(10, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.len(), 1);
    let d = got.remove(0);
    assert_eq!(d.payload(), &job(1), "the first publish wins");
    d.ack().await.unwrap();
    // Still a duplicate after the first was done: the key is remembered for the duplicate window.
    assert!(
        q.publish("run", "same-key", &job(3))
            .await
            .unwrap()
            .duplicate
    );
    assert!(q
        .pull::<Job>(10, Duration::from_millis(500))
        .await
        .unwrap()
        .is_empty());
}

async fn an_unacked_message_comes_back_after_ack_wait_as_attempt_2(env: &Env) {
    let config = config();
    let q = env.open(&config).await;
    q.publish("run", "k", &job(7)).await.unwrap();
    let first = must_pull(&q).await;
    let delivered_at = Instant::now();
    let sequence = first.sequence();
    // The worker dies: no ack, no progress.
    drop(first);
    let second = must_pull(&q).await;
    let gap = delivered_at.elapsed();
    assert!(
        gap >= ACK_WAIT - Duration::from_millis(100),
        "redelivered after {gap:?}, before ack_wait"
    );
    assert_eq!(second.attempt(), 2);
    assert_eq!(second.sequence(), sequence);
    assert_eq!(second.payload(), &job(7));
    second.ack().await.unwrap();
}

async fn progress_keeps_a_message_from_being_redelivered(env: &Env) {
    let _cores = crate::common::timed().await;
    let config = config();
    let a = env.open(&config).await;
    let b = env.open(&config).await;
    a.publish("run", "long", &job(1)).await.unwrap();
    let held = must_pull(&a).await;
    // Three ack_waits of heartbeats; meanwhile another worker must get nothing.
    let until = Instant::now() + ACK_WAIT * 3;
    while Instant::now() < until {
        held.progress().await.unwrap();
        assert!(
            pull_one(&b, ACK_WAIT / 3).await.is_none(),
            "redelivered while its holder sent progress"
        );
    }
    assert_eq!(held.attempt(), 1);
    held.ack().await.unwrap();
    assert!(pull_one(&b, ACK_WAIT + ACK_WAIT / 2).await.is_none());
}

async fn nak_redelivers_no_sooner_than_the_delay(env: &Env) {
    let config = WorkQueueConfig {
        backoff: vec![Duration::from_millis(700)],
        ..config()
    };
    let q = env.open(&config).await;
    q.publish("run", "k", &job(1)).await.unwrap();
    let d = must_pull(&q).await;
    let delay = Duration::from_millis(1500);
    let naked_at = Instant::now();
    d.nak(Some(delay)).await.unwrap();
    let d = must_pull(&q).await;
    assert!(
        naked_at.elapsed() >= delay,
        "back after {:?}",
        naked_at.elapsed()
    );
    assert_eq!(d.attempt(), 2);
    // Without a delay the backoff schedule decides.
    let naked_at = Instant::now();
    d.nak(None).await.unwrap();
    let d = must_pull(&q).await;
    assert!(
        naked_at.elapsed() >= Duration::from_millis(700),
        "back after {:?}",
        naked_at.elapsed()
    );
    assert_eq!(d.attempt(), 3);
    d.ack().await.unwrap();
}

async fn work_is_split_between_consumers_not_copied(env: &Env) {
    let config = config();
    let a = env.open(&config).await;
    let b = env.open(&config).await;
    a.publish("run", "held", &job(0)).await.unwrap();
    let held = must_pull(&a).await;
    assert!(
        pull_one(&b, ACK_WAIT / 2).await.is_none(),
        "another worker got a message that one holds"
    );
    held.ack().await.unwrap();

    for n in 1..=20 {
        a.publish("run", &format!("job-{n}"), &job(n))
            .await
            .unwrap();
    }
    let worker = |q: WorkQueue| {
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let got = q.pull::<Job>(3, Duration::from_millis(700)).await.unwrap();
                if got.is_empty() {
                    return seen;
                }
                for d in got {
                    seen.push((d.payload().n, d.attempt()));
                    d.ack().await.unwrap();
                }
            }
        })
    };
    let (from_a, from_b) = tokio::join!(worker(a.clone()), worker(b.clone()));
    let all: Vec<(u32, u32)> = from_a.unwrap().into_iter().chain(from_b.unwrap()).collect();
    let distinct: HashSet<u32> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(all.len(), 20, "each message delivered once in all: {all:?}");
    assert_eq!(distinct, (1..=20).collect::<HashSet<_>>());
    assert!(all.iter().all(|(_, attempt)| *attempt == 1), "{all:?}");
}

async fn a_full_queue_refuses_new_work_with_a_clear_error(env: &Env) {
    let config = WorkQueueConfig {
        max_messages: 3,
        ..config()
    };
    let q = env.open(&config).await;
    for n in 1..=3 {
        q.publish("run", &format!("k{n}"), &job(n)).await.unwrap();
    }
    let err = q.publish("run", "k4", &job(4)).await.unwrap_err();
    assert!(matches!(err, WorkError::Full { max: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("is full (3 messages)"), "{err}");
    // A duplicate of held work is still answered as a duplicate, not refused.
    assert!(q.publish("run", "k1", &job(1)).await.unwrap().duplicate);
    // Done work makes room.
    must_pull(&q).await.ack().await.unwrap();
    let k4 = q.publish("run", "k4", &job(4)).await.unwrap();
    assert!(
        !k4.duplicate,
        "a refused publish leaves no trace of its key"
    );
    assert_eq!(q.held().await.unwrap(), 3);
}

async fn kinds_and_keys_are_validated(env: &Env) {
    let q = env.open(&config()).await;
    for kind in ["", "a.b", "*", ">"] {
        let err = q.publish(kind, "k", &job(1)).await.unwrap_err();
        assert!(
            matches!(err, WorkError::InvalidKind(_)),
            "{kind:?}: {err:?}"
        );
    }
    for key in ["", "line\nbreak", &"k".repeat(257)] {
        let err = q.publish("run", key, &job(1)).await.unwrap_err();
        assert!(matches!(err, WorkError::InvalidKey(_)), "{key:?}: {err:?}");
    }
    assert!(
        pull_one(&q, Duration::from_millis(200)).await.is_none(),
        "nothing was stored"
    );
}

async fn dead_lettered_after_max_deliveries_exactly_once(env: &Env) {
    let config = config(); // max_deliver 3
    let q = env.open(&config).await;
    let published = q.publish("run", "doomed", &job(9)).await.unwrap();
    // Attempt 1 fails fast, attempt 2's worker dies (ack_wait runs out), attempt 3's worker stalls past ack_wait.
    let d = must_pull(&q).await;
    assert_eq!(d.attempt(), 1);
    d.nak(Some(Duration::ZERO)).await.unwrap();
    let d = must_pull(&q).await;
    assert_eq!(d.attempt(), 2);
    drop(d);
    let stalled = must_pull(&q).await;
    assert_eq!(stalled.attempt(), 3);
    assert!(stalled.is_last_attempt());

    // The fourth delivery is never handed out: it is recorded and terminated.
    assert!(pull_one(&q, ACK_WAIT * 2).await.is_none());
    // The stalled worker reports its failure late: the same dead letter, not a second one.
    let Failed::DeadLettered(late) = stalled.fail("too late").await.unwrap() else {
        panic!("a failure on the last attempt is a dead letter");
    };
    assert!(late.duplicate, "recorded twice: {late:?}");
    let dead = env.dead_letters().await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let event = &dead[0];
    assert_eq!(event.source, "pidevops");
    assert_eq!(event.action.as_deref(), Some("max_deliveries"));
    assert_eq!(event.reference.as_deref(), Some("doomed"));
    let b = body(event);
    assert_eq!(b["stream"], config.stream.as_str());
    assert_eq!(b["sequence"], published.sequence);
    assert_eq!(b["subject"], format!("{}.run", config.subject_prefix));
    assert_eq!(b["key"], "doomed");
    assert_eq!(b["attempts"], 3);
    assert_eq!(b["reason"], "max_deliveries");
    assert_eq!(b["last_error"], serde_json::Value::Null);
    assert_eq!(b["payload"], serde_json::json!({"task": "T-9", "n": 9}));
    assert_eq!(event.position, late.position);
    assert_eq!(
        env.store
            .count_by_key(Source::Pidevops, &event.dedup_key)
            .await
            .unwrap(),
        1
    );
    // Never delivered again, to this worker or another.
    let other = env.open(&config).await;
    assert!(pull_one(&other, ACK_WAIT * 2).await.is_none());
    assert!(pull_one(&q, Duration::from_millis(100)).await.is_none());
    assert_eq!(env.dead_letters().await.len(), 1);
    assert_eq!(
        q.held().await.unwrap(),
        0,
        "terminated, not left in the stream"
    );
}

async fn fail_on_the_last_attempt_dead_letters_with_the_error(env: &Env) {
    let config = WorkQueueConfig {
        max_deliver: 2,
        backoff: vec![Duration::from_millis(300)],
        ..config()
    };
    let q = env.open(&config).await;
    q.publish("run", "flaky", &job(3)).await.unwrap();
    let d = must_pull(&q).await;
    assert_eq!(
        d.fail("tests failed: 1 of 40").await.unwrap(),
        Failed::Retrying {
            after: Duration::from_millis(300)
        }
    );
    let d = must_pull(&q).await;
    assert_eq!(d.attempt(), 2);
    let Failed::DeadLettered(appended) = d.fail("tests failed: 2 of 40").await.unwrap() else {
        panic!("the last attempt's failure is a dead letter");
    };
    assert!(!appended.duplicate);
    let dead = env.dead_letters().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].position, appended.position);
    let b = body(&dead[0]);
    assert_eq!(b["reason"], "failed");
    assert_eq!(b["attempts"], 2);
    assert_eq!(b["last_error"], "tests failed: 2 of 40");
    assert!(pull_one(&q, ACK_WAIT * 2).await.is_none());
    assert_eq!(env.dead_letters().await.len(), 1);
    assert_eq!(
        q.held().await.unwrap(),
        0,
        "terminated, not left in the stream"
    );
}

async fn a_malformed_payload_is_dead_lettered_not_a_panic(env: &Env) {
    let config = config();
    let q = env.open(&config).await;
    q.publish("run", "bad", &serde_json::json!({"task": 42}))
        .await
        .unwrap();
    q.publish("run", "good", &job(2)).await.unwrap();
    // The consumer goes on past the bad message to the good one.
    let d = must_pull(&q).await;
    assert_eq!((d.key(), d.attempt()), ("good", 1));
    d.ack().await.unwrap();
    let dead = env.dead_letters().await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let b = body(&dead[0]);
    assert_eq!(b["reason"], "malformed");
    assert_eq!(b["key"], "bad");
    assert_eq!(b["attempts"], 1);
    assert_eq!(b["payload"], serde_json::json!({"task": 42}));
    let error = b["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("payload is not a valid it::work::Job: invalid type: integer `42`"),
        "{error}"
    );
    assert!(
        pull_one(&q, ACK_WAIT * 2).await.is_none(),
        "never delivered again"
    );
    assert_eq!(env.dead_letters().await.len(), 1);
    assert_eq!(
        q.held().await.unwrap(),
        0,
        "terminated, not left in the stream"
    );
}

#[tokio::test]
async fn the_work_stream_and_consumer_have_their_explicit_settings() {
    let url = crate::common::nats_url();
    let config = config();
    let first = match JetstreamWork::connect(&url, config.clone()).await {
        Ok(b) => b,
        Err(e) if crate::common::in_ci() => panic!("CI is set and NATS is unreachable: {e}"),
        Err(e) => {
            eprintln!("\n*** SKIPPED a NATS-backed test: {e}\n");
            return;
        }
    };
    // A second start-up (another worker, a restart) updates both to the same settings.
    let _again = JetstreamWork::connect(&url, config.clone())
        .await
        .expect("idempotent set-up");
    let js = async_nats::jetstream::new(crate::common::nats_client().await.unwrap());
    let mut stream = js.get_stream(&config.stream).await.unwrap();
    let info = stream.info().await.unwrap().config.clone();
    use async_nats::jetstream::{consumer, stream as s};
    assert_eq!(info.retention, s::RetentionPolicy::WorkQueue);
    assert_eq!(info.storage, s::StorageType::File);
    assert_eq!(info.discard, s::DiscardPolicy::New);
    assert_eq!(info.max_messages, 100);
    assert_eq!(info.duplicate_window, config.duplicate_window);
    let c = stream
        .consumer_info(&config.consumer)
        .await
        .unwrap()
        .config
        .clone();
    assert_eq!(c.ack_policy, consumer::AckPolicy::Explicit);
    assert_eq!(c.ack_wait, ACK_WAIT);
    assert_eq!(
        c.max_deliver, -1,
        "the consumer, not the server, bounds deliveries"
    );
    assert!(c.backoff.is_empty());
    first.delete_stream().await.unwrap();
}

/// Two deployments on one NATS, each with its own events stream (`PIDEVOPS_NATS_STREAM`, subject prefix): a run
/// request one queues is never delivered to the other's workers. Before, the run queue's names were fixed, so a
/// staging worker took (and, not knowing the task, terminated) production's runs.
#[tokio::test]
async fn deployments_sharing_one_nats_never_take_each_others_run_requests() {
    let Some(env) = Env::new(true, TestDb::sqlite()).await else {
        return;
    };
    let production = crate::common::bus_config();
    let staging = crate::common::bus_config();
    let (prod_config, staging_config) = (
        pidevops::startup::run_queue_config(&production),
        pidevops::startup::run_queue_config(&staging),
    );
    assert_ne!(prod_config.stream, staging_config.stream);
    assert_ne!(prod_config.subject_prefix, staging_config.subject_prefix);
    let prod = env.open(&prod_config).await;
    let stage = env.open(&staging_config).await;
    prod.publish("run", "T-1/1", &job(1)).await.unwrap();
    assert!(
        pull_one(&stage, Duration::from_millis(500)).await.is_none(),
        "staging's worker got production's run request"
    );
    let delivery = must_pull(&prod).await;
    assert_eq!(delivery.payload(), &job(1));
    delivery.ack().await.unwrap();
    env.finish().await;
}
