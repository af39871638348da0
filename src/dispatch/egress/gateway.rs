//! The model gateway: the agent's model base URL points at its proxy, the agent holds a placeholder key, and the
//! proxy forwards each request to the real API with the real key. Pure: which provider a profile talks to, read
//! from the variables it passes, and what its agent gets instead.
//!
//! | provider | key variables (the profile's `env`) | base URL variable | default base | key header |
//! | --- | --- | --- | --- | --- |
//! | Anthropic | `ANTHROPIC_API_KEY` | `ANTHROPIC_BASE_URL` | `https://api.anthropic.com` | `x-api-key` |
//! | OpenAI | `CODEX_API_KEY`, `OPENAI_API_KEY` | `OPENAI_BASE_URL` | `https://api.openai.com/v1` | `Authorization: Bearer` |

use secrecy::SecretString;

/// What the agent holds instead of its key: worth nothing anywhere but its own run's gateway, which replaces it.
pub const PLACEHOLDER_KEY: &str = "pidevops-gateway-placeholder-key";

/// How the real key travels to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHeader {
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
    /// `Authorization: Bearer <key>` (OpenAI).
    Bearer,
}

/// A provider the gateway knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Provider {
    pub name: &'static str,
    pub key_vars: &'static [&'static str],
    pub base_var: &'static str,
    pub default_base: &'static str,
    pub header: KeyHeader,
}

pub const PROVIDERS: [Provider; 2] = [
    Provider {
        name: "anthropic",
        key_vars: &["ANTHROPIC_API_KEY"],
        base_var: "ANTHROPIC_BASE_URL",
        default_base: "https://api.anthropic.com",
        header: KeyHeader::XApiKey,
    },
    Provider {
        name: "openai",
        key_vars: &["CODEX_API_KEY", "OPENAI_API_KEY"],
        base_var: "OPENAI_BASE_URL",
        default_base: "https://api.openai.com/v1",
        header: KeyHeader::Bearer,
    },
];

/// One run's gateway: where requests go, with which key, and which of the agent's variables it replaces.
#[derive(Clone, Debug)]
pub struct Gateway {
    pub provider: Provider,
    /// The real API base (scheme, host, port, path prefix).
    pub base: reqwest::Url,
    pub key: SecretString,
    /// The variable that held the key (the agent gets [`PLACEHOLDER_KEY`] there).
    pub key_var: String,
}

impl Gateway {
    /// The gateway for a profile that names `names` in its `env` and so passes `passed` (name, value) from the
    /// service's environment: the first provider whose key it passes with a value and whose base-URL variable it
    /// names (the sign that its CLI reads that variable; a CLI that does not keeps its key, see docs/agents.md).
    /// `Err` when the base URL is not an http(s) URL.
    pub fn for_profile(
        names: &[String],
        passed: &[(String, String)],
    ) -> Result<Option<Self>, String> {
        let value = |name: &str| {
            passed
                .iter()
                .find(|(n, v)| n == name && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_owned())
        };
        for provider in PROVIDERS {
            if !names.iter().any(|n| n == provider.base_var) {
                continue;
            }
            let Some((key_var, key)) = provider
                .key_vars
                .iter()
                .find_map(|name| value(name).map(|key| ((*name).to_owned(), key)))
            else {
                continue;
            };
            let base_text =
                value(provider.base_var).unwrap_or_else(|| provider.default_base.to_owned());
            let base = reqwest::Url::parse(&base_text)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                .filter(|u| u.username().is_empty() && u.password().is_none())
                .ok_or_else(|| {
                    format!(
                        "{} is not an http(s) URL without credentials: the model gateway cannot forward to it",
                        provider.base_var
                    )
                })?;
            return Ok(Some(Self {
                provider,
                base,
                key: SecretString::from(key),
                key_var,
            }));
        }
        Ok(None)
    }

    /// The model host of a profile that passes a provider's key without a gateway (its CLI reads its endpoint
    /// from its own configuration): that provider's default API host, or the host its passed base URL names. The
    /// agent holds its key and may reach only that host (by `CONNECT`) with it.
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

    #[test]
    fn a_profile_passing_a_providers_key_gets_that_providers_gateway() {
        let claude = names(&["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
        let g = Gateway::for_profile(&claude, &pairs(&[("ANTHROPIC_API_KEY", "sk-real")]))
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

        let g = Gateway::for_profile(
            &names(&["CODEX_API_KEY", "OPENAI_BASE_URL"]),
            &pairs(&[
                ("CODEX_API_KEY", "sk-codex"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(g.provider.header, KeyHeader::Bearer);
        assert_eq!(g.key_var, "CODEX_API_KEY");
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
    }

    #[test]
    fn no_key_or_no_base_variable_no_gateway_and_a_bad_base_is_refused() {
        let claude = names(&["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
        assert!(
            Gateway::for_profile(&claude, &pairs(&[("PI_CODING_AGENT_DIR", "/x")]))
                .unwrap()
                .is_none()
        );
        assert!(
            Gateway::for_profile(&claude, &pairs(&[("ANTHROPIC_API_KEY", " ")]))
                .unwrap()
                .is_none()
        );
        // pi passes the key but reads its base URL from its own models.json: it keeps its key, and may reach
        // its provider's host with it.
        let pi = names(&["ANTHROPIC_API_KEY", "PI_CODING_AGENT_DIR"]);
        let passed = pairs(&[("ANTHROPIC_API_KEY", "k")]);
        assert!(Gateway::for_profile(&pi, &passed).unwrap().is_none());
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
            assert!(
                Gateway::for_profile(
                    &claude,
                    &pairs(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", base)])
                )
                .is_err(),
                "{base}"
            );
        }
    }
}
