//! A task's scope read as rules. A spec's scope is free text: a plan writes it as globs joined with `, `
//! ([`Scope`]'s `Display`), a person may write a list of paths, or a sentence. [`Scope::parse`] tells them apart;
//! only a list of globs can be enforced (after an attempt, [`Scope::outside`] names the changed files no glob
//! matches).

use std::fmt;

use super::glob::Glob;

/// An enforceable scope: one or more globs. A path is in scope when any of them matches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    globs: Vec<Glob>,
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
