//! Resolution against a tree of links, hostile cases included. `tree(&[("a", "b")])` is a commit whose links
//! are `a -> b`; every other path is a directory, a file or nothing.

use super::*;

fn tree(links: &[(&str, &str)]) -> Links {
    let mut tree = Links::default();
    for (path, target) in links {
        tree.set_target(path, Some((*target).to_owned()));
    }
    tree
}

fn inside(path: &str, through: &[&str]) -> Resolution {
    Resolution::Inside {
        path: path.to_owned(),
        through: through.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn refused(why: Refusal, through: &[&str]) -> Resolution {
    Resolution::Refused {
        why,
        through: through.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// The first hop of `link -> target` with no other link in the commit.
fn alone(link: &str, target: &str) -> Resolution {
    resolve(link, Some(target), &Links::default())
}

#[test]
fn one_link_resolves_from_its_own_directory() {
    assert_eq!(alone("a/b/l", "c"), inside("a/b/c", &[]));
    assert_eq!(alone("a/b/l", "../c/./d"), inside("a/c/d", &[]));
    assert_eq!(alone("a/b/l", "../../c"), inside("c", &[]));
    assert_eq!(alone("l", "x//y/"), inside("x/y", &[]));
    assert_eq!(alone("a/l", ".."), refused(Refusal::Root, &[]));
    assert_eq!(alone("a/l", "./"), inside("a", &[]));
}

#[test]
fn a_target_out_of_the_repository_or_no_path_is_refused() {
    for (link, target, why) in [
        ("a/b/l", "../../../etc/passwd", Refusal::AboveRoot),
        ("a/l", "../../a/x", Refusal::AboveRoot),
        ("a/l", "/etc/passwd", Refusal::Absolute),
        ("a/l", "//x", Refusal::Absolute),
        ("l", "..", Refusal::AboveRoot),
        ("l", ".", Refusal::Root),
        ("l", "a/..", Refusal::Root),
        ("a/l", "../.git/config", Refusal::IntoGit),
        ("a/l", "../.GIT/hooks/pre-commit", Refusal::IntoGit),
        ("l", ".Git", Refusal::IntoGit),
        ("l", "sub/.git/x", Refusal::IntoGit),
        ("a/l", "x\0y", Refusal::NotAPath),
        ("a/l", "", Refusal::NotAPath),
    ] {
        assert_eq!(
            alone(link, target),
            refused(why, &[]),
            "{link} -> {target:?}"
        );
    }
    assert_eq!(
        resolve("l", None, &Links::default()),
        refused(Refusal::NotAPath, &[])
    );
    // A `.git` inside a name is an ordinary name.
    assert_eq!(alone("l", ".github/x"), inside(".github/x", &[]));
    assert_eq!(alone("l", "a.git/x"), inside("a.git/x", &[]));
}

#[test]
fn a_chain_is_followed_to_its_end() {
    // a -> b, b -> ../../etc: out, however harmless `a`'s own target looks.
    let links = tree(&[("b", "../../etc")]);
    assert_eq!(
        resolve("a", Some("b"), &links),
        refused(Refusal::AboveRoot, &["b"])
    );
    // a -> b, b -> .github/workflows/x.yml: the end is what counts.
    let links = tree(&[("b", ".github/workflows/x.yml")]);
    assert_eq!(
        resolve("src/a", Some("../b"), &links),
        inside(".github/workflows/x.yml", &["b"])
    );
    // a -> b, b -> other-item/: another item's directory.
    let links = tree(&[("src/api/b", "../../other-item/")]);
    assert_eq!(
        resolve("src/api/a", Some("b"), &links),
        inside("other-item", &["src/api/b"])
    );
    // Three hops, each from its own directory.
    let links = tree(&[("x/b", "../y/c"), ("y/c", "z/../../w/d"), ("w/d", "file")]);
    assert_eq!(
        resolve("a", Some("x/b"), &links),
        inside("w/file", &["x/b", "y/c", "w/d"])
    );
    // A later hop that is absolute, into .git, or no path.
    for (target, why) in [
        ("/etc", Refusal::Absolute),
        (".git", Refusal::IntoGit),
        ("", Refusal::NotAPath),
        (".", Refusal::Root),
    ] {
        let links = tree(&[("b", target)]);
        assert_eq!(
            resolve("a", Some("b"), &links),
            refused(why, &["b"]),
            "{target:?}"
        );
    }
}

#[test]
fn a_path_through_a_linked_directory_is_walked_where_the_link_leads() {
    // d -> other-item, and a link through d.
    let links = tree(&[("d", "other-item")]);
    assert_eq!(
        resolve("src/api/x", Some("../../d/file.rs"), &links),
        inside("other-item/file.rs", &["d"])
    );
    // `..` after a linked directory leaves the directory it leads to, not the link's: d -> a/b, d/../c is a/c.
    let links = tree(&[("d", "a/b")]);
    assert_eq!(resolve("l", Some("d/../c"), &links), inside("a/c", &["d"]));
    // And so a harmless-looking d/../.. can leave the repository: d -> x, x is at the root.
    let links = tree(&[("src/d", "../x")]);
    assert_eq!(
        resolve("src/l", Some("d/../../y"), &links),
        refused(Refusal::AboveRoot, &["src/d"])
    );
    // A linked directory into .git, then a path through it.
    let links = tree(&[("g", ".git")]);
    assert_eq!(
        resolve("l", Some("g/config"), &links),
        refused(Refusal::IntoGit, &["g"])
    );
    // A link to a linked directory's parent's sibling, nested: src/l -> api/h, src/api -> ../lib.
    let links = tree(&[("src/api", "../lib")]);
    assert_eq!(
        resolve("src/l", Some("api/h"), &links),
        inside("lib/h", &["src/api"])
    );
}

#[test]
fn only_links_are_followed_not_paths_that_look_like_them() {
    let links = tree(&[("src/api", "/etc")]);
    assert_eq!(alone("src/l", "apix/y"), inside("src/apix/y", &[]));
    assert_eq!(
        resolve("src/l", Some("apix/y"), &links),
        inside("src/apix/y", &[])
    );
    // A link named like a directory elsewhere is not that directory.
    assert_eq!(
        resolve("l", Some("lib/src/api"), &links),
        inside("lib/src/api", &[])
    );
}

#[test]
fn a_loop_is_refused_as_a_loop() {
    let links = tree(&[("a", "b"), ("b", "a")]);
    let Resolution::Refused { why, through } = resolve("a", Some("b"), &links) else {
        panic!("a loop resolved");
    };
    assert_eq!(why, Refusal::Loop);
    assert_eq!(through.len(), MAX_HOPS);
    assert_eq!(&through[..3], ["b", "a", "b"]);
    // A link to itself, and one to a path beneath itself.
    for (link, target) in [("a", "a"), ("a", "a/x"), ("d/a", "../d/a")] {
        let links = tree(&[(link, target)]);
        assert!(
            matches!(
                resolve(link, Some(target), &links),
                Resolution::Refused {
                    why: Refusal::Loop,
                    ..
                }
            ),
            "{link} -> {target}"
        );
    }
}

#[test]
fn a_chain_of_more_than_forty_links_is_refused_and_of_forty_is_not() {
    // l0 -> l1 -> … -> l{n-1} -> end: n links followed, the first one included.
    let chain = |n: usize| {
        let pairs: Vec<(String, String)> = (1..n)
            .map(|i| {
                let next = if i + 1 == n {
                    "end".to_owned()
                } else {
                    format!("l{}", i + 1)
                };
                (format!("l{i}"), next)
            })
            .collect();
        let borrowed: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let first = if n == 1 { "end" } else { "l1" };
        resolve("l0", Some(first), &tree(&borrowed))
    };
    assert!(matches!(chain(MAX_HOPS), Resolution::Inside { ref path, .. } if path == "end"));
    assert!(matches!(
        chain(MAX_HOPS + 1),
        Resolution::Refused {
            why: Refusal::TooLong,
            ..
        }
    ));
}

#[test]
fn a_link_revisited_a_few_times_is_no_loop() {
    // x/d -> . : x/d/d/d/f is x/f, as a checkout resolves it.
    let links = tree(&[("x/d", ".")]);
    assert_eq!(
        resolve("x/l", Some("d/d/d/f"), &links),
        inside("x/f", &["x/d", "x/d", "x/d"])
    );
}

#[test]
fn an_unread_link_on_the_way_is_asked_for_then_followed() {
    let mut links = Links::default();
    links.add("b", "0123");
    links.add("c", "4567");
    assert_eq!(links.len(), 2);
    assert_eq!(links.unread_object("b"), Some("0123"));
    assert_eq!(
        resolve("a", Some("b/x"), &links),
        Resolution::Needs("b".into())
    );
    links.set_target("b", Some("c".into()));
    assert_eq!(links.unread_object("b"), None);
    assert_eq!(
        resolve("a", Some("b/x"), &links),
        Resolution::Needs("c".into())
    );
    links.set_target("c", None);
    assert_eq!(
        resolve("a", Some("b/x"), &links),
        refused(Refusal::NotAPath, &["b", "c"])
    );
    // A target read already is not made unread again; the count stays.
    links.add("b", "89ab");
    assert_eq!(links.unread_object("b"), None);
    assert_eq!(links.len(), 2);
    // An unread link off the way is never asked for.
    assert_eq!(resolve("a", Some("d"), &links), inside("d", &[]));
}

#[test]
fn hostile_targets_end_quickly() {
    // Every segment through a link to `.`: refused at the hop limit, not walked 2000 times.
    let many = "a/".repeat(2_000) + "f";
    let links = tree(&[("a", ".")]);
    let started = std::time::Instant::now();
    assert!(matches!(
        resolve("l", Some(&many), &links),
        Resolution::Refused {
            why: Refusal::Loop,
            ..
        }
    ));
    // Each link expands to the longest target, 40 times over: bounded by the hops, one lookup per segment.
    let deep = "x/".repeat(2_040) + "b";
    let links = tree(&[("b", &deep), ("x", ".")]);
    assert!(matches!(
        resolve("l", Some("b"), &links),
        Resolution::Refused { .. }
    ));
    let long = "y/".repeat(2_040) + "z";
    let fan = tree(&[("b", &long)]);
    assert_eq!(
        resolve("l", Some("b"), &fan),
        Resolution::Inside {
            path: long.clone(),
            through: vec!["b".into()]
        }
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}
