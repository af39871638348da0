//! A timeline entry's "what" as a person reads it, pure. A failed run's reason ends with its agent's last output
//! (`RunEvent::failure_reason`: "…\nlast output:\n…"), which for a JSON-speaking agent is lines of JSON: the entry
//! shows its headline, then the readable lines of that output (a failed result's error, stderr, plain lines; the
//! message of an unknown JSON line), each bounded, and the output as printed only inside a collapsed `<details>`.
//! All of it is agent-written: maud escapes every value, nothing here is `PreEscaped`.

use maud::{html, Markup};
use serde_json::Value;

use super::transcript::{self, Item};

/// What `failure_reason` puts between a failure and its agent's last output.
const LAST_OUTPUT: &str = "\nlast output:\n";
/// The readable lines shown of a last output (its last ones).
const READABLE_LINES: usize = 4;
/// The most characters of one readable line.
const LINE_CHARS: usize = 300;

/// One entry's summary, its last output (if any) read for a person.
pub fn what(summary: &str) -> Markup {
    let Some((headline, output)) = summary.split_once(LAST_OUTPUT) else {
        return html! { (summary) };
    };
    let lines = readable(output);
    html! {
        (headline)
        @if !lines.is_empty() {
            ul.last-output { @for line in &lines { li { (line) } } }
        }
        details.raw-output {
            summary { "last output as printed (" (output.len()) " bytes)" }
            pre { (output) }
        }
    }
}

/// The lines of an agent's output a person needs: a failed result's summary and error, stderr and plain lines, an
/// unknown JSON line's message; the last [`READABLE_LINES`], each at most [`LINE_CHARS`] characters.
pub fn readable(output: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for item in transcript::render(output) {
        match item {
            Item::Ended {
                ok: false,
                summary,
                text,
            } => lines.push(match text {
                Some(text) => format!("{summary}: {text}"),
                None => summary,
            }),
            Item::Raw(raw) | Item::Stderr(raw) => lines.extend(raw.iter().filter_map(|l| plain(l))),
            _ => {}
        }
    }
    let from = lines.len().saturating_sub(READABLE_LINES);
    lines
        .drain(from..)
        .map(|line| bounded(line.trim()))
        .filter(|line| !line.is_empty())
        .collect()
}

/// A line as a person reads it: a JSON object's message (`error.message`, `message`, `error`), none for one without
/// (or a JSON line the tail cut), else the line itself.
fn plain(line: &str) -> Option<String> {
    let trimmed = line.trim();
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        if !value.is_object() {
            return Some(trimmed.to_owned());
        }
        let message = value["error"]["message"]
            .as_str()
            .or(value["message"].as_str())
            .or(value["error"].as_str())
            .or(value["result"]
                .as_str()
                .filter(|_| value["is_error"] == true));
        return message.map(str::to_owned);
    }
    // The start or end of a JSON line the tail cut off: no words for a person.
    let json_like = (trimmed.starts_with('{') || trimmed.ends_with('}')) && trimmed.contains("\":");
    (!json_like).then(|| trimmed.to_owned())
}

fn bounded(line: &str) -> String {
    match line.char_indices().nth(LINE_CHARS) {
        None => line.to_owned(),
        Some((at, _)) => format!("{}…", &line[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE_NO_KEY: &str = r#"{"type":"system","subtype":"init","session_id":"s","tools":["Bash"],"model":"claude-sonnet-4-5"}
{"type":"result","subtype":"success","is_error":true,"duration_ms":120,"num_turns":1,"result":"Invalid API key · Please run /login","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#;

    #[test]
    fn a_failed_result_reads_as_its_error_and_the_json_stays_collapsed() {
        assert_eq!(
            readable(CLAUDE_NO_KEY),
            ["error · 1 turns · 0.1 s · $0.00: Invalid API key · Please run /login"]
        );
        let summary = format!(
            "attempt 1 failed (run failed): run exit (attempt 1): the agent exited with status 1{LAST_OUTPUT}{CLAUDE_NO_KEY}"
        );
        let html = what(&summary).into_string();
        let (shown, collapsed) = html.split_once("<details").unwrap();
        assert!(shown.starts_with("attempt 1 failed (run failed)"), "{html}");
        assert!(shown.contains("<li>error · 1 turns"), "{html}");
        assert!(!shown.contains("{&quot;type"), "{html}");
        assert!(
            collapsed.contains("{&quot;type&quot;:&quot;result&quot;"),
            "{html}"
        );
    }

    #[test]
    fn plain_lines_stderr_and_unknown_json_messages_are_kept_cut_json_is_not() {
        let output = "ms\":120,\"num_turns\":1}\n{\"level\":\"error\",\"error\":{\"message\":\"401 Unauthorized\"}}\n\u{1e}fatal: <b>no key</b>\n{\"quiet\":true}\nexit status 1";
        assert_eq!(
            readable(output),
            ["401 Unauthorized", "fatal: <b>no key</b>", "exit status 1"]
        );
        let html = what(&format!("failed{LAST_OUTPUT}{output}")).into_string();
        assert!(html.contains("fatal: &lt;b&gt;no key&lt;/b&gt;"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
    }

    #[test]
    fn readable_lines_are_few_and_bounded_and_other_summaries_are_as_they_are() {
        let long = format!("{}\n", "x".repeat(1000)).repeat(10);
        let lines = readable(&long);
        assert_eq!(lines.len(), READABLE_LINES);
        assert!(lines.iter().all(|l| l.chars().count() == LINE_CHARS + 1));
        assert_eq!(what("approved").into_string(), "approved");
    }
}
