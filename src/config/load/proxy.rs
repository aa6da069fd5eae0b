//! The `proxy` section.

use super::super::ProxySettings;
use super::super::raw::RawConfig;

use super::checker::Checker;
use super::values::*;

impl Checker<'_> {
    pub(crate) fn proxy(&mut self, raw: &RawConfig) -> ProxySettings {
        let defaults = ProxySettings::default();
        let Some(proxy) = &raw.proxy else {
            return defaults;
        };
        ProxySettings {
            max_request_body_bytes: self
                .value(
                    proxy.max_request_body.as_ref(),
                    "proxy.max_request_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_request_body_bytes),
            max_retry_body_bytes: self
                .value(
                    proxy.max_retry_body.as_ref(),
                    "proxy.max_retry_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_retry_body_bytes),
            max_request_head_bytes: self
                .value(
                    proxy.max_request_head.as_ref(),
                    "proxy.max_request_head",
                    |text| match parse_size(text)? {
                        n if (8 * 1024..=1024 * 1024).contains(&n) => Ok(n),
                        n => Err(format!("{n} bytes: must be from 8KiB to 1MiB")),
                    },
                )
                .unwrap_or(defaults.max_request_head_bytes),
            request_head_timeout: self
                .value(
                    proxy.request_head_timeout.as_ref(),
                    "proxy.request_head_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.request_head_timeout),
            max_connections: self.value(
                proxy.max_connections.as_ref(),
                "proxy.max_connections",
                parse_positive_count,
            ),
            overload_threshold: self
                .value(
                    proxy.overload_threshold.as_ref(),
                    "proxy.overload_threshold",
                    parse_percentage,
                )
                .unwrap_or(defaults.overload_threshold),
            overload_timeout: self
                .value(
                    proxy.overload_timeout.as_ref(),
                    "proxy.overload_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.overload_timeout),
            upstream_idle_connections: self
                .value(
                    proxy.upstream_idle_connections.as_ref(),
                    "proxy.upstream_idle_connections",
                    |text| {
                        text.trim().parse::<usize>().map_err(|_| {
                            format!(
                                "invalid count `{text}`: expected a whole number (0 keeps none)"
                            )
                        })
                    },
                )
                .unwrap_or(defaults.upstream_idle_connections),
            upstream_idle_timeout: self
                .value(
                    proxy.upstream_idle_timeout.as_ref(),
                    "proxy.upstream_idle_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.upstream_idle_timeout),
            max_response_body_bytes: self
                .value(
                    proxy.max_response_body.as_ref(),
                    "proxy.max_response_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_response_body_bytes),
            x_forwarded: self
                .value(proxy.x_forwarded.as_ref(), "proxy.x_forwarded", parse_bool)
                .unwrap_or(defaults.x_forwarded),
            trusted_proxies: proxy
                .trusted_proxies
                .as_ref()
                .map_or_else(Vec::new, |list| {
                    list.value
                        .iter()
                        .enumerate()
                        .filter_map(|(i, item)| {
                            self.value(
                                Some(item),
                                &format!("proxy.trusted_proxies[{i}]"),
                                parse_ip_net,
                            )
                        })
                        .collect()
                }),
            shutdown_grace: self
                .value(
                    proxy.shutdown_grace.as_ref(),
                    "proxy.shutdown_grace",
                    parse_duration,
                )
                .unwrap_or(defaults.shutdown_grace),
        }
    }
}
