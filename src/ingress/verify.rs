//! Signature and token checks, the primitives every provider's scheme is made of (each scheme, its header and
//! its signer are in the provider's folder: `providers/<name>/webhook.rs`). Every comparison of secret material
//! is constant time.

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

/// Whether `hex_digest` (64 hex digits, surrounding whitespace ignored) is HMAC-SHA256(`secret`, `body`); `name`
/// is the header's, for the error.
pub fn verify_hex_hmac(
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

/// A secret token sent back verbatim in header `name` (`header`: its value, if sent), compared in constant time.
pub fn verify_token(
    name: &'static str,
    expected: &str,
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let presented = header.ok_or(SignatureError::Missing(name))?;
    if constant_time_eq_bytes(expected.as_bytes(), presented) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch(name))
    }
}

use crate::config::secret::constant_time_eq_bytes;

/// HMAC-SHA256(`secret`, `body`) in lower-case hex: what a provider's signer sends (tests, the load generator and
/// fakes sign with it).
pub fn hmac_hex(secret: &[u8], body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // GitHub's published test vector, which is plain HMAC-SHA256.
    const VECTOR_SECRET: &[u8] = b"It's a Secret to Everybody";
    const VECTOR_BODY: &[u8] = b"Hello, World!";
    const VECTOR_DIGEST: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn hmac_matches_the_published_vector() {
        assert_eq!(hmac_hex(VECTOR_SECRET, VECTOR_BODY), VECTOR_DIGEST);
        assert_eq!(
            verify_hex_hmac("H", VECTOR_SECRET, VECTOR_BODY, VECTOR_DIGEST.as_bytes()),
            Ok(())
        );
        let padded = format!(" {VECTOR_DIGEST}\n");
        assert_eq!(
            verify_hex_hmac("H", VECTOR_SECRET, VECTOR_BODY, padded.as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn a_short_non_hex_or_wrong_digest_is_refused_naming_the_header() {
        assert!(matches!(
            verify_hex_hmac(
                "H",
                VECTOR_SECRET,
                VECTOR_BODY,
                &VECTOR_DIGEST.as_bytes()[..62]
            ),
            Err(SignatureError::Malformed { header: "H", .. })
        ));
        let not_hex = VECTOR_DIGEST.replace('7', "g");
        assert!(matches!(
            verify_hex_hmac("H", VECTOR_SECRET, VECTOR_BODY, not_hex.as_bytes()),
            Err(SignatureError::Malformed { header: "H", .. })
        ));
        assert_eq!(
            verify_hex_hmac(
                "H",
                b"another secret",
                VECTOR_BODY,
                VECTOR_DIGEST.as_bytes()
            ),
            Err(SignatureError::Mismatch("H"))
        );
    }

    #[test]
    fn a_token_must_match_exactly() {
        assert_eq!(verify_token("T", "s3cret", Some(b"s3cret")), Ok(()));
        assert!(verify_token("T", "s3cret", Some(b"s3cre")).is_err());
        assert!(verify_token("T", "s3cret", Some(b"s3cret ")).is_err());
        assert!(verify_token("T", "s3cret", Some(b"")).is_err());
        assert_eq!(
            verify_token("T", "s3cret", None),
            Err(SignatureError::Missing("T"))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_hex_digests_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                            digest in "[0-9a-f]{64}") {
            prop_assume!(digest != hmac_hex(b"secret", &body));
            prop_assert!(verify_hex_hmac("H", b"secret", &body, digest.as_bytes()).is_err());
        }

        #[test]
        fn arbitrary_tokens_never_pass(token in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assume!(token != b"the-real-token");
            prop_assert!(verify_token("T", "the-real-token", Some(&token)).is_err());
        }
    }
}
