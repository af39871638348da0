//! Dashboard sessions, pure: a signed cookie value and the CSRF token bound to it.
//!
//! The cookie is `v1.<expires unix s>.<nonce hex>.<mac hex>`, the MAC an HMAC-SHA256 under a key derived from
//! `PIDEVOPS_ADMIN_TOKEN`, so changing the token signs everyone out. The CSRF token is an HMAC of the session's
//! nonce under the same key: a form from another site cannot know it, and it changes with every sign-in.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The cookie's name.
pub const COOKIE: &str = "pidevops_session";
/// How long a sign-in lasts.
pub const LIFETIME: chrono::Duration = chrono::Duration::hours(12);

/// The signing key: the admin token, hashed under a label of its own (the raw token is never the key).
#[derive(Clone)]
pub struct Key([u8; 32]);

impl Key {
    pub fn from_admin_token(token: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"pidevops dashboard session v1\0");
        hasher.update(token.as_bytes());
        Self(hasher.finalize().into())
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        for part in parts {
            mac.update(part);
            mac.update(b"\0");
        }
        mac
    }
}

/// A valid session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub expires: DateTime<Utc>,
    nonce: String,
}

impl Session {
    /// A new session from now; `nonce` is random (16 bytes, hex).
    pub fn new(now: DateTime<Utc>, nonce: [u8; 16]) -> Self {
        Self {
            expires: now + LIFETIME,
            nonce: hex::encode(nonce),
        }
    }

    /// The cookie value.
    pub fn cookie_value(&self, key: &Key) -> String {
        let expires = self.expires.timestamp().to_string();
        let mac = key
            .mac(&[b"session", expires.as_bytes(), self.nonce.as_bytes()])
            .finalize()
            .into_bytes();
        format!("v1.{expires}.{}.{}", self.nonce, hex::encode(mac))
    }

    /// The session a cookie value proves, if it is ours, intact and not expired. The MAC is checked in constant
    /// time.
    pub fn verify(value: &str, key: &Key, now: DateTime<Utc>) -> Option<Self> {
        let mut parts = value.split('.');
        let (Some("v1"), Some(expires), Some(nonce), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let presented = hex::decode(mac).ok()?;
        key.mac(&[b"session", expires.as_bytes(), nonce.as_bytes()])
            .verify_slice(&presented)
            .ok()?;
        let expires = DateTime::from_timestamp(expires.parse().ok()?, 0)?;
        (expires > now).then(|| Self {
            expires,
            nonce: nonce.to_owned(),
        })
    }

    /// The session's public name (what its sign-out is recorded under): a hash of its nonce, which alone cannot
    /// make a cookie or a CSRF token.
    pub fn id(&self) -> String {
        let digest = Sha256::new()
            .chain_update(b"pidevops dashboard session id v1\0")
            .chain_update(self.nonce.as_bytes())
            .finalize();
        hex::encode(&digest[..16])
    }

    /// The CSRF token every form of this session carries.
    pub fn csrf(&self, key: &Key) -> String {
        hex::encode(
            key.mac(&[b"csrf", self.nonce.as_bytes()])
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, key: &Key, presented: &str) -> bool {
        let Ok(presented) = hex::decode(presented) else {
            return false;
        };
        key.mac(&[b"csrf", self.nonce.as_bytes()])
            .verify_slice(&presented)
            .is_ok()
    }
}

/// A value from a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// Where to go after signing in: only a path on this site, else `/`.
///
/// Strict, because browsers are lenient: `/\host`, `/<tab>/host` and `//host` all leave the site, and a server
/// or proxy in between may decode `%2F`, `%5C` or `%09` into those. So the value must be visible ASCII, start with
/// one `/`, and neither it nor any percent-decoding of it may hold `//`, a backslash or a control character.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path) if is_same_origin_path(path) => path.to_owned(),
        _ => "/".to_owned(),
    }
}

fn is_same_origin_path(path: &str) -> bool {
    // Decoding more than this many times to reach a fixed point is itself suspicious.
    const MAX_DECODES: usize = 4;
    if path.len() > 2048 || !path.bytes().all(|b| b.is_ascii_graphic()) {
        return false;
    }
    let mut form = path.as_bytes().to_vec();
    for _ in 0..=MAX_DECODES {
        let plain = form.first() == Some(&b'/')
            && !form.windows(2).any(|w| w == b"//")
            && !form.iter().any(|b| *b == b'\\' || b.is_ascii_control());
        if !plain {
            return false;
        }
        let decoded = percent_decode(&form);
        if decoded == form {
            return true;
        }
        form = decoded;
    }
    false
}

/// `%XX` to its byte; anything else (a lone `%` included) as is.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_780_000_000, 0).unwrap()
    }

    #[test]
    fn a_session_verifies_until_it_expires_and_only_under_its_key() {
        let key = Key::from_admin_token("admin-token");
        let session = Session::new(now(), [7; 16]);
        let value = session.cookie_value(&key);
        assert_eq!(Session::verify(&value, &key, now()), Some(session.clone()));
        assert_eq!(
            Session::verify(&value, &key, now() + LIFETIME),
            None,
            "expired"
        );
        let other = Key::from_admin_token("another-token");
        assert_eq!(
            Session::verify(&value, &other, now()),
            None,
            "a new token signs everyone out"
        );
        // Any change to any part breaks the MAC.
        let later = value.replacen(
            &session.expires.timestamp().to_string(),
            &(session.expires.timestamp() + 3600).to_string(),
            1,
        );
        assert_eq!(Session::verify(&later, &key, now()), None);
        for bad in [
            "",
            "v1",
            "v1.1.2",
            "v2.1.2.3",
            "v1.x.y.z.w",
            &format!("{value}."),
        ] {
            assert_eq!(Session::verify(bad, &key, now()), None, "{bad:?}");
        }
    }

    #[test]
    fn the_csrf_token_is_bound_to_the_session() {
        let key = Key::from_admin_token("admin-token");
        let one = Session::new(now(), [1; 16]);
        let two = Session::new(now(), [2; 16]);
        assert!(one.csrf_matches(&key, &one.csrf(&key)));
        assert!(!one.csrf_matches(&key, &two.csrf(&key)));
        assert!(!one.csrf_matches(&key, ""));
        assert!(!one.csrf_matches(&key, "not hex"));
    }

    #[test]
    fn cookies_and_next_paths_are_read_carefully() {
        assert_eq!(
            cookie("a=1; pidevops_session=v1.x; b=2", COOKIE),
            Some("v1.x")
        );
        assert_eq!(cookie("xpidevops_session=1", COOKIE), None);
        assert_eq!(safe_next(None), "/");
    }

    /// Every way to leave the site that we know of falls back to `/`; ordinary paths pass unchanged.
    #[test]
    fn next_is_a_strict_same_origin_path() {
        for good in [
            "/",
            "/tasks/T-1",
            "/events?source=github&type=task.",
            "/tasks/T-1?at=42",
            "/runs#top",
            "/a%20b",
            "/caf%C3%A9",
        ] {
            assert_eq!(safe_next(Some(good)), good, "{good:?}");
        }
        for bad in [
            "",
            "tasks",
            "https://evil.example",
            "//evil.example",
            "///evil.example",
            "/\\evil.example",
            "\\evil.example",
            "/\tevil.example",
            "/\t/evil.example",
            "\t//evil.example",
            "/a\r\nb",
            "/a\0b",
            "/a\x7fb",
            "/ /evil.example",
            "/%2F/evil.example",
            "/%2f/evil.example",
            "%2F%2Fevil.example",
            "/%2F%2Fevil.example",
            "/%5Cevil.example",
            "/%5cevil.example",
            "/%09/evil.example",
            "/%0D%0ALocation:%20x",
            "/%00",
            "/%7F",
            "/%252F%252Fevil.example",
            "/%25252F/evil.example",
            "/%2525252F/evil.example",
            "/tasks//T-1",
            "/caf\u{e9}",
            "/\u{2215}\u{2215}evil.example",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(Some(&format!("/{}", "a".repeat(4096)))), "/");
        assert_eq!(safe_next(None), "/");
    }
}
