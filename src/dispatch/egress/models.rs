//! The model APIs the gateway knows (gateway.rs's table), and the placeholder key an agent holds instead of its
//! own: read by gateway.rs and by routes.rs (how each CLI is pointed), so neither needs the other for them.

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
