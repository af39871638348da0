//! "Did you mean": the one suggestion for a mistyped key, shared by the configuration reader and the agents'
//! strict report fields.

/// The known key an unknown one probably meant: the same up to case, `_` and `-` (`needsHuman`, `max-attempts`),
/// or a typo close enough to be one (a missing `s`, two letters swapped).
pub fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let squash = |s: &str| s.to_ascii_lowercase().replace(['_', '-'], "");
    let key_squashed = squash(key);
    if let Some(k) = known.iter().find(|k| squash(k) == key_squashed) {
        return Some(k);
    }
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&key, k), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 3).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn suggests_the_key_meant_and_nothing_far() {
        let known = ["max_concurrent", "needs_human", "retries", "scope"];
        assert_eq!(closest("maxConcurrent", &known), Some("max_concurrent"));
        assert_eq!(closest("needsHuman", &known), Some("needs_human"));
        assert_eq!(closest("retrys", &known), Some("retries"));
        assert_eq!(
            closest("retry", &known),
            None,
            "three edits from retries: too far"
        );
        assert_eq!(closest("scoep", &known), Some("scope"));
        assert_eq!(closest("bananas", &known), None);
        assert_eq!(closest("", &known), None);
    }
}
