//! A task's scope read as rules. A spec's scope is free text: a plan writes it as globs joined with `, `
//! ([`Scope`]'s `Display`), a person may write a list of paths, or a sentence. [`Scope::parse`] tells them apart;
//! only a list of globs can be enforced (after an attempt, [`Scope::outside`] names the changed files no glob
//! matches).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::glob::Glob;

/// An enforceable scope: one or more globs. A path is in scope when any of them matches it. Stored on a plan's
/// item task as the list of its globs (`["src/api/**"]`), read back through [`Scope::new`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Glob>", into = "Vec<Glob>")]
pub struct Scope {
    globs: Vec<Glob>,
}

impl TryFrom<Vec<Glob>> for Scope {
    type Error = &'static str;
    fn try_from(globs: Vec<Glob>) -> Result<Self, Self::Error> {
        Scope::new(globs).ok_or("a scope is one or more globs without whitespace or backticks")
    }
}

impl From<Scope> for Vec<Glob> {
    fn from(scope: Scope) -> Self {
        scope.globs
    }
}

/// What a scope text says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeText {
    /// Every entry is a glob: enforceable.
    Paths(Scope),
    /// Text that is not a list of globs ("the API module only"): shown to the agent, not enforced.
    Prose,
    /// Nothing, or a placeholder such as `n/a`.
    Empty,
}

/// Whole scope texts that mean "no scope" in issue templates. Read as globs they would be paths (`n/a` is the
/// directory `n`'s file `a`), and every change would be out of scope.
const PLACEHOLDERS: [&str; 6] = ["-", "—", "n/a", "none", "tbd", "any"];

/// Words a planner writes for "no particular paths" rather than a path. A plan's scope entry that is one of them
/// (any case, trimmed) is refused ([`Scope::placeholder`]); `docs/plans.md` lists them.
pub const PLACEHOLDER_WORDS: [&str; 25] = [
    "-",
    "--",
    "—",
    "–",
    "n/a",
    "na",
    "n.a.",
    "none",
    "nothing",
    "null",
    "nil",
    "tbd",
    "tba",
    "todo",
    "unknown",
    "any",
    "anything",
    "all",
    "everything",
    "whatever",
    "various",
    "same",
    "...",
    "…",
    "?",
];

impl Scope {
    /// A scope of these globs; `None` when there are none, or when one could not be written back into a scope
    /// line and read again (see [`Scope::holds`]).
    pub fn new(globs: Vec<Glob>) -> Option<Scope> {
        (!globs.is_empty() && globs.iter().all(Scope::holds)).then_some(Scope { globs })
    }

    /// Whether `glob` survives the text form: scope lines are trimmed and cleaned of backticks, and an entry with
    /// whitespace reads as prose, so a glob with whitespace or a backtick cannot be part of a scope.
    pub fn holds(glob: &Glob) -> bool {
        !glob.as_str().chars().any(|c| c.is_whitespace() || c == '`')
    }

    /// Reads a scope a person wrote (a ticket's "Scope:", the API's `scope`): like [`Scope::parse`], but paths only
    /// when they look like paths: some entry has a `/`, a `.` or a glob character. "everything", "backend" or
    /// "API" alone are words, read as prose and never enforced (a false "outside the scope" would fail every
    /// attempt; a plan's items, whose scopes a planner wrote as paths, are read with [`Scope::parse`]).
    pub fn parse_written(text: &str) -> ScopeText {
        // The text as written: a glob's canonical form drops a trailing `/` (`src/` is `src`).
        let looks_like_paths = text.contains(['/', '.', '*', '?', '[', '{']);
        match Self::parse(text) {
            ScopeText::Paths(scope) if looks_like_paths => ScopeText::Paths(scope),
            ScopeText::Paths(_) => ScopeText::Prose,
            other => other,
        }
    }

    /// Reads a scope text. Entries are separated by commas (outside `{...}` and `[...]`) and newlines, never by
    /// spaces; each is trimmed, cleaned of a leading markdown bullet (`- `, `* `) and of surrounding backticks,
    /// and empty entries are dropped. When every entry is a glob without whitespace the text is
    /// [`ScopeText::Paths`]; otherwise it is [`ScopeText::Prose`].
    pub fn parse(text: &str) -> ScopeText {
        let entries: Vec<&str> = split(text)
            .into_iter()
            .map(clean)
            .filter(|e| !e.is_empty())
            .collect();
        match entries.as_slice() {
            [] => return ScopeText::Empty,
            [one] if PLACEHOLDERS.iter().any(|p| one.eq_ignore_ascii_case(p)) => {
                return ScopeText::Empty;
            }
            _ => {}
        }
        let globs: Option<Vec<Glob>> = entries
            .iter()
            .map(|e| e.parse::<Glob>().ok().filter(Scope::holds))
            .collect();
        match globs.and_then(Scope::new) {
            Some(scope) => ScopeText::Paths(scope),
            None => ScopeText::Prose,
        }
    }

    pub fn globs(&self) -> &[Glob] {
        &self.globs
    }

    /// Why a plan's scope entry names no path, if it does not: empty or blank, a placeholder word
    /// ([`PLACEHOLDER_WORDS`]), or a pattern of wildcards alone (`*`, `**`, `?`, `*/**`: every file, or every
    /// file of a depth, which is no scope at all). `None` for an entry that names something.
    pub fn placeholder(entry: &str) -> Option<&'static str> {
        let trimmed = entry.trim();
        if trimmed.is_empty() {
            return Some("is empty or blank");
        }
        if PLACEHOLDER_WORDS
            .iter()
            .any(|word| trimmed.eq_ignore_ascii_case(word))
        {
            return Some("is a placeholder, not a path");
        }
        let wildcards_only = trimmed.chars().all(|c| matches!(c, '*' | '?' | '/' | '.'));
        if wildcards_only {
            return Some("names no path: wildcards alone match every file");
        }
        None
    }

    /// Whether this scope names `path` explicitly: some glob matches it, and that glob's literal prefix (the text
    /// before its first wildcard) reaches the end of `root`, the part of the path that makes it special (a
    /// protected directory such as `.claude`, a protected file such as `.mcp.json`, a submodule's path).
    /// `.claude/**` and `.claude/settings.json` name `.claude/settings.json`; `**`, `.c*/**` and `*.json` do not.
    pub fn names(&self, path: &str, root: &str) -> bool {
        self.globs.iter().any(|glob| {
            let text = glob.as_str();
            let literal = text
                .find(['*', '?', '[', '{'])
                .map_or(text, |wild| &text[..wild]);
            glob.matches(path) && literal.len() >= root.len() && literal.starts_with(root)
        })
    }

    /// Whether any glob matches `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }

    /// The changed files no glob matches, sorted and without repeats.
    pub fn outside(&self, changed: &[String]) -> Vec<String> {
        let mut outside: Vec<String> = changed
            .iter()
            .filter(|path| !self.matches(path))
            .cloned()
            .collect();
        outside.sort();
        outside.dedup();
        outside
    }
}

/// Splits at newlines, and at commas outside `{...}` and `[...]` (where they belong to a glob).
fn split(text: &str) -> Vec<&str> {
    let mut entries = Vec::new();
    let (mut start, mut in_class, mut in_brace) = (0, false, false);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => {
                entries.push(&text[start..i]);
                start = i + 1;
                (in_class, in_brace) = (false, false);
            }
            ',' if !in_class && !in_brace => {
                entries.push(&text[start..i]);
                start = i + 1;
            }
            '[' if !in_class => {
                in_class = true;
                // As in a glob: `]` first (after an optional `!` or `^`) is a member, not the end.
                chars.next_if(|&(_, c)| c == '!' || c == '^');
                chars.next_if(|&(_, c)| c == ']');
            }
            ']' if in_class => in_class = false,
            '{' if !in_class => in_brace = true,
            '}' if !in_class => in_brace = false,
            _ => {}
        }
    }
    entries.push(&text[start..]);
    entries
}

/// Trims an entry and removes a markdown bullet and surrounding backticks.
fn clean(entry: &str) -> &str {
    let entry = entry.trim();
    let entry = entry
        .strip_prefix("- ")
        .or_else(|| entry.strip_prefix("* "))
        .unwrap_or(entry)
        .trim();
    match entry.strip_prefix('`').and_then(|e| e.strip_suffix('`')) {
        Some(inner) => inner.trim(),
        None => entry,
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, glob) in self.globs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{glob}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn paths(text: &str) -> Scope {
        match Scope::parse(text) {
            ScopeText::Paths(scope) => scope,
            other => panic!("{text:?} should be paths, got {other:?}"),
        }
    }

    fn texts(scope: &Scope) -> Vec<&str> {
        scope.globs().iter().map(Glob::as_str).collect()
    }

    #[test]
    fn a_comma_separated_list_of_globs_is_paths() {
        let scope = paths("src/api/**, docs/api.md");
        assert_eq!(texts(&scope), ["src/api/**", "docs/api.md"]);
        assert_eq!(scope.to_string(), "src/api/**, docs/api.md");
        assert_eq!(
            texts(&paths("src/api/**,docs/api.md,")),
            ["src/api/**", "docs/api.md"]
        );
    }

    #[test]
    fn markdown_bullets_backticks_and_newlines_are_cleaned() {
        let text = "- `src/api/**`\n* docs/api.md\r\n  `Cargo.toml`  \n\n";
        assert_eq!(
            texts(&paths(text)),
            ["src/api/**", "docs/api.md", "Cargo.toml"]
        );
        assert_eq!(texts(&paths("`src/{a,b}.rs`")), ["src/{a,b}.rs"]);
    }

    #[test]
    fn commas_inside_alternatives_and_classes_belong_to_the_glob() {
        assert_eq!(
            texts(&paths("docs/{a,b}.md, x[,]y, src/**")),
            ["docs/{a,b}.md", "x[,]y", "src/**"]
        );
    }

    #[test]
    fn sentences_are_prose() {
        for text in [
            "the API module only",
            "src/api/**, and the docs",
            "Only touch src/api",
            "src/api/** (not the tests)",
            "src//api",
            "/etc/passwd",
            "- src/api/**\n- whatever the reviewer says",
        ] {
            assert_eq!(Scope::parse(text), ScopeText::Prose, "{text:?}");
        }
    }

    #[test]
    fn nothing_or_a_placeholder_is_empty() {
        for text in ["", "  ", ",\n, ", "- ", "``", "N/A", "none", "-", "TBD"] {
            assert_eq!(Scope::parse(text), ScopeText::Empty, "{text:?}");
        }
    }

    #[test]
    fn a_written_scope_is_paths_only_when_it_looks_like_paths() {
        for words in ["everything", "backend", "API", "Makefile"] {
            assert_eq!(Scope::parse_written(words), ScopeText::Prose, "{words}");
            assert!(
                matches!(Scope::parse(words), ScopeText::Paths(_)),
                "{words}"
            );
        }
        for written in [
            "CHANGES.md",
            "src/",
            "src/api/**",
            "docs, src/lib.rs",
            "*.md",
            "Makefile, ci/",
        ] {
            assert!(
                matches!(Scope::parse_written(written), ScopeText::Paths(_)),
                "{written}"
            );
        }
        assert_eq!(
            Scope::parse_written("the API module only"),
            ScopeText::Prose
        );
        assert_eq!(Scope::parse_written("n/a"), ScopeText::Empty);
    }

    #[test]
    fn outside_lists_the_changed_files_no_glob_matches_sorted_once() {
        let scope = paths("src/api/**, docs/api.md");
        let changed: Vec<String> = [
            "src/web/b.ts",
            "src/api/x.rs",
            "docs/api.md",
            "README.md",
            "src/web/b.ts",
            "src/api",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(scope.outside(&changed), ["README.md", "src/web/b.ts"]);
        assert!(scope.outside(&[]).is_empty());
    }

    #[test]
    fn a_scope_needs_globs_that_survive_its_text_form() {
        assert_eq!(Scope::new(Vec::new()), None);
        let spaced: Glob = "my docs/**".parse().unwrap();
        let ticked: Glob = "`a`".parse().unwrap();
        assert!(!Scope::holds(&spaced) && !Scope::holds(&ticked));
        assert_eq!(Scope::new(vec![spaced]), None);
        assert_eq!(Scope::new(vec![ticked]), None);
        let plain: Glob = "src".parse().unwrap();
        assert!(Scope::new(vec![plain]).is_some());
    }

    #[test]
    fn a_scope_is_stored_as_its_list_of_globs_and_read_back_only_when_valid() {
        let scope = paths("src/api/**, docs/api.md");
        let stored = serde_json::to_value(&scope).unwrap();
        assert_eq!(stored, serde_json::json!(["src/api/**", "docs/api.md"]));
        assert_eq!(serde_json::from_value::<Scope>(stored).unwrap(), scope);
        for bad in [
            serde_json::json!([]),
            serde_json::json!(["/etc"]),
            serde_json::json!(["my docs"]),
            serde_json::json!("src/**"),
        ] {
            assert!(
                serde_json::from_value::<Scope>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_scope_names_a_path_only_through_an_entry_whose_literal_part_reaches_it() {
        let scope = paths(".claude/**, src/**, *.json, .c*/x");
        assert!(scope.names(".claude/settings.json", ".claude"));
        assert!(!scope.names(".codex/x", ".codex"));
        assert!(
            !scope.names(".mcp.json", ".mcp.json"),
            "*.json matches but names nothing"
        );
        assert!(paths(".mcp.json").names(".mcp.json", ".mcp.json"));
        assert!(!paths("**").names(".mcp.json", ".mcp.json"));
        assert!(
            !paths(".claude/x").names(".claude/y", ".claude"),
            "must match too"
        );
    }

    #[test]
    fn placeholders_and_bare_wildcards_name_no_path() {
        for entry in [
            "", " ", "N/A", "none", "-", "tbd", "Any", "ALL", "*", "**", "?", "*/**", "**/*",
        ] {
            assert!(Scope::placeholder(entry).is_some(), "{entry:?}");
        }
        for entry in ["src", "none.md", "*.md", "n/a/b", "a?", "docs/todo"] {
            assert_eq!(Scope::placeholder(entry), None, "{entry:?}");
        }
    }

    fn any_glob() -> impl Strategy<Value = Glob> {
        prop::sample::select(vec![
            "src/**",
            "docs/{a,b}.md",
            "x[,]y",
            "*.md",
            "a/**/b",
            "src/api",
            "x[!]]",
            "-x",
            "{,a}b",
            "Cargo{,.lock}",
            "[*]",
            "é/ü",
            "a-b_c.d",
        ])
        .prop_map(|t| t.parse::<Glob>().unwrap())
    }

    proptest! {
        #[test]
        fn the_text_form_reads_back(globs in prop::collection::vec(any_glob(), 1..6)) {
            let scope = Scope::new(globs).unwrap();
            prop_assert_eq!(Scope::parse(&scope.to_string()), ScopeText::Paths(scope.clone()));
            let bullets: String = scope.globs().iter().map(|g| format!("- `{g}`\n")).collect();
            prop_assert_eq!(Scope::parse(&bullets), ScopeText::Paths(scope));
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,60}|[a*,\\[\\]{}`\n -]{0,30}") {
            let _ = Scope::parse(&text);
        }
    }
}
