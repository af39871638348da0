//! The compiler remembers: a `match` over a task event (`TaskEvent`) or a task command (`Command`) in the service's
//! code names every variant, so a new event or command fails to compile wherever it must be decided (announced or
//! not, applied or refused) instead of falling silently into a `_ =>` arm. `matches!` over several variants is a
//! `match` with a hidden `_ => false` (a set decided by hand), so it counts too. Asking about one variant
//! (`matches!(event, TaskEvent::Created(_))`) or pulling its fields out (`let … else`, `if let`) is a question, not
//! a decision, and is allowed. Test code may match as it likes.

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Enums whose matches must be exhaustive, by the first segment of a pattern's path.
const DECIDED: &[&str] = &["TaskEvent", "Command"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests" || n == "bin") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The first segment of a pattern's path (`TaskEvent` in `TaskEvent::Started { .. }`), through `|` and `&`.
fn heads(pat: &syn::Pat, out: &mut Vec<String>) {
    let path = match pat {
        syn::Pat::Or(or) => {
            or.cases.iter().for_each(|p| heads(p, out));
            return;
        }
        syn::Pat::Reference(r) => return heads(&r.pat, out),
        syn::Pat::Paren(p) => return heads(&p.pat, out),
        syn::Pat::Struct(s) => &s.path,
        syn::Pat::TupleStruct(s) => &s.path,
        syn::Pat::Path(p) => &p.path,
        _ => return,
    };
    if path.segments.len() > 1 {
        if let Some(first) = path.segments.first() {
            out.push(first.ident.to_string());
        }
    }
}

fn is_wild(pat: &syn::Pat) -> bool {
    match pat {
        syn::Pat::Wild(_) => true,
        // `other =>` binds everything just as `_ =>` does.
        syn::Pat::Ident(i) => {
            i.subpat.is_none() && i.by_ref.is_none() && {
                let name = i.ident.to_string();
                name.chars().next().is_some_and(|c| c.is_lowercase())
            }
        }
        syn::Pat::Or(or) => or.cases.iter().any(is_wild),
        _ => false,
    }
}

struct Finder<'a> {
    file: &'a Path,
    source: &'a str,
    found: Vec<String>,
}

impl Finder<'_> {
    fn check(&mut self, decided: Vec<String>, wild: bool, line: usize) {
        if wild {
            if let Some(name) = decided.iter().find(|h| DECIDED.contains(&h.as_str())) {
                let file = self
                    .file
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap_or(self.file);
                let text = self
                    .source
                    .lines()
                    .nth(line.saturating_sub(1))
                    .unwrap_or("")
                    .trim();
                self.found.push(format!(
                    "{}:{line}: a wildcard over {name}: {text}",
                    file.display()
                ));
            }
        }
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        let mut decided = Vec::new();
        m.arms.iter().for_each(|arm| heads(&arm.pat, &mut decided));
        let wild = m.arms.iter().any(|arm| is_wild(&arm.pat));
        self.check(decided, wild, m.match_token.span.start().line);
        syn::visit::visit_expr_match(self, m);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if mac.path.is_ident("matches") {
            // `matches!(expr, pattern)`: a match with a hidden `_ => false`.
            let parser = |input: syn::parse::ParseStream| {
                let _: syn::Expr = input.parse()?;
                let _: syn::Token![,] = input.parse()?;
                syn::Pat::parse_multi_with_leading_vert(input)
            };
            if let Ok(pat) = syn::parse::Parser::parse2(parser, mac.tokens.clone()) {
                let mut decided = Vec::new();
                heads(&pat, &mut decided);
                let set = decided.len() > 1;
                self.check(decided, set, mac.path.segments[0].ident.span().start().line);
            }
        }
        syn::visit::visit_macro(self, mac);
    }
}

fn wildcards_in(file: &Path, source: &str) -> Vec<String> {
    let parsed = syn::parse_file(source).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut finder = Finder {
        file,
        source,
        found: Vec::new(),
    };
    finder.visit_file(&parsed);
    finder.found
}

#[test]
fn no_wildcard_over_task_events_or_commands() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 100,
        "the scan found the sources: {}",
        files.len()
    );
    let mut found = Vec::new();
    for file in files {
        // The command line's own `Command` (clap's) is another enum.
        if file.ends_with("src/main.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap();
        found.extend(wildcards_in(&file, &source));
    }
    assert!(
        found.is_empty(),
        "name every variant (a new one must be decided where it matters; `let … else` to pull one out):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_a_wildcard_when_there_is_one() {
    let planted = r#"
        fn announce(event: &TaskEvent) -> bool {
            match event {
                TaskEvent::Completed { .. } => true,
                _ => false,
            }
        }
        fn bound(command: &Command) -> u8 {
            match command { Command::Approve => 1, other => 2 }
        }
        fn hidden(event: &TaskEvent) -> bool {
            matches!(event, TaskEvent::Started { .. } | TaskEvent::Retried { .. })
        }
        fn asked(event: &TaskEvent) -> bool { matches!(event, TaskEvent::Created(_)) }
        fn pulled(event: &TaskEvent) -> Option<u8> {
            let TaskEvent::Started { .. } = event else { return None };
            Some(1)
        }
        fn other(column: Column) -> bool { match column { Column::Done => true, _ => false } }
        #[cfg(test)]
        mod tests {
            fn free(event: &TaskEvent) -> bool { match event { TaskEvent::Completed { .. } => true, _ => false } }
        }
    "#;
    let found = wildcards_in(Path::new("planted.rs"), planted);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].contains("planted.rs:3: a wildcard over TaskEvent"),
        "{found:#?}"
    );
    assert!(found[1].contains("over Command"), "{found:#?}");
    assert!(found[2].contains("matches!"), "{found:#?}");
}
