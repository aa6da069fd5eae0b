//! Values of any section: addresses, sizes, durations, booleans, shares,
//! counts, address ranges, label values, and upstream URLs (with the one
//! redaction of a URL shown in a message).

use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::{IpNet, MetricsEndpoint, Protocol, Upstream};

/// `IP:port`.
pub(crate) fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("invalid address `{text}`: expected IP:port, such as 0.0.0.0:8080 or [::1]:8080")
    })
}

/// Bytes, as a whole number with an optional unit: `B`, decimal `kB`/`KB`,
/// `MB`, `GB`, `TB` (powers of 1000) or binary `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024). Greater than zero.
pub(crate) fn parse_size(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let bad = || {
        format!(
            "invalid size `{text}`: expected a whole number of bytes, optionally with a unit (B, kB, MB, GB, KiB, MiB, GiB), such as 4MiB"
        )
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let multiplier: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "kB" | "KB" => 1000,
        "MB" => 1000 * 1000,
        "GB" => 1000 * 1000 * 1000,
        "TB" => 1000 * 1000 * 1000 * 1000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    let too_large = || format!("invalid size `{text}`: too large");
    let count: u64 = digits.parse().map_err(|_| too_large())?;
    let bytes = count.checked_mul(multiplier).ok_or_else(too_large)?;
    let bytes = usize::try_from(bytes).map_err(|_| too_large())?;
    if bytes == 0 {
        return Err(format!("invalid size `{text}`: must be greater than zero"));
    }
    Ok(bytes)
}

/// A humantime duration (`500ms`, `30s`, `10m`, `1h 30m`), greater than zero.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(duration) if duration.is_zero() => Err(format!(
            "invalid duration `{text}`: must be greater than zero"
        )),
        Ok(duration) => Ok(duration),
        Err(_) => Err(format!(
            "invalid duration `{text}`: expected a number with a unit, such as 500ms, 30s, 10m or 1h"
        )),
    }
}

/// YAML 1.2 core booleans.
pub(crate) fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" | "True" | "TRUE" => Ok(true),
        "false" | "False" | "FALSE" => Ok(false),
        _ => Err(format!("invalid boolean `{text}`: expected true or false")),
    }
}

/// A share written as a percentage, `1%` to `100%`, as a fraction.
pub(crate) fn parse_percentage(text: &str) -> Result<f64, String> {
    let invalid = || format!("invalid percentage `{text}`: expected 1% to 100%, like `90%`");
    let number = text.trim().strip_suffix('%').ok_or_else(invalid)?;
    match number.trim().parse::<f64>() {
        Ok(n) if (1.0..=100.0).contains(&n) => Ok(n / 100.0),
        _ => Err(invalid()),
    }
}

pub(crate) fn parse_positive_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid count `{text}`: expected a whole number, at least 1"
        )),
    }
}

/// An address (`10.1.2.3`, `::1`) or a CIDR range (`10.0.0.0/8`,
/// `fd00::/8`).
pub(crate) fn parse_ip_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let addr: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("invalid address `{text}`: expected an IP address or CIDR range"))?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= bits => n,
            _ => {
                return Err(format!(
                    "invalid range `{text}`: the prefix length must be 0 to {bits}"
                ));
            }
        },
    };
    Ok(IpNet { addr, prefix })
}

/// Prometheus-safe metric name prefix.
pub(crate) fn is_metric_namespace(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A bucket bound: a finite number greater than zero.
pub(crate) fn parse_bound(text: &str) -> Result<f64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        ".inf" | "inf" | "infinity" | ".nan" | "nan"
    ) {
        return Err(format!("invalid bucket bound `{text}`: must be finite"));
    }
    match trimmed.parse::<f64>() {
        Ok(bound) if !bound.is_finite() => {
            Err(format!("invalid bucket bound `{text}`: must be finite"))
        }
        Ok(bound) if bound <= 0.0 => Err(format!(
            "invalid bucket bound `{text}`: must be greater than zero"
        )),
        Ok(bound) => Ok(bound),
        Err(_) => Err(format!("invalid bucket bound `{text}`: expected a number")),
    }
}

/// Route names and SLO classes: bounded, readable label values.
pub(crate) fn is_label_value(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

/// `text`, a URL as written (valid or not), made safe to show in an error
/// or a log line: the user info masked (`http://***@host`), each non-empty
/// query value replaced (`?api_key=<redacted>`; the keys are kept, but a
/// bare item without `=` is replaced whole, as it may be a token itself)
/// and a non-empty fragment replaced whole (`#<redacted>`). The query
/// starts at the first `?` and the fragment at the first `#`, wherever
/// they are, and the user info runs to the last `@` before them (even past
/// a `/`, which a password may hold unencoded), so a URL that fails to
/// parse is redacted as much as one that parses.
pub(crate) fn redact_url(text: &str) -> std::borrow::Cow<'_, str> {
    const REDACTED: &str = "<redacted>";
    let (before_fragment, fragment) = match text.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (text, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (before_fragment, None),
    };
    let start = before_query
        .find("://")
        .map(|i| i + 3)
        .or_else(|| before_query.starts_with("//").then_some(2))
        .unwrap_or(0);
    let at = before_query[start..].rfind('@').map(|i| start + i);
    let mut shown = String::with_capacity(text.len() + 16);
    match at {
        Some(at) => {
            shown.push_str(&before_query[..start]);
            shown.push_str("***");
            shown.push_str(&before_query[at..]);
        }
        None => shown.push_str(before_query),
    }
    if let Some(query) = query {
        shown.push('?');
        for (i, item) in query.split('&').enumerate() {
            if i > 0 {
                shown.push('&');
            }
            match item.split_once('=') {
                Some((key, "")) => {
                    shown.push_str(key);
                    shown.push('=');
                }
                Some((key, _)) => {
                    shown.push_str(key);
                    shown.push('=');
                    shown.push_str(REDACTED);
                }
                None if item.is_empty() => {}
                None => shown.push_str(REDACTED),
            }
        }
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        if !fragment.is_empty() {
            shown.push_str(REDACTED);
        }
    }
    if shown == text {
        text.into()
    } else {
        shown.into()
    }
}

/// An upstream base URL: `http`/`https`, a host, no user info, query or
/// fragment; the path is kept without its trailing `/`. Errors show the
/// URL redacted (`redact_url`).
pub(crate) fn parse_upstream(text: &str) -> Result<Upstream, String> {
    parse_base_url(text, "send credentials as headers")
}

/// An `http`/`https` base URL with neither user info, query nor fragment;
/// a URL with user info is refused with `credentials`, where they go
/// instead. Every error shows the URL as `redact_url` makes it, never as
/// written, whichever check it fails.
pub(crate) fn parse_base_url(text: &str, credentials: &str) -> Result<Upstream, String> {
    let shown = redact_url(text);
    let uri: http::Uri = text
        .parse()
        .map_err(|error| format!("invalid URL `{shown}`: {error}"))?;
    let scheme = match uri.scheme() {
        Some(s) if *s == http::uri::Scheme::HTTP => http::uri::Scheme::HTTP,
        Some(s) if *s == http::uri::Scheme::HTTPS => http::uri::Scheme::HTTPS,
        Some(s) => {
            return Err(format!(
                "invalid URL `{shown}`: scheme `{s}` is not supported, use http or https"
            ));
        }
        None => {
            return Err(format!(
                "invalid URL `{shown}`: expected an absolute URL such as http://127.0.0.1:8000"
            ));
        }
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(format!("invalid URL `{shown}`: missing host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "invalid URL `{shown}`: must not contain user info; {credentials}"
        ));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(format!("invalid URL `{shown}`: missing host"));
    }
    let after_host = authority.as_str().get(host.len()..).unwrap_or("");
    if !after_host.is_empty() && !matches!(authority.port_u16(), Some(port) if port > 0) {
        return Err(format!("invalid URL `{shown}`: invalid port"));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!(
            "invalid URL `{shown}`: must not have a query or fragment"
        ));
    }
    Ok(Upstream {
        scheme,
        authority,
        base_path: uri.path().trim_end_matches('/').to_owned(),
    })
}

/// The URL of a page to scrape (`engine_metrics`, `gpu_metrics`):
/// `http`/`https` with a host. User info, a query and a fragment are
/// allowed (an exporter may want them), and [`MetricsEndpoint::shown`] is
/// the URL as `redact_url` makes it, as is every error.
pub(crate) fn parse_metrics_url(text: &str) -> Result<MetricsEndpoint, String> {
    let text = text.trim();
    let shown = redact_url(text).into_owned();
    let url: http::Uri = text
        .parse()
        .map_err(|error| format!("invalid URL `{shown}`: {error}"))?;
    match url.scheme_str() {
        Some("http" | "https") => {}
        Some(scheme) => {
            return Err(format!(
                "invalid URL `{shown}`: scheme `{scheme}` is not supported, use http or https"
            ));
        }
        None => {
            return Err(format!(
                "invalid URL `{shown}`: expected an absolute URL such as http://127.0.0.1:8000/metrics"
            ));
        }
    }
    let Some(authority) = url.authority() else {
        return Err(format!("invalid URL `{shown}`: missing host"));
    };
    let host = authority.host();
    if host.is_empty() {
        return Err(format!("invalid URL `{shown}`: missing host"));
    }
    let after_host = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, hostport)| hostport)
        .get(host.len()..)
        .unwrap_or("");
    if !after_host.is_empty() && !matches!(authority.port_u16(), Some(port) if port > 0) {
        return Err(format!("invalid URL `{shown}`: invalid port"));
    }
    Ok(MetricsEndpoint { url, shown })
}

/// Every accepted `protocol` value, for error messages.
pub(crate) fn parse_protocol(text: &str) -> Result<Protocol, String> {
    match text.trim() {
        "auto" => Ok(Protocol::Auto),
        "none" => Ok(Protocol::None),
        name => meter::Api::from_name(name)
            .map(Protocol::Api)
            .ok_or_else(|| {
                let names: Vec<&str> = std::iter::once("auto")
                    .chain(meter::Api::NAMED.iter().map(|(name, _)| *name))
                    .chain(std::iter::once("none"))
                    .collect();
                format!(
                    "invalid protocol `{text}`: expected one of {}",
                    names.join(", ")
                )
            }),
    }
}

/// A `gen_ai.provider.name`: lowercase letters, digits, `_` and `.`, as the
/// conventions' values are written, 1 to 64 of them.
pub(crate) fn parse_provider_name(text: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid provider name `{text}`: expected 1 to 64 of a-z, 0-9, `_` and `.`, such as vllm or azure.ai.openai"
        ))
    }
}

pub(crate) fn parse_path_prefix(text: &str) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err(format!("invalid path prefix `{text}`: must start with `/`"));
    }
    if text.contains(['?', '#']) || text.contains(char::is_whitespace) {
        return Err(format!(
            "invalid path prefix `{text}`: must be a plain path, without query, fragment or spaces"
        ));
    }
    Ok(text.to_owned())
}

/// A host name or IP address without port, stored lowercase.
pub(crate) fn parse_host(text: &str) -> Result<String, String> {
    let host = text.trim();
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .map(|_| host.to_ascii_lowercase())
            .map_err(|_| format!("invalid host `{text}`: not an IPv6 address"));
    }
    if host.contains(':') {
        return Err(format!(
            "invalid host `{text}`: give the host without a port (IPv6 addresses in brackets)"
        ));
    }
    let valid = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if valid {
        Ok(host.to_ascii_lowercase())
    } else {
        Err(format!(
            "invalid host `{text}`: expected a host name such as api.example.com"
        ))
    }
}

pub(crate) fn parse_method(text: &str) -> Result<http::Method, String> {
    let upper = text.trim().to_ascii_uppercase();
    if upper.is_empty() {
        return Err("method must not be empty".to_owned());
    }
    http::Method::from_bytes(upper.as_bytes()).map_err(|_| format!("invalid HTTP method `{text}`"))
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4194304"), Ok(4 << 20));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4MB"), Ok(4_000_000));
        assert_eq!(parse_size("100kB"), Ok(100_000));
        assert_eq!(parse_size("100KB"), Ok(100_000));
        assert_eq!(parse_size("16 MiB"), Ok(16 << 20));
        assert_eq!(parse_size("7B"), Ok(7));
        for bad in [
            "",
            "MiB",
            "0",
            "0MiB",
            "1.5MiB",
            "4mb",
            "4 M",
            "-1",
            "99999999999999999999",
            "20000000TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "30", "0s", "-5s", "soon"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn upstreams() {
        let up = parse_upstream("http://127.0.0.1:8000").expect("valid");
        assert_eq!(up.url(), "http://127.0.0.1:8000");
        assert_eq!(up.base_path, "");
        let up = parse_upstream("HTTPS://Example.com/v1/").expect("valid");
        assert_eq!(up.scheme, http::uri::Scheme::HTTPS);
        assert_eq!(up.base_path, "/v1");
        let up = parse_upstream("http://[::1]:8080/a/b").expect("valid");
        assert_eq!(up.authority.as_str(), "[::1]:8080");
        assert_eq!(up.base_path, "/a/b");
        for bad in [
            "127.0.0.1:8000",
            "ftp://h/",
            "http://u:p@h/",
            "http://h/?x=1",
            "http://h/?",
            "http://h/#frag",
            "http://:80/",
            "http://h:99999/",
            "http://h:0/",
            "http://h:/",
            "http://h/a b",
            "",
        ] {
            assert!(parse_upstream(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redact_url_hides_user_info_query_values_and_fragment() {
        for (text, shown) in [
            ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
            ("http://h/?api_key=s3cret", "http://h/?api_key=<redacted>"),
            (
                "http://h/v1?a=1&key=s3cret&b=",
                "http://h/v1?a=<redacted>&key=<redacted>&b=",
            ),
            ("http://h/?a=b=s3cret", "http://h/?a=<redacted>"),
            // A bare item may be a token itself: it goes whole.
            ("http://h/?s3cret", "http://h/?<redacted>"),
            ("http://h/?&&", "http://h/?&&"),
            ("http://h/?", "http://h/?"),
            ("http://h/#s3cret", "http://h/#<redacted>"),
            ("http://h/#", "http://h/#"),
            (
                "http://h/?k=s3cret#s3cret?x=s3cret",
                "http://h/?k=<redacted>#<redacted>",
            ),
            ("http://u:s3cret@h/", "http://***@h/"),
            ("https://s3cret@h:8443", "https://***@h:8443"),
            (
                "http://u:s3cret@h/?k=v#f",
                "http://***@h/?k=<redacted>#<redacted>",
            ),
            // Past a `/` a password may hold unencoded; a `?` or `#` in one
            // starts the query or fragment, which are hidden anyway.
            ("http://u:s3/cret@h/", "http://***@h/"),
            ("http://u:s3?cret@h/", "http://u:s3?<redacted>"),
            ("http://u:s3#cret@h/", "http://u:s3#<redacted>"),
            // Not URLs, or not valid ones, alike.
            ("http://h:bad/?key=s3cret", "http://h:bad/?key=<redacted>"),
            ("h:8000/?key=s3cret", "h:8000/?key=<redacted>"),
            ("u:s3cret@h:8000", "***@h:8000"),
            ("//u:s3cret@h/", "//***@h/"),
            ("", ""),
        ] {
            assert_eq!(redact_url(text), shown, "{text}");
        }
        assert!(matches!(
            redact_url("http://h/?k="),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn metrics_urls() {
        let ok = parse_metrics_url(" https://u:s3cret@dcgm:9400/metrics?token=s3cret ").unwrap();
        assert_eq!(ok.shown, "https://***@dcgm:9400/metrics?token=<redacted>");
        assert_eq!(ok.url.host(), Some("dcgm"));
        assert_eq!(ok.url.port_u16(), Some(9400));
        assert_eq!(
            parse_metrics_url("http://vllm:8000/metrics").unwrap().shown,
            "http://vllm:8000/metrics"
        );
        for (bad, says) in [
            ("ftp://h/metrics", "scheme `ftp`"),
            ("vllm:8000/metrics", "invalid URL"),
            ("/metrics", "absolute URL"),
            ("http://:80/metrics", "missing host"),
            ("http://h:0/metrics", "invalid port"),
            ("ftp://u:s3cret@h/?k=s3cret", "***@"),
        ] {
            let error = parse_metrics_url(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
            assert!(!error.contains("s3cret"), "{bad}: {error}");
        }
    }

    #[test]
    fn names() {
        assert!(is_metric_namespace("llm"));
        assert!(is_metric_namespace("_x9"));
        assert!(!is_metric_namespace("9x"));
        assert!(!is_metric_namespace("a-b"));
        assert!(!is_metric_namespace(""));
        assert!(is_label_value("chat-v1.2:a_b"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(""));
    }
}
