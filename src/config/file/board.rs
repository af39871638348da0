//! `[board]`, `[repos."o/n"]` (approval and landing rules) and the allow-list (`[repos]` with `[intake]
//! allow_repos`), read into `board::BoardConfig`.

use std::collections::BTreeMap;

use super::{RepoTable, Tables};
use crate::board::{AllowedRepos, BoardConfig};
use crate::tasks::{LandConfig, MaxAttempts, RepoName, StaleRule};

/// `[board] approval`, `[board] max_attempts`, `[repos."owner/name"] approval` and the allow-list.
pub fn board_config(tables: &Tables) -> Result<BoardConfig, String> {
    let max_attempts = u32::try_from(tables.board.max_attempts)
        .map_err(|_| "board.max_attempts must be a whole number".to_owned())?;
    let mut config = BoardConfig {
        approval: tables.board.approval,
        max_attempts: MaxAttempts::new(max_attempts)
            .map_err(|e| format!("board.max_attempts: {e}"))?,
        allowed: allowed_repos(tables)?,
        ..BoardConfig::default()
    };
    for (name, repo) in &tables.repos {
        if let Some(approval) = repo.approval {
            let parsed = name
                .parse::<RepoName>()
                .map_err(|e| format!("[repos.\"{name}\"]: {e}"))?;
            config.repos.insert(parsed, approval);
        }
        config
            .land
            .insert(name.to_ascii_lowercase(), land_config(name, repo)?);
        if let Some(rule) = stale_rule(name, repo)? {
            config.stale.insert(name.to_ascii_lowercase(), rule);
        }
    }
    Ok(config)
}

/// The names under `[repos]` and the patterns in `[intake] allow_repos`.
pub fn allowed_repos(tables: &Tables) -> Result<AllowedRepos, String> {
    let mut seen = BTreeMap::new();
    for name in tables.repos.keys() {
        let repo = name
            .parse::<RepoName>()
            .map_err(|e| format!("[repos.\"{name}\"]: {e}"))?;
        // Two tables for one repository would each hold half its settings.
        if let Some(first) = seen.insert(repo.clone(), repo) {
            return Err(format!(
                "[repos.\"{name}\"] and [repos.\"{first}\"] name one repository (GitHub ignores case): keep one"
            ));
        }
    }
    let mut allowed = AllowedRepos::new(tables.repos.keys().map(String::as_str))?;
    let more = AllowedRepos::new(tables.intake.allow_repos.iter().map(String::as_str))
        .map_err(|e| format!("intake.allow_repos: {e}"))?;
    // A repository allowed by a pattern alone is GitHub's (`[repos] provider`'s default), so a pattern GitHub
    // could not hold would allow names no host makes work for: a GitLab project is named by its own table.
    for pattern in &tables.intake.allow_repos {
        let pattern = pattern.trim();
        let name = match pattern.strip_suffix("/*") {
            Some(namespace) => format!("{namespace}/x"),
            None => pattern.to_owned(),
        };
        if name
            .parse::<RepoName>()
            .ok()
            .and_then(|r| r.github_parts().map(|_| ()))
            .is_none()
        {
            return Err(format!(
                "intake.allow_repos: {pattern:?} is not a GitHub name (owner/name or owner/*); a GitLab project \
                 is allowed by its [repos.\"group/…/name\"] table with provider = \"gitlab\""
            ));
        }
    }
    allowed.extend(more);
    Ok(allowed)
}

/// `[repos."o/n"]` `land`, `approvals`, `required_checks`, `merge_method` and `refresh`, checked.
fn land_config(name: &str, repo: &RepoTable) -> Result<LandConfig, String> {
    use crate::tasks::landing::{MAX_NAME_CHARS, MAX_REQUIRED_APPROVALS};
    let key = format!("repos.\"{name}\"");
    let approvals = match repo.approvals {
        None => 1,
        Some(n) => u8::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_REQUIRED_APPROVALS)
            .ok_or_else(|| {
                format!("{key}.approvals must be a whole number from 0 to {MAX_REQUIRED_APPROVALS}")
            })?,
    };
    let mut required_checks: Vec<String> = Vec::new();
    for check in repo.required_checks.iter().flatten() {
        let check = check.trim();
        if check.is_empty() || check.chars().count() > MAX_NAME_CHARS {
            return Err(format!(
                "{key}.required_checks names a check that is empty or longer than {MAX_NAME_CHARS} characters"
            ));
        }
        if !required_checks.iter().any(|c| c == check) {
            required_checks.push(check.to_owned());
        }
    }
    Ok(LandConfig {
        mode: repo.land.unwrap_or_default(),
        approvals,
        required_checks,
        merge_method: repo.merge_method,
        refresh: repo.refresh.unwrap_or_default(),
    })
}

/// `[repos."o/n"]` `stale_after_h` and `stale_action`: `None` when off (absent or 0).
fn stale_rule(name: &str, repo: &RepoTable) -> Result<Option<StaleRule>, String> {
    use crate::tasks::stale::MAX_STALE_AFTER_H;
    let key = format!("repos.\"{name}\"");
    let after_h = match repo.stale_after_h {
        None | Some(0) => {
            if let Some(action) = repo.stale_action {
                return Err(format!(
                    "{key}.stale_action = \"{}\" does nothing without stale_after_h (hours, 1 to {MAX_STALE_AFTER_H})",
                    action.as_str()
                ));
            }
            return Ok(None);
        }
        Some(h) => u32::try_from(h)
            .ok()
            .filter(|h| *h <= MAX_STALE_AFTER_H)
            .ok_or_else(|| {
                format!(
                    "{key}.stale_after_h must be a whole number of hours from 0 (off) to {MAX_STALE_AFTER_H}, not {h}"
                )
            })?,
    };
    Ok(Some(StaleRule {
        after_h,
        action: repo.stale_action.unwrap_or_default(),
    }))
}
