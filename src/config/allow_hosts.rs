//! `[repos."o/n"] allow_hosts`: the names a repository's agents and hooks may reach through the egress proxy
//! (dispatch/egress), and the package registries its hooks get by default. Pure.

use std::net::IpAddr;

/// Package registries a repository's setup hook typically needs (npm, PyPI, crates.io, Go's proxy, RubyGems,
/// Maven Central): allowed for the repository's hooks (setup, before_run, after_run, check) by default, and for
/// an agent only when `allow_hosts` names `"registries"`. docs/agents.md lists them.
pub const PACKAGE_REGISTRIES: [&str; 12] = [
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "pypi.org",
    "files.pythonhosted.org",
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "rubygems.org",
    "index.rubygems.org",
    "repo.maven.apache.org",
];

/// The word in `allow_hosts` that stands for [`PACKAGE_REGISTRIES`].
pub const REGISTRIES: &str = "registries";

/// Longest host name kept (DNS's own limit); a longer one is refused and recorded under a fixed name.
pub const MAX_HOST: usize = 253;

/// One `allow_hosts` entry: an exact name, or `*.example.com` (any name below it, not itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostRule {
    Exact(String),
    Suffix(String),
}

impl HostRule {
    /// A host name or `*.name`, lower-cased; IP literals, ports, schemes and paths are refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim().to_ascii_lowercase();
        let (wild, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest.to_owned()),
            None => (false, text.clone()),
        };
        let valid = !name.is_empty()
            && name.len() <= MAX_HOST
            && name.contains('.')
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
            && name.parse::<IpAddr>().is_err();
        if !valid {
            return Err(format!(
                "{text:?} is not a host name (or *.name): no scheme, port, path or IP address"
            ));
        }
        Ok(if wild {
            Self::Suffix(name)
        } else {
            Self::Exact(name)
        })
    }

    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(name) => host == name,
            Self::Suffix(name) => host
                .strip_suffix(name.as_str())
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_host_entries_are_names_only() {
        assert_eq!(
            HostRule::parse(" Pypi.ORG ").unwrap(),
            HostRule::Exact("pypi.org".into())
        );
        for bad in [
            "",
            "*",
            "*.com.",
            "localhost",
            "10.0.0.1",
            "https://pypi.org",
            "pypi.org:443",
            "pypi.org/simple",
            "-bad.org",
            "a..b",
        ] {
            assert!(HostRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_suffix_rule_matches_names_below_it_only() {
        let rule = HostRule::parse("*.example.com").unwrap();
        assert!(rule.matches("a.example.com"));
        assert!(!rule.matches("example.com"));
        assert!(!rule.matches("badexample.com"));
    }
}
