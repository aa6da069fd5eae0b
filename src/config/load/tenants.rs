//! A route's `tenant`: by header, or by API key looked up by its hash.

use std::collections::HashMap;

use http::HeaderName;

use super::super::raw::{self, Spanned};
use super::super::{ApiKeys, TenantSource};

use super::checker::Checker;

impl Checker<'_> {
    /// `routes[i].tenant`: a header, or API keys by their hashes. A key
    /// path or message here never holds what is written as a key of
    /// `keys`: it may be an API key pasted by mistake.
    pub(crate) fn tenant(
        &mut self,
        key: &str,
        field: &Spanned<raw::RawTenant>,
    ) -> Option<TenantSource> {
        let tenant = &field.value;
        match (&tenant.header, &tenant.api_keys) {
            (Some(header), None) => self
                .value(Some(header), &format!("{key}.header"), parse_tenant_header)
                .map(TenantSource::Header),
            (None, Some(api_keys)) => self.api_keys(&format!("{key}.api_keys"), field, api_keys),
            (Some(_), Some(_)) => {
                self.at(
                    raw::pos(field),
                    key,
                    "give `header` or `api_keys`, not both",
                );
                None
            }
            (None, None) => {
                self.at(
                    raw::pos(field),
                    key,
                    "needs `header` (a request header naming the tenant) or `api_keys`",
                );
                None
            }
        }
    }

    pub(crate) fn api_keys(
        &mut self,
        key: &str,
        tenant: &Spanned<raw::RawTenant>,
        raw: &raw::RawApiKeys,
    ) -> Option<TenantSource> {
        let mut ok = true;
        let headers = match &raw.headers {
            None => vec![
                http::header::AUTHORIZATION,
                HeaderName::from_static("x-api-key"),
            ],
            Some(list) if list.value.is_empty() => {
                self.at(
                    raw::pos(list),
                    format!("{key}.headers"),
                    "must not be empty",
                );
                ok = false;
                Vec::new()
            }
            Some(list) => list
                .value
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let header = self.value(Some(item), &format!("{key}.headers[{i}]"), |text| {
                        HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
                            .map_err(|_| format!("invalid header name `{text}`"))
                    });
                    ok &= header.is_some();
                    header
                })
                .collect(),
        };
        let keys_key = format!("{key}.keys");
        let Some(entries) = &raw.keys else {
            self.at(raw::pos(tenant), keys_key, "required key is missing");
            return None;
        };
        if entries.value.0.is_empty() {
            self.at(
                raw::pos(entries),
                keys_key,
                "must list at least one key hash",
            );
            return None;
        }
        let mut tenants = HashMap::with_capacity(entries.value.0.len());
        for (hash, field) in &entries.value.0 {
            let Some(digest) = parse_key_hash(hash) else {
                self.at(
                    raw::pos(field),
                    &keys_key,
                    "a key of `keys` must be the SHA-256 of an API key, 64 hex digits \
                     (`tokenmeter hash-key` prints it), never the key itself",
                );
                ok = false;
                continue;
            };
            let name = self.value(Some(field), &keys_key, |text| {
                let text = text.trim();
                if is_tenant_name(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid tenant name `{text}`: 1 to 64 visible ASCII characters, no spaces"
                    ))
                }
            });
            let Some(name) = name else {
                ok = false;
                continue;
            };
            if tenants.insert(digest, name).is_some() {
                self.at(
                    raw::pos(field),
                    &keys_key,
                    "the same key hash is listed twice",
                );
                ok = false;
            }
        }
        ok.then_some(TenantSource::ApiKeys(ApiKeys { headers, tenants }))
    }
}

/// A whole number, at least 1.
/// The header of `routes[i].tenant.header`: any but those that carry
/// credentials, whose values must never become label values.
pub(crate) fn parse_tenant_header(text: &str) -> Result<HeaderName, String> {
    let name = HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
        .map_err(|_| format!("invalid header name `{text}`"))?;
    if CREDENTIAL_HEADERS.contains(&name.as_str()) {
        return Err(format!(
            "`{name}` carries credentials, which must not become label values: \
             use `api_keys` to attribute requests by key"
        ));
    }
    Ok(name)
}

/// Headers whose values are secrets.
pub(crate) const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "x-goog-api-key",
];

/// 32 bytes from 64 hex digits (either case).
pub(crate) fn parse_key_hash(text: &str) -> Option<[u8; 32]> {
    let text = text.trim().as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// A tenant name usable as a label value and in a log line: 1 to 64
/// visible ASCII characters.
pub fn is_tenant_name(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic())
}
