use chrono::TimeZone;

use super::*;

fn parse(text: &str) -> Result<Vec<Schedule>, String> {
    text.parse::<crate::config::FileConfig>()
        .map(|file| file.schedules)
        .map_err(|e| e.to_string())
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

const WEEKLY: &str = r#"
[[schedules]]
name = "weekly-deps"
cron = "0 9 * * MON"
timezone = "Europe/Berlin"
[schedules.task]
repo = "acme/api"
task = "Update the dependencies"
done_when = "cargo test passes"
priority = "low"
"#;

#[test]
fn a_schedule_fires_its_latest_slot_once_after_any_downtime() {
    let schedules = parse(WEEKLY).unwrap();
    let weekly = &schedules[0];
    assert_eq!(weekly.timezone, chrono_tz::Europe::Berlin);
    assert!(matches!(
        weekly.action,
        ScheduleAction::Task {
            priority: Some(Priority::Low),
            ..
        }
    ));
    // Monday 2026-11-30, 09:00 in Berlin is 08:00 UTC.
    let slot = utc(2026, 11, 30, 8, 0, 0);
    let armed = utc(2026, 11, 1, 0, 0, 0);
    assert_eq!(
        weekly.due(armed, utc(2026, 11, 30, 7, 59, 59)),
        Some(utc(2026, 11, 23, 8, 0, 0))
    );
    assert_eq!(
        weekly.due(utc(2026, 11, 23, 8, 0, 0), utc(2026, 11, 30, 7, 59, 59)),
        None,
        "fired already"
    );
    assert_eq!(
        weekly.due(utc(2026, 11, 23, 8, 0, 0), slot),
        Some(slot),
        "on time, to the second"
    );
    // Down from before the 16th until the 30th: one firing, for the latest slot, not three.
    assert_eq!(
        weekly.due(utc(2026, 11, 9, 8, 0, 0), utc(2026, 11, 30, 12, 0, 0)),
        Some(slot)
    );
    assert_eq!(weekly.due(slot, utc(2026, 11, 30, 12, 0, 0)), None);
    // Armed after the last slot: nothing to make up.
    assert_eq!(
        weekly.due(utc(2026, 11, 30, 9, 0, 0), utc(2026, 11, 30, 12, 0, 0)),
        None
    );
    assert_eq!(weekly.next_after(slot), Some(utc(2026, 12, 7, 8, 0, 0)));
    // Summer time: 09:00 in Berlin is 07:00 UTC.
    assert_eq!(
        weekly.next_after(utc(2026, 6, 1, 0, 0, 0)),
        Some(utc(2026, 6, 1, 7, 0, 0))
    );
}

#[test]
fn six_fields_have_seconds_first() {
    let text = r#"
[[schedules]]
name = "every-ten-seconds"
cron = "*/10 * * * * *"
[schedules.task]
repo = "acme/api"
task = "Tick"
"#;
    let every = &parse(text).unwrap()[0];
    assert_eq!(every.timezone, chrono_tz::UTC);
    assert_eq!(
        every.due(utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 25)),
        Some(utc(2026, 1, 1, 0, 0, 20))
    );
    assert_eq!(
        every.next_after(utc(2026, 1, 1, 0, 0, 25)),
        Some(utc(2026, 1, 1, 0, 0, 30))
    );
}

#[test]
fn bad_schedules_are_refused_with_the_schedule_and_key_named() {
    let base = |extra: &str, task: &str| {
        format!("[[schedules]]\nname = \"s\"\ncron = \"0 9 * * *\"\n{extra}\n[schedules.task]\n{task}\n")
    };
    for (text, needle) in [
        (
            "schedules = 3".to_owned(),
            "[schedules]: expected a list, found the whole number 3",
        ),
        (
            "[[schedules]]\ncron = \"* * * * *\"".to_owned(),
            "schedules[0].name is missing",
        ),
        (
            base("", "repo = \"acme/api\"\ntask = \"x\"")
                .replace("name = \"s\"", "name = \"Nightly Build\""),
            "schedule \"Nightly Build\": a name is 1 to 64 of a-z",
        ),
        (
            base("", "repo = \"acme/api\"\ntask = \"x\"").replace("0 9 * * *", "61 * * * *"),
            "schedule \"s\": cron \"61 * * * *\" is not a 5- or 6-field pattern",
        ),
        (
            base(
                "timezone = \"Mars/Olympus\"",
                "repo = \"acme/api\"\ntask = \"x\"",
            ),
            "timezone \"Mars/Olympus\" is not an IANA time zone name",
        ),
        (
            base("", "repo = \"nope\"\ntask = \"x\""),
            "schedule \"s\": task.repo",
        ),
        (
            base("", "repo = \"acme/api\"\ntask = \"\""),
            "schedule \"s\": ",
        ),
        (
            base("", "repo = \"acme/api\"\ntask = \"x\"\nagent = \"y\""),
            "[schedules[0].task] agent: unknown key (known: repo, task, scope, done_when, priority)",
        ),
        (
            base("every = 5", "repo = \"acme/api\"\ntask = \"x\""),
            "[schedules[0]] every: unknown key (known: name, cron, timezone, digest, task)",
        ),
        (
            base("digest = true", "repo = \"acme/api\"\ntask = \"x\""),
            "either sends a digest (digest = true) or creates a task",
        ),
        (
            "[digest]\nenabled = true\ntime = \"25:00\"".to_owned(),
            "digest.time \"25:00\" is not a time of day",
        ),
        (
            "[digest]\nenabled = true\nat = \"09:00\"".to_owned(),
            "[digest] at: unknown key (known: enabled, time, timezone)",
        ),
        (
            "[digest]\nenabled = true\n[[schedules]]\nname = \"daily-digest\"\ncron = \"* * * * *\"\ndigest = true".to_owned(),
            "is the built-in daily digest's name",
        ),
        (
            "[[schedules]]\nname = \"s\"\ncron = \"* * * * *\"".to_owned(),
            "[schedules.task] is missing",
        ),
        (
            format!(
                "{}{}",
                base("", "repo = \"acme/api\"\ntask = \"x\""),
                base("", "repo = \"acme/api\"\ntask = \"x\"")
            ),
            "schedule \"s\" is defined twice",
        ),
    ] {
        let message = parse(&text).expect_err(&text);
        assert!(message.contains(needle), "{text}\n=> {message}");
    }
    assert!(crate::config::FileConfig::default().schedules.is_empty());
}

#[test]
fn the_daily_digest_is_off_by_default_and_a_schedule_may_send_one() {
    assert!(parse("[digest]\ntime = \"08:30\"").unwrap().is_empty());
    let on =
        parse("[digest]\nenabled = true\ntime = \"08:30\"\ntimezone = \"Europe/Berlin\"").unwrap();
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].name, DAILY_DIGEST);
    assert_eq!(on[0].action, ScheduleAction::Digest);
    // 08:30 in Berlin on 2026-11-30 is 07:30 UTC.
    assert_eq!(
        on[0].next_after(utc(2026, 11, 30, 0, 0, 0)),
        Some(utc(2026, 11, 30, 7, 30, 0))
    );
    let weekly =
        parse("[[schedules]]\nname = \"friday\"\ncron = \"0 16 * * FRI\"\ndigest = true").unwrap();
    assert_eq!(weekly[0].action, ScheduleAction::Digest);
}
