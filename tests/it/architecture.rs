//! The module graph keeps data flowing one way, and it is read from the source as the compiler would: `syn` parses
//! every file of `src/` (the library: not main.rs, not bin/), and every path that names a module of this crate
//! (`crate::`, `super::`, `self::`, a child module, a name imported with `use`, re-exports followed, paths inside
//! macro calls and attributes) is an import of that module. A top-level module is the union of `x.rs`, `x/mod.rs`
//! and `x/`; so is every module inside a folder. Only test code is skipped: `tests.rs`, files under a `tests/`
//! folder, and items marked `#[cfg(test)]` (an inline `mod tests { … }`, or the file of `#[cfg(test)] mod x;`).
//!
//! What is asserted:
//! - top-level modules import only their own or lower layers (`LAYERS`, the table AGENTS.md and src/lib.rs show);
//!   every top-level module is placed, so a new one fails until it is;
//! - no import cycle between top-level modules;
//! - the import cycles between sibling modules of one folder are exactly `KNOWN_FOLDER_CYCLES`: a new one fails,
//!   and so does a broken one still listed, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// The layers, lowest first: a top-level module imports only modules of its own layer or a lower one.
const LAYERS: &[(&str, &[&str])] = &[
    ("foundation", &["tasks", "domain", "telemetry"]),
    ("infrastructure", &["eventlog", "loops", "bus"]),
    ("read models", &["projectors"]),
    ("command side", &["board"]),
    (
        "policies",
        &[
            "budgets", "cron", "intake", "pollers", "effects", "receipts",
        ],
    ),
    ("configuration", &["config"]),
    (
        "workers",
        &[
            "dispatch",
            "ingress",
            "plans",
            "reactions",
            "landing",
            "whatif",
        ],
    ),
    ("providers", &["providers"]),
    ("surfaces", &["http", "init"]),
    ("start-up", &["startup"]),
    ("front ends", &["doctor", "cli", "bench"]),
];

/// Import cycles between sibling modules of one folder that are known, each with why it stays: (folder, the
/// modules of the cycle sorted, why).
const KNOWN_FOLDER_CYCLES: &[(&str, &[&str], &str)] = &[
    (
        "config",
        &["dispatch", "file", "plans", "profiles", "repo_env"],
        "file/ reads pidevops.toml into the typed values the others define, and they are built from file's tables",
    ),
    (
        "tasks/domain",
        &[
            "combined",
            "conflict",
            "decision",
            "event",
            "evolution",
            "family",
            "landing",
            "refresh_check",
            "resume",
            "ticket",
        ],
        "one aggregate split by topic: decide and evolve read every part's events and facts, and each part's \
         rules are written against Task, its events and decide's errors",
    ),
];

/// A module's path from the crate root: `["effects", "runner"]`; the root is `[]`.
type ModPath = Vec<String>;

/// Folder (a module path) -> importing child -> imported sibling -> one file where it happens.
type Edges = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, PathBuf>>>;

struct Graph {
    modules: BTreeSet<ModPath>,
    edges: Edges,
}

impl Graph {
    fn folder(&self, folder: &[&str]) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
        let folder: ModPath = folder.iter().map(|s| s.to_string()).collect();
        self.edges.get(&folder).cloned().unwrap_or_default()
    }

    fn top_level(&self) -> BTreeSet<String> {
        self.modules
            .iter()
            .filter(|m| m.len() == 1)
            .map(|m| m[0].clone())
            .collect()
    }
}

/// What one file's non-test code names.
#[derive(Default)]
struct FileScan {
    file: PathBuf,
    /// The module the visitor is in: the file's, then its inline modules'.
    at: ModPath,
    /// Modules declared `#[cfg(test)] mod x;`: their files are test code.
    test_children: Vec<ModPath>,
    inline_modules: Vec<ModPath>,
    /// (module, name, path as written): what `use` brings into a module.
    imports: Vec<(ModPath, String, Vec<String>)>,
    /// (module, path as written).
    references: Vec<(ModPath, Vec<String>)>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string().trim() == "test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

impl FileScan {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => self.import(prefix, None),
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.import(prefix, None);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.import(prefix, Some(r.rename.to_string()));
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.references.push((self.at.clone(), prefix.clone())),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn import(&mut self, path: &[String], rename: Option<String>) {
        let Some(last) = path.last() else { return };
        let name = rename.unwrap_or_else(|| last.clone());
        self.imports.push((self.at.clone(), name, path.to_vec()));
        self.references.push((self.at.clone(), path.to_vec()));
    }

    /// Paths in tokens the parser leaves unparsed (macro calls, attributes): `a::b::c` runs of identifiers.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |run: &mut Vec<String>, this: &mut Self| {
            if run.len() > 1 {
                this.references.push((this.at.clone(), std::mem::take(run)));
            }
            run.clear();
        };
        for token in tokens {
            match token {
                TokenTree::Ident(ident) => {
                    if colons != 2 {
                        flush(&mut run, self);
                    }
                    run.push(ident.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' => {
                    colons += 1;
                    if colons == 1 && p.spacing() != Spacing::Joint {
                        colons = 3; // a lone ':' ends the run
                    }
                }
                // `$crate::…` in a macro_rules! body is this crate.
                TokenTree::Punct(p) if p.as_char() == '$' => {
                    flush(&mut run, self);
                    colons = 0;
                }
                TokenTree::Group(g) => {
                    flush(&mut run, self);
                    colons = 0;
                    self.tokens(g.stream());
                }
                _ => {
                    flush(&mut run, self);
                    colons = 0;
                }
            }
        }
        flush(&mut run, self);
    }
}

impl<'ast> Visit<'ast> for FileScan {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_cfg_test(item_attrs(item)) {
            if let syn::Item::Mod(m) = item {
                if m.content.is_none() {
                    let mut child = self.at.clone();
                    child.push(m.ident.to_string());
                    self.test_children.push(child);
                }
            }
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_cfg_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let Some((_, items)) = &m.content else {
            assert!(
                !m.attrs.iter().any(|a| a.path().is_ident("path")),
                "{}: `#[path] mod {}` outside tests: the scan maps files to modules by their place",
                self.file.display(),
                m.ident
            );
            return;
        };
        self.at.push(m.ident.to_string());
        self.inline_modules.push(self.at.clone());
        items.iter().for_each(|i| self.visit_item(i));
        self.at.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.references.push((self.at.clone(), segments));
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &attr.meta {
            if !attr.path().is_ident("cfg") {
                self.tokens(list.tokens.clone());
            }
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/effects/runner.rs` and `src/effects/runner/mod.rs` -> `["effects", "runner"]`; None for what is not the
/// library (main.rs, bin/) or is test code by its place (tests.rs, a `tests/` folder).
fn module_of(src: &Path, file: &Path) -> Option<ModPath> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let first = parts.first()?.as_str();
    if ["main", "bin"].contains(&first) || parts.iter().any(|p| p == "tests") {
        return None;
    }
    if parts == ["lib"] {
        return Some(Vec::new());
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

struct Resolver {
    modules: BTreeSet<ModPath>,
    imports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
}

impl Resolver {
    /// A path as written in `module`, made absolute; None when it is not this crate's (std, a dependency, a local).
    fn absolute(&self, module: &[String], path: &[String], depth: usize) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        if depth > 16 {
            return None;
        }
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some([module, rest].concat()),
            "super" => {
                let parent = &module[..module.len().checked_sub(1)?];
                if rest.first().is_some_and(|r| r == "super") {
                    self.absolute(parent, rest, depth + 1)
                } else {
                    Some([parent, rest].concat())
                }
            }
            name => {
                let child = [module, &[name.to_owned()]].concat();
                if self.modules.contains(&child) {
                    return Some([module, path].concat());
                }
                let imported = self.imports.get(module)?.get(name)?;
                if imported.len() == 1 && imported[0] == name {
                    return None; // `use serde;`-style: a dependency
                }
                let base = self.absolute(module, imported, depth + 1)?;
                Some([base.as_slice(), rest].concat())
            }
        }
    }

    /// The module an absolute path lands in, following re-exports (`pub use`, and private imports a child reaches
    /// through `super::`).
    fn module_of(&self, path: &[String], depth: usize) -> ModPath {
        let mut at: ModPath = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let child = [at.as_slice(), std::slice::from_ref(segment)].concat();
            if self.modules.contains(&child) {
                at = child;
                continue;
            }
            if depth < 16 {
                if let Some(imported) = self.imports.get(&at).and_then(|m| m.get(segment)) {
                    if let Some(target) = self.absolute(&at, imported, 0) {
                        if target != path[..=i] {
                            let whole = [target.as_slice(), &path[i + 1..]].concat();
                            return self.module_of(&whole, depth + 1);
                        }
                    }
                }
            }
            break;
        }
        at
    }
}

/// The import graph of the library under `src`, test code left out.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut scans = Vec::new();
    for file in files {
        let Some(module) = module_of(src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut scan = FileScan {
            file: file.clone(),
            at: module.clone(),
            ..FileScan::default()
        };
        scan.visit_file(&parsed);
        scans.push((module, scan));
    }
    let test_modules: BTreeSet<ModPath> = scans
        .iter()
        .flat_map(|(_, s)| s.test_children.clone())
        .collect();
    scans.retain(|(module, _)| !test_modules.iter().any(|t| module.starts_with(t)));

    let mut resolver = Resolver {
        modules: BTreeSet::new(),
        imports: BTreeMap::new(),
    };
    for (module, scan) in &scans {
        for m in std::iter::once(module).chain(&scan.inline_modules) {
            for depth in 0..=m.len() {
                resolver.modules.insert(m[..depth].to_vec());
            }
        }
        for (at, name, path) in &scan.imports {
            resolver
                .imports
                .entry(at.clone())
                .or_default()
                .insert(name.clone(), path.clone());
        }
    }
    let mut edges = Edges::new();
    for (_, scan) in &scans {
        for (at, path) in &scan.references {
            let Some(absolute) = resolver.absolute(at, path, 0) else {
                continue;
            };
            let target = resolver.module_of(&absolute, 0);
            let common = at.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < at.len() && common < target.len() {
                edges
                    .entry(at[..common].to_vec())
                    .or_default()
                    .entry(at[common].clone())
                    .or_default()
                    .entry(target[common].clone())
                    .or_insert_with(|| scan.file.clone());
            }
        }
    }
    Graph {
        modules: resolver.modules,
        edges,
    }
}

fn graph() -> Graph {
    graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn shown(file: &Path) -> String {
    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(file)
        .display()
        .to_string()
}

/// The cycles of one folder's graph: its strongly connected sets of two or more modules, each sorted.
fn cycles(edges: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(at) = stack.pop() {
            for next in edges.get(&at).into_iter().flat_map(|t| t.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, from_m) in &reaches {
        if !from_m.contains(*m) {
            continue;
        }
        let set: Vec<String> = from_m
            .iter()
            .filter(|o| reaches.get(o).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        found.insert(set);
    }
    found.into_iter().collect()
}

/// A cycle in words: each of its imports with one file.
fn describe(edges: &BTreeMap<String, BTreeMap<String, PathBuf>>, cycle: &[String]) -> String {
    let mut lines = vec![cycle.join(" ⇄ ")];
    for from in cycle {
        for (to, file) in edges.get(from).into_iter().flatten() {
            if cycle.contains(to) {
                lines.push(format!("    {from} -> {to} (in {})", shown(file)));
            }
        }
    }
    lines.join("\n")
}

/// Modules not placed in a layer (or placed and gone), and imports that point to a higher layer.
fn layer_problems(graph: &Graph, layers: &[(&str, &[&str])]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut layer_of = BTreeMap::new();
    for (i, (_, modules)) in layers.iter().enumerate() {
        for m in *modules {
            if layer_of.insert(m.to_string(), i).is_some() {
                problems.push(format!("{m} is in two layers"));
            }
        }
    }
    let top = graph.top_level();
    for m in &top {
        if !layer_of.contains_key(m) {
            problems.push(format!(
                "{m} is in no layer: place it in LAYERS, AGENTS.md and src/lib.rs"
            ));
        }
    }
    for m in layer_of.keys() {
        if !top.contains(m) {
            problems.push(format!("{m} is in a layer but not a module of src/"));
        }
    }
    for (from, targets) in graph.folder(&[]) {
        for (to, file) in targets {
            if let (Some(&a), Some(&b)) = (layer_of.get(&from), layer_of.get(&to)) {
                if b > a {
                    problems.push(format!(
                        "{from} ({} {}) imports {to} ({} {}), a higher layer, in {}",
                        a + 1,
                        layers[a].0,
                        b + 1,
                        layers[b].0,
                        shown(&file)
                    ));
                }
            }
        }
    }
    problems
}

/// Every folder's cycles not in `known`, and every known one not found (broken, or changed).
fn folder_cycle_problems(graph: &Graph, known: &[(&str, &[&str], &str)]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut problems = Vec::new();
    for (folder, edges) in &graph.edges {
        if folder.is_empty() {
            continue;
        }
        for cycle in cycles(edges) {
            let name = folder.join("/");
            let listed = known
                .iter()
                .any(|(f, members, _)| *f == name && members.iter().eq(cycle.iter()));
            if !listed {
                problems.push(format!("new cycle in {name}/: {}", describe(edges, &cycle)));
            }
            found.insert((name, cycle));
        }
    }
    for (folder, members, _) in known {
        let key = (
            folder.to_string(),
            members.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        );
        if !found.contains(&key) {
            problems.push(format!(
                "{folder}/: {} is listed in KNOWN_FOLDER_CYCLES but is no cycle now: remove it",
                members.join(" ⇄ ")
            ));
        }
    }
    problems
}

/// The table as AGENTS.md and src/lib.rs write it, one line a layer.
fn layer_lines() -> Vec<String> {
    LAYERS
        .iter()
        .enumerate()
        .map(|(i, (name, modules))| format!("{:>2} {name}: {}", i + 1, modules.join(", ")))
        .collect()
}

#[test]
fn top_level_modules_import_only_their_own_or_lower_layers() {
    let graph = graph();
    assert!(
        graph.top_level().len() > 10,
        "the scan found the modules: {:?}",
        graph.modules
    );
    let problems = layer_problems(&graph, LAYERS);
    assert!(
        problems.is_empty(),
        "the layers (AGENTS.md, \"Layers\"; lowest first):\n{}\n\nbroken:\n{}",
        layer_lines().join("\n"),
        problems.join("\n")
    );
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let graph = graph();
    let edges = graph.folder(&[]);
    let found: Vec<String> = cycles(&edges).iter().map(|c| describe(&edges, c)).collect();
    assert!(
        found.is_empty(),
        "import cycles between top-level modules (data flows one way: ingress -> log -> projectors/relay -> \
         policies -> effects):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cycles_inside_folders_are_the_known_ones() {
    let problems = folder_cycle_problems(&graph(), KNOWN_FOLDER_CYCLES);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layer_table_is_the_documented_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let agents = std::fs::read_to_string(root.join("AGENTS.md")).unwrap();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    for line in layer_lines() {
        assert!(
            agents.lines().any(|l| l.trim_end() == format!("  {line}")),
            "AGENTS.md (\"Layers\") lacks the line `  {line}`"
        );
        assert!(
            lib.lines().any(|l| l.trim_end() == format!("//! {line}")),
            "src/lib.rs's layout map lacks the line `//! {line}`"
        );
    }
}

/// The scan and the checks on a planted tree: each violation is caught, test code is not read.
#[test]
fn the_scan_catches_planted_violations() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod low; pub mod high; pub mod other; mod main_like;",
    );
    // `low` is low.rs and low/: its folder half imports `high` (upward), and the two close a cycle.
    write(
        "low.rs",
        r#"
        pub mod inner;
        pub fn f() { let s = "}"; let c = '}'; /* } */ }
        #[cfg(test)]
        mod tests { use crate::other::Y; fn g() { let s = "{"; } }
        pub fn after_the_tests() { crate::other::z(); }
        #[cfg(test)]
        mod tests2;
        "#,
    );
    write("low/inner.rs", "use super::super::high::Thing;");
    write("low/tests2.rs", "use crate::high::Never;");
    write(
        "high.rs",
        "pub mod a; pub mod b; pub use a::Shared; macro_rules! m { () => { $crate::low::f() } }",
    );
    // In-folder cycle: a -> b by path, b -> a through the parent's re-export.
    write("high/a.rs", "pub struct Shared; fn f() { super::b::g(); }");
    write(
        "high/b.rs",
        "pub fn g() { let _ = std::mem::size_of::<super::Shared>(); }",
    );
    write("other.rs", "pub struct Y; pub fn z() {}");
    write("tests/ignored.rs", "use crate::high::Never;");

    let graph = graph_of(src);
    let top = graph.folder(&[]);
    let targets =
        |m: &str| -> Vec<&String> { top.get(m).map(|t| t.keys().collect()).unwrap_or_default() };
    assert_eq!(
        targets("low"),
        ["high", "other"],
        "the code after a test module is read; the test module is not"
    );
    assert_eq!(
        targets("high"),
        ["low"],
        "a macro body's `$crate::` path counts"
    );
    assert!(targets("other").is_empty());
    assert_eq!(cycles(&top), [vec!["high".to_owned(), "low".to_owned()]]);

    let layers: &[(&str, &[&str])] = &[("low", &["low", "other"]), ("high", &["high"])];
    let problems = layer_problems(&graph, layers);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("low (1 low) imports high (2 high)"),
        "{problems:?}"
    );
    assert!(problems[0].ends_with("low/inner.rs"), "{problems:?}");
    let unplaced = layer_problems(&graph, &[("low", &["low"]), ("high", &["high", "gone"])]);
    assert!(
        unplaced
            .iter()
            .any(|p| p.starts_with("other is in no layer")),
        "{unplaced:?}"
    );
    assert!(
        unplaced.iter().any(|p| p.starts_with("gone is in a layer")),
        "{unplaced:?}"
    );

    let new = folder_cycle_problems(&graph, &[]);
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].starts_with("new cycle in high/: a ⇄ b"), "{new:?}");
    assert!(folder_cycle_problems(&graph, &[("high", &["a", "b"], "planted")]).is_empty());
    let stale = folder_cycle_problems(
        &graph,
        &[
            ("high", &["a", "b"], "planted"),
            ("low", &["x", "y"], "fixed"),
        ],
    );
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].contains("no cycle now"), "{stale:?}");
}
