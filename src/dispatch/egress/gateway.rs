//! The model gateway: the agent's model base URL points at its proxy, the agent holds a placeholder key, and the
//! proxy forwards each request to the real API with the real key. Pure: which provider a profile talks to, read
//! from the variables it passes and its CLI's configuration (by its route, routes.rs), and what its agent gets
//! instead.
//!
//! | provider | key variables (the profile's `env`) | base URL variable | default base | key header |
//! | --- | --- | --- | --- | --- |
//! | Anthropic | `ANTHROPIC_API_KEY` | `ANTHROPIC_BASE_URL` | `https://api.anthropic.com` | `x-api-key` |
//! | OpenAI | `CODEX_API_KEY`, `OPENAI_API_KEY` | `OPENAI_BASE_URL` | `https://api.openai.com/v1` | `Authorization: Bearer` |

use secrecy::SecretString;

pub use super::models::{KeyHeader, Provider, PLACEHOLDER_KEY, PROVIDERS};
use super::routes::{self, ModelRoute, OperatorFiles, Pointed, Pointing};

/// One run's gateway: where requests go, with which key, and how the agent is pointed at it instead.
#[derive(Clone, Debug)]
pub struct Gateway {
    pub provider: Provider,
    /// The real API base (scheme, host, port, path prefix).
    pub base: reqwest::Url,
    pub key: SecretString,
    /// Every variable of the provider's keys the profile passes: the agent gets [`PLACEHOLDER_KEY`] in each.
    pub key_vars: Vec<String>,
    /// Whether the profile passes the provider's base-URL variable (the agent gets the gateway there).
    pub base_var_passed: bool,
    /// How its CLI is pointed at the gateway (routes.rs).
    pub pointing: Pointing,
}

impl Gateway {
    /// The gateway of a run of a profile whose CLI is pointed by `route`, that names `names` in its `env` and so
    /// passes `passed` (name, value) from the service's environment, with the command `command` (as configured)
    /// and the operator's CLI configuration `operator`: the first provider the route serves whose key it passes
    /// with a value (for [`ModelRoute::BaseUrlVariable`], whose base-URL variable it also names: the sign that
    /// its CLI reads it). `Err` when the operator's configuration is malformed or its base not an http(s) URL.
    pub fn for_run(
        route: ModelRoute,
        names: &[String],
        passed: &[(String, String)],
        command: &[String],
        operator: &OperatorFiles,
    ) -> Result<Option<Self>, String> {
        let value = |name: &str| {
            passed
                .iter()
                .find(|(n, v)| n == name && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_owned())
        };
        for provider in PROVIDERS {
            if !routes::serves(route, &provider)
                || (route == ModelRoute::BaseUrlVariable
                    && !names.iter().any(|n| n == provider.base_var))
            {
                continue;
            }
            let key_vars: Vec<String> = provider
                .key_vars
                .iter()
                .filter(|name| value(name).is_some())
                .map(|name| (*name).to_owned())
                .collect();
            let Some(key) = key_vars.first().and_then(|name| value(name)) else {
                continue;
            };
            let resolved =
                routes::resolve(route, &provider, &key_vars[0], &value, command, operator)?;
            let base_text = resolved
                .base
                .clone()
                .unwrap_or_else(|| resolved.default_base.to_owned());
            let base = reqwest::Url::parse(&base_text)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                .filter(|u| u.username().is_empty() && u.password().is_none())
                .ok_or_else(|| {
                    format!(
                        "{} is not an http(s) URL without credentials: the model gateway cannot forward to it",
                        resolved.from
                    )
                })?;
            return Ok(Some(Self {
                provider,
                base,
                key: SecretString::from(key),
                key_vars,
                base_var_passed: names.iter().any(|n| n == provider.base_var),
                pointing: resolved.pointing,
            }));
        }
        Ok(None)
    }

    /// What the agent gets once the gateway listens at `gateway` (`http://127.0.0.1:<port>`): the placeholder in
    /// each key variable, the gateway in the base-URL variable it is passed, and its CLI's own pointing (which
    /// may change `argv`).
    pub fn point(&self, gateway: &str, argv: &mut Vec<String>) -> Pointed {
        let base = self.agent_base(gateway);
        let mut pointed = self.pointing.point(&base, argv);
        pointed.env.extend(
            self.key_vars
                .iter()
                .map(|name| (name.clone(), PLACEHOLDER_KEY.to_owned())),
        );
        if self.base_var_passed {
            pointed.env.push((self.provider.base_var.to_owned(), base));
        }
        pointed
    }

    /// The model host of a profile that passes a provider's key without a gateway (a profile of your own pointed
    /// by the base-URL variable that does not name it): that provider's default API host, or the host its passed
    /// base URL names. The agent holds its key and may reach only that host (by `CONNECT`) with it.
    pub fn direct_model_host(passed: &[(String, String)]) -> Option<super::policy::ModelHost> {
        let value = |name: &str| {
            passed
                .iter()
                .find(|(n, v)| n == name && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_owned())
        };
        let provider = PROVIDERS
            .iter()
            .find(|p| p.key_vars.iter().any(|k| value(k).is_some()))?;
        let base = value(provider.base_var).unwrap_or_else(|| provider.default_base.to_owned());
        let url = reqwest::Url::parse(&base).ok()?;
        Some(super::policy::ModelHost {
            host: super::policy::normalize(url.host_str()?),
            port: url.port_or_known_default()?,
        })
    }

    /// The base URL the agent gets: the gateway's address with the real base's path (`/v1` stays `/v1`).
    pub fn agent_base(&self, gateway: &str) -> String {
        format!("{gateway}{}", self.base.path().trim_end_matches('/'))
    }

    /// The real URL of a request the agent sent to the gateway at `path` (which carries the base's path).
    pub fn upstream(&self, path: &str) -> String {
        let origin = self.base.origin().ascii_serialization();
        let prefix = self.base.path().trim_end_matches('/');
        if path.starts_with(prefix) {
            format!("{origin}{path}")
        } else {
            format!("{origin}{prefix}{path}")
        }
    }

    /// The model host and port, for the allow-list.
    pub fn host(&self) -> super::policy::ModelHost {
        super::policy::ModelHost {
            host: super::policy::normalize(self.base.host_str().unwrap_or_default()),
            port: self.base.port_or_known_default().unwrap_or(443),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn variable(names: &[String], passed: &[(String, String)]) -> Result<Option<Gateway>, String> {
        Gateway::for_run(
            ModelRoute::BaseUrlVariable,
            names,
            passed,
            &[],
            &OperatorFiles::default(),
        )
    }

    #[test]
    fn a_profile_passing_a_providers_key_gets_that_providers_gateway() {
        let claude = names(&["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
        let g = variable(&claude, &pairs(&[("ANTHROPIC_API_KEY", "sk-real")]))
            .unwrap()
            .unwrap();
        assert_eq!(g.provider.name, "anthropic");
        assert_eq!(g.key.expose_secret(), "sk-real");
        assert_eq!(g.base.as_str(), "https://api.anthropic.com/");
        assert_eq!(
            g.agent_base("http://127.0.0.1:3128"),
            "http://127.0.0.1:3128"
        );
        assert_eq!(
            g.upstream("/v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
        let mut argv = names(&["claude", "-p"]);
        let pointed = g.point("http://127.0.0.1:3128", &mut argv);
        assert_eq!(argv, names(&["claude", "-p"]));
        assert_eq!(
            pointed.env,
            pairs(&[
                ("ANTHROPIC_API_KEY", PLACEHOLDER_KEY),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:3128")
            ])
        );

        // Both of OpenAI's key variables passed: both get the placeholder, the first is the key.
        let g = variable(
            &names(&["CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"]),
            &pairs(&[
                ("CODEX_API_KEY", "sk-codex"),
                ("OPENAI_API_KEY", "sk-openai"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(g.provider.header, KeyHeader::Bearer);
        assert_eq!(g.key.expose_secret(), "sk-codex");
        assert_eq!(g.key_vars, names(&["CODEX_API_KEY", "OPENAI_API_KEY"]));
        assert_eq!(
            g.agent_base("http://127.0.0.1:3128"),
            "http://127.0.0.1:3128/v1"
        );
        assert_eq!(
            g.upstream("/v1/responses"),
            "http://127.0.0.1:9999/v1/responses"
        );
        assert_eq!(
            g.host(),
            super::super::policy::ModelHost {
                host: "127.0.0.1".into(),
                port: 9999
            }
        );
        let pointed = g.point("http://127.0.0.1:3128", &mut Vec::new());
        assert!(!format!("{pointed:?}").contains("sk-"), "{pointed:?}");
    }

    #[test]
    fn no_key_or_no_base_variable_no_gateway_and_a_bad_base_is_refused() {
        let claude = names(&["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
        assert!(variable(&claude, &pairs(&[("PI_CODING_AGENT_DIR", "/x")]))
            .unwrap()
            .is_none());
        assert!(variable(&claude, &pairs(&[("ANTHROPIC_API_KEY", " ")]))
            .unwrap()
            .is_none());
        // A script of your own that passes the key but not the base-URL variable keeps its key, and may reach its
        // provider's host with it.
        let script = names(&["ANTHROPIC_API_KEY"]);
        let passed = pairs(&[("ANTHROPIC_API_KEY", "k")]);
        assert!(variable(&script, &passed).unwrap().is_none());
        assert_eq!(
            Gateway::direct_model_host(&passed),
            Some(super::super::policy::ModelHost {
                host: "api.anthropic.com".into(),
                port: 443
            })
        );
        for base in [
            "file:///etc",
            "api.anthropic.com",
            "https://u:p@api.anthropic.com",
        ] {
            let refused = variable(
                &claude,
                &pairs(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", base)]),
            )
            .unwrap_err();
            assert!(
                refused.starts_with("ANTHROPIC_BASE_URL is not an http(s) URL"),
                "{refused}"
            );
        }
    }
}
