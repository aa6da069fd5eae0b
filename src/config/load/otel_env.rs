//! The OpenTelemetry SDKs' environment variables (`OTEL_*`), as the
//! `otlp` settings take them: read from the process once, by
//! [`OtelEnv::from_process`], and handed to the loader with the other
//! overrides, so that a test can pass a map instead.
//!
//! The values' formats are the specification's: durations in whole
//! milliseconds, headers and resource attributes as comma-separated
//! `key=value` pairs with percent-encoded values. A header's value is a
//! secret (a collector's credentials): no message repeats it, nor anything
//! else of a headers variable but the position of the entry at fault.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// File name used in errors about environment variables.
pub const ENV_FILE: &str = "<environment>";

/// The `OTEL_*` variables of an environment.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OtelEnv(BTreeMap<String, String>);

impl OtelEnv {
    /// The `OTEL_*` variables of this process (those whose value is not
    /// Unicode are left out, as if unset).
    pub fn from_process() -> Self {
        Self::from_pairs(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// The `OTEL_*` variables among `pairs`.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .filter(|(k, _)| k.starts_with("OTEL_"))
                .collect(),
        )
    }

    /// The variable `name`, unless it is unset or empty (which the
    /// specification treats alike).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
    }
}

/// The names only: a headers variable's value is a secret.
impl fmt::Debug for OtelEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// A duration in whole milliseconds, greater than zero.
pub(crate) fn parse_millis(text: &str) -> Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "invalid value `{text}`: expected a whole number of milliseconds, greater than zero"
        )),
    }
}

/// `OTEL_SDK_DISABLED`: `true` or `false`, in any case.
pub(crate) fn parse_disabled(text: &str) -> Result<bool, String> {
    if text.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(format!("invalid value `{text}`: expected true or false"))
    }
}

/// Comma-separated `key=value` pairs, each value percent-decoded. With
/// `secret`, no message shows anything of the text.
fn pairs(text: &str, secret: bool) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        let n = i + 1;
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let shown = |what: &str| {
            if secret {
                format!("entry {n}: {what}")
            } else {
                format!("entry {n} `{entry}`: {what}")
            }
        };
        let Some((key, value)) = entry.split_once('=') else {
            return Err(shown("expected key=value"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(shown("the key is empty"));
        }
        let Some(value) = percent_decode(value.trim()) else {
            return Err(shown(
                "the value is not valid percent-encoded UTF-8 (a `%` is followed by two hex digits)",
            ));
        };
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

/// `OTEL_EXPORTER_OTLP_HEADERS` and its signals' forms: header names
/// (lowercased) and values, checked as HTTP headers.
pub(crate) fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = pairs(text, true)?;
    for (i, (name, value)) in out.iter_mut().enumerate() {
        let n = i + 1;
        *name = name.to_ascii_lowercase();
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("entry {n}: the key is not a valid header name"));
        }
        if http::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "entry {n}: the value is not a valid header value (visible ASCII and spaces)"
            ));
        }
    }
    Ok(out)
}

/// `OTEL_RESOURCE_ATTRIBUTES`.
pub(crate) fn parse_resource_attributes(text: &str) -> Result<Vec<(String, String)>, String> {
    pairs(text, false)
}

/// `%XX` decoded; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_otel_variables_are_kept_and_empty_is_unset() {
        let env = OtelEnv::from_pairs([
            ("OTEL_SERVICE_NAME", "a"),
            ("PATH", "/bin"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "  "),
        ]);
        assert_eq!(env.get("OTEL_SERVICE_NAME"), Some("a"));
        assert_eq!(env.get("PATH"), None);
        assert_eq!(env.get("OTEL_EXPORTER_OTLP_ENDPOINT"), None);
    }

    #[test]
    fn debug_shows_names_not_values() {
        let env = OtelEnv::from_pairs([("OTEL_EXPORTER_OTLP_HEADERS", "authorization=s3cret")]);
        let shown = format!("{env:?}");
        assert!(shown.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn headers_are_percent_decoded_and_errors_never_show_them() {
        assert_eq!(
            parse_headers("Authorization=Bearer%20s3cret, x-scope=a%2Cb ,").as_deref(),
            Ok(&[
                ("authorization".to_owned(), "Bearer s3cret".to_owned()),
                ("x-scope".to_owned(), "a,b".to_owned()),
            ][..])
        );
        for bad in [
            "authorization",
            "a=1,Bearer s3cret",
            "=s3cret",
            "a=s3cret%zz",
            "a=s3cret%2",
            "bad header=s3cret",
            "a=s3cret%0A",
        ] {
            let message = parse_headers(bad).expect_err(bad);
            assert!(!message.contains("s3cret"), "{bad}: {message}");
            assert!(message.starts_with("entry "), "{bad}: {message}");
        }
    }

    #[test]
    fn resource_attributes() {
        assert_eq!(
            parse_resource_attributes("service.name=x,deployment.environment=prod%20eu").as_deref(),
            Ok(&[
                ("service.name".to_owned(), "x".to_owned()),
                ("deployment.environment".to_owned(), "prod eu".to_owned()),
            ][..])
        );
        assert!(parse_resource_attributes("a").is_err());
    }

    #[test]
    fn the_gen_ai_names_are_the_opt_in_lists_and_dup_wins() {
        use crate::config::GenAiNames;
        for (list, names) in [
            (None, GenAiNames::Released),
            (Some("http"), GenAiNames::Released),
            (Some("gen_ai_latest_experimental"), GenAiNames::Latest),
            (
                Some(" http/dup , gen_ai_latest_experimental "),
                GenAiNames::Latest,
            ),
            (Some("gen_ai_latest_experimental/dup"), GenAiNames::Both),
            (
                Some("gen_ai_latest_experimental,gen_ai_latest_experimental/dup"),
                GenAiNames::Both,
            ),
            (Some("gen_ai_latest"), GenAiNames::Released),
            (Some("GEN_AI_LATEST_EXPERIMENTAL"), GenAiNames::Released),
        ] {
            assert_eq!(GenAiNames::from_opt_in(list), names, "{list:?}");
        }
        assert!(GenAiNames::Both.released() && GenAiNames::Both.latest());
        assert!(!GenAiNames::Latest.released() && !GenAiNames::Released.latest());
    }

    #[test]
    fn millis_and_disabled() {
        assert_eq!(parse_millis("1500"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "-1", "1s", "1.5", ""] {
            assert!(parse_millis(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_disabled("TRUE"), Ok(true));
        assert_eq!(parse_disabled("false"), Ok(false));
        assert!(parse_disabled("1").is_err());
    }
}
