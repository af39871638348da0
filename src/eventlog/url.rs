//! Where the event log lives: a Postgres or SQLite URL, printable only with its password redacted.

/// Where the event log lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    Postgres(String),
    Sqlite(String),
}

impl DatabaseUrl {
    /// The embedded default when `DATABASE_URL` is unset: a file next to the working directory.
    pub const EMBEDDED_DEFAULT: &'static str = "sqlite://./data/pidevops.db";

    /// Reads a `DATABASE_URL`; the error says what a valid one starts with.
    pub fn parse(url: &str) -> Result<Self, &'static str> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(url.to_owned()))
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(url.to_owned()))
        } else {
            Err("must start with postgres://, postgresql:// or sqlite:")
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    /// The URL with any password replaced, safe to print.
    pub fn redacted(&self) -> String {
        let url = match self {
            Self::Postgres(u) | Self::Sqlite(u) => u,
        };
        redact_password(url)
    }
}

/// A URL with any password replaced, safe to print.
pub fn redact_password(url: &str) -> String {
    // scheme://user:password@host → scheme://user:***@host
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}://{}:***{}",
            &url[..scheme_end],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
    }
}
