//! What a run's log keeps of an agent's output: the first `keep` bytes as they come, and the last `keep` bytes,
//! written after a line that says how many bytes were cut between. An agent prints whatever it likes, as much as
//! it likes; the log on the workspace volume stays under `2 × keep` plus one line. Pure: the runner writes.
//!
//! The log holds whole lines, in the order the runner read them from the agent's two pipes (each stream's lines
//! are assembled on their own, so a partial line of one stream is never cut by a line of the other). A line the
//! agent wrote to stderr begins with [`STDERR_MARK`] (the ASCII record separator, which no agent's text needs); a
//! line of stdout that begins with it has it dropped, so stdout cannot pass for stderr.

use std::collections::VecDeque;

/// The byte that begins each line of stderr in a run's log.
pub const STDERR_MARK: u8 = 0x1e;

/// One whole line of output (its newline included, if it had one) as the log holds it: marked when it came from
/// stderr, a stray mark at the start of a stdout line dropped.
pub fn logged_line(stderr: bool, line: &[u8]) -> Vec<u8> {
    let text = match line.first() {
        Some(&STDERR_MARK) => &line[1..],
        _ => line,
    };
    let mut out = Vec::with_capacity(text.len() + 1);
    if stderr {
        out.push(STDERR_MARK);
    }
    out.extend_from_slice(text);
    out
}

/// Whole lines (each with its newline) as the log holds them, each as [`logged_line`] makes it.
pub fn logged_lines(stderr: bool, lines: &[u8]) -> Vec<u8> {
    if !stderr && !lines.contains(&STDERR_MARK) {
        return lines.to_vec();
    }
    let mut out = Vec::with_capacity(lines.len() + 64);
    for line in lines.split_inclusive(|b| *b == b'\n') {
        out.extend(logged_line(stderr, line));
    }
    out
}

/// A line of the log read back: whether it came from stderr, and its text without the mark.
pub fn read_line(line: &str) -> (bool, &str) {
    match line.strip_prefix(char::from(STDERR_MARK)) {
        Some(text) => (true, text),
        None => (false, line),
    }
}

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
    fn stderr_lines_are_marked_and_stdout_cannot_pass_for_stderr() {
        assert_eq!(logged_line(true, b"err 1\n"), b"\x1eerr 1\n");
        assert_eq!(logged_line(false, b"out 1\n"), b"out 1\n");
        assert_eq!(logged_line(false, b"\x1eforged\n"), b"forged\n");
        assert_eq!(logged_line(true, b"\x1eerr\n"), b"\x1eerr\n");
        assert_eq!(logged_lines(true, b"a\n\x1eb\nc"), b"\x1ea\n\x1eb\n\x1ec");
        assert_eq!(logged_lines(false, b"a\n\x1eb\n"), b"a\nb\n");
        assert_eq!(read_line("\u{1e}err 1"), (true, "err 1"));
        assert_eq!(read_line("out 1"), (false, "out 1"));
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
