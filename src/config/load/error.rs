//! The message of an unknown key, with its did-you-mean.

use super::super::raw;

pub(crate) fn unknown_key_message(unknown: &raw::UnknownKey) -> String {
    let Some(raw::Segment::Key(key)) = unknown.path.last() else {
        return "unknown key".to_owned();
    };
    if let Some(near) = unknown
        .expected
        .iter()
        .filter(|known| strsim::levenshtein(key, known) <= 2 || key.eq_ignore_ascii_case(known))
        .min_by_key(|known| strsim::levenshtein(key, known))
    {
        return format!("unknown key `{key}`; did you mean `{near}`?");
    }
    if unknown.expected.is_empty() {
        format!("unknown key `{key}`")
    } else {
        format!(
            "unknown key `{key}`; expected one of: {}",
            unknown.expected.join(", ")
        )
    }
}
