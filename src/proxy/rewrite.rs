//! The request rewrite: what the proxy changes of a request on its way
//! upstream (RFC 9110 §7.6), and nothing else. Hop-by-hop headers go, `Host`
//! is the upstream's (unless the route preserves the client's), the
//! `X-Forwarded-*` headers are set, and an HTTP/1.1 connection is given the
//! origin form. The response comes back with its hop-by-hop headers
//! removed.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Uri};

use crate::config::{IpNet, Route, Upstream};

/// Which `X-Forwarded-*` headers a proxy adds, and whose it keeps.
#[derive(Debug, Clone)]
pub struct XForwarded {
    /// Add `X-Forwarded-For`, `-Proto` and `-Host`.
    pub x_forwarded: bool,
    /// Clients whose own `X-Forwarded-Proto` and `-Host` are passed on.
    pub trusted_proxies: Vec<IpNet>,
}

/// Rewrites the client's request into the upstream's: the route's
/// upstream and path, HTTP/1.1, hop-by-hop headers removed, `Host` the
/// upstream's (or the client's, with `preserve_host`), and, when
/// `forwarded` says, the `X-Forwarded-*` headers.
pub fn upstream_request<B>(
    route: &Route,
    req: Request<B>,
    client_addr: SocketAddr,
    forwarded: &XForwarded,
) -> Result<Request<B>, http::Error> {
    let (mut parts, body) = req.into_parts();
    let original_host = request_host_value(&parts.uri, &parts.headers);
    let upstream = &route.upstream;
    let mut path = parts.uri.path();
    if route.strip_prefix {
        let prefix = route.matcher.path_prefix.trim_end_matches('/');
        path = path.strip_prefix(prefix).unwrap_or(path);
    }
    let mut target = String::with_capacity(upstream.base_path.len() + path.len() + 64);
    target.push_str(&upstream.base_path);
    if !path.starts_with('/') {
        target.push('/');
    }
    target.push_str(path);
    if let Some(q) = parts.uri.query() {
        target.push('?');
        target.push_str(q);
    }
    parts.uri = Uri::builder()
        .scheme(upstream.scheme.clone())
        .authority(upstream.authority.clone())
        .path_and_query(target)
        .build()?;
    parts.version = http::Version::HTTP_11;

    let headers = &mut parts.headers;
    remove_hop_by_hop(headers);
    if route.preserve_host {
        if let Some(host) = original_host.clone() {
            headers.insert(header::HOST, host);
        }
    } else {
        // The upstream's: `origin_form` sets it for HTTP/1.1 (from
        // `upstream_host`), and HTTP/2 sends the URI's authority.
        headers.remove(header::HOST);
    }
    if forwarded.x_forwarded {
        if let Some(v) = forwarded_for(headers.get(X_FORWARDED_FOR), client_addr.ip()) {
            headers.insert(X_FORWARDED_FOR, v);
        }
        // What a client says of the scheme and host it used is taken
        // only from a proxy in front that is trusted to have set it.
        let trusted = forwarded
            .trusted_proxies
            .iter()
            .any(|net| net.contains(client_addr.ip()));
        if !trusted || !headers.contains_key(X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        }
        if !trusted || !headers.contains_key(X_FORWARDED_HOST) {
            match original_host {
                Some(host) => headers.insert(X_FORWARDED_HOST, host),
                None => headers.remove(X_FORWARDED_HOST),
            };
        }
    }
    Ok(Request::from_parts(parts, body))
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The hop-by-hop headers (RFC 9110 §7.6.1), `Connection` first, and the
/// credentials of this hop (`Proxy-Authorization`, RFC 9110 §11.7.2, and
/// its challenge `Proxy-Authenticate`), which are never for the next one.
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Hop-by-hop headers (RFC 9110 §7.6.1), plus any the `Connection` header
/// names, are for one connection only and are never forwarded.
///
/// One pass over the names finds which are there; only those are removed
/// (most heads have none, or only `Transfer-Encoding`).
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if present[0] {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (name, present) in HOP_BY_HOP.iter().zip(present) {
        if present {
            headers.remove(name);
        }
    }
}

/// What is wrong with a request's `Host` (RFC 9112 §3.2): an HTTP/1.1
/// request must have exactly one, and no request may have two (which one
/// would route it, and which one would the upstream read?).
pub fn host_problem<B>(req: &Request<B>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("more than one Host header"),
        (None, _) if req.version() == http::Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host header")
        }
        _ => None,
    }
}

pub fn request_host<B>(req: &Request<B>) -> Option<&str> {
    request_host_parts(req.uri(), req.headers())
}

/// The host the client addressed: the `Host` header (HTTP/1.1) or the
/// URI's authority (HTTP/2, absolute-form).
fn request_host_parts<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
}

/// [`request_host_parts`] as a header value: the `Host` header's own (no
/// copy), or the authority's.
fn request_host_value(uri: &Uri, headers: &HeaderMap) -> Option<HeaderValue> {
    match headers.get(header::HOST) {
        Some(host) if host.to_str().is_ok() => Some(host.clone()),
        _ => HeaderValue::from_str(uri.authority()?.as_str()).ok(),
    }
}

/// `X-Forwarded-For`: the client's address after the value a client or a
/// proxy in front sent (when it is text), formatted without a string of its
/// own.
fn forwarded_for(before: Option<&HeaderValue>, ip: IpAddr) -> Option<HeaderValue> {
    use std::io::Write as _;
    // The longest address text is 45 bytes (IPv6 with an IPv4 tail).
    let mut buf = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    write!(cursor, "{ip}").ok()?;
    let len = usize::try_from(cursor.position()).ok()?;
    let ip = &buf[..len];
    match before.filter(|v| v.to_str().is_ok()) {
        Some(before) => {
            let mut value = Vec::with_capacity(before.len() + 2 + ip.len());
            value.extend_from_slice(before.as_bytes());
            value.extend_from_slice(b", ");
            value.extend_from_slice(ip);
            HeaderValue::from_maybe_shared(bytes::Bytes::from(value)).ok()
        }
        None => HeaderValue::from_bytes(ip).ok(),
    }
}

pub fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // IPv6 literal: "[::1]:8080".
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// The `Host` of a request to `upstream` that does not keep the client's:
/// the upstream's host, with the port only when it is not the scheme's
/// default. (HTTP/2 says it in `:authority`, from the URI.)
pub fn upstream_host(upstream: &Upstream) -> Option<HeaderValue> {
    let host = upstream.authority.host();
    let default_port = if upstream.scheme == http::uri::Scheme::HTTPS {
        443
    } else {
        80
    };
    let value = match upstream.authority.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

/// An absolute-form request made origin-form for an HTTP/1.1 connection,
/// with `Host` set to `host` (the upstream's, made once by its pool) unless
/// it has one.
pub fn origin_form<B>(req: Request<B>, host: Option<&HeaderValue>) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    if let Some(host) = host {
        parts
            .headers
            .entry(header::HOST)
            .or_insert_with(|| host.clone());
    }
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) if pq.as_str() != "/" => Uri::from(pq.clone()),
        _ => Uri::default(),
    };
    Request::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_appends_the_clients_address_to_a_text_value() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let v6: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
            .parse()
            .unwrap();
        let text = |v: Option<HeaderValue>| v.unwrap().to_str().unwrap().to_owned();
        assert_eq!(text(forwarded_for(None, v4)), "127.0.0.1");
        assert_eq!(
            text(forwarded_for(None, v6)),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        let before = HeaderValue::from_static("10.0.0.1, 10.0.0.2");
        assert_eq!(
            text(forwarded_for(Some(&before), v4)),
            "10.0.0.1, 10.0.0.2, 127.0.0.1"
        );
        let mixed: IpAddr = "::ffff:1.2.3.4".parse().unwrap();
        assert_eq!(
            text(forwarded_for(Some(&before), mixed)),
            "10.0.0.1, 10.0.0.2, ::ffff:1.2.3.4"
        );
        // A value that is not text is replaced, not extended.
        let opaque = HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap();
        assert_eq!(text(forwarded_for(Some(&opaque), v4)), "127.0.0.1");
    }

    #[test]
    fn the_host_is_the_headers_value_or_the_authority() {
        let mut headers = HeaderMap::new();
        let absolute: Uri = "http://from-uri.example:8080/x".parse().unwrap();
        let origin: Uri = "/x".parse().unwrap();
        assert_eq!(request_host_value(&origin, &headers), None);
        assert_eq!(
            request_host_value(&absolute, &headers).unwrap(),
            "from-uri.example:8080"
        );
        headers.insert(header::HOST, HeaderValue::from_static("public.example"));
        assert_eq!(
            request_host_value(&absolute, &headers).unwrap(),
            "public.example"
        );
        headers.insert(
            header::HOST,
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert_eq!(
            request_host_value(&absolute, &headers).unwrap(),
            "from-uri.example:8080"
        );
        assert_eq!(request_host_value(&origin, &headers), None);
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed_and_only_they() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "text/event-stream"),
            ("connection", "keep-alive, x-private"),
            ("connection", "X-Other"),
            ("x-private", "1"),
            ("x-other", "2"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("x-kept", "3"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        remove_hop_by_hop(&mut headers);
        // Removing reorders the map: compare as sets.
        let mut left: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        left.sort();
        let want = [
            ("content-type", "text/event-stream"),
            ("x-kept", "3"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ];
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        assert_eq!(left, want);

        // Each alone, without `Connection`.
        for name in &HOP_BY_HOP[1..] {
            let mut headers = HeaderMap::new();
            headers.insert(name.clone(), HeaderValue::from_static("x"));
            headers.insert("x-kept", HeaderValue::from_static("y"));
            remove_hop_by_hop(&mut headers);
            assert!(!headers.contains_key(name), "{name}");
            assert!(headers.contains_key("x-kept"));
        }
    }

    #[test]
    fn origin_form_keeps_the_path_and_query_and_sets_host_unless_set() {
        let host = HeaderValue::from_static("up:8000");
        let req = Request::builder()
            .uri("http://up:8000/v1/chat?x=1")
            .body(())
            .unwrap();
        let req = origin_form(req, Some(&host));
        assert_eq!(req.uri().to_string(), "/v1/chat?x=1");
        assert_eq!(req.headers()[header::HOST], "up:8000");
        let req = Request::builder()
            .uri("http://up:8000/")
            .header(header::HOST, "client.example")
            .body(())
            .unwrap();
        let req = origin_form(req, Some(&host));
        assert_eq!(req.uri().to_string(), "/");
        assert_eq!(req.headers()[header::HOST], "client.example");
    }

    #[test]
    fn the_upstreams_host_names_its_port_unless_it_is_the_schemes_default() {
        let host = |scheme: &str, authority: &str| {
            let upstream = Upstream {
                scheme: scheme.parse().unwrap(),
                authority: authority.parse().unwrap(),
                base_path: String::new(),
            };
            upstream_host(&upstream).unwrap()
        };
        assert_eq!(host("http", "up"), "up");
        assert_eq!(host("http", "up:80"), "up");
        assert_eq!(host("http", "up:443"), "up:443");
        assert_eq!(host("https", "up:443"), "up");
        assert_eq!(host("https", "[::1]:8443"), "[::1]:8443");
    }
}
