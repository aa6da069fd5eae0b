//! Stage two of loading: raw values checked and turned into runtime types,
//! every problem collected with its file, line, column and key.
//!
//! Checking never stops at the first problem: each value is checked on its
//! own, a bad one is recorded and replaced by its default so the rest can
//! still be checked, and only when nothing was recorded is a [`Config`]
//! returned. Command-line overrides are applied here too, after the file, and
//! checked like any other value (their errors name the file `<flags>`).
//!
//! This module must not read YAML itself (that is [`super::raw`]'s job) and
//! must not hand raw types to anyone.

mod checker;
mod classes;
mod document;
mod error;
mod otel_env;
mod otlp;
mod routes;
mod validate;

pub use super::error::{ConfigError, ConfigErrors, FLAGS_FILE};
pub use checker::Overrides;
pub use otel_env::{ENV_FILE, OtelEnv};

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::super::RouteMatch;
    use super::super::raw;
    use super::super::values::parse_otlp_endpoint;
    use super::super::values::*;
    use super::error::*;
    use super::validate::covers;

    /// Every refusal of an upstream or OTLP endpoint names its problem and
    /// shows the URL redacted, whichever check refused it.
    #[test]
    fn url_errors_never_echo_secrets() {
        for (text, problem, shown) in [
            (
                "http://h/?api_key=s3cret",
                "must not have a query or fragment",
                "`http://h/?api_key=<redacted>`",
            ),
            (
                "http://h/#s3cret",
                "must not have a query or fragment",
                "`http://h/#<redacted>`",
            ),
            (
                "http://u:s3cret@h/",
                "must not contain user info",
                "`http://***@h/`",
            ),
            (
                "http://h:bad/?key=s3cret",
                "invalid port",
                "`http://h:bad/?key=<redacted>`",
            ),
            (
                "http://h:0/?key=s3cret",
                "invalid port",
                "`http://h:0/?key=<redacted>`",
            ),
            (
                "ftp://u:s3cret@h/?key=s3cret",
                "scheme `ftp` is not supported",
                "`ftp://***@h/?key=<redacted>`",
            ),
            (
                "/v1?key=s3cret",
                "expected an absolute URL",
                "`/v1?key=<redacted>`",
            ),
            (
                "h:8000/?key=s3cret",
                "invalid format",
                "`h:8000/?key=<redacted>`",
            ),
            (
                "http://h/a b?key=s3cret",
                "invalid URL",
                "`http://h/a b?key=<redacted>`",
            ),
        ] {
            for error in [
                parse_upstream(text).expect_err(text),
                parse_otlp_endpoint(text).expect_err(text),
            ] {
                assert!(!error.contains("s3cret"), "{error}");
                assert!(error.contains(problem), "{error}");
                assert!(error.contains(shown), "{error}");
            }
        }
    }

    /// An upstream or OTLP endpoint that parses has nothing to redact, so
    /// what shows it whole (the `route` and OTLP log lines at start,
    /// `/config`) shows no secret.
    #[test]
    fn parsed_upstream_urls_have_nothing_to_redact() {
        for text in [
            "http://127.0.0.1:8000",
            "HTTPS://Example.com/v1/",
            "http://[::1]:8080/a/b",
        ] {
            let url = parse_upstream(text).expect(text).url();
            assert_eq!(redact_url(&url), url.as_str());
        }
        for text in ["http://collector:4318", "http://127.0.0.1:4317/"] {
            let endpoint = parse_otlp_endpoint(text).expect(text);
            assert_eq!(redact_url(&endpoint), endpoint.as_str());
        }
    }

    #[test]
    fn hosts_methods_bounds() {
        assert_eq!(
            parse_host("API.Example.com"),
            Ok("api.example.com".to_owned())
        );
        assert_eq!(parse_host("[::1]"), Ok("[::1]".to_owned()));
        assert!(parse_host("example.com:80").is_err());
        assert!(parse_host("a..b").is_err());
        assert!(parse_host("").is_err());
        assert_eq!(parse_method("post"), Ok(http::Method::POST));
        assert!(parse_method("PO ST").is_err());
        assert_eq!(parse_bound("1e-3"), Ok(0.001));
        for bad in [".inf", "-.Inf", ".nan", "NaN", "0", "-1", "x"] {
            assert!(parse_bound(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shadowing() {
        let m = |prefix: &str, host: Option<&str>, methods: Option<Vec<http::Method>>| RouteMatch {
            path_prefix: prefix.to_owned(),
            host: host.map(str::to_owned),
            methods,
        };
        assert!(covers(&m("/", None, None), &m("/v1/", Some("h"), None)));
        assert!(covers(&m("/v1/", None, None), &m("/v1/", None, None)));
        assert!(!covers(&m("/v1/", None, None), &m("/v2/", None, None)));
        assert!(!covers(&m("/", Some("a"), None), &m("/", None, None)));
        assert!(!covers(
            &m("/", None, Some(vec![http::Method::POST])),
            &m("/", None, None)
        ));
        assert!(covers(
            &m("/", None, Some(vec![http::Method::POST, http::Method::GET])),
            &m("/x", None, Some(vec![http::Method::GET]))
        ));
    }

    #[test]
    fn did_you_mean() {
        let unknown = raw::UnknownKey {
            path: vec![raw::Segment::Key("idel".into())],
            pos: None,
            expected: &["connect", "response_headers", "idle"],
        };
        assert_eq!(
            unknown_key_message(&unknown),
            "unknown key `idel`; did you mean `idle`?"
        );
        let unknown = raw::UnknownKey {
            path: vec![raw::Segment::Key("zzz".into())],
            pos: None,
            expected: &["a", "b"],
        };
        assert_eq!(
            unknown_key_message(&unknown),
            "unknown key `zzz`; expected one of: a, b"
        );
    }
}
