//! What `doctor` asks of a project's members: who the token is, and the access level a user has on a project
//! (inherited from its groups too: `members/all`). Read-only calls.

use serde::Deserialize;

use super::GitlabClient;
use crate::effects::CallError;
use crate::tasks::RepoName;

/// GitLab's Developer role: push to branches and open merge requests.
pub const DEVELOPER: u32 = 30;

/// A member's access to a project: their username and GitLab's access level (10 guest, 20 reporter, 30
/// developer, 40 maintainer, 50 owner).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Access {
    pub id: u64,
    pub username: String,
    pub access_level: u32,
}

impl Access {
    pub fn developer(&self) -> bool {
        self.access_level >= DEVELOPER
    }

    /// GitLab's name for the level.
    pub fn role(&self) -> &'static str {
        match self.access_level {
            0..=9 => "no access",
            10..=14 => "Guest",
            15..=19 => "Planner",
            20..=29 => "Reporter",
            30..=39 => "Developer",
            40..=49 => "Maintainer",
            _ => "Owner",
        }
    }
}

impl GitlabClient {
    /// The token's user (`GET /api/v4/user`): its id and username.
    pub async fn current_user(&self) -> Result<(u64, String), CallError> {
        #[derive(Deserialize)]
        struct User {
            id: u64,
            username: String,
        }
        let user: User = self
            .send(
                "reading the token's user",
                self.http.get(format!("{}/api/v4/user", self.url)),
            )
            .await?;
        Ok((user.id, user.username))
    }

    /// `user`'s access to `project`, inherited ones included; `None`: not a member.
    pub async fn member(&self, project: &RepoName, user: u64) -> Result<Option<Access>, CallError> {
        let url = format!("{}/members/all/{user}", self.project_url(project));
        match self
            .send("reading a member's access", self.http.get(url))
            .await
        {
            Ok(access) => Ok(Some(access)),
            Err(CallError::Permanent { message }) if message.ends_with("404 Not Found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The member of `project` named `username` (GitLab's usernames ignore case), inherited ones included;
    /// `None`: no such member.
    pub async fn member_named(
        &self,
        project: &RepoName,
        username: &str,
    ) -> Result<Option<Access>, CallError> {
        let url = format!("{}/members/all", self.project_url(project));
        let found: Vec<Access> = self
            .send(
                "looking a member up",
                self.http
                    .get(url)
                    .query(&[("query", username), ("per_page", "100")]),
            )
            .await?;
        Ok(found
            .into_iter()
            .find(|m| m.username.eq_ignore_ascii_case(username)))
    }
}
