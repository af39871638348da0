use super::*;

#[test]
fn backoff_doubles_and_is_capped() {
    assert_eq!(backoff(1), Duration::from_secs(1));
    assert_eq!(backoff(2), Duration::from_secs(2));
    assert_eq!(backoff(5), Duration::from_secs(16));
    assert_eq!(backoff(20), MAX_BACKOFF);
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
}
