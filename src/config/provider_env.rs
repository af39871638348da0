//! Every provider's own environment variables, read and checked as the provider table declares them
//! (`domain::registry::ProviderEntry::variables`): config names no provider's variable, and a new provider's are
//! read with no line here. Each provider's folder makes its typed settings of them (`providers/<name>/settings.rs`).

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use super::{ConfigError, Env};
use crate::domain::registry::{self, ProviderVariable, VariableKind};

/// One variable's value as read: a secret stays wrapped.
#[derive(Clone)]
enum Value {
    Plain(String),
    Secret(SecretString),
}

/// The providers' variables that are set, by name; checked when read and when set.
#[derive(Clone, Default)]
pub struct ProviderEnv(BTreeMap<&'static str, Value>);

/// Names only, with whether each is set: values include credentials.
impl std::fmt::Debug for ProviderEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ProviderEnv")
            .field(&self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ProviderEnv {
    /// Every provider's variables from `env`, each checked by its provider's rule.
    pub(super) fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut vars = Self::default();
        for provider in &registry::PROVIDERS {
            for variable in provider.variables {
                vars.put(variable, env.get(variable.name))?;
            }
        }
        Ok(vars)
    }

    /// Sets (or, with `None`, unsets) the provider variable `name`, checked as when it is read from the
    /// environment; an unknown name or a refused value changes nothing.
    pub fn set(&mut self, name: &str, value: Option<&str>) -> Result<(), ConfigError> {
        let Some((_, variable)) = registry::variable(name) else {
            return Err(ConfigError::Invalid {
                field: "provider variable",
                reason: format!("{name:?} is no provider's variable"),
            });
        };
        self.put(variable, value)
    }

    fn put(
        &mut self,
        variable: &'static ProviderVariable,
        value: Option<&str>,
    ) -> Result<(), ConfigError> {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            self.0.remove(variable.name);
            return Ok(());
        };
        if let Some(check) = variable.check {
            check(value).map_err(|reason| ConfigError::Invalid {
                field: variable.name,
                reason,
            })?;
        }
        let value = match variable.kind {
            VariableKind::Secret => Value::Secret(SecretString::from(value.to_owned())),
            VariableKind::Url { .. } => Value::Plain(value.trim_end_matches('/').to_owned()),
            VariableKind::Text => Value::Plain(value.to_owned()),
        };
        self.0.insert(variable.name, value);
        Ok(())
    }

    /// A plain variable's value, or a URL's default when it is unset; `None` for a secret (see [`Self::secret`]).
    pub fn get(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(Value::Plain(value)) => Some(value),
            Some(Value::Secret(_)) => None,
            None => match registry::variable(name)?.1.kind {
                VariableKind::Url { default } => Some(default),
                VariableKind::Secret | VariableKind::Text => None,
            },
        }
    }

    /// A secret variable's value, when set.
    pub fn secret(&self, name: &str) -> Option<&SecretString> {
        match self.0.get(name) {
            Some(Value::Secret(secret)) => Some(secret),
            _ => None,
        }
    }

    /// Whether `name` is set.
    pub fn is_set(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Every secret's value that is set (for masking).
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.0.values().filter_map(|value| match value {
            Value::Secret(secret) => Some(secret.expose_secret()),
            Value::Plain(_) => None,
        })
    }
}
