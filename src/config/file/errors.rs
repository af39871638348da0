//! Errors: a key path and what is wrong there.

use super::*;

/// One step of a key path: a table key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Segment {
    Key(String),
    Index(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Problem {
    /// A key no struct has; the closest known one, if any is close, else every known one.
    Unknown {
        suggestion: Option<String>,
        known: Vec<String>,
        table: Option<&'static str>,
    },
    /// A value of the wrong type or shape: what was expected and what was found.
    Invalid(String),
    /// A domain rule's own message (it names its key itself).
    Rule(String),
}

/// One mistake in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    pub(super) path: Vec<Segment>,
    pub(super) problem: Problem,
}

impl FileError {
    pub(super) fn rule(message: String) -> Self {
        Self {
            path: Vec::new(),
            problem: Problem::Rule(message),
        }
    }

    pub(super) fn unknown(
        path: Vec<Segment>,
        key: &str,
        known: &[&str],
        value: &toml::Value,
    ) -> Self {
        let mut path = path;
        path.push(Segment::Key(key.to_owned()));
        let table = match value {
            toml::Value::Table(_) => Some("[]"),
            toml::Value::Array(items)
                if !items.is_empty() && items.iter().all(|i| i.is_table()) =>
            {
                Some("[[]]")
            }
            _ => None,
        };
        Self {
            path,
            problem: Problem::Unknown {
                suggestion: closest(key, known).map(str::to_owned),
                known: known.iter().map(|k| (*k).to_owned()).collect(),
                table,
            },
        }
    }

    /// The key path, as it reads in the file: `dispatch.max_concurrent`, `repos."acme/api".base`.
    pub fn key(&self) -> String {
        dotted(&self.path)
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Rule(message) => f.write_str(message),
            Problem::Invalid(message) => write!(f, "{}: {message}", location(&self.path)),
            Problem::Unknown {
                suggestion,
                known,
                table: Some(brackets),
            } => {
                let (open, close) = brackets.split_at(brackets.len() / 2);
                write!(f, "{open}{}{close}: unknown table", dotted(&self.path))?;
                match suggestion {
                    Some(s) => {
                        let mut parent = self.path.clone();
                        parent.pop();
                        parent.push(Segment::Key(s.clone()));
                        write!(f, "; did you mean {open}{}{close}?", dotted(&parent))
                    }
                    None => write!(f, " (known: {})", known.join(", ")),
                }
            }
            Problem::Unknown {
                suggestion,
                known,
                table: None,
            } => {
                let at = match self.path.as_slice() {
                    [top] => dotted(std::slice::from_ref(top)),
                    path => location(path),
                };
                write!(f, "{at}: unknown key")?;
                match suggestion {
                    Some(s) => write!(f, "; did you mean {s}?"),
                    None => write!(f, " (known: {})", known.join(", ")),
                }
            }
        }
    }
}

/// Every mistake found, one a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileErrors(pub Vec<FileError>);

impl fmt::Display for FileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FileErrors {}

/// The known key closest to `key`, if one is close enough to be what was meant (the one did-you-mean).
pub(super) use crate::tasks::values::suggest::closest;

pub(super) fn bare(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(super) fn key_text(key: &str) -> String {
    if bare(key) {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// `dispatch`, `repos."acme/api"`, `schedules[0].task`.
pub(super) fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_text(key));
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `[dispatch] max_concurrent`, `[intake] allow_repos[0]`, `[dispatch]` (a top-level key: all are tables).
pub(super) fn location(path: &[Segment]) -> String {
    let Some(last_key) = path.iter().rposition(|s| matches!(s, Segment::Key(_))) else {
        return "the file".to_owned();
    };
    let (table, key) = path.split_at(last_key);
    if path.len() == 1 {
        // Every top-level key is a table.
        format!("[{}]", dotted(key))
    } else if table.is_empty() {
        dotted(key)
    } else {
        format!("[{}] {}", dotted(table), dotted(key))
    }
}

/// Takes the value at `path` out, so the next reading goes past it. A bad array element takes its whole array
/// (removing one element would renumber the others' errors). False when there is nothing to take.
pub(super) fn remove(root: &mut toml::Value, path: &[Segment]) -> bool {
    let Some(last_key) = path.iter().rposition(|s| matches!(s, Segment::Key(_))) else {
        return false;
    };
    let Segment::Key(key) = &path[last_key] else {
        return false;
    };
    let mut node = root;
    for segment in &path[..last_key] {
        node = match (segment, node) {
            (Segment::Key(k), toml::Value::Table(t)) => match t.get_mut(k) {
                Some(next) => next,
                None => return false,
            },
            (Segment::Index(i), toml::Value::Array(a)) => match a.get_mut(*i) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match node {
        toml::Value::Table(t) => t.remove(key).is_some(),
        _ => false,
    }
}
