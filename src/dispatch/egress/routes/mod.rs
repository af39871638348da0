//! How each CLI is pointed at its run's model gateway (gateway.rs), by its profile's [`ModelRoute`]: where the real
//! base URL is read from (the operator's configuration, read by pidevops before the agent starts, never anything
//! the agent wrote) and what the agent gets instead. Pure: launch.rs reads the operator's files and writes pi's
//! directory.
//!
//! | route | the real base (first found, else the provider's default) | what the agent gets |
//! | --- | --- | --- |
//! | `BaseUrlVariable` | the provider's base-URL variable | that variable: the gateway |
//! | `PiModels` | `providers.<p>.baseUrl` in `models.json` of the passed `PI_CODING_AGENT_DIR` | `PI_CODING_AGENT_DIR`: a directory of its own; its `models.json` holds only that provider, `baseUrl` the gateway, `apiKey` the key variable's name; the operator's `settings.json` copied |
//! | `OpencodeConfig` | `provider.<p>.options.baseURL` in `OPENCODE_CONFIG_CONTENT`, else in the file `OPENCODE_CONFIG` names | `OPENCODE_CONFIG_CONTENT`: the operator's, that `baseURL` the gateway, `apiKey` the placeholder |
//! | `CodexConfig` | `-c openai_base_url=…` in the profile's command, else `OPENAI_BASE_URL` | `-c openai_base_url="<gateway>/v1"`, the operator's taken out |

use serde_json::{Map, Value};

use super::models::{Provider, PLACEHOLDER_KEY};
pub use crate::config::profiles::ModelRoute;

/// The largest configuration file pidevops reads for a route (models.json, settings.json, OPENCODE_CONFIG's).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// pi's agent directory (`PI_CODING_AGENT_DIR`) and OpenCode's configuration variables.
pub const PI_DIR_VAR: &str = "PI_CODING_AGENT_DIR";
pub const OPENCODE_CONTENT_VAR: &str = "OPENCODE_CONFIG_CONTENT";
pub const OPENCODE_FILE_VAR: &str = "OPENCODE_CONFIG";
/// The Codex setting that names its OpenAI endpoint.
const CODEX_BASE_KEY: &str = "openai_base_url";

/// What pidevops read of the operator's CLI configuration: the files the profile's passed variables name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorFiles {
    /// `models.json` and `settings.json` in the passed `PI_CODING_AGENT_DIR`, where they exist.
    pub pi_models: Option<String>,
    pub pi_settings: Option<String>,
    /// The file the passed `OPENCODE_CONFIG` names.
    pub opencode_file: Option<String>,
}

/// How the agent is pointed at its gateway, with what it keeps of the operator's configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum Pointing {
    Variable,
    /// pi: the provider's entry of the operator's models.json (without `baseUrl`), and its settings.json.
    Pi {
        provider: &'static str,
        key_var: String,
        entry: Map<String, Value>,
        settings: Option<String>,
    },
    /// OpenCode: the operator's `OPENCODE_CONFIG_CONTENT` (or nothing), as an object.
    Opencode {
        provider: &'static str,
        config: Map<String, Value>,
    },
    /// Codex: the command's arguments that set `openai_base_url` (taken out of the agent's argv).
    Codex {
        operator_args: Vec<usize>,
    },
}

/// The real base as the operator configured it (`None`: the default), where it was read, and the pointing.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub base: Option<String>,
    pub from: String,
    pub default_base: &'static str,
    pub pointing: Pointing,
}

/// What the agent gets once its gateway's address is known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pointed {
    /// Variables set, replacing what the profile passed.
    pub env: Vec<(String, String)>,
    /// pi's agent directory: file names and contents, for a fresh directory whose path becomes
    /// `PI_CODING_AGENT_DIR`.
    pub pi_files: Vec<(&'static str, String)>,
}

/// Which providers a route can point at the gateway.
pub fn serves(route: ModelRoute, provider: &Provider) -> bool {
    match route {
        ModelRoute::CodexConfig => provider.name == "openai",
        ModelRoute::BaseUrlVariable | ModelRoute::PiModels | ModelRoute::OpencodeConfig => true,
    }
}

/// Where `route` reads `provider`'s real base: `key_var` holds its key, `value` gives a passed variable (trimmed,
/// non-empty), `command` is the profile's command as configured. `Err` names what is malformed.
pub fn resolve(
    route: ModelRoute,
    provider: &Provider,
    key_var: &str,
    value: &dyn Fn(&str) -> Option<String>,
    command: &[String],
    operator: &OperatorFiles,
) -> Result<Resolved, String> {
    let name = provider.name;
    match route {
        ModelRoute::BaseUrlVariable => Ok(Resolved {
            base: value(provider.base_var),
            from: provider.base_var.to_owned(),
            default_base: provider.default_base,
            pointing: Pointing::Variable,
        }),
        ModelRoute::PiModels => {
            let from = format!("providers.{name}.baseUrl in {PI_DIR_VAR}/models.json");
            let mut entry = match &operator.pi_models {
                Some(text) => {
                    let models = object(text, &format!("{PI_DIR_VAR}/models.json"))?;
                    let providers =
                        member(&models, "providers", &format!("{PI_DIR_VAR}/models.json"))?;
                    match providers {
                        Some(providers) => {
                            member(&providers, name, "its providers")?.unwrap_or_default()
                        }
                        None => Map::new(),
                    }
                }
                None => Map::new(),
            };
            let base = string(entry.remove("baseUrl"), &from)?;
            // Its own key in the file (a literal, a command, a variable's name) is not the agent's.
            entry.remove("apiKey");
            Ok(Resolved {
                base,
                from,
                default_base: provider.default_base,
                pointing: Pointing::Pi {
                    provider: name,
                    key_var: key_var.to_owned(),
                    entry,
                    settings: operator.pi_settings.clone(),
                },
            })
        }
        ModelRoute::OpencodeConfig => {
            let content = value(OPENCODE_CONTENT_VAR)
                .map(|text| object(&text, OPENCODE_CONTENT_VAR))
                .transpose()?;
            let in_content = content
                .as_ref()
                .map(|c| opencode_base(c, name, OPENCODE_CONTENT_VAR))
                .transpose()?
                .flatten();
            let (base, from) = match in_content {
                Some(base) => (Some(base), OPENCODE_CONTENT_VAR),
                None => {
                    let in_file = operator
                        .opencode_file
                        .as_deref()
                        .map(|text| {
                            let file = format!("the file {OPENCODE_FILE_VAR} names");
                            opencode_base(&object(&strip_jsonc(text), &file)?, name, &file)
                        })
                        .transpose()?
                        .flatten();
                    (in_file, OPENCODE_FILE_VAR)
                }
            };
            Ok(Resolved {
                base,
                from: format!("provider.{name}.options.baseURL in {from}"),
                default_base: match name {
                    // OpenCode's Anthropic base carries the version, unlike Claude Code's and pi's.
                    "anthropic" => "https://api.anthropic.com/v1",
                    _ => provider.default_base,
                },
                pointing: Pointing::Opencode {
                    provider: name,
                    config: content.unwrap_or_default(),
                },
            })
        }
        ModelRoute::CodexConfig => {
            let mut base = None;
            let mut operator_args = Vec::new();
            for (at, arg) in command.iter().enumerate().skip(1) {
                let setting = match arg.as_str() {
                    "-c" | "--config" => command
                        .get(at + 1)
                        .map(|next| (vec![at, at + 1], next.as_str())),
                    other => other.strip_prefix("--config=").map(|rest| (vec![at], rest)),
                };
                let Some((args, setting)) = setting else {
                    continue;
                };
                let Some((key, raw)) = setting.split_once('=') else {
                    continue;
                };
                if key.trim() != CODEX_BASE_KEY {
                    continue;
                }
                // Codex reads the value as TOML, and as the text itself when it is not TOML.
                base = Some(match format!("v = {raw}").parse::<toml::Table>() {
                    Ok(table) => match table.get("v") {
                        Some(toml::Value::String(s)) => s.trim().to_owned(),
                        _ => {
                            return Err(format!(
                                "-c {CODEX_BASE_KEY}=… in the profile's command is not a string"
                            ))
                        }
                    },
                    Err(_) => raw.trim().to_owned(),
                });
                operator_args.extend(args);
            }
            let from = if base.is_some() {
                format!("-c {CODEX_BASE_KEY}=… in the profile's command")
            } else {
                base = value(provider.base_var);
                provider.base_var.to_owned()
            };
            Ok(Resolved {
                base,
                from,
                default_base: provider.default_base,
                pointing: Pointing::Codex { operator_args },
            })
        }
    }
}

impl Pointing {
    /// What the agent gets: `agent_base` is the gateway's base URL as the agent reaches it.
    pub fn point(&self, agent_base: &str, argv: &mut Vec<String>) -> Pointed {
        let mut pointed = Pointed::default();
        match self {
            Self::Variable => {}
            Self::Pi {
                provider,
                key_var,
                entry,
                settings,
            } => {
                let mut entry = entry.clone();
                entry.insert("baseUrl".into(), Value::String(agent_base.to_owned()));
                // pi reads a variable's name as that variable: the placeholder the agent holds.
                entry.insert("apiKey".into(), Value::String(key_var.clone()));
                let models = serde_json::json!({ "providers": { *provider: entry } });
                pointed.pi_files.push(("models.json", models.to_string()));
                if let Some(settings) = settings {
                    pointed.pi_files.push(("settings.json", settings.clone()));
                }
            }
            Self::Opencode { provider, config } => {
                let mut config = config.clone();
                let options = config
                    .entry("provider")
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .and_then(|p| {
                        p.entry(*provider)
                            .or_insert_with(|| Value::Object(Map::new()))
                            .as_object_mut()
                    })
                    .and_then(|p| {
                        p.entry("options")
                            .or_insert_with(|| Value::Object(Map::new()))
                            .as_object_mut()
                    });
                // `resolve` checked each level is an object.
                if let Some(options) = options {
                    options.insert("baseURL".into(), Value::String(agent_base.to_owned()));
                    options.insert("apiKey".into(), Value::String(PLACEHOLDER_KEY.to_owned()));
                }
                pointed.env.push((
                    OPENCODE_CONTENT_VAR.to_owned(),
                    Value::Object(config).to_string(),
                ));
            }
            Self::Codex { operator_args } => {
                let mut at = 0;
                argv.retain(|_| {
                    at += 1;
                    !operator_args.contains(&(at - 1))
                });
                let set = format!(
                    "{CODEX_BASE_KEY}={}",
                    toml::Value::String(agent_base.into())
                );
                let after = argv.len().min(1);
                argv.splice(after..after, ["-c".to_owned(), set]);
            }
        }
        pointed
    }
}

/// `provider.<name>.options.baseURL` of an OpenCode configuration: `Err` when a level is not an object or the
/// value not a string.
fn opencode_base(
    config: &Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<String>, String> {
    let Some(providers) = member(config, "provider", what)? else {
        return Ok(None);
    };
    let Some(entry) = member(&providers, name, &format!("provider in {what}"))? else {
        return Ok(None);
    };
    let Some(options) = member(&entry, "options", &format!("provider.{name} in {what}"))? else {
        return Ok(None);
    };
    string(
        options.get("baseURL").cloned(),
        &format!("provider.{name}.options.baseURL in {what}"),
    )
}

fn object(text: &str, what: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{what} is not a JSON object")),
        Err(e) => Err(format!("{what} is not JSON: {e}")),
    }
}

/// A member that must be an object when present.
fn member(
    map: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<Map<String, Value>>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner.clone())),
        Some(_) => Err(format!("{key} in {what} is not an object")),
    }
}

/// A value that must be a string when present; blank is absent.
fn string(value: Option<Value>, what: &str) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(_) => Err(format!("{what} is not a string")),
    }
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as OpenCode reads its files, made plain JSON.
pub fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some(&'/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some(&'*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            (']' | '}', _) => {
                // A comma before the closing bracket, with only blanks between, goes.
                let kept = out.trim_end().len();
                if out[..kept].ends_with(',') {
                    out.truncate(kept - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
