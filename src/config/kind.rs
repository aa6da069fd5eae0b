//! What kind of value a typed key holds: the `deserialize_with` (and, for
//! durations, `with`) functions the config types name on their fields.
//!
//! Each reads the text written and checks it with the same parser and the
//! same message as everywhere else in loading; a bad value is recorded with
//! its location and does not stop the reading (see `located.rs`), so
//! every problem of a file is reported at once. The stand-in each gives for
//! a bad value is never used: a config with a problem is refused.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::located::{
    Entry, Item, Pos, Problems, checked, checked_entries, checked_items, checked_or_empty,
    checked_standing_in,
};
use super::values::{
    is_label_value, is_metric_namespace, is_tenant_name, parse_addr, parse_bool, parse_bound,
    parse_duration, parse_host, parse_ip_net, parse_key_hash, parse_method, parse_metrics_url,
    parse_otlp_endpoint, parse_otlp_protocol, parse_path_prefix, parse_percentage,
    parse_positive_count, parse_protocol, parse_provider_name, parse_size, parse_tenant_header,
    parse_upstream,
};
use super::{
    ApiKeys, IpNet, MetricsEndpoint, OtlpProtocol, Protocol, TenantSource, TlsRoots, Upstream,
};

/// A duration (`500ms`, `30s`, `10m`, `1h 30m`), greater than zero; shown
/// in seconds.
pub(super) mod duration {
    use super::*;

    pub(in super::super) use super::super::show::secs as serialize;

    pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        checked(d, Duration::ZERO, parse_duration)
    }
}

/// A size: bytes (`4194304`) or with a unit (`512KiB`, `4MiB`, `100kB`).
pub(super) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, parse_size)
}

/// The largest request head: a size from 8 KiB (the longest heads clients send
/// commonly fit) to 1 MiB.
pub(super) fn request_head_size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, |text| match parse_size(text)? {
        n if (8 * 1024..=1024 * 1024).contains(&n) => Ok(n),
        n => Err(format!("{n} bytes: must be from 8KiB to 1MiB")),
    })
}

/// A whole number, at least 1, where leaving the key out (or giving it
/// no value) means "none set".
pub(super) fn optional_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        parse_positive_count(text).map(Some)
    })
}

/// A whole number of idle connections, `0` keeping none.
pub(super) fn idle_count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, |text| {
        text.trim()
            .parse::<usize>()
            .map_err(|_| format!("invalid count `{text}`: expected a whole number (0 keeps none)"))
    })
}

/// `true` or `false` (YAML 1.2's core spellings).
pub(super) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    checked(d, false, parse_bool)
}

/// A percentage, `1%` to `100%`, held as a share (0.01 to 1).
pub(super) fn percentage<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, 1.0, parse_percentage)
}

/// A list of addresses or CIDR ranges (`10.0.0.0/8`, `::1`).
pub(super) fn ip_nets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    checked_items(d, None, Vec::new(), |_, items| {
        let (nets, problems): (Vec<_>, Vec<_>) = items
            .iter()
            .map(|item| parse_ip_net(item.text).map_err(|message| (item.pos, message)))
            .partition(Result::is_ok);
        match problems.is_empty() {
            true => Ok(nets.into_iter().flatten().collect()),
            false => Err(problems.into_iter().filter_map(Result::err).collect()),
        }
    })
}

/// A whole number, at least 1.
pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, parse_positive_count)
}

/// A token count, at least 1.
pub(super) fn token_count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    checked(d, 0, |text| parse_positive_count(text).map(|n| n as u64))
}

/// `true` or `false`, where no value (`key:`) is `false`, as leaving the
/// key out is.
pub(super) fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    checked_or_empty(d, Some(false), false, parse_bool)
}

/// A duration greater than zero, where no value (`key:`) is `None`, as
/// leaving the key out is.
pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| parse_duration(text).map(Some))
}

/// A route's `gpus`: a whole number of GPUs, at least 1.
pub(super) fn gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    checked(d, None, |text| match text.trim().parse::<u32>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "invalid GPU count `{text}`: expected a whole number, at least 1 (leave the key out when the route's GPUs are not counted)"
        )),
    })
}

/// A route's `gpu_hourly_cost`: a number from 0 to
/// [`MAX_GPU_HOURLY_COST`](super::MAX_GPU_HOURLY_COST).
pub(super) fn gpu_hourly_cost<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, None, |text| match text.trim().parse::<f64>() {
        // `-0` is 0.
        Ok(p) if (0.0..=super::MAX_GPU_HOURLY_COST).contains(&p) => Ok(Some(p + 0.0)),
        _ => Err(format!(
            "invalid price `{text}`: expected a number from 0 to {}, per GPU-hour in `cost.currency`",
            super::MAX_GPU_HOURLY_COST
        )),
    })
}

/// A route's `gpu_set`: a label value of 1 to 64 characters.
pub(super) fn gpu_set<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, None, |text| {
        match is_label_value(text) && text.len() <= 64 {
            true => Ok(Some(text.to_owned())),
            false => Err(format!(
                "invalid GPU set `{text}`: expected 1 to 64 of [a-zA-Z0-9_.:-]"
            )),
        }
    })
}

/// `cost.currency`: 1 to 16 letters, digits, `_` or `-`.
pub(super) fn currency<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, String::new(), |text| {
        let ok = (1..=16).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        match ok {
            true => Ok(text.to_owned()),
            false => Err(format!(
                "invalid currency `{text}`: expected 1 to 16 letters, digits, `_` or `-`, like `USD`"
            )),
        }
    })
}

/// A route's `protocol` (`auto`, an API's name, `none`); no value is
/// `auto`, the default.
pub(super) fn protocol<'de, D: Deserializer<'de>>(d: D) -> Result<Protocol, D::Error> {
    checked_or_empty(d, Some(Protocol::Auto), Protocol::Auto, parse_protocol)
}

/// A route's `max_in_flight`: a whole number, at least 1; no value is
/// `None`, no limit.
pub(super) fn in_flight_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        match text.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "invalid limit `{text}`: expected a whole number, at least 1 (leave the key out for no limit)"
            )),
        }
    })
}

/// A `gen_ai.provider.name` (`vllm`, `azure.ai.openai`); no value is
/// `None`, the protocol's.
pub(super) fn provider_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        parse_provider_name(text).map(Some)
    })
}

/// A route's `match.path_prefix`: starts with `/`; no value is `/`. The
/// stand-in for a bad one is empty, which no valid prefix is (see
/// `load/routes.rs`, which leaves such a match out of the shadowing check).
pub(super) fn path_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_or_empty(d, Some("/".to_owned()), String::new(), parse_path_prefix)
}

/// A route's `match.host`: a host name or address without port, held
/// lowercase; no value is `None`, any host. The stand-in for a bad one is
/// an empty host, which no valid one is.
pub(super) fn host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_or_empty(d, Some(None), Some(String::new()), |text| {
        parse_host(text).map(Some)
    })
}

/// A route's `match.methods`: at least one, each listed once; no value is
/// `None`, any method. The stand-in for a bad list is an empty one, which
/// no valid list is.
pub(super) fn methods<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<http::Method>>, D::Error> {
    checked_items(d, Some(None), Some(Vec::new()), |at, items| {
        if items.is_empty() {
            return Err(vec![(
                at,
                "must not be empty (leave `methods` out to accept any method)".to_owned(),
            )]);
        }
        let mut problems = Vec::new();
        let mut methods: Vec<http::Method> = Vec::with_capacity(items.len());
        for item in items {
            match parse_method(item.text) {
                Err(message) => problems.push((item.pos, message)),
                Ok(method) if methods.contains(&method) => {
                    problems.push((item.pos, format!("method {method} is listed twice")));
                }
                Ok(method) => methods.push(method),
            }
        }
        if problems.is_empty() {
            Ok(Some(methods))
        } else {
            Err(problems)
        }
    })
}

/// The URL of a page to scrape: `http` or `https`, with a host; no value
/// is `None`, not scraped.
pub(super) fn metrics_url<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<MetricsEndpoint>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        parse_metrics_url(text).map(Some)
    })
}

/// Values a label must have to be selected: a list of non-empty strings,
/// at least one.
pub(super) fn label_values<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    checked_items(d, None, Vec::new(), |at, items| {
        if items.is_empty() {
            return Err(vec![(
                at,
                "must not be empty (leave the key out to select any value)".to_owned(),
            )]);
        }
        let problems: Vec<(Option<Pos>, String)> = items
            .iter()
            .filter(|item| item.text.trim().is_empty())
            .map(|item| (item.pos, "must not be empty".to_owned()))
            .collect();
        if problems.is_empty() {
            Ok(items
                .iter()
                .map(|item| item.text.trim().to_owned())
                .collect())
        } else {
            Err(problems)
        }
    })
}

/// An address (`IP:port`) where no value is `None`, the default.
pub(super) fn address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| parse_addr(text).map(Some))
}

/// `admin.listen`: an address; no value is the default, which also stands
/// in for a bad one (so the other listener is checked against it, as when
/// the key is left out).
pub(super) fn admin_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let default = super::DEFAULT_ADMIN_LISTEN;
    checked_or_empty(d, Some(default), default, parse_addr)
}

/// `admin.max_connections`: a whole number, at least 1; no value is the
/// default.
pub(super) fn admin_connections<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let default = super::AdminSettings::default().max_connections;
    checked_or_empty(d, Some(default), default, parse_positive_count)
}

/// `otlp.endpoint`: a collector's `http://host:port`; no value is `None`.
pub(super) fn otlp_endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        parse_otlp_endpoint(text).map(Some)
    })
}

/// `otlp.protocol`: `http/protobuf` or `grpc`.
pub(super) fn otlp_protocol<'de, D: Deserializer<'de>>(d: D) -> Result<OtlpProtocol, D::Error> {
    checked(d, OtlpProtocol::HttpProtobuf, parse_otlp_protocol)
}

/// A name taken as written (`otlp.service_name`).
pub(super) fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, String::new(), |text| Ok(text.to_owned()))
}

/// `tenant.header`: a header's name, but not one that carries
/// credentials; no value is `None`.
pub(super) fn tenant_header<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<http::HeaderName>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        parse_tenant_header(text).map(Some)
    })
}

/// `tenant.api_keys.headers`: header names, at least one; no value is
/// `None`, the default.
pub(super) fn key_headers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<http::HeaderName>>, D::Error> {
    checked_items(d, Some(None), Some(Vec::new()), |at, items| {
        if items.is_empty() {
            return Err(vec![(at, "must not be empty".to_owned())]);
        }
        let mut problems = Vec::new();
        let mut headers = Vec::with_capacity(items.len());
        for item in items {
            match http::HeaderName::from_bytes(item.text.trim().to_ascii_lowercase().as_bytes()) {
                Ok(header) => headers.push(header),
                Err(_) => problems.push((item.pos, format!("invalid header name `{}`", item.text))),
            }
        }
        if problems.is_empty() {
            Ok(Some(headers))
        } else {
            Err(problems)
        }
    })
}

/// `tenant.api_keys.keys`: tenant name by the SHA-256 of an API key, at
/// least one; no value is `None`. What is written as a key is never
/// shown, in a message or a key path: it may be an API key pasted by
/// mistake.
pub(super) fn key_hashes<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::collections::HashMap<[u8; 32], String>>, D::Error> {
    checked_entries(d, None, true, |at, entries| {
        let mut tenants = std::collections::HashMap::with_capacity(entries.len());
        let mut problems = Vec::new();
        if entries.is_empty() {
            problems.push((at, "must list at least one key hash".to_owned()));
        }
        for entry in entries {
            let Some(digest) = parse_key_hash(entry.key) else {
                problems.push((
                    entry.pos,
                    "a key of `keys` must be the SHA-256 of an API key, 64 hex digits \
                     (`tokenmeter hash-key` prints it), never the key itself"
                        .to_owned(),
                ));
                continue;
            };
            let name = entry.text.trim();
            if !is_tenant_name(name) {
                problems.push((
                    entry.pos,
                    format!(
                        "invalid tenant name `{name}`: 1 to 64 visible ASCII characters, no spaces"
                    ),
                ));
                continue;
            }
            if tenants.insert(digest, name.to_owned()).is_some() {
                problems.push((entry.pos, "the same key hash is listed twice".to_owned()));
            }
        }
        (Some(tenants), problems)
    })
}

/// A route's `name`: a label value. No value is empty, as leaving the
/// key out is (it is required: see `load/validate.rs`). A bad name stands
/// in as written, so that it is still compared with the others.
pub(super) fn route_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_standing_in(d, Some(String::new()), str::to_owned, |text| {
        if is_label_value(text) {
            Ok(text.to_owned())
        } else {
            Err(format!(
                "invalid route name `{text}`: must match [a-zA-Z0-9_.:-]+"
            ))
        }
    })
}

/// A route's `upstream`: an `http`/`https` base URL with a host, without
/// user info, query or fragment. No value, or a bad one, leaves the
/// stand-in (the key is required unless `--upstream` gives it).
pub(super) fn upstream<'de, D: Deserializer<'de>>(d: D) -> Result<Upstream, D::Error> {
    checked_or_empty(
        d,
        Some(Upstream::stand_in()),
        Upstream::stand_in(),
        parse_upstream,
    )
}

/// `routes[i].tls`: how the certificate of an `https` upstream or metrics
/// page is verified.
#[derive(Debug, Default, Deserialize)]
pub(super) struct TlsFile {
    /// PEM file of the certificate authorities to trust for this upstream
    /// and the route's `https` metrics pages, instead of the web PKI roots
    /// built in (for servers with an internal or self-signed CA). Relative
    /// to the directory of the config file; read when the configuration is
    /// loaded or reloaded. Default: the web PKI roots.
    #[serde(default, deserialize_with = "text")]
    pub ca_file: Option<String>,
}

/// A route's `tls`: its `ca_file` as written (read when the route is
/// loaded, from the config file's directory); none without one.
pub(super) fn tls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TlsRoots>, D::Error> {
    let file = Option::<TlsFile>::deserialize(d)?.and_then(|tls| tls.ca_file);
    Ok(file.map(|file| TlsRoots {
        file: file.into(),
        certificates: Vec::new(),
    }))
}

/// `routes[i].slo_request_max`: the largest bound a client may declare for
/// each objective; a larger one is judged at this bound.
#[derive(Debug, Default, Deserialize)]
pub(super) struct DeclaredMax {
    /// The largest TTFT bound a request may declare.
    #[serde(default, deserialize_with = "optional_duration")]
    pub ttft: Option<Duration>,
    /// The largest TPOT bound a request may declare.
    #[serde(default, deserialize_with = "optional_duration")]
    pub tpot: Option<Duration>,
    /// The largest E2EL bound a request may declare.
    #[serde(default, deserialize_with = "optional_duration")]
    pub e2el: Option<Duration>,
}

/// A route's `slo_request_max`, each bound not given the default's; none
/// without the key (the defaults apply if the route reads declarations).
pub(super) fn declared_max<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<slo::declared::Caps>, D::Error> {
    use slo::ObjectiveKind;
    let Some(max) = Option::<DeclaredMax>::deserialize(d)? else {
        return Ok(None);
    };
    let mut caps = slo::declared::Caps::default();
    for (kind, cap) in [
        (ObjectiveKind::Ttft, max.ttft),
        (ObjectiveKind::Tpot, max.tpot),
        (ObjectiveKind::E2el, max.e2el),
    ] {
        if let Some(cap) = cap {
            caps.0[kind as usize] = cap;
        }
    }
    Ok(Some(caps))
}

/// `routes[i].tenant`: where a request's tenant comes from.
#[derive(Debug, Default, Deserialize)]
pub(super) struct TenantFile {
    /// The request header that names the tenant (`x-tenant`, `x-team`): its
    /// value, trimmed, is the tenant. A request without it is `unknown`.
    #[serde(default, deserialize_with = "tenant_header")]
    pub header: Option<http::HeaderName>,
    /// Tenants by API key: the key a request carries is hashed (SHA-256) and
    /// looked up in `keys`. The configuration holds only the hashes.
    pub api_keys: Option<ApiKeysFile>,
}

/// `routes[i].tenant.api_keys`: tenants by API key.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ApiKeysFile {
    /// The headers a key is read from, the first one present: from
    /// `authorization`, the token of `Bearer <token>`; from any other, the
    /// whole value.
    #[serde(default, deserialize_with = "key_headers")]
    pub headers: Option<Vec<http::HeaderName>>,
    /// Tenant name by the SHA-256 of the key, in lowercase hex (what
    /// `tokenmeter hash-key` prints): `{9f86d0…: team-a}`. A request whose
    /// key is not listed, or that has none, is `unknown`. Required.
    #[serde(default, deserialize_with = "key_hashes")]
    pub keys: Option<std::collections::HashMap<[u8; 32], String>>,
}

/// A route's `tenant`: by header, or by API key (hashed) from the headers
/// given or `authorization` and `x-api-key`; none when it gives neither or
/// both, or API keys without `keys` (the rules across its keys are
/// `load/validate.rs`'s).
pub(super) fn tenant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TenantSource>, D::Error> {
    let Some(tenant) = Option::<TenantFile>::deserialize(d)? else {
        return Ok(None);
    };
    Ok(match (tenant.header, tenant.api_keys) {
        (Some(header), None) => Some(TenantSource::Header(header)),
        (None, Some(api_keys)) => api_keys.keys.map(|tenants| {
            TenantSource::ApiKeys(ApiKeys {
                headers: api_keys.headers.unwrap_or_else(|| {
                    vec![
                        http::header::AUTHORIZATION,
                        http::HeaderName::from_static("x-api-key"),
                    ]
                }),
                tenants,
            })
        }),
        _ => None,
    })
}

/// A text value (a path, a name) taken as written; no value is `None`.
pub(super) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| Ok(Some(text.to_owned())))
}

/// An SLO class a route names: a label value (whether it is defined is a
/// rule across keys). No value is `None`.
pub(super) fn slo_class<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| class_name(text).map(Some))
}

/// A request header's name, held lowercase; no value is `None`.
pub(super) fn header_name<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<http::HeaderName>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| {
        http::HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
            .map(Some)
            .map_err(|_| format!("invalid header name `{text}`"))
    })
}

/// `sessions.keys`: the places a session key is read, in order.
pub(super) fn session_keys<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<super::SessionKeySpec>, D::Error> {
    Vec::<super::SessionKeySpec>::deserialize(d)
}

/// A `sessions.keys` entry's `body`: `conversation` or
/// `previous_response_id`; no value is `None`.
pub(super) fn session_body<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<super::SessionBody>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| match text.trim() {
        "conversation" => Ok(Some(super::SessionBody::Conversation)),
        "previous_response_id" => Ok(Some(super::SessionBody::PreviousResponseId)),
        _ => Err(format!(
            "invalid body field `{text}`: expected `conversation` or `previous_response_id`"
        )),
    })
}

/// A route's `slo_by_model`: SLO class by model name, each model named
/// once and not empty.
pub(super) fn classes_by_model<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<(String, String)>, D::Error> {
    checked_entries(d, Vec::new(), false, |_, entries| {
        class_map(entries, "model", |model| {
            if model.is_empty() {
                Err("model name must not be empty".to_owned())
            } else {
                Ok(model.to_owned())
            }
        })
    })
}

/// A route's `slo_by_operation`: SLO class by operation name, each
/// operation named once.
pub(super) fn classes_by_operation<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<(meter::Operation, String)>, D::Error> {
    checked_entries(d, Vec::new(), false, |_, entries| {
        class_map(entries, "operation", |name| {
            meter::Operation::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = meter::Operation::ALL.iter().map(|op| op.name()).collect();
                format!("unknown operation `{name}` (one of {})", known.join(", "))
            })
        })
    })
}

/// A mapping of `what` (read by `parse`) to SLO class, each entry checked
/// (a bad one left out, with its problem), each `what` listed once.
fn class_map<K: PartialEq>(
    entries: &[Entry<'_>],
    what: &str,
    parse: impl Fn(&str) -> Result<K, String>,
) -> (Vec<(K, String)>, Problems) {
    let mut out: Vec<(K, String)> = Vec::with_capacity(entries.len());
    let mut problems = Vec::new();
    for entry in entries {
        let k = match parse(entry.key) {
            Ok(k) => k,
            Err(message) => {
                problems.push((entry.pos, message));
                continue;
            }
        };
        if out.iter().any(|(seen, _)| *seen == k) {
            problems.push((entry.pos, format!("{what} `{}` is listed twice", entry.key)));
            continue;
        }
        match class_name(entry.text) {
            Ok(class) => out.push((k, class)),
            Err(message) => problems.push((entry.pos, message)),
        }
    }
    (out, problems)
}

/// An SLO class as a route names it: a label value.
fn class_name(text: &str) -> Result<String, String> {
    if is_label_value(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid SLO class `{text}`: must match [a-zA-Z0-9_.:-]+"
        ))
    }
}

/// A metric name prefix: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(super) fn namespace<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, String::new(), |text| {
        if is_metric_namespace(text) {
            Ok(text.to_owned())
        } else {
            Err(format!(
                "invalid namespace `{text}`: must match [a-zA-Z_][a-zA-Z0-9_]*"
            ))
        }
    })
}

/// Histogram bucket bounds: at least one, each finite and greater than
/// zero, strictly increasing.
pub(super) fn bucket_bounds<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    checked_items(d, None, Vec::new(), |at, items| {
        if items.is_empty() {
            return Err(vec![(at, "must list at least one bucket bound".to_owned())]);
        }
        let mut problems = Vec::new();
        let mut bounds = Vec::with_capacity(items.len());
        let mut previous: Option<f64> = None;
        for item in items {
            match parse_bound(item.text) {
                Err(message) => problems.push((item.pos, message)),
                Ok(bound) => {
                    if let Some(before) = previous.filter(|before| bound <= *before) {
                        problems.push((
                            item.pos,
                            format!(
                                "bucket bounds must be strictly increasing: {} is not greater than the previous bound {}",
                                item.text.trim(),
                                before
                            ),
                        ));
                    }
                    previous = Some(bound);
                    bounds.push(bound);
                }
            }
        }
        if problems.is_empty() {
            Ok(bounds)
        } else {
            Err(problems)
        }
    })
}

/// A native histogram schema, as Prometheus defines them: -4 to 8.
pub(super) fn native_schema<'de, D: Deserializer<'de>>(d: D) -> Result<i8, D::Error> {
    checked(d, 0, |text| match text.trim().parse::<i8>() {
        Ok(n) if (-4..=8).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid schema `{text}`: expected a whole number from -4 to 8"
        )),
    })
}

/// `metrics.models.allow`: model names, non-empty, no duplicates.
pub(super) fn model_names<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    checked_items(d, Some(None), None, |at, items| {
        allow_list(at, items, "metrics.models.allow", "model").map(Some)
    })
}

/// `metrics.tenants.allow`: tenant names, non-empty, no duplicates.
pub(super) fn tenant_names<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    checked_items(d, Some(None), None, |at, items| {
        allow_list(at, items, "metrics.tenants.allow", "tenant").map(Some)
    })
}

/// The allow-list of a label clients choose (`what`: `model`, `tenant`),
/// written at `key`.
fn allow_list(
    at: Option<Pos>,
    items: &[Item<'_>],
    key: &str,
    what: &str,
) -> Result<Vec<String>, Vec<(Option<Pos>, String)>> {
    if items.is_empty() {
        return Err(vec![(
            at,
            format!(
                "must not be empty (leave `allow` out to bound {what}s by max_distinct instead)"
            ),
        )]);
    }
    let mut problems = Vec::new();
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if item.text.is_empty() {
            problems.push((item.pos, format!("{what} name must not be empty")));
        } else if let Some(first) = seen.insert(item.text, i) {
            problems.push((
                item.pos,
                format!(
                    "duplicate {what} name `{}` (also {key}[{first}])",
                    item.text
                ),
            ));
        } else {
            names.push(item.text.to_owned());
        }
    }
    if problems.is_empty() {
        Ok(names)
    } else {
        Err(problems)
    }
}
