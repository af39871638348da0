//! GitLab as a code host: ingress, repository names (`group/sub/name`), intake, a note on the task's issue, and a
//! GitLab-hosted task's merge request, merged by auto-land. Pipelines and approvals as landing facts are other
//! parts'.
//!
//! - `settings.rs`: its variables (`GITLAB_TOKEN`, `GITLAB_URL`) and `[intake.gitlab]`, typed;
//! - `webhook.rs`: the token-checked route (`ingress::Webhook`: `X-Gitlab-Token`, constant time), the event's
//!   type from `object_kind`, deduplicated by `X-Gitlab-Event-UUID` and the body's digest;
//! - `models.rs`: GitLab's webhook payloads as typed structs, the fields pidevops reads;
//! - `client/`: its REST API (`<GITLAB_URL>/api/v4`, `PRIVATE-TOKEN`), bounded: a note on an issue, once;
//!   `merge_requests.rs`: a merge request opened (found first) and merged at a commit;
//! - `doctor.rs`: its line in `doctor` (`GET /api/v4/user`, bounded);
//! - `effects/`: the `effects:gitlab` policy: a note when the task is made and when it is done;
//!   `merge_request.rs`: a GitLab-hosted task's merge request, its link and note, and auto-land's merge;
//! - `intake/`: its intake rules (`intake::rules::SourceRules`): a labeled issue of a trusted author, its
//!   withdrawal, a trusted note's follow-up.
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; `providers::webhook`
//! mounts its webhook.

pub mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod models;
pub mod settings;
pub mod webhook;
