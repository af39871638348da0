//! First run on a laptop. `serve` bound to loopback without `PIDEVOPS_ADMIN_TOKEN` makes its own admin token, kept
//! in the data directory with mode 0600 (the same token on every start), so the dashboard opens from the terminal
//! through a link that signs in once (`/sign-in/once`). Bound to anything else, nothing is made: the dashboard
//! and the API stay closed until an operator sets a token, as a server reachable from a network must.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use anyhow::{bail, Context};
use secrecy::{ExposeSecret, SecretString};

use crate::config::{Settings, MIN_ADMIN_TOKEN_CHARS};

/// The file in `PIDEVOPS_DATA_DIR` that holds the token made on a first run.
pub const TOKEN_FILE: &str = "admin-token";

/// Gives `settings` an admin token of its own when it has none and listens on loopback only; returns the file
/// that holds it then. A token file readable by anyone else, or too short, stops the start: it would be a
/// token others could read, or guess.
pub fn local_admin_token(settings: &mut Settings) -> anyhow::Result<Option<PathBuf>> {
    if settings.admin_token.is_some() || !settings.bind.is_loopback() {
        return Ok(None);
    }
    let dir = &settings.data_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let path = dir.join(TOKEN_FILE);
    let token = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut file) => {
            let token = hex::encode(rand::random::<[u8; 32]>());
            file.write_all(token.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            token
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_token_file(&path)?,
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    };
    settings.admin_token = Some(SecretString::from(token));
    Ok(Some(path))
}

fn read_token_file(path: &std::path::Path) -> anyhow::Result<String> {
    let mode = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        bail!(
            "{} can be read by other users (mode {:o}): `chmod 600` it, or set PIDEVOPS_ADMIN_TOKEN",
            path.display(),
            mode & 0o777
        );
    }
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned();
    if token.chars().count() < MIN_ADMIN_TOKEN_CHARS {
        bail!(
            "{} holds a token shorter than {MIN_ADMIN_TOKEN_CHARS} characters: delete it to have a new one made",
            path.display()
        );
    }
    Ok(token)
}

/// The line `serve` prints for a first run: where the dashboard opens, signed in, and where the token is.
pub fn sign_in_line(
    addr: std::net::SocketAddr,
    code: &SecretString,
    token_file: &std::path::Path,
) -> String {
    format!(
        "pidevops: open the dashboard, signed in: http://{addr}/sign-in/once?code={} (the link works once; the \
         admin token for later sign-ins and the API is in {}, mode 0600)",
        code.expose_secret(),
        token_file.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Env;

    fn settings(bind: &str, data_dir: &std::path::Path) -> Settings {
        let data_dir = data_dir.to_string_lossy().into_owned();
        Settings::from_env(&Env::from_pairs([
            ("PIDEVOPS_BIND", bind),
            ("PIDEVOPS_DATA_DIR", data_dir.as_str()),
        ]))
        .expect("valid settings")
    }

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn on_loopback_a_token_is_made_once_kept_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut first = settings("127.0.0.1", &data);
        let file = local_admin_token(&mut first)
            .unwrap()
            .expect("a token file");
        assert_eq!(file, data.join(TOKEN_FILE));
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&data), 0o700);
        let token = first
            .admin_token
            .as_ref()
            .unwrap()
            .expose_secret()
            .to_owned();
        assert_eq!(token.len(), 64);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), token);

        let mut again = settings("::1", &data);
        local_admin_token(&mut again).unwrap();
        assert_eq!(
            again.admin_token.unwrap().expose_secret(),
            token,
            "the same token on every start"
        );
    }

    #[test]
    fn off_loopback_or_with_a_token_set_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        for bind in ["0.0.0.0", "::", "192.0.2.7"] {
            let mut s = settings(bind, dir.path());
            assert_eq!(local_admin_token(&mut s).unwrap(), None, "{bind}");
            assert!(
                s.admin_token.is_none(),
                "{bind}: the dashboard stays closed"
            );
        }
        let mut set = settings("127.0.0.1", dir.path());
        set.admin_token = Some(SecretString::from(
            "an-operator-token-of-24-chars+".to_owned(),
        ));
        assert_eq!(local_admin_token(&mut set).unwrap(), None);
        assert!(!dir.path().join(TOKEN_FILE).exists());
    }

    #[test]
    fn a_token_file_others_can_read_or_too_short_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(TOKEN_FILE);
        std::fs::write(&file, "a".repeat(64)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = local_admin_token(&mut settings("127.0.0.1", dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("can be read by other users (mode 644)"),
            "{error}"
        );

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&file, "short").unwrap();
        let error = local_admin_token(&mut settings("127.0.0.1", dir.path()))
            .unwrap_err()
            .to_string();
        assert!(error.contains("shorter than 24 characters"), "{error}");
    }
}
