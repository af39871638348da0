use super::*;

#[test]
fn backoff_repeats_its_last_step_and_defaults_to_none() {
    let mut c = WorkQueueConfig {
        backoff: vec![Duration::from_secs(1), Duration::from_secs(5)],
        ..WorkQueueConfig::default()
    };
    assert_eq!(c.backoff_for(1), Duration::from_secs(1));
    assert_eq!(c.backoff_for(2), Duration::from_secs(5));
    assert_eq!(c.backoff_for(9), Duration::from_secs(5));
    c.backoff.clear();
    assert_eq!(c.backoff_for(3), Duration::ZERO);
}

#[test]
fn kinds_are_single_subject_tokens() {
    let c = WorkQueueConfig::default();
    assert_eq!(c.subject("run").unwrap(), "pidevops.work.run");
    for bad in ["", "a.b", "*", ">", "a b", &"x".repeat(65)] {
        assert!(c.subject(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn configs_are_validated() {
    let ok = WorkQueueConfig::default();
    assert!(ok.validate().is_ok());
    for bad in [
        WorkQueueConfig {
            max_deliver: 0,
            ..ok.clone()
        },
        WorkQueueConfig {
            ack_wait: Duration::ZERO,
            ..ok.clone()
        },
        WorkQueueConfig {
            stream: "A.B".into(),
            ..ok.clone()
        },
        WorkQueueConfig {
            subject_prefix: "a.>".into(),
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}
