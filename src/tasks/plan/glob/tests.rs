use proptest::prelude::*;

use super::*;

fn glob(text: &str) -> Glob {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
}

fn refused(text: &str) -> GlobErrorKind {
    match text.parse::<Glob>() {
        Ok(g) => panic!("{text:?} should be refused, parsed as {g:?}"),
        Err(e) => e.kind,
    }
}

#[track_caller]
fn assert_matches(pattern: &str, yes: &[&str], no: &[&str]) {
    let g = glob(pattern);
    for path in yes {
        assert!(g.matches(path), "{pattern:?} should match {path:?}");
    }
    for path in no {
        assert!(!g.matches(path), "{pattern:?} should not match {path:?}");
    }
}

#[test]
fn a_plain_path_matches_itself_and_everything_beneath_it() {
    let no = [
        "src/apix",
        "src",
        "src/ap",
        "src/apix/y.rs",
        "x/src/api",
        "src/api/",
    ];
    assert_matches(
        "src/api",
        &["src/api", "src/api/x.rs", "src/api/a/b/c"],
        &no,
    );
    assert_matches("src/api/", &["src/api", "src/api/x.rs"], &no);
    assert!(glob("src/api").is_path());
    assert!(!glob("src/*").is_path());
    assert_eq!(glob("src/api/").to_string(), "src/api");
    assert_eq!(glob("src/api/"), glob("src/api"));
    assert_matches(
        "README.md",
        &["README.md"],
        &["README.mdx", "docs/README.md"],
    );
}

#[test]
fn a_star_stays_within_a_segment() {
    assert_matches(
        "src/*.rs",
        &["src/a.rs", "src/.rs", "src/long_name.rs"],
        &["src/api/x.rs", "src/a.rsx", "a.rs", "src/a.rs/x"],
    );
    assert_matches("*", &["README.md", "x"], &["src/x"]);
    assert_matches("a*b*c", &["abc", "aXbYc", "abbc"], &["ab/c", "acb"]);
}

#[test]
fn a_double_star_segment_matches_any_number_of_segments_including_none() {
    assert_matches(
        "a/**/b",
        &["a/b", "a/x/b", "a/x/y/b"],
        &["a/xb", "ab", "a/b/c", "x/a/b"],
    );
    assert_matches(
        "**/b.rs",
        &["b.rs", "x/b.rs", "x/y/b.rs"],
        &["xb.rs", "b.rs/c"],
    );
    assert_matches(
        "src/**",
        &["src", "src/a", "src/a/b.rs"],
        &["srcx", "src/", "x/src"],
    );
    assert_matches("**", &["a", "a/b/c"], &[""]);
    assert_matches("**/*.md", &["a.md", "docs/a.md"], &["a.rs"]);
    // `**/**` means `**`, and is written so.
    assert_eq!(glob("a/**/**/b").to_string(), "a/**/b");
    assert_eq!(glob("**/**").to_string(), "**");
}

#[test]
fn a_question_mark_is_one_character_but_not_a_slash() {
    assert_matches("a?c", &["abc", "a.c", "aéc"], &["ac", "abbc", "a/c"]);
}

#[test]
fn classes_match_one_listed_character_never_a_slash() {
    assert_matches("x[abc]", &["xa", "xc"], &["xd", "x", "xab"]);
    assert_matches("x[a-c]", &["xa", "xb", "xc"], &["xd", "x-"]);
    assert_matches("x[!a]", &["xb", "x."], &["xa", "x/", "x"]);
    assert_matches("x[^a]", &["xb"], &["xa", "x/"]);
    assert_matches("x[]a]", &["x]", "xa"], &["xb"]);
    assert_matches("x[!]]", &["xa"], &["x]"]);
    assert_matches("x[-a]", &["x-", "xa"], &["xb"]);
    assert_matches("x[a-]", &["x-", "xa"], &["xb"]);
    // The only way to a literal glob character is a class.
    assert_matches("x[*]", &["x*"], &["xa"]);
    assert_matches("x[{][,]", &["x{,"], &["xa,"]);
}

#[test]
fn alternatives_match_one_of_their_sequences() {
    assert_matches(
        "docs/{a,b}.md",
        &["docs/a.md", "docs/b.md"],
        &["docs/c.md", "docs/ab.md"],
    );
    assert_matches(
        "src/{*.rs,*.toml}",
        &["src/x.rs", "src/Cargo.toml"],
        &["src/x.md", "src/a/x.rs"],
    );
    assert_matches("Cargo{,.lock}", &["Cargo", "Cargo.lock"], &["Cargo.toml"]);
    assert_matches("x{[,],y}", &["x,", "xy"], &["x"]);
    assert_matches("{src,tests}/**", &["src/a", "tests/b/c"], &["docs/a"]);
}

#[test]
fn a_trailing_slash_on_a_glob_means_everything_beneath_too() {
    let g = glob("src/*/");
    assert_eq!(g.to_string(), "src/*/**");
    assert!(g.matches("src/api") && g.matches("src/api/x/y.rs"));
    assert!(!g.matches("src") && !g.matches("docs/a"));
    assert_eq!(glob("src/**/").to_string(), "src/**");
}

#[test]
fn each_refusal_names_its_reason() {
    use GlobErrorKind::*;
    let long = "a".repeat(301);
    assert_eq!(glob(&"a".repeat(300)).as_str().len(), 300);
    let cases: Vec<(&str, GlobErrorKind)> = vec![
        ("", Empty),
        (
            &long,
            TooLong {
                chars: 301,
                max: 300,
            },
        ),
        ("/etc/passwd", Absolute),
        ("/", Absolute),
        ("a\0b", Control('\0')),
        ("a\nb", Control('\n')),
        ("a\u{7f}", Control('\u{7f}')),
        ("src\\api", Backslash),
        ("a//b", EmptySegment),
        ("a//", EmptySegment),
        ("a/{,}/b", EmptySegment),
        ("../x", DotSegment("..")),
        ("a/./b", DotSegment(".")),
        ("a/..", DotSegment("..")),
        ("a/{x,..}", DotSegment("..")),
        ("src/[ab", UnclosedClass),
        ("src/[", UnclosedClass),
        ("x[]", UnclosedClass),
        ("x[b-a]", ReversedRange('b', 'a')),
        ("a[/]b", SlashInClass),
        ("a[x/y]", SlashInClass),
        ("docs/{a,b", UnclosedBrace),
        ("{a,{b,c}}", NestedBrace),
        ("{src/a,docs}", SlashInBrace),
        ("a]", StrayClose(']')),
        ("a}", StrayClose('}')),
        ("a,b", Comma),
        ("src/a**", StarStarInSegment),
        ("**.rs", StarStarInSegment),
        ("{**,a}", StarStarInSegment),
    ];
    for (pattern, kind) in cases {
        assert_eq!(refused(pattern), kind, "{pattern:?}");
    }
}

#[test]
fn an_error_names_the_pattern_and_why() {
    let e = "a//b".parse::<Glob>().unwrap_err();
    assert_eq!(e.pattern, "a//b");
    assert!(
        e.to_string()
            .starts_with("glob \"a//b\" has an empty segment"),
        "{e}"
    );
    let e = "a".repeat(400).parse::<Glob>().unwrap_err();
    assert!(e.to_string().len() < 200, "the pattern is cut: {e}");
}

#[test]
fn canonical_text_round_trips_through_display_and_serde() {
    for text in [
        "src/api",
        "src/**",
        "docs/{a,b}.md",
        "x[!a-c]?",
        "a/**/b/*.rs",
        "src/*/**",
    ] {
        let g = glob(text);
        assert_eq!(g.to_string(), text);
        let json = serde_json::to_string(&g).unwrap();
        assert_eq!(json, format!("{text:?}"));
        assert_eq!(serde_json::from_str::<Glob>(&json).unwrap(), g);
    }
    assert!(serde_json::from_str::<Glob>("\"a//b\"").is_err());
    assert!(serde_json::from_str::<Glob>("7").is_err());
}

#[test]
fn overlap_is_between_globs_not_strings() {
    let overlap = |a: &str, b: &str| glob(a).overlaps(&glob(b));
    assert!(overlap("src/**", "src/api/*.rs"));
    assert!(!overlap("src/*.rs", "src/api/x.rs"));
    assert!(overlap("docs/{a,b}.md", "docs/b.md"));
    assert!(overlap("a/*/c", "a/b/*"));
    assert!(!overlap("*.md", "src/*.md"));
    assert!(overlap("src/api", "src/api/handlers.rs"));
    assert!(overlap("src/api", "src/*/x.rs"));
    assert!(!overlap("src/api", "src/apix"));
    assert!(!overlap("src/api", "docs/**"));
    assert!(overlap("**/*.rs", "src/main.rs"));
    assert!(!overlap("**/*.rs", "**/*.md"));
    assert!(!overlap("x[!a]", "x[a]"));
    assert!(overlap("x[!a]", "x[ab]"));
    assert!(overlap("a", "a"));
}

#[test]
fn the_witness_is_an_ordinary_path_both_match() {
    let witness = |a: &str, b: &str| glob(a).overlap_witness(&glob(b));
    assert_eq!(
        witness("src/**", "src/web/*.ts").as_deref(),
        Some("src/web/a.ts")
    );
    assert_eq!(witness("src/*.rs", "src/api/x.rs"), None);
    assert_eq!(
        witness("docs/{a,b}.md", "docs/b.md").as_deref(),
        Some("docs/b.md")
    );
    assert_eq!(witness("a/*/c", "a/b/*").as_deref(), Some("a/b/c"));
    assert_eq!(
        witness(".github/**", ".github/workflows/*.yml").as_deref(),
        Some(".github/workflows/a.yml")
    );
    assert_eq!(witness("src", "src/*").as_deref(), Some("src/a"));
    assert_eq!(witness("x[!a-z]", "x?").as_deref(), Some("x0"));
}

#[test]
fn the_automaton_stays_small() {
    // Two states per character at most, so the product of two longest globs is bounded.
    for text in [
        "a".repeat(300),
        "x".to_owned() + &"a*".repeat(149),
        "{a,b,c,d}".repeat(33),
        "[a-z]".repeat(60),
        "a/".repeat(149) + "**",
    ] {
        let g = glob(&text);
        assert!(
            g.nfa.state_count() <= 2 * text.len() + 4,
            "{}",
            g.nfa.state_count()
        );
    }
}

#[test]
fn thirty_long_globs_compare_pairwise() {
    // Not a timing assertion (benchmarks are not tests): it exercises the worst shapes so a blow-up shows.
    let globs: Vec<Glob> = (0..30)
        .map(|i| {
            glob(&format!(
                "{}**/{}{}*.rs",
                "x/".repeat(i % 3),
                "ab*".repeat(20),
                i
            ))
        })
        .collect();
    let overlapping = globs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| globs[i + 1..].iter().map(move |b| (a, b)))
        .filter(|(a, b)| match a.overlap_witness(b) {
            Some(w) => {
                assert!(a.matches(&w) && b.matches(&w), "{a:?} {b:?} {w:?}");
                true
            }
            None => false,
        })
        .count();
    assert!(overlapping > 0);
}

/// An independent reading of the syntax: the glob rewritten as a regular expression.
fn oracle(g: &Glob) -> regex::Regex {
    let mut segments: Vec<&str> = g.as_str().split('/').collect();
    if g.is_path() {
        segments.push("**");
    }
    let mut re = String::from("^");
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        if *segment == "**" {
            re.push_str(match (i == 0, last) {
                (true, true) => "[^/](?s:.)*",
                (true, false) => "(?:[^/]+/)*",
                (false, true) => "(?:/[^/](?s:.)*)?",
                (false, false) => "/(?:[^/]+/)*",
            });
        } else {
            if i > 0 && segments[i - 1] != "**" {
                re.push('/');
            }
            re.push_str(&segment_regex(&segment.chars().collect::<Vec<_>>()));
        }
    }
    re.push('$');
    regex::Regex::new(&re).unwrap_or_else(|e| panic!("{g:?} -> {re}: {e}"))
}

fn segment_regex(chars: &[char]) -> String {
    let hex = |c: char| format!("\\x{{{:x}}}", c as u32);
    let mut re = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            '[' => {
                i += 1;
                let negated = matches!(chars[i], '!' | '^');
                if negated {
                    i += 1;
                }
                re.push_str(if negated { "[^/" } else { "[" });
                let first = i;
                while !(chars[i] == ']' && i > first) {
                    if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&c| c != ']')
                    {
                        re.push_str(&format!("{}-{}", hex(chars[i]), hex(chars[i + 2])));
                        i += 3;
                    } else {
                        re.push_str(&hex(chars[i]));
                        i += 1;
                    }
                }
                re.push(']');
            }
            '{' => {
                let close = i + chars[i..].iter().position(|&c| c == '}').unwrap();
                let mut alternatives = Vec::new();
                let (mut start, mut in_class) = (i + 1, false);
                for j in i + 1..close {
                    match chars[j] {
                        '[' if !in_class => in_class = true,
                        ']' if in_class && chars[j - 1] != '[' => in_class = false,
                        ',' if !in_class => {
                            alternatives.push(segment_regex(&chars[start..j]));
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                alternatives.push(segment_regex(&chars[start..close]));
                re.push_str(&format!("(?:{})", alternatives.join("|")));
                i = close;
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re
}

/// Small globs over a tiny alphabet, so random paths often match.
fn small_glob() -> impl Strategy<Value = Glob> {
    let atom = prop::sample::select(vec![
        "a", "b", ".", "*", "?", "[ab]", "[!a]", "[a-b]", "{a,b}", "{a,*}", "{,b}", "{b,[!b]}",
    ]);
    let segment = prop_oneof![
        1 => Just("**".to_owned()),
        4 => prop::collection::vec(atom, 1..=3).prop_map(|atoms| atoms.concat()),
    ];
    (prop::collection::vec(segment, 1..=3), any::<bool>()).prop_filter_map(
        "a refused pattern",
        |(segments, slash)| {
            let text = segments.join("/") + if slash { "/" } else { "" };
            text.parse().ok()
        },
    )
}

/// Every string over `a`, `b`, `.` and `/` up to four characters, and over `a`, `b`, `/` of five.
fn all_small_paths() -> Vec<String> {
    let mut paths = vec![String::new()];
    let mut layer = vec![String::new()];
    for length in 1..=5 {
        let alphabet: &[char] = if length <= 4 {
            &['a', 'b', '.', '/']
        } else {
            &['a', 'b', '/']
        };
        layer = layer
            .iter()
            .flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}")))
            .filter(|p| length <= 4 || !p.contains('.'))
            .collect();
        paths.extend(layer.iter().cloned());
    }
    paths
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn overlap_agrees_with_brute_force(a in small_glob(), b in small_glob()) {
        let witness = a.overlap_witness(&b);
        prop_assert_eq!(witness.is_some(), a.overlaps(&b), "the witness search and reachability agree");
        prop_assert_eq!(a.overlaps(&b), b.overlaps(&a), "overlap is symmetric");
        if let Some(w) = &witness {
            prop_assert!(a.matches(w) && b.matches(w), "witness {:?} must match both", w);
        }
        for path in all_small_paths() {
            if a.matches(&path) && b.matches(&path) {
                prop_assert!(witness.is_some(), "{:?} matches both {:?} and {:?}", path, a, b);
            }
        }
    }

    #[test]
    fn matching_agrees_with_a_regex_reading(g in small_glob(), paths in prop::collection::vec("[ab./]{0,8}", 30)) {
        let re = oracle(&g);
        for path in paths.iter().map(String::as_str).chain(["", "a", "a/b", "b/a/b"]) {
            prop_assert_eq!(g.matches(path), re.is_match(path), "{:?} on {:?} ({})", g, path, re.as_str());
        }
    }

    #[test]
    fn canonical_text_parses_to_the_same_glob(g in small_glob()) {
        let again: Glob = g.to_string().parse().unwrap();
        prop_assert_eq!(again.as_str(), g.as_str());
        for path in all_small_paths() {
            prop_assert_eq!(again.matches(&path), g.matches(&path));
        }
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,40}|[a*?/\\[\\]{},!^.-]{0,20}") {
        let _ = text.parse::<Glob>();
    }
}
