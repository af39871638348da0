//! A planner's scopes held to the protected paths (`guard::PROTECTED`: agent, hook and CI configuration). A
//! planner is an agent reading a stranger's goal; an item whose scope named `.github/workflows/**` would let its
//! worker push a workflow. So an entry that names or covers a protected path is refused, unless the repository
//! lets plans name that path (`[repos."o/n"] plans_may_name`). A stored plan is not held to it (see `Reading`):
//! the push is, whatever the plan says (`guard::Author::Planner`).

use super::{Draft, Kind, PlanErrors};
use crate::tasks::plan::glob::{Budget, Exhausted, Glob};
use crate::tasks::plan::guard::{protected, protected_root};

/// How much product-search work the check of one plan may do (see `glob::Budget`). Most entries are settled by
/// their literal beginning at once; a hostile plan is refused for running out rather than checked without end.
pub(super) const PROTECTED_WORK: u64 = 4_000_000;

/// A protected path an entry reaches: its protected part, a path the entry matches there, and whether the entry
/// names it (its literal beginning reaches the protected part, as `Scope::names` reads it at push time) or only
/// covers it with a wildcard.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Claim {
    pub root: String,
    pub witness: String,
    pub named: bool,
}

/// The protected paths `glob` names or covers: every protected path at the repository's root it matches as a
/// whole (`.github/**` covers `.github/workflows`, `*.json` covers `.mcp.json`), and a protected part at any depth
/// that its literal beginning reaches, where it matches something (`web/.claude/**` names `web/.claude`,
/// `.github/workflows/ci.yml` names `.github/workflows`). What an entry matches only beneath a protected
/// directory it does not reach by name (`**/*.rs` and `.claude/x.rs`, `src/**` and `src/.claude/x`) is left to the
/// push, where such an entry names nothing and the path is refused.
pub(super) fn claims(glob: &Glob, budget: &mut Budget) -> Result<Vec<Claim>, Exhausted> {
    let text = glob.as_str();
    let literal = text
        .find(['*', '?', '[', '{'])
        .map_or(text, |wild| &text[..wild]);
    let reaches = |root: &str| literal.len() >= root.len() && literal.starts_with(root);
    let mut claims: Vec<Claim> = protected()
        .map(|p| p.name())
        .filter(|root| glob.matches(root))
        .map(|root| Claim {
            root: root.to_owned(),
            witness: root.to_owned(),
            named: reaches(root),
        })
        .collect();
    if let Some(root) = protected_root(literal) {
        // A protected part is a plain path (no glob character), which as a glob matches itself and beneath.
        let at = root.parse::<Glob>();
        if let (false, Ok(at)) = (claims.iter().any(|c| c.root == root), at) {
            if let Some(witness) = glob.overlap_witness_within(&at, budget)? {
                claims.push(Claim {
                    root: root.to_owned(),
                    witness,
                    named: true,
                });
            }
        }
    }
    Ok(claims)
}

/// Every scope entry of every item that names or covers a protected path `may_name` does not list.
pub(super) fn protected_scopes(drafts: &[Draft], may_name: &[String], errors: &mut PlanErrors) {
    let mut budget = Budget::new(PROTECTED_WORK);
    for draft in drafts {
        for (glob, j) in draft.globs.iter().zip(&draft.glob_at) {
            let claims = match claims(glob, &mut budget) {
                Ok(claims) => claims,
                Err(Exhausted) => {
                    errors.push(
                        Kind::Scope,
                        format!(
                            "the scopes are too many or too intricate to check against agent, hook and CI configuration: the check stopped at {} {:?}; use fewer scope entries and simpler globs",
                            draft.label,
                            glob.as_str()
                        ),
                    );
                    return;
                }
            };
            for claim in claims {
                if may_name.contains(&claim.root) {
                    continue;
                }
                let verb = if claim.named { "names" } else { "covers" };
                errors.push(
                    Kind::Protected,
                    format!(
                        "{}: scope[{j}] {:?} {verb} {}, agent, hook or CI configuration (it matches {:?}); a plan may not give an item such paths unless the repository lists them in plans_may_name: leave them out of the scope",
                        draft.label,
                        glob.as_str(),
                        claim.root,
                        claim.witness
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::plan::{PlanDocument, PlanLimits};

    fn claimed(text: &str) -> Vec<(String, bool)> {
        let glob: Glob = text.parse().unwrap();
        claims(&glob, &mut Budget::new(PROTECTED_WORK))
            .unwrap()
            .into_iter()
            .map(|c| (c.root, c.named))
            .collect()
    }

    #[test]
    fn an_entry_names_or_covers_the_protected_paths_it_can_reach() {
        let owned = |list: &[(&str, bool)]| -> Vec<(String, bool)> {
            list.iter().map(|(r, n)| ((*r).to_owned(), *n)).collect()
        };
        for (entry, expected) in [
            (".github/workflows/**", vec![(".github/workflows", true)]),
            (
                ".github/workflows/ci.yml",
                vec![(".github/workflows", true)],
            ),
            (".github/workflows", vec![(".github/workflows", true)]),
            (
                ".github/**",
                vec![(".github/workflows", false), (".github/actions", false)],
            ),
            (
                ".github",
                vec![(".github/workflows", false), (".github/actions", false)],
            ),
            (".claude/**", vec![(".claude", true)]),
            (".claude", vec![(".claude", true)]),
            (".claude*/**", vec![(".claude", true)]),
            (
                ".c*/**",
                vec![(".claude", false), (".codex", false), (".circleci", false)],
            ),
            (".mcp.json", vec![(".mcp.json", true)]),
            (
                "*.json",
                vec![(".mcp.json", false), ("opencode.json", false)],
            ),
            ("web/.claude/**", vec![("web/.claude", true)]),
            ("web/.mcp.json", vec![("web/.mcp.json", true)]),
            ("{.husky,src}/**", vec![(".husky", false)]),
        ] {
            let mut got = claimed(entry);
            let mut want = owned(&expected);
            got.sort();
            want.sort();
            assert_eq!(got, want, "{entry}");
        }
    }

    fn plan(scopes: &[&[&str]]) -> serde_json::Value {
        let items: Vec<serde_json::Value> = scopes
            .iter()
            .enumerate()
            .map(|(i, scope)| {
                serde_json::json!({"id": format!("i{i}"), "title": "t", "task": "t", "scope": scope,
                    "done_when": "d"})
            })
            .collect();
        serde_json::json!({"version": 1, "items": items})
    }

    fn parse(
        value: &serde_json::Value,
        may_name: &[&str],
    ) -> Result<PlanDocument, crate::tasks::plan::PlanErrors> {
        let limits = PlanLimits {
            may_name: may_name.iter().map(|p| (*p).to_owned()).collect(),
            ..PlanLimits::default()
        };
        PlanDocument::parse(value.to_string().as_bytes(), &limits)
    }

    #[test]
    fn a_planners_scope_reaching_a_protected_path_is_refused_naming_the_item_and_the_path() {
        let value = plan(&[
            &["src/api/**"],
            &["docs/**", ".github/workflows/**"],
            &[".claude"],
            &["*.json"],
            &["web/.mcp.json"],
        ]);
        let errors = parse(&value, &[]).unwrap_err();
        let lines: Vec<&str> = errors.errors().iter().map(|e| e.line()).collect();
        assert!(
            errors.errors().iter().all(|e| e.kind() == Kind::Protected),
            "{lines:?}"
        );
        let tail = "agent, hook or CI configuration";
        for expected in [
            format!(
                r#"items[1] "i1": scope[1] ".github/workflows/**" names .github/workflows, {tail} (it matches ".github/workflows")"#
            ),
            format!(
                r#"items[2] "i2": scope[0] ".claude" names .claude, {tail} (it matches ".claude")"#
            ),
            format!(
                r#"items[3] "i3": scope[0] "*.json" covers .mcp.json, {tail} (it matches ".mcp.json")"#
            ),
            format!(r#"items[3] "i3": scope[0] "*.json" covers opencode.json, {tail}"#),
            format!(r#"items[4] "i4": scope[0] "web/.mcp.json" names web/.mcp.json, {tail}"#),
        ] {
            assert!(
                lines.iter().any(|l| l.starts_with(&expected)),
                "{expected}\nin {lines:#?}"
            );
        }
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].ends_with(
            "unless the repository lists them in plans_may_name: leave them out of the scope"
        ));
        assert!(errors.retry_text().contains(".github/workflows/**"));
    }

    #[test]
    fn the_repositorys_plans_may_name_lets_exactly_those_through() {
        let value = plan(&[&[".github/workflows/**"], &[".github/**"], &["src/**"]]);
        // `.github/**` covers .github/actions too, which is not listed.
        let errors = parse(&value, &[".github/workflows"]).unwrap_err();
        let lines: Vec<&str> = errors.errors().iter().map(|e| e.line()).collect();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with(r#"items "i0" and "i1" overlap"#),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with(r#"items[1] "i1": scope[0] ".github/**" covers .github/actions"#),
            "{lines:#?}"
        );
        let value = plan(&[&[".github/workflows/**"], &["src/**"]]);
        let document = parse(&value, &[".github/workflows"]).unwrap();
        assert_eq!(
            document.items()[0].scope()[0].as_str(),
            ".github/workflows/**"
        );
        // Listing a root does not list the same name deeper down.
        let nested = plan(&[&["web/.github/workflows/**"]]);
        assert!(parse(&nested, &[".github/workflows"])
            .unwrap_err()
            .has(Kind::Protected));
        assert!(parse(&nested, &["web/.github/workflows"]).is_ok());
    }

    #[test]
    fn a_stored_plan_naming_a_protected_path_still_reads_back() {
        // Accepted when the repository allowed it (or before the check): the log stays readable, and the push
        // holds the item to what the repository allows now.
        let stored = plan(&[&[".claude/**"]]);
        let read = serde_json::from_value::<PlanDocument>(stored).unwrap();
        assert_eq!(read.items()[0].scope()[0].as_str(), ".claude/**");
    }

    #[test]
    fn ordinary_entries_claim_nothing() {
        for entry in [
            "src/**",
            "src/api/*.rs",
            "docs/{a,b}.md",
            ".github/CODEOWNERS",
            ".github/ISSUE_TEMPLATE/**",
            ".claude.md",
            ".mcp.json.bak",
            "src/.mcp.json[x]",
            ".vscode/extensions.json",
            "**/*.rs",
            "**/*.md",
            "web/**",
            "src/**/.claude/**",
            "*/.claude",
        ] {
            assert_eq!(claimed(entry), [], "{entry}");
        }
    }
}
