//! "Did you mean …?" for unknown keys and names: the closest candidate by
//! edit distance (strsim's Levenshtein, counted in characters).

use strsim::levenshtein as distance;

/// The candidate closest to `word`, if one is close enough to be a likely
/// typo (or contains / is contained in `word`, e.g. `attempts` →
/// `max_attempts`).
///
/// ```
/// use ballast_config::suggest::did_you_mean;
///
/// assert_eq!(did_you_mean("max_atempts", ["max_attempts", "backoff"]), Some("max_attempts"));
/// assert_eq!(did_you_mean("colour", ["max_attempts", "backoff"]), None);
/// ```
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .filter_map(|c| {
            let d = distance(&word_lower, &c.to_lowercase());
            let related =
                word_lower.len() >= 3 && (c.contains(word_lower.as_str()) || word_lower.contains(c));
            (d <= limit || related).then_some((d, c))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("retries", "retries"), 0);
    }

    #[test]
    fn suggests_likely_typos_only() {
        let keys = ["max_attempts", "backoff", "first_delay", "max_delay", "retry_on", "budget_ratio"];
        assert_eq!(did_you_mean("retry-on", keys), Some("retry_on"));
        assert_eq!(did_you_mean("first_dely", keys), Some("first_delay"));
        assert_eq!(did_you_mean("attempts", keys), Some("max_attempts"));
        assert_eq!(did_you_mean("zzz", keys), None);
    }
}
