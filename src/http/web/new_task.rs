//! The new-task form (`GET /tasks/new`, `POST /tasks/new`): a person makes a task from the dashboard through the same
//! door as `POST /api/tasks` and `pidevops task new`: the allow-list checked (`AllowedRepos::check`, so a repository
//! posted by hand that the configuration does not name is refused), then `Board::create` with the spec the domain
//! checks (`Spec::new`: bounds, NULs). The form's text is a stranger's: escaped wherever it is shown (maud), and a
//! refusal shows the form again with what was typed and why, having changed nothing. The form carries a key of its
//! own (a UUID, made with the page), so sending it twice (a double click, a reload) makes one task.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};

use super::session::{Key, Session};
use super::{
    field, frame, page, pages, parse_form, require_post, unavailable, Access, SignedIn,
    SPEC_FORM_LIMIT,
};
use crate::board::{AllowedRepos, BoardError, Draft};
use crate::http::AppState;
use crate::tasks::{ApprovalPolicy, Links, RepoName, Spec, ValueError};

/// What the form holds: empty with a fresh key on the page, or what was sent, shown again with why it was refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewTaskForm {
    /// The form's own key: one task per key, however often it is sent.
    pub key: String,
    pub repo: String,
    /// The task's first line (its title on the board); the details follow it after a blank line.
    pub title: String,
    pub details: String,
    pub scope: String,
    pub done_when: String,
    /// `""` (the repository's approval), `manual` or `auto`.
    pub approval: String,
}

impl NewTaskForm {
    fn from_fields(fields: &[(String, String)]) -> Self {
        let get = |name: &str| field(fields, name).unwrap_or_default();
        Self {
            key: get("key"),
            repo: get("repo"),
            title: get("title"),
            details: get("details"),
            scope: get("scope"),
            done_when: get("done_when"),
            approval: get("approval"),
        }
    }

    /// The intake key of the task this form makes: `dashboard:new:<uuid>`; a key that is not a UUID (posted by
    /// hand) is replaced with a fresh one.
    fn intake_key(&self) -> String {
        let key = uuid::Uuid::parse_str(self.key.trim()).unwrap_or_else(|_| uuid::Uuid::new_v4());
        format!("dashboard:new:{key}")
    }
}

/// Why a form makes no task: the status to answer with, and the words shown above the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: String,
}

impl Refusal {
    fn bad(why: impl std::fmt::Display) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            why: why.to_string(),
        }
    }
}

/// The draft the form asks for, judged as the API judges one (the allow-list, then the domain's values), or why not.
pub fn draft(form: &NewTaskForm, allowed: &AllowedRepos) -> Result<Draft, Refusal> {
    let named = form.repo.trim();
    if named.is_empty() {
        return Err(Refusal::bad("Choose a repository."));
    }
    let repo = named
        .parse::<RepoName>()
        .map_err(|e| Refusal::bad(format!("repository {named:?}: {e}")))?;
    allowed.check(&repo).map_err(|refused| Refusal {
        status: StatusCode::FORBIDDEN,
        why: refused.to_string(),
    })?;
    if form.title.trim().is_empty() {
        return Err(Refusal::bad(ValueError::Empty { field: "title" }));
    }
    if form.title.contains(['\n', '\r']) {
        return Err(Refusal::bad(
            "title is one line: the rest goes in the details",
        ));
    }
    let approval = match form.approval.trim() {
        "" => None,
        named => Some(named.parse::<ApprovalPolicy>().map_err(Refusal::bad)?),
    };
    let task = if form.details.trim().is_empty() {
        form.title.clone()
    } else {
        format!("{}\n\n{}", form.title, form.details)
    };
    let spec = Spec::new(task, form.scope.clone(), form.done_when.clone()).map_err(Refusal::bad)?;
    Ok(Draft {
        approval,
        ..Draft::new(repo, spec, Links::default())
    })
}

/// What the form page shows besides the form's values.
pub struct NewTaskView<'a> {
    pub form: &'a NewTaskForm,
    pub error: Option<&'a str>,
    /// The repositories named one by one, each with the approval its tasks get by default.
    pub repos: Vec<(RepoName, ApprovalPolicy)>,
    /// Owners every repository of which is allowed (`owner/*`): then any such name may be typed.
    pub owners: Vec<String>,
    pub csrf: &'a str,
}

pub fn new_task(view: &NewTaskView<'_>) -> Markup {
    let form = view.form;
    let approval = |value: &str| form.approval.trim() == value;
    html! {
        h1 { "New task" }
        @if view.repos.is_empty() && view.owners.is_empty() {
            p.error {
                "No repository is allowed yet: add [repos.\"owner/name\"] to pidevops.toml, or a pattern to [intake] "
                "allow_repos."
            }
        } @else {
            form.new-task method="post" action="/tasks/new" {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="key" value=(form.key);
                @if let Some(error) = view.error { p.error.new-task-error { "Not created: " (error) } }
                label for="new-repo" { "Repository" }
                @if view.owners.is_empty() {
                    select #new-repo name="repo" required {
                        option value="" selected[form.repo.is_empty()] { "choose one" }
                        @for (repo, default) in &view.repos {
                            option value=(repo) selected[form.repo == repo.as_str()] {
                                (repo) " (approval: " (default.as_str()) ")"
                            }
                        }
                    }
                } @else {
                    input #new-repo type="text" name="repo" list="new-repos" required placeholder="owner/name"
                        value=(form.repo);
                    datalist #new-repos { @for (repo, _) in &view.repos { option value=(repo) {} } }
                    p.muted {
                        @if !view.repos.is_empty() { "One of those listed, or any repository of " } @else { "Any repository of " }
                        @for (i, owner) in view.owners.iter().enumerate() {
                            @if i > 0 { ", " } code { (owner) "/*" }
                        }
                        "."
                    }
                }
                label for="new-title" { "Title (the task's first line)" }
                input #new-title type="text" name="title" required value=(form.title);
                // A textarea drops one newline right after its start tag: this one, so text sent back keeps its own.
                label for="new-details" { "Details (what the agent reads after the title)" }
                textarea #new-details name="details" rows="6" { "\n" (form.details) }
                label for="new-scope" { "Scope (what the work may touch)" }
                textarea #new-scope name="scope" rows="3" { "\n" (form.scope) }
                label for="new-done-when" { "Done when" }
                textarea #new-done-when name="done_when" rows="3" { "\n" (form.done_when) }
                fieldset.approval {
                    legend { "Approval" }
                    label { input type="radio" name="approval" value="" checked[approval("")]; " the repository's" }
                    label { input type="radio" name="approval" value="manual" checked[approval("manual")]; " manual: it waits in triage for a person" }
                    label { input type="radio" name="approval" value="auto" checked[approval("auto")]; " auto: to todo at once" }
                }
                div { button type="submit" data-action="create-task" { "Create task" } }
            }
        }
    }
}

/// `GET /tasks/new`: the empty form, with a fresh key.
pub(super) async fn new_task_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
) -> Response {
    let form = NewTaskForm {
        key: uuid::Uuid::new_v4().to_string(),
        ..NewTaskForm::default()
    };
    render(&state, &key, &session, &form, None, StatusCode::OK)
}

/// `POST /tasks/new`: the task made, then its page (once the read models show it); or the form again with why.
pub(super) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let Some(fields) = parse_form(&body, SPEC_FORM_LIMIT) else {
        return page(
            StatusCode::PAYLOAD_TOO_LARGE,
            pages::message(
                "Too large",
                &format!(
                    "The dashboard takes a task of up to {} KiB as the browser sends it; make a larger one with \
                     POST /api/tasks or `pidevops task new`.",
                    SPEC_FORM_LIMIT / 1024
                ),
            ),
        );
    };
    let (key, session) = match require_post(&state, &headers, &fields).await {
        Access::Granted(key, session) => (key, session),
        Access::Denied(response) => return response,
    };
    let form = NewTaskForm::from_fields(&fields);
    let draft = match draft(&form, &state.board.config().allowed) {
        Ok(draft) => draft,
        Err(refusal) => {
            return render(
                &state,
                &key,
                &session,
                &form,
                Some(&refusal.why),
                refusal.status,
            )
        }
    };
    let refused =
        |status: StatusCode, why: String| render(&state, &key, &session, &form, Some(&why), status);
    match state
        .board
        .create(draft, &form.intake_key(), "dashboard", None)
        .await
    {
        Ok((outcome, _)) => {
            let id = outcome.task.id();
            match outcome.appended.last() {
                Some(last) => {
                    Redirect::to(&format!("/tasks/{id}?at={}", last.position)).into_response()
                }
                None => Redirect::to(&format!("/tasks/{id}")).into_response(),
            }
        }
        Err(BoardError::Refused(e)) => refused(StatusCode::CONFLICT, e.to_string()),
        Err(BoardError::Invalid(e)) => refused(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => unavailable(e),
    }
}

fn render(
    state: &AppState,
    key: &Key,
    session: &Session,
    form: &NewTaskForm,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let config = state.board.config();
    let repos = config
        .allowed
        .repositories()
        .map(|repo| (repo.clone(), config.approval_for(repo)))
        .collect();
    let owners = config
        .allowed
        .owners()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let csrf = session.csrf(key);
    page(
        status,
        pages::layout(
            &frame(key, session, "New task", pages::Nav::Board, None),
            new_task(&NewTaskView {
                form,
                error,
                repos,
                owners,
                csrf: &csrf,
            }),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AllowedRepos {
        AllowedRepos::new(["acme/app", "tools/*"]).unwrap()
    }

    fn form() -> NewTaskForm {
        NewTaskForm {
            key: uuid::Uuid::new_v4().to_string(),
            repo: "acme/app".to_owned(),
            title: "Keep the query".to_owned(),
            details: "It is dropped.".to_owned(),
            scope: "src/**".to_owned(),
            done_when: "a test".to_owned(),
            approval: String::new(),
        }
    }

    #[test]
    fn a_filled_form_is_the_draft_it_says() {
        let draft = draft(&form(), &allowed()).unwrap();
        assert_eq!(draft.repo.as_str(), "acme/app");
        assert_eq!(
            draft.spec,
            Spec::new("Keep the query\n\nIt is dropped.", "src/**", "a test").unwrap()
        );
        assert_eq!(draft.approval, None);
        let only_title = NewTaskForm {
            details: "  ".to_owned(),
            approval: "auto".to_owned(),
            repo: "tools/lint".to_owned(),
            ..form()
        };
        let draft = super::draft(&only_title, &allowed()).unwrap();
        assert_eq!(draft.spec.task(), "Keep the query");
        assert_eq!(draft.approval, Some(ApprovalPolicy::Auto));
    }

    #[test]
    fn each_refusal_says_why() {
        let cases = [
            (
                NewTaskForm {
                    repo: "evil/app".to_owned(),
                    ..form()
                },
                403,
                "evil/app is not an allowed repository",
            ),
            (
                NewTaskForm {
                    repo: " ".to_owned(),
                    ..form()
                },
                400,
                "Choose a repository.",
            ),
            (
                NewTaskForm {
                    repo: "no".to_owned(),
                    ..form()
                },
                400,
                "repository \"no\"",
            ),
            (
                NewTaskForm {
                    title: "".to_owned(),
                    ..form()
                },
                400,
                "title must not be empty",
            ),
            (
                NewTaskForm {
                    title: "a\nb".to_owned(),
                    ..form()
                },
                400,
                "title is one line",
            ),
            (
                NewTaskForm {
                    approval: "maybe".to_owned(),
                    ..form()
                },
                400,
                "unknown approval policy",
            ),
            (
                NewTaskForm {
                    scope: "x".repeat(Spec::MAX_CHARS + 1),
                    ..form()
                },
                400,
                "spec scope is 65537 characters; at most 65536 allowed",
            ),
        ];
        for (form, status, why) in cases {
            let refusal = draft(&form, &allowed()).unwrap_err();
            assert_eq!(refusal.status.as_u16(), status, "{why}");
            assert!(refusal.why.contains(why), "{why}: {}", refusal.why);
        }
    }

    #[test]
    fn the_form_key_is_a_uuid_or_a_fresh_one() {
        let form = form();
        assert_eq!(form.intake_key(), format!("dashboard:new:{}", form.key));
        let forged = NewTaskForm {
            key: "api:someone-elses".to_owned(),
            ..form
        };
        let key = forged.intake_key();
        assert!(
            key.starts_with("dashboard:new:") && !key.contains("someone"),
            "{key}"
        );
    }

    #[test]
    fn what_was_typed_is_text() {
        let form = NewTaskForm {
            title: "<script>alert(1)</script>".to_owned(),
            details: "</textarea><b>x</b>".to_owned(),
            ..form()
        };
        let html = new_task(&NewTaskView {
            form: &form,
            error: Some("<i>why</i>"),
            repos: vec![("acme/app".parse().unwrap(), ApprovalPolicy::Manual)],
            owners: Vec::new(),
            csrf: "token",
        })
        .into_string();
        assert!(
            !html.contains("<script>")
                && !html.contains("</textarea><b>")
                && !html.contains("<i>why")
        );
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }
}
