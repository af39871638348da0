//! What a run's log keeps of an agent's output: the first `keep` bytes as they come, and the last `keep` bytes,
//! written after a line that says how many bytes were cut between. An agent prints whatever it likes, as much as
//! it likes; the log on the workspace volume stays under `2 × keep` plus one line. Pure: the runner writes.

use std::collections::VecDeque;

/// Splits an output stream into the head written as it comes and a tail held until the end.
#[derive(Debug)]
pub struct HeadAndTail {
    keep: usize,
    /// Bytes still to write straight through.
    head_left: usize,
    /// The last bytes past the head, at most `keep`.
    tail: VecDeque<u8>,
    /// Bytes that fell out of the tail: neither in the head nor in the tail.
    cut: u64,
}

impl HeadAndTail {
    /// `keep` bytes of the start and `keep` of the end are kept.
    pub fn new(keep: usize) -> Self {
        Self {
            keep,
            head_left: keep,
            tail: VecDeque::new(),
            cut: 0,
        }
    }

    /// Takes a chunk: returns the part to write now (the head's), keeping the rest for the end.
    pub fn take<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let now = chunk.len().min(self.head_left);
        self.head_left -= now;
        let (head, rest) = chunk.split_at(now);
        if rest.len() >= self.keep {
            self.cut += (self.tail.len() + rest.len() - self.keep) as u64;
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - self.keep..]);
        } else {
            let over = (self.tail.len() + rest.len()).saturating_sub(self.keep);
            self.cut += over as u64;
            self.tail.drain(..over);
            self.tail.extend(rest);
        }
        head
    }

    /// Bytes cut between the head and the tail so far.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// What to write at the end: the tail, after a marker line when anything was cut.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.tail.len() + 160);
        if self.cut > 0 {
            out.extend(marker(self.cut, self.keep).as_bytes());
        }
        out.extend(self.tail.drain(..));
        out
    }
}

/// The line between the head and the tail of a log that was cut.
pub fn marker(cut: u64, keep: usize) -> String {
    format!(
        "\n=== pidevops: {cut} bytes of output cut here (the log keeps the first and the last {keep} bytes) ===\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole log as written: the head parts in order, then `finish`.
    fn log_of(keep: usize, chunks: &[&[u8]]) -> (Vec<u8>, u64) {
        let mut kept = HeadAndTail::new(keep);
        let mut log = Vec::new();
        for chunk in chunks {
            log.extend_from_slice(kept.take(chunk));
        }
        let cut = kept.cut();
        log.extend(kept.finish());
        (log, cut)
    }

    #[test]
    fn output_within_twice_the_keep_is_kept_whole_and_unmarked() {
        let (log, cut) = log_of(4, &[b"abc", b"defg", b"h"]);
        assert_eq!(log, b"abcdefgh");
        assert_eq!(cut, 0);
        let (log, _) = log_of(4, &[b""]);
        assert!(log.is_empty());
    }

    #[test]
    fn longer_output_keeps_its_head_and_tail_and_names_the_bytes_cut() {
        let (log, cut) = log_of(4, &[b"0123", b"45", b"6789ab", b"cd"]);
        assert_eq!(cut, 6);
        let mut expected = b"0123".to_vec();
        expected.extend(marker(6, 4).as_bytes());
        expected.extend(b"abcd");
        assert_eq!(log, expected);
    }

    #[test]
    fn a_chunk_larger_than_everything_kept_is_cut_in_the_middle() {
        let big: Vec<u8> = (0..100u8).collect();
        let (log, cut) = log_of(10, &[&big, b"xy"]);
        assert_eq!(cut, 100 + 2 - 20);
        assert_eq!(&log[..10], &big[..10]);
        assert!(log.ends_with(&[92, 93, 94, 95, 96, 97, 98, 99, b'x', b'y']));
        assert_eq!(log.len(), 20 + marker(82, 10).len());
    }

    #[test]
    fn the_log_is_bounded_whatever_is_printed() {
        let chunk = vec![b'z'; 16 * 1024];
        let mut kept = HeadAndTail::new(64 * 1024);
        let mut written = 0;
        for _ in 0..1000 {
            written += kept.take(&chunk).len();
        }
        written += kept.finish().len();
        assert!(written <= 2 * 64 * 1024 + 200, "{written}");
    }
}
