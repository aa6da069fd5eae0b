//! Whom a request is attributed to: its tenant, named by a request header
//! or by the caller's API key (`routes[i].tenant`).
//!
//! What this returns is the *name* the request gives; the metrics bound it
//! (allow-list, or the first names the upstream answered with a 2xx, then
//! `other`) as they bound `model`. An API key is never kept: it is hashed
//! (SHA-256) where it is read and only the hash is looked up, and a key
//! that is not listed is `unknown`, never its hash or a part of it.

use http::HeaderMap;

/// The tenant of a request that names none (no header, no key, or a key
/// that is not listed), and of one whose header value is no usable name.
pub use super::labels::{OTHER, UNKNOWN};
use crate::config::{ApiKeys, TenantSource, is_tenant_name};

/// The tenant `source` finds in `headers`: a name, `unknown`, or `other`
/// for a header value that is no usable name.
pub fn of_request<'a>(source: &'a TenantSource, headers: &'a HeaderMap) -> &'a str {
    match source {
        TenantSource::Header(name) => match headers.get(name).map(|v| v.to_str()) {
            None => UNKNOWN,
            Some(Ok(value)) => match value.trim() {
                "" => UNKNOWN,
                name if is_tenant_name(name) => name,
                _ => OTHER,
            },
            Some(Err(_)) => OTHER,
        },
        TenantSource::ApiKeys(keys) => by_key(keys, headers).unwrap_or(UNKNOWN),
    }
}

/// The tenant of the API key in the first of `keys.headers` that carries
/// one.
fn by_key<'a>(keys: &'a ApiKeys, headers: &HeaderMap) -> Option<&'a str> {
    let key = keys.headers.iter().find_map(|name| {
        let value = headers.get(name)?.as_bytes().trim_ascii();
        let key = if name == http::header::AUTHORIZATION {
            bearer_token(value)?
        } else {
            value
        };
        (!key.is_empty()).then_some(key)
    })?;
    keys.tenants.get(&key_hash(key)).map(String::as_str)
}

/// The token of `Bearer <token>` (the scheme is case-insensitive).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

/// The SHA-256 of an API key, as `api_keys.keys` lists it (in hex).
pub fn key_hash(key: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// `key_hash` in lowercase hex, as `tokenmeter hash-key` prints it.
pub fn key_hash_hex(key: &[u8]) -> String {
    key_hash(key).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_bytes(value).unwrap());
        }
        h
    }

    fn keys() -> TenantSource {
        TenantSource::ApiKeys(ApiKeys {
            headers: vec![
                http::header::AUTHORIZATION,
                HeaderName::from_static("x-api-key"),
            ],
            tenants: [
                (key_hash(b"sk-alpha"), "team-a".to_owned()),
                (key_hash(b"sk-beta"), "team-b".to_owned()),
            ]
            .into_iter()
            .collect(),
        })
    }

    #[test]
    fn the_hash_is_sha256() {
        // FIPS 180-2's example.
        assert_eq!(
            key_hash_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_header_names_the_tenant() {
        let source = TenantSource::Header(HeaderName::from_static("x-tenant"));
        let of = |pairs: &[(&'static str, &[u8])]| of_request(&source, &headers(pairs)).to_owned();
        assert_eq!(of(&[("x-tenant", b" acme ")]), "acme");
        assert_eq!(of(&[]), UNKNOWN);
        assert_eq!(of(&[("x-tenant", b"")]), UNKNOWN);
        assert_eq!(of(&[("x-tenant", b"two words")]), OTHER);
        assert_eq!(of(&[("x-tenant", "é".as_bytes())]), OTHER);
        assert_eq!(of(&[("x-tenant", "a".repeat(65).as_bytes())]), OTHER);
        assert_eq!(
            of(&[("x-tenant", "a".repeat(64).as_bytes())]),
            "a".repeat(64)
        );
    }

    #[test]
    fn an_api_key_names_its_tenant_by_hash() {
        let source = keys();
        let of = |pairs: &[(&'static str, &[u8])]| of_request(&source, &headers(pairs)).to_owned();
        assert_eq!(of(&[("authorization", b"Bearer sk-alpha")]), "team-a");
        assert_eq!(of(&[("authorization", b"bearer  sk-alpha ")]), "team-a");
        assert_eq!(of(&[("x-api-key", b"sk-beta")]), "team-b");
        // The first listed header with a key is the one read.
        assert_eq!(
            of(&[
                ("x-api-key", b"sk-beta"),
                ("authorization", b"Bearer sk-alpha")
            ]),
            "team-a"
        );
        assert_eq!(
            of(&[("authorization", b"Basic eDp5"), ("x-api-key", b"sk-beta")]),
            "team-b"
        );
        for unknown in [
            &[("authorization", &b"Bearer sk-gamma"[..])][..],
            &[("authorization", b"Basic c2stYWxwaGE=")],
            &[("authorization", b"Bearer ")],
            &[("x-api-key", b"")],
            &[],
        ] {
            assert_eq!(of(unknown), UNKNOWN, "{unknown:?}");
        }
    }
}
