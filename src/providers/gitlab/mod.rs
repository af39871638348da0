//! GitLab as a code host: ingress, repository names (`group/sub/name`), intake, notes on the task's issue, a
//! GitLab-hosted task's merge request (opened, merged by auto-land), the reactions to its pipelines, approvals,
//! notes, merge and close, and the poller that finds what a missed webhook would have said.
//!
//! - `settings.rs`: its variables (`GITLAB_TOKEN`, `GITLAB_URL`) and `[intake.gitlab]`, typed;
//! - `webhook.rs`: the token-checked route (`ingress::Webhook`: `X-Gitlab-Token`, constant time), the event's
//!   type from `object_kind`, deduplicated by `X-Gitlab-Event-UUID` and the body's digest;
//! - `models.rs`: GitLab's webhook payloads as typed structs, the fields pidevops reads;
//! - `client/`: its REST API (`<GITLAB_URL>/api/v4`, `PRIVATE-TOKEN`), bounded: a note on an issue, once
//!   (`mod.rs`); merge requests changed since a time (`poll.rs`); a project's webhook (`hooks.rs`, for
//!   `init --gitlab`); members' access (`members.rs`); a CI job's log tail (`jobs.rs`); a merge request
//!   opened (found first) and merged at a commit (`merge_requests.rs`);
//! - `doctor.rs`: its lines in `doctor` (`GET /api/v4/user`; the token's and the trusted users' access to each
//!   project, bounded);
//! - `poller.rs`: `gitlab_poller`, a task's merge request merged or closed whose webhook never came, in its shape;
//! - `effects/`: the `effects:gitlab` policy: a note when the task is made and when it is done;
//!   `merge_request.rs`: a GitLab-hosted task's merge request, its link and note, and auto-land's merge;
//! - `intake/`: its intake rules (`intake::rules::SourceRules`): a labeled issue of a trusted author, its
//!   withdrawal, a trusted note's follow-up.
//! - `reactions/`: its reactions (`reactions::rules::HostRules`): a pipeline or job on a `pidevops/<task>` branch,
//!   its merge request approved, unapproved, merged or closed, a trusted note on it; held to the task's project,
//!   its merge request (`GITLAB_MR`), not a fork's.
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; `providers::webhook`
//! mounts its webhook.

pub mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod models;
pub mod poller;
pub mod reactions;
pub mod settings;
pub mod webhook;
