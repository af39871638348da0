//! Signature and token checks. Every comparison of secret material is constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    Missing(&'static str),
    #[error("the {header} header is malformed: {reason}")]
    Malformed {
        header: &'static str,
        reason: &'static str,
    },
    #[error("the {0} header does not match the body")]
    Mismatch(&'static str),
}

pub const GITHUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
pub const LINEAR_SIGNATURE_HEADER: &str = "linear-signature";
pub const TELEGRAM_TOKEN_HEADER: &str = "x-telegram-bot-api-secret-token";

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>`.
pub fn verify_github(
    secret: &[u8],
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let name = "X-Hub-Signature-256";
    let header = header.ok_or(SignatureError::Missing(name))?;
    let hex_digest = header
        .strip_prefix(b"sha256=")
        .ok_or(SignatureError::Malformed {
            header: name,
            reason: "expected sha256=<64 hex digits>",
        })?;
    verify_hex_hmac(name, secret, body, hex_digest)
}

/// Linear: `Linear-Signature: <hex HMAC-SHA256(secret, raw body)>`, no prefix.
pub fn verify_linear(
    secret: &[u8],
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let name = "Linear-Signature";
    let header = header.ok_or(SignatureError::Missing(name))?;
    verify_hex_hmac(name, secret, body, header)
}

fn verify_hex_hmac(
    name: &'static str,
    secret: &[u8],
    body: &[u8],
    hex_digest: &[u8],
) -> Result<(), SignatureError> {
    let trimmed = hex_digest.trim_ascii();
    if trimmed.len() != 64 {
        return Err(SignatureError::Malformed {
            header: name,
            reason: "expected 64 hex digits",
        });
    }
    let expected = hex::decode(trimmed).map_err(|_| SignatureError::Malformed {
        header: name,
        reason: "expected 64 hex digits",
    })?;
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(body);
    // verify_slice compares in constant time.
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch(name))
}

/// Telegram sends the webhook's secret token back verbatim.
pub fn verify_token(expected: &str, header: Option<&[u8]>) -> Result<(), SignatureError> {
    let name = "X-Telegram-Bot-Api-Secret-Token";
    let presented = header.ok_or(SignatureError::Missing(name))?;
    if constant_time_eq_bytes(expected.as_bytes(), presented) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch(name))
    }
}

use crate::config::secret::constant_time_eq_bytes;

/// `sha256=<hex>` as GitHub would send it; for tests, the load generator and fakes.
pub fn sign_github(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(secret, body))
}

/// The `Linear-Signature` value for a body.
pub fn sign_linear(secret: &[u8], body: &[u8]) -> String {
    hmac_hex(secret, body)
}

fn hmac_hex(secret: &[u8], body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VECTOR_SECRET: &[u8] = b"It's a Secret to Everybody";
    const VECTOR_BODY: &[u8] = b"Hello, World!";
    const VECTOR_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_published_test_vector() {
        assert_eq!(sign_github(VECTOR_SECRET, VECTOR_BODY), VECTOR_SIGNATURE);
        assert_eq!(
            verify_github(
                VECTOR_SECRET,
                VECTOR_BODY,
                Some(VECTOR_SIGNATURE.as_bytes())
            ),
            Ok(())
        );
    }

    #[test]
    fn github_rejects_missing_malformed_and_wrong_signatures() {
        assert_eq!(
            verify_github(VECTOR_SECRET, VECTOR_BODY, None),
            Err(SignatureError::Missing("X-Hub-Signature-256"))
        );
        let sha1 = b"sha1=0123456789012345678901234567890123456789";
        assert!(matches!(
            verify_github(VECTOR_SECRET, VECTOR_BODY, Some(sha1)),
            Err(SignatureError::Malformed { .. })
        ));
        let uppercase_prefix = VECTOR_SIGNATURE.replace("sha256=", "SHA256=");
        assert!(verify_github(
            VECTOR_SECRET,
            VECTOR_BODY,
            Some(uppercase_prefix.as_bytes())
        )
        .is_err());
        assert_eq!(
            verify_github(
                b"another secret",
                VECTOR_BODY,
                Some(VECTOR_SIGNATURE.as_bytes())
            ),
            Err(SignatureError::Mismatch("X-Hub-Signature-256"))
        );
        assert_eq!(
            verify_github(
                VECTOR_SECRET,
                b"Hello, World?",
                Some(VECTOR_SIGNATURE.as_bytes())
            ),
            Err(SignatureError::Mismatch("X-Hub-Signature-256"))
        );
        let truncated = &VECTOR_SIGNATURE[..VECTOR_SIGNATURE.len() - 2];
        assert!(verify_github(VECTOR_SECRET, VECTOR_BODY, Some(truncated.as_bytes())).is_err());
    }

    #[test]
    fn linear_signature_has_no_prefix() {
        let sig = sign_linear(b"lin", b"{}");
        assert_eq!(verify_linear(b"lin", b"{}", Some(sig.as_bytes())), Ok(()));
        let prefixed = format!("sha256={sig}");
        assert!(verify_linear(b"lin", b"{}", Some(prefixed.as_bytes())).is_err());
        assert_eq!(
            verify_linear(b"lin", b"{}", None),
            Err(SignatureError::Missing("Linear-Signature"))
        );
    }

    #[test]
    fn telegram_token_must_match_exactly() {
        assert_eq!(verify_token("s3cret", Some(b"s3cret")), Ok(()));
        assert!(verify_token("s3cret", Some(b"s3cre")).is_err());
        assert!(verify_token("s3cret", Some(b"s3cret ")).is_err());
        assert!(verify_token("s3cret", Some(b"")).is_err());
        assert!(verify_token("s3cret", None).is_err());
    }

    proptest! {
        // Arbitrary bytes never panic and never pass.
        #[test]
        fn arbitrary_github_headers_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                               header in proptest::collection::vec(any::<u8>(), 0..80)) {
            prop_assert!(verify_github(b"secret", &body, Some(&header)).is_err());
        }

        #[test]
        fn arbitrary_hex_signatures_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                               digest in "[0-9a-f]{64}") {
            let header = format!("sha256={digest}");
            prop_assume!(header != sign_github(b"secret", &body));
            prop_assert!(verify_github(b"secret", &body, Some(header.as_bytes())).is_err());
            prop_assert!(verify_linear(b"secret", &body, Some(digest.as_bytes())).is_err());
        }

        #[test]
        fn a_changed_body_never_passes(body in proptest::collection::vec(any::<u8>(), 1..256), flip in any::<usize>()) {
            let signature = sign_github(b"secret", &body);
            let mut tampered = body.clone();
            let i = flip % tampered.len();
            tampered[i] ^= 0x01;
            prop_assert!(verify_github(b"secret", &tampered, Some(signature.as_bytes())).is_err());
        }

        #[test]
        fn arbitrary_tokens_never_pass(token in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assume!(token != b"the-real-token");
            prop_assert!(verify_token("the-real-token", Some(&token)).is_err());
        }
    }
}
