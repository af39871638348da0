//! What an attempt said of itself, on its task's page, pure: the agent's summary, the reviewer agent's verdict with
//! its comments (file:line), the files it changed outside its scope and the agent or hook configuration its scope
//! named; and a failed run's kind in words. All of it is agent-written: escaped text, never a link or an attribute.

use maud::{html, Markup};

use crate::domain::runs::FailureKind;
use crate::tasks::values::Verdict;
use crate::tasks::AttemptReport;

/// The report of the attempt last submitted for review, if it said anything.
pub fn report_section(report: &AttemptReport) -> Markup {
    html! {
        @if !report.is_empty() {
            section.report {
                h2 { "What the last attempt said" }
                @if let Some(summary) = &report.summary {
                    h3 { "The agent's summary" }
                    div.summary { (summary) }
                }
                @if let Some(review) = &report.review {
                    @let (verdict, class) = match review.verdict() {
                        Verdict::Approve => ("approved", "good"),
                        Verdict::RequestChanges => ("changes requested", "bad"),
                    };
                    h3 { "The reviewer: " span class={ "badge verdict " (class) } { (verdict) } }
                    @if !review.summary().trim().is_empty() { div.review-summary { (review.summary()) } }
                    @if !review.comments().is_empty() {
                        ul.comments {
                            @for comment in review.comments() {
                                li {
                                    code.at {
                                        (comment.path())
                                        @if let Some(line) = comment.line() { ":" (line) }
                                    }
                                    " " div.body { (comment.body()) }
                                }
                            }
                        }
                    }
                }
                @if !report.outside_scope.is_empty() {
                    h3 { "Files changed outside its scope" }
                    ul.outside-scope { @for path in &report.outside_scope { li { code { (path) } } } }
                }
                @if !report.agent_config.is_empty() {
                    h3 { "Agent and hook configuration it changed (its scope names it)" }
                    ul.agent-config { @for path in &report.agent_config { li { code { (path) } } } }
                }
            }
        }
    }
}

/// A run's failure as a person reads it, the kind's name on hover; a name this build does not know, as stored.
pub fn failure(kind: &str) -> Markup {
    match kind.parse::<FailureKind>() {
        Ok(known) => {
            html! { span.failure data-failure=(kind) title=(kind) { (known.for_a_person()) } }
        }
        Err(_) => html! { span.failure data-failure=(kind) { (kind) } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_agent_configuration_is_listed_escaped() {
        let report = AttemptReport {
            agent_config: vec![".claude/<script>alert(1)</script>.json".into()],
            ..AttemptReport::default()
        };
        let html = report_section(&report).into_string();
        assert!(html.contains("Agent and hook configuration"), "{html}");
        assert!(
            html.contains("<code>.claude/&lt;script&gt;alert(1)&lt;/script&gt;.json</code>"),
            "{html}"
        );
    }
}
