//! Pure domain values. No I/O lives here.

pub mod backoff;
pub mod clock;
pub mod effect;
pub mod event;
pub mod limits;
pub mod registry;
pub mod runs;
pub mod usage;

pub use event::{EventType, NewEvent, Source, Subject};

/// The last `max` bytes of `text`, cut on a character boundary: a run's output tail, a CLI's last error. Here, not
/// in runs.rs, so that usage.rs (which runs.rs reads) needs nothing of runs.rs.
pub fn tail_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::tail_chars;

    #[test]
    fn tail_chars_cuts_on_a_boundary() {
        assert_eq!(tail_chars("abc", 10), "abc");
        assert_eq!(tail_chars("aé", 1), "");
        assert_eq!(tail_chars("aéb", 2), "b");
        assert_eq!(tail_chars("aéb", 3), "éb");
    }
}
