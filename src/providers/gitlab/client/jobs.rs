//! A CI job's log (`GET /projects/:id/jobs/:job_id/trace`, plain text): only its end is kept, read as it streams
//! so a log of any size costs at most [`KEEP_BYTES`] of memory, its terminal escapes and progress redraws taken
//! out, at most [`TAIL_LINES`] lines and [`TAIL_BYTES`] bytes handed back.

use secrecy::ExposeSecret;

use super::GitlabClient;
use crate::effects::CallError;
use crate::tasks::RepoName;

/// The log's last lines handed back: where a failing job says what failed.
pub const TAIL_LINES: usize = 30;
/// And at most this many bytes of them (a line of a minified bundle is long).
pub const TAIL_BYTES: usize = 4096;
/// What is kept of the stream while it is read: enough for [`TAIL_LINES`] lines after escapes are taken out.
const KEEP_BYTES: usize = 32 * 1024;

impl GitlabClient {
    /// The end of job `job`'s log in `project`: its last [`TAIL_LINES`] lines, at most [`TAIL_BYTES`], clean.
    pub async fn job_log_tail(&self, project: &RepoName, job: u64) -> Result<String, CallError> {
        let url = format!(
            "{}/api/v4/projects/{}/jobs/{job}/trace",
            self.url,
            project.as_str().replace('/', "%2F")
        );
        let failed = |what: &str, e: reqwest::Error| CallError::Transient {
            message: format!("{what}: {}", e.without_url()),
            retry_after: None,
        };
        let mut response = self
            .http
            .get(&url)
            .header("PRIVATE-TOKEN", self.token.expose_secret())
            .send()
            .await
            .map_err(|e| failed("no answer from GitLab", e))?;
        let status = response.status();
        if !status.is_success() {
            let message = format!("GitLab answered {status}");
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                CallError::Transient {
                    message,
                    retry_after: None,
                }
            } else {
                CallError::Permanent { message }
            });
        }
        let mut kept: Vec<u8> = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed("the log stopped", e))?
        {
            kept.extend_from_slice(&chunk);
            if kept.len() > 2 * KEEP_BYTES {
                kept.drain(..kept.len() - KEEP_BYTES);
            }
        }
        let start = kept.len().saturating_sub(KEEP_BYTES);
        Ok(tail(&String::from_utf8_lossy(&kept[start..])))
    }
}

/// The last [`TAIL_LINES`] non-empty lines of a log, at most [`TAIL_BYTES`], each with its terminal escapes
/// taken out and only what its last carriage return left on screen.
pub fn tail(log: &str) -> String {
    let clean = strip_escapes(log);
    let lines: Vec<&str> = clean
        .lines()
        .map(|line| {
            // A progress bar redraws itself after `\r`: what is shown is the last part written. GitLab's
            // collapsible sections are marked by `section_start:…` / `section_end:…` before one: not shown.
            line.split('\r')
                .rev()
                .find(|part| !part.trim().is_empty() && !part.starts_with("section_"))
                .unwrap_or("")
                .trim_end()
        })
        .filter(|line| !line.is_empty())
        .collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for line in lines.iter().rev().take(TAIL_LINES) {
        if bytes + line.len() + 1 > TAIL_BYTES {
            let room = TAIL_BYTES.saturating_sub(bytes + 1);
            if room > 0 {
                let mut from = line.len() - room.min(line.len());
                while !line.is_char_boundary(from) {
                    from += 1;
                }
                kept.push(&line[from..]);
            }
            break;
        }
        bytes += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

/// `text` without terminal escape sequences (colours, GitLab's `section_start` markers' `ESC[0K`, titles) or
/// other control characters but tabs, line feeds and carriage returns.
pub fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates up to a final byte in `@`..=`~`.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ST (`ESC \`).
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                // Any other escape is two characters.
                _ => {}
            },
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_gitlab_s_section_markers_are_taken_out() {
        let log = "section_start:1733400000:step_script\r\u{1b}[0K\u{1b}[0;m\u{1b}[36;1mExecuting \"step_script\"\u{1b}[0;m\n\
                   \u{1b}[31;1mtest items::empty_page ... FAILED\u{1b}[0m\n\
                   \u{1b}]0;title\u{7}Downloading 10%\rDownloading 100%\r\n\
                   section_end:1733400001:step_script\r\u{1b}[0K\n\
                   \u{1b}[31;1mERROR: Job failed: exit code 101\u{1b}[0;m\n";
        assert_eq!(
            tail(log),
            "Executing \"step_script\"\ntest items::empty_page ... FAILED\nDownloading 100%\n\
             ERROR: Job failed: exit code 101"
        );
        assert!(!tail(log).contains('\u{1b}'));
    }

    #[test]
    fn only_the_last_lines_and_bytes_are_kept() {
        let log: String = (1..=100).map(|n| format!("line {n}\n")).collect();
        let kept = tail(&log);
        assert_eq!(kept.lines().count(), TAIL_LINES);
        assert!(
            kept.starts_with("line 71\n") && kept.ends_with("line 100"),
            "{kept}"
        );
        let long = format!("{}\nthe end", "é".repeat(10_000));
        let kept = tail(&long);
        assert!(kept.len() <= TAIL_BYTES, "{}", kept.len());
        assert!(kept.ends_with("\nthe end"));
        assert_eq!(tail(""), "");
    }
}
