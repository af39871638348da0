use super::*;
use crate::tasks::plan::ScopeText;

fn scope(text: &str) -> Scope {
    match Scope::parse(text) {
        ScopeText::Paths(scope) => scope,
        other => panic!("{text}: {other:?}"),
    }
}

fn link(path: &str, target: &str) -> Change {
    Change {
        path: path.to_owned(),
        entry: Entry::Symlink(Some(target.to_owned())),
    }
}

/// The commit's links beyond the changed ones.
fn tree(links: &[(&str, &str)]) -> Links {
    let mut tree = Links::default();
    for (path, target) in links {
        tree.set_target(path, Some((*target).to_owned()));
    }
    tree
}

fn person(scope: Option<&Scope>, changes: &[Change]) -> Judged {
    judge(scope, Author::Person, changes, &Links::default())
}

#[test]
fn protected_paths_are_found_at_any_depth_by_whole_segments() {
    for (path, root) in [
        (".claude/settings.json", Some(".claude")),
        ("pkg/.claude/hooks/x.sh", Some("pkg/.claude")),
        (".mcp.json", Some(".mcp.json")),
        ("web/.mcp.json", Some("web/.mcp.json")),
        (".github/workflows/planted.yml", Some(".github/workflows")),
        (".github/CODEOWNERS", None),
        (".github", None),
        // A protected directory's own path: a link or a file put in its place.
        (".github/workflows", Some(".github/workflows")),
        (".claude", Some(".claude")),
        ("pkg/.husky", Some("pkg/.husky")),
        (".vscode/settings.json", Some(".vscode/settings.json")),
        (".vscode/extensions.json", None),
        (".vscode", None),
        ("opencode.jsonc", Some("opencode.jsonc")),
        ("opencode.jsonc/x", None),
        ("docs/.claude.md", None),
        (".claudex/a", None),
        (".husky/pre-commit", Some(".husky")),
        ("src/main.rs", None),
    ] {
        assert_eq!(protected_root(path), root, "{path}");
    }
}

#[test]
fn a_protected_path_is_refused_unless_the_scope_names_it() {
    let changes = [
        Change::file(".claude/settings.json"),
        Change::file("src/a.rs"),
    ];
    for scope_text in ["**", "src/**, .c*/**", "*.json, src/**"] {
        let judged = person(Some(&scope(scope_text)), &changes);
        assert_eq!(
            judged.refused,
            [".claude/settings.json (agent or hook configuration)"],
            "{scope_text}"
        );
    }
    let unscoped = person(None, &changes);
    assert_eq!(unscoped.refused.len(), 1);
    assert!(unscoped.outside.is_empty());
    for naming in [
        ".claude/**, src/**",
        ".claude, src",
        ".claude/settings.json, src/*.rs",
    ] {
        let judged = person(Some(&scope(naming)), &changes);
        assert!(judged.refused.is_empty(), "{naming}: {judged:?}");
        assert_eq!(judged.named, [".claude/settings.json"], "{naming}");
        assert!(judged.outside.is_empty(), "{naming}");
    }
}

#[test]
fn a_planners_scope_names_a_protected_path_only_where_the_repository_lets_it() {
    let changes = [
        Change::file(".claude/settings.json"),
        Change::file(".github/workflows/ci.yml"),
        link("src/ci.yml", "../.github/workflows/ci.yml"),
    ];
    let naming = scope(".claude/**, .github/workflows/**, src/**");
    let judged = judge(
        Some(&naming),
        Author::Planner(&[]),
        &changes,
        &Links::default(),
    );
    assert!(judged.named.is_empty(), "{judged:?}");
    assert_eq!(
        judged.refused,
        [
            ".claude/settings.json (agent or hook configuration: a plan's item may not name .claude; the \
             repository's plans_may_name does not list it)",
            ".github/workflows/ci.yml (agent or hook configuration: a plan's item may not name \
             .github/workflows; the repository's plans_may_name does not list it)",
            "src/ci.yml (a symbolic link to agent or hook configuration: .github/workflows/ci.yml)",
        ]
    );
    let allowed = [".github/workflows".to_owned()];
    let judged = judge(
        Some(&naming),
        Author::Planner(&allowed),
        &changes,
        &Links::default(),
    );
    assert_eq!(judged.named, [".github/workflows/ci.yml"]);
    assert_eq!(
        judged.refused,
        [".claude/settings.json (agent or hook configuration: a plan's item may not name .claude; the \
          repository's plans_may_name does not list it)"]
    );
    // Allowing a root at the top does not allow the same name deeper down, nor the other way round.
    let nested = [Change::file("web/.claude/settings.json")];
    let judged = judge(
        Some(&scope("web/.claude/**")),
        Author::Planner(&[".claude".to_owned()]),
        &nested,
        &Links::default(),
    );
    assert_eq!(judged.refused.len(), 1, "{judged:?}");
    // A person's scope names what it names.
    assert_eq!(person(Some(&naming), &changes).named.len(), 2);
}

#[test]
fn a_link_out_of_the_repository_or_the_scope_or_to_configuration_is_caught() {
    let api = scope("src/api/**");
    let judged = person(
        Some(&api),
        &[
            link("src/api/passwd", "../../../etc/passwd"),
            link("src/api/web", "../web/page.ts"),
            link("src/api/ok", "handlers.rs"),
            link("src/api/hooks", "../../.claude/settings.json"),
            link("src/api/abs", "/etc/passwd"),
            Change {
                path: "src/api/bad".into(),
                entry: Entry::Symlink(None),
            },
        ],
    );
    assert_eq!(
        judged.refused,
        [
            "src/api/abs (a symbolic link out of the repository: an absolute target)",
            "src/api/bad (a symbolic link whose target is no path)",
            "src/api/hooks (a symbolic link to agent or hook configuration: .claude/settings.json)",
            "src/api/passwd (a symbolic link out of the repository: .. above its root)",
        ]
    );
    assert_eq!(
        judged.outside,
        [
            "src/api/hooks (links to .claude/settings.json)",
            "src/api/web (links to src/web/page.ts)",
        ]
    );
    // Without a scope only the repository's bounds and the protected paths hold.
    let unscoped = person(None, &[link("l", "../x"), link("docs/l", "../src/x")]);
    assert_eq!(
        unscoped.refused,
        ["l (a symbolic link out of the repository: .. above its root)"]
    );
    assert!(unscoped.outside.is_empty());
}

#[test]
fn a_chain_through_the_commits_links_is_judged_by_its_end() {
    let api = scope("src/api/**");
    let links = tree(&[
        ("src/api/b", "../../.github/workflows/x.yml"),
        ("src/api/d", "../../other-item"),
        ("src/api/e", "f"),
        ("src/api/f", "e"),
        ("src/api/up", "../.."),
        ("src/api/here", "."),
    ]);
    let judged = judge(
        Some(&api),
        Author::Person,
        &[
            link("src/api/a", "b"),
            link("src/api/c", "d/file.rs"),
            link("src/api/loop", "e"),
            link("src/api/out", "up/../etc"),
            link("src/api/fine", "here/here/x.rs"),
        ],
        &links,
    );
    let through = |links: &[&str]| links.join(" -> ");
    assert_eq!(judged.refused.len(), 3, "{judged:?}");
    assert_eq!(
        judged.refused[0],
        "src/api/a (a symbolic link to agent or hook configuration: .github/workflows/x.yml, through src/api/b)"
    );
    assert!(
        judged.refused[1].starts_with(&format!(
            "src/api/loop (a loop of symbolic links, through {} -> … (40 links))",
            through(&[
                "src/api/e",
                "src/api/f",
                "src/api/e",
                "src/api/f",
                "src/api/e"
            ])
        )),
        "{}",
        judged.refused[1]
    );
    assert_eq!(
        judged.refused[2],
        "src/api/out (a symbolic link out of the repository: .. above its root, through src/api/up)"
    );
    assert_eq!(
        judged.outside,
        [
            "src/api/a (links to .github/workflows/x.yml)",
            "src/api/c (links to other-item/file.rs)",
        ]
    );
}

#[test]
fn a_link_in_a_protected_directorys_place_is_protected() {
    // `.claude -> notes`: the CLI reads notes/settings.json as .claude/settings.json, and notes/ is in scope.
    let judged = person(Some(&scope("notes/**")), &[link(".claude", "notes")]);
    assert_eq!(judged.refused, [".claude (agent or hook configuration)"]);
    assert_eq!(judged.outside, [".claude"]);
    // A link to a protected directory itself.
    let judged = person(
        Some(&scope("src/**")),
        &[link("src/w", "../.github/workflows")],
    );
    assert_eq!(
        judged.refused,
        ["src/w (a symbolic link to agent or hook configuration: .github/workflows)"]
    );
}

#[test]
fn every_link_met_is_read_before_the_judgement_and_one_unread_is_refused() {
    let changes = [
        link("src/a", "b/x"),
        link("src/c", "d"),
        Change::file("src/y"),
    ];
    let mut links = Links::default();
    links.add("src/b", "01");
    assert_eq!(unread(&changes, &links), ["src/b"]);
    let judged = judge(None, Author::Person, &changes, &links);
    assert_eq!(
        judged.refused,
        ["src/a (a symbolic link through src/b, whose target was not read)"]
    );
    links.set_target("src/b", Some("../../etc".into()));
    assert!(unread(&changes, &links).is_empty());
    let judged = judge(None, Author::Person, &changes, &links);
    assert_eq!(
        judged.refused,
        ["src/a (a symbolic link out of the repository: .. above its root, through src/b)"]
    );
}

#[test]
fn a_gitlink_is_refused_unless_the_scope_names_its_path() {
    let gitlink = Change {
        path: "vendor/lib".into(),
        entry: Entry::Gitlink,
    };
    for scope_text in ["vendor/**", "**", "vendor/*"] {
        let judged = person(Some(&scope(scope_text)), std::slice::from_ref(&gitlink));
        assert_eq!(
            judged.refused,
            ["vendor/lib (a gitlink: a submodule's commit)"],
            "{scope_text}"
        );
    }
    assert_eq!(
        person(None, std::slice::from_ref(&gitlink)).refused.len(),
        1
    );
    let named = person(Some(&scope("vendor/lib")), std::slice::from_ref(&gitlink));
    assert_eq!(named, Judged::default());
}

/// `agent_config::PATHS` is part of [`PROTECTED`] by construction; what is checked here is that the two matchers
/// over it agree: every path a reviewer's set-aside removes (`is_agent_config`) is refused in a push.
#[test]
fn what_is_set_aside_as_agent_configuration_is_protected() {
    use crate::tasks::agent_config::{is_agent_config, PATHS};
    for config in PATHS {
        let name = config.name();
        let mut at_root = vec![name.to_owned()];
        if config.is_dir() {
            at_root.push(format!("{name}/settings.json"));
            at_root.push(format!("{name}/a/b.ts"));
        }
        for probe in at_root {
            assert!(is_agent_config(&probe), "{probe}");
            assert_eq!(protected_root(&probe), Some(name), "{probe}");
            let nested = format!("web/{probe}");
            assert_eq!(
                protected_root(&nested),
                Some(format!("web/{name}").as_str()),
                "{nested}"
            );
        }
    }
    assert_eq!(protected().count(), PATHS.len() + HOOKS_AND_CI.len());
}
