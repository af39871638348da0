//! Comparing secret material. It lives with the secrets (`Settings`' tokens, webhook secrets) so that every
//! module that checks one, the admin sign-in as well as webhook signatures, uses this one comparison.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Compares two secrets in constant time, whatever their lengths: both are hashed first, so neither the position
/// of the first difference nor the length of the expected value leaks through timing.
pub fn constant_time_eq(expected: &str, presented: &str) -> bool {
    constant_time_eq_bytes(expected.as_bytes(), presented.as_bytes())
}

/// [`constant_time_eq`] on bytes (an HMAC's hex, a header's raw value).
pub fn constant_time_eq_bytes(expected: &[u8], presented: &[u8]) -> bool {
    let a = Sha256::digest(expected);
    let b = Sha256::digest(presented);
    a.ct_eq(&b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_only_when_every_byte_and_the_length_match() {
        assert!(constant_time_eq("s3cret-token", "s3cret-token"));
        assert!(!constant_time_eq("s3cret-token", "s3cret-tokem"));
        assert!(!constant_time_eq("s3cret-token", "s3cret-token-and-more"));
        assert!(!constant_time_eq("s3cret-token", ""));
        assert!(constant_time_eq_bytes(b"", b""));
    }
}
