//! The one writer of the description of a pull request (or GitLab merge request) pidevops opens. A task's
//! ([`task_body`], GitHub's and GitLab's alike)
//! and a combined plan's (`combined.rs`: `plan_pull_request_body`, each item a section of it) are built from the
//! same parts, written the same way: the spec's parts, what the attempt said of itself (the agent's summary, the
//! reviewer's verdict, files outside the scope, agent configuration touched), and the footer (where it came from,
//! who opened it, for what). Every text from a ticket or an agent is made inert here. Pure.

use super::inert::inert;
use crate::tasks::values::plain_markdown;
use crate::tasks::{AttemptReport, Links, RepoName, Task, TaskId};

/// A task's pull request (or merge request) description: the spec, what the attempt said of itself, where the
/// task came from, and how many attempts it took.
pub fn task_body(task: &Task) -> String {
    let spec = task.spec();
    // Ticket text is untrusted: only the "From" line of the footer may reference the source issue.
    let mut body = PullRequestBody::new("Task", spec.task());
    body.part("Scope", spec.scope())
        .part("Done when", spec.done_when())
        .report(task.report());
    body.footer(
        task.links(),
        task.repo(),
        OpenedFor::Task {
            task: task.id(),
            attempt: task.attempts(),
            max: task.max_attempts().get(),
        },
    )
}

/// How a body's parts are headed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// The body's own parts: `## Scope`, the text on the lines below.
    Body,
    /// The parts of one item's section of a plan's body: `**Scope:**`, a line's text after it on the line.
    Item,
}

/// Whether a part's text is a line (after an item's `**Heading:**`) or lines of its own (below it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Line,
    Block,
}

/// Who the pull request is opened for, as its footer's last line says.
pub enum OpenedFor<'a> {
    /// A task's own, after attempt `attempt` of `max`.
    Task {
        task: TaskId,
        attempt: u32,
        max: u32,
    },
    /// A plan's, combining `items` (in the combination's order).
    Plan { plan: TaskId, items: &'a [TaskId] },
}

/// A pull request's description (or one item's section of a plan's), written part by part.
#[derive(Debug)]
pub struct PullRequestBody {
    text: String,
    level: Level,
}

impl PullRequestBody {
    /// A body opening with `## <heading>` and `text` (a ticket's words: the task, a plan's goal).
    pub fn new(heading: &str, text: &str) -> Self {
        Self {
            text: format!("## {heading}\n{}\n", inert(text)),
            level: Level::Body,
        }
    }

    /// One item's section of a plan's body: `### <id>: <title> (commit <commit>)`, then its task's text.
    pub fn item(id: TaskId, title: &str, commit: &str, task: &str) -> Self {
        Self {
            text: format!(
                "\n### {id}: {} (commit {commit})\n{}\n",
                inert(title),
                inert(task)
            ),
            level: Level::Item,
        }
    }

    /// The section of an item the combination names but the board did not load: its id and commit alone.
    pub fn item_not_loaded(id: TaskId, commit: &str) -> Self {
        Self {
            text: format!("\n### {id} (commit {commit})\n"),
            level: Level::Item,
        }
    }

    /// A part of the spec (the scope, "done when"), a ticket's words; nothing when it is empty.
    pub fn part(&mut self, heading: &str, text: &str) -> &mut Self {
        if !text.is_empty() {
            self.write(heading, &inert(text), Shape::Line);
        }
        self
    }

    /// A part in pidevops's own words (a plan's "Items" and how they were merged), written as it is.
    pub fn own(&mut self, heading: &str, text: &str) -> &mut Self {
        self.write(heading, text, Shape::Line);
        self
    }

    /// What the attempt says of itself: the agent's words and the reviewer's are untrusted like the ticket's.
    pub fn report(&mut self, report: &AttemptReport) -> &mut Self {
        if let Some(summary) = &report.summary {
            self.write(
                "The agent's summary",
                &inert(&plain_markdown(summary)),
                Shape::Line,
            );
        }
        if let Some(review) = &report.review {
            self.write(
                "Review (reviewer agent)",
                &inert(&review.as_markdown()),
                Shape::Block,
            );
        }
        if !report.outside_scope.is_empty() {
            let files = inert(&report.outside_scope.join(", "));
            let text = match self.level {
                Level::Body => {
                    format!("This change also touches files outside the task's scope: {files}")
                }
                Level::Item => files,
            };
            self.write("Outside the scope", &text, Shape::Line);
        }
        self.text
            .push_str(&agent_config_section(&report.agent_config));
        self
    }

    /// Item sections after the body's parts, each cut to at most `max` characters.
    pub fn sections(
        &mut self,
        sections: impl IntoIterator<Item = PullRequestBody>,
        max: usize,
    ) -> &mut Self {
        for section in sections {
            self.text.push_str(&clip(&section.text, max));
        }
        self
    }

    /// The body so far cut to at most `max` characters, saying so (the footer is written after).
    pub fn clip(&mut self, max: usize) -> &mut Self {
        self.text = clip(&self.text, max);
        self
    }

    /// The finished body: the footer under a rule, where the work came from (each provider's "From:" part of
    /// `links`) and who it was opened for.
    pub fn footer(self, links: &Links, repo: &RepoName, opened: OpenedFor<'_>) -> String {
        let mut body = self.text;
        let from = crate::domain::registry::from_lines(links, repo);
        body.push_str("\n---\n");
        if !from.is_empty() {
            body.push_str(&format!("From: {}\n", from.join(", ")));
        }
        match opened {
            OpenedFor::Task { task, attempt, max } => body.push_str(&format!(
                "Opened by pidevops for {task} after attempt {attempt} of {max}. \
                 Receipt: `GET /api/tasks/{task}/receipt` or `pidevops receipt {task}`, checked with \
                 `pidevops verify --receipt`.\n"
            )),
            OpenedFor::Plan { plan, items } => {
                let ids: Vec<String> = items.iter().map(TaskId::to_string).collect();
                body.push_str(&format!(
                    "Opened by pidevops for plan {plan}, combining {}. Merging it completes every item.\n",
                    ids.join(", ")
                ));
            }
        }
        body
    }

    fn write(&mut self, heading: &str, text: &str, shape: Shape) {
        self.text.push_str(&match (self.level, shape) {
            (Level::Body, _) => format!("\n## {heading}\n{text}\n"),
            (Level::Item, Shape::Line) => format!("\n**{heading}:** {text}\n"),
            (Level::Item, Shape::Block) => format!("\n**{heading}:**\n{text}\n"),
        });
    }
}

/// The pull request's call-out of agent and hook configuration the change touches (named by the task's scope, or it
/// would not have been pushed): a heading and the paths as a list; empty when there are none.
pub fn agent_config_section(paths: &[String]) -> String {
    if paths.is_empty() {
        return String::new();
    }
    let listed: String = paths
        .iter()
        // A path is the agent's choice of bytes: no backtick or line break may end its code span.
        .map(|path| format!("- `{}`\n", inert(&path.replace(['`', '\n', '\r'], "?"))))
        .collect();
    format!(
        "\n## Agent and hook configuration\nThis change touches files that agent CLIs, git hooks, editors or CI \
         load and run; the task's scope names them. Read them before merging:\n{listed}"
    )
}

/// `text` cut to at most `max` characters, saying so.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}\n\n… (cut: over {max} characters)\n", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same report, written as a body's sections and as an item's lines of a plan's body: the one place the
    /// two differ. Every text an agent or a ticket wrote is inert in both.
    #[test]
    fn a_report_is_sections_in_a_body_and_bold_lines_in_an_items_section() {
        let review = serde_json::from_str(
            r#"{"verdict": "approve", "summary": "Fine, @dev", "comments": []}"#,
        )
        .expect("a review");
        let report = AttemptReport {
            summary: Some("Fixed #4 for @dev".to_owned()),
            review: Some(review),
            outside_scope: vec!["README.md".to_owned()],
            agent_config: vec!["CLAUDE.md".to_owned()],
        };
        let id = |n: &str| n.parse::<TaskId>().expect("an id");
        let repo: RepoName = "acme/app".parse().expect("a repo");
        let mut task = PullRequestBody::new("Task", "Fix it");
        task.part("Scope", "src/**")
            .part("Done when", "")
            .report(&report);
        let task = task.footer(
            &Links::default(),
            &repo,
            OpenedFor::Task {
                task: id("T-9"),
                attempt: 1,
                max: 3,
            },
        );
        let mut item = PullRequestBody::item(id("T-2"), "Part @a", "ccccccc", "Do a");
        item.part("Scope", "a/**").report(&report);
        let mut plan = PullRequestBody::new("Goal", "Ship it");
        plan.own("Items", "Merged in this order:").sections(
            [item, PullRequestBody::item_not_loaded(id("T-3"), "ddddddd")],
            6_000,
        );
        let plan = plan.footer(
            &Links::default(),
            &repo,
            OpenedFor::Plan {
                plan: id("T-1"),
                items: &[id("T-2"), id("T-3")],
            },
        );
        let zw = '\u{200B}';
        let summary = format!("F{zw}ixed #{zw}4 for @{zw}dev");
        let review = format!("**Review: approved**\n\nFine, @{zw}dev");
        let config = "\n## Agent and hook configuration\nThis change touches files that agent CLIs, git hooks, \
                      editors or CI load and run; the task's scope names them. Read them before merging:\n\
                      - `CLAUDE.md`\n";
        assert_eq!(
            task,
            format!(
                "## Task\nFix it\n\n## Scope\nsrc/**\n\n## The agent's summary\n{summary}\n\n\
                 ## Review (reviewer agent)\n{review}\n\n## Outside the scope\nThis change also touches files \
                 outside the task's scope: README.md\n{config}\n---\nOpened by pidevops for T-9 after attempt 1 \
                 of 3. Receipt: `GET /api/tasks/T-9/receipt` or `pidevops receipt T-9`, checked with `pidevops \
                 verify --receipt`.\n"
            )
        );
        assert_eq!(
            plan,
            format!(
                "## Goal\nShip it\n\n## Items\nMerged in this order:\n\n### T-2: Part @{zw}a (commit ccccccc)\n\
                 Do a\n\n**Scope:** a/**\n\n**The agent's summary:** {summary}\n\n\
                 **Review (reviewer agent):**\n{review}\n\n**Outside the scope:** README.md\n{config}\n\
                 ### T-3 (commit ddddddd)\n\n---\nOpened by pidevops for plan T-1, combining T-2, T-3. Merging \
                 it completes every item.\n"
            )
        );
    }

    #[test]
    fn a_body_too_long_for_github_is_cut_and_says_so() {
        let long = "x".repeat(100);
        assert_eq!(clip(&long, 200), long);
        let cut = clip(&long, 10);
        assert!(cut.starts_with("xxxxxxxxxx\n") && cut.contains("cut: over 10"));
    }
}
