//! The `routes`: each route's match, upstream, protocol, timeouts, SLO
//! class and limits, and routes shadowed by an earlier one.

use std::collections::HashMap;
use std::path::Path;

use super::super::raw::{self, Pos, RawConfig, RawRoute, Spanned};
use super::super::{Protocol, Route, RouteMatch, ScrapeSettings, Upstream};

use super::super::values::*;
use super::checker::Checker;
use meter::Operation;
use slo::ObjectiveKind;
use slo::declared::Caps;

/// A route's checked match, and where to report it as shadowed.
pub(crate) struct MatchSite {
    matcher: RouteMatch,
    pos: Option<Pos>,
    key: String,
}

impl Checker<'_> {
    pub(crate) fn routes(
        &mut self,
        raw: &RawConfig,
        upstream_overridden: bool,
        upstream_override: Option<Upstream>,
        scrape: &ScrapeSettings,
        base: &Path,
    ) -> Vec<Route> {
        let Some(raw_routes) = self.required_list(&raw.routes, "routes", "route") else {
            return Vec::new();
        };

        let mut names: HashMap<&str, usize> = HashMap::new();
        // Match of each route that checked out, for the shadowing check.
        let mut matches: Vec<Option<MatchSite>> = Vec::new();
        let mut routes = Vec::with_capacity(raw_routes.len());
        // Whether a scraped route takes `scrape.interval`, which must then
        // be longer than `scrape.timeout`.
        let mut on_shared_interval = false;
        for (i, raw_route) in raw_routes.iter().enumerate() {
            let prefix = format!("routes[{i}]");
            let route_pos = raw::pos(raw_route);
            let route = &raw_route.value;
            on_shared_interval |= self.scrape_targets(&prefix, route, scrape);

            if let Some(name) = &route.name
                && let Some(first) = names.insert(&name.value, i)
            {
                self.at(
                    raw::pos(name),
                    format!("{prefix}.name"),
                    format!(
                        "duplicate route name `{}` (also routes[{first}])",
                        name.value
                    ),
                );
            }
            let (built, matcher) = self.route(
                &prefix,
                route_pos,
                route,
                upstream_overridden,
                &upstream_override,
                base,
            );
            if let Some(route) = built {
                routes.push(route);
            }
            matches.push(matcher);
        }
        // A bad interval's stand-in is zero, which is reported already.
        if on_shared_interval && scrape.timeout >= scrape.interval && !scrape.interval.is_zero() {
            let (timeout, interval) = (
                humantime::format_duration(scrape.timeout),
                humantime::format_duration(scrape.interval),
            );
            if self.written("scrape.timeout") {
                self.at_key(
                    "scrape.timeout",
                    format!("{timeout} is not below scrape.interval ({interval}): a scrape must end before the next one starts"),
                );
            } else {
                self.at_key(
                    "scrape.interval",
                    format!("{interval} is not longer than scrape.timeout ({timeout}): a scrape must end before the next one starts"),
                );
            }
        }

        for (j, later) in matches.iter().enumerate() {
            let Some(later) = later else {
                continue;
            };
            let shadowing = matches[..j].iter().enumerate().find_map(|(i, earlier)| {
                earlier
                    .as_ref()
                    .filter(|earlier| covers(&earlier.matcher, &later.matcher))
                    .map(|_| i)
            });
            if let Some(i) = shadowing {
                self.at(
                    later.pos,
                    later.key.clone(),
                    format!(
                        "route can never match: shadowed by routes[{i}], which accepts every request this one does (put the more specific route first)"
                    ),
                );
            }
        }
        routes
    }

    /// Builds one route; also returns its match (with where to report
    /// shadowing) when the match itself checked out.
    pub(crate) fn route(
        &mut self,
        prefix: &str,
        route_pos: Option<Pos>,
        route: &RawRoute,
        upstream_overridden: bool,
        upstream_override: &Option<Upstream>,
        base: &Path,
    ) -> (Option<Route>, Option<MatchSite>) {
        let name = match &route.name {
            None => {
                self.at(
                    route_pos,
                    format!("{prefix}.name"),
                    "required key is missing",
                );
                None
            }
            Some(name) => self.value(Some(name), &format!("{prefix}.name"), |text| {
                if is_label_value(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid route name `{text}`: must match [a-zA-Z0-9_.:-]+"
                    ))
                }
            }),
        };

        let matcher = route
            .matcher
            .as_ref()
            .map_or_else(RouteMatch::default, |matcher| matcher.value.clone());
        let matcher = read_whole(&matcher).then_some(matcher);
        let matcher_report = matcher.clone().map(|matcher| match &route.matcher {
            Some(raw_match) => MatchSite {
                matcher,
                pos: raw::pos(raw_match),
                key: format!("{prefix}.match"),
            },
            None => MatchSite {
                matcher,
                pos: route_pos,
                key: prefix.to_owned(),
            },
        });

        let upstream_key = format!("{prefix}.upstream");
        let own_upstream = match &route.upstream {
            None if !upstream_overridden => {
                self.at(route_pos, upstream_key, "required key is missing");
                None
            }
            None => None,
            Some(url) => self.value(Some(url), &upstream_key, parse_upstream),
        };
        // A file upstream is checked even when overridden: the file should be
        // valid on its own.
        let upstream = upstream_override.clone().or(own_upstream);

        let protocol = route.protocol.unwrap_or(Protocol::Auto);

        let timeouts = route.timeouts.unwrap_or_default();

        let https_page = [&route.engine_metrics, &route.gpu_metrics]
            .into_iter()
            .flatten()
            .any(|page| page.url.scheme_str() == Some("https"));
        let tls_roots = route.tls.as_ref().and_then(|tls| {
            if upstream
                .as_ref()
                .is_some_and(|u| u.scheme != http::uri::Scheme::HTTPS)
                && !https_page
            {
                let pages = route.engine_metrics.is_some() || route.gpu_metrics.is_some();
                self.at(
                    raw::pos(tls),
                    format!("{prefix}.tls"),
                    if pages {
                        "applies only to an https upstream, engine_metrics or gpu_metrics"
                    } else {
                        "applies only to an https upstream"
                    },
                );
                return None;
            }
            self.value(
                tls.value.ca_file.as_ref(),
                &format!("{prefix}.tls.ca_file"),
                |text| read_roots(base, text),
            )
        });
        let names = self.slo_names.clone();
        let names = names.as_deref();
        let slo = self.value(route.slo.as_ref(), &format!("{prefix}.slo"), |text| {
            check_class(names, text)
        });
        let slo_by_model = match &route.slo_by_model {
            None => Vec::new(),
            Some(entries) => self.slo_by_model(&format!("{prefix}.slo_by_model"), entries, names),
        };
        let slo_by_operation = match &route.slo_by_operation {
            None => Vec::new(),
            Some(entries) => {
                self.slo_by_operation(&format!("{prefix}.slo_by_operation"), entries, names)
            }
        };
        let slo_header = route.slo_header.as_ref().and_then(|field| {
            let key = format!("{prefix}.slo_header");
            if names.is_none() {
                self.at(
                    raw::pos(field),
                    key,
                    "needs `slo_files`: a client may only declare a class defined there",
                );
                return None;
            }
            self.value(Some(field), &key, |text| {
                http::HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
                    .map_err(|_| format!("invalid header name `{text}`"))
            })
        });

        let slo_request_max = slo_request_max(route);

        let tenant = route
            .tenant
            .as_ref()
            .and_then(|field| self.tenant(&format!("{prefix}.tenant"), field));

        let built = match (name, matcher, upstream) {
            (Some(name), Some(matcher), Some(upstream)) => Some(Route {
                name,
                matcher,
                upstream,
                protocol,
                timeouts,
                preserve_host: route.preserve_host,
                strip_prefix: route.strip_prefix,
                max_in_flight: route.max_in_flight,
                tls_roots,
                slo,
                slo_by_model,
                slo_by_operation,
                slo_header,
                slo_request_max,
                tenant,
                otel_provider_name: route.otel_provider_name.clone(),
                engine_metrics: route.engine_metrics.clone(),
                gpu_metrics: route.gpu_metrics.clone(),
                gpu_select: route.gpu_select.clone().unwrap_or_default(),
                scrape_interval: route.scrape_interval,
            }),
            _ => None,
        };
        (built, matcher_report)
    }

    /// The rules of a route's scrape keys: `gpu_select` needs
    /// `gpu_metrics`, `scrape_interval` a page to scrape, and a route's own
    /// interval must be longer than `scrape.timeout`. Returns whether the
    /// route is scraped on `scrape.interval`, which the caller checks once.
    fn scrape_targets(&mut self, prefix: &str, route: &RawRoute, scrape: &ScrapeSettings) -> bool {
        // A page written but bad is reported already, not as missing.
        let page = |checker: &Self, key: &str, page: &Option<_>| {
            page.is_some() || checker.written(&format!("{prefix}.{key}"))
        };
        let gpu = page(self, "gpu_metrics", &route.gpu_metrics);
        let scraped = gpu || page(self, "engine_metrics", &route.engine_metrics);
        if route.gpu_select.is_some() && !gpu {
            self.at_key(
                format!("{prefix}.gpu_select"),
                "needs `gpu_metrics`: it selects GPUs of that page",
            );
        }
        match route.scrape_interval {
            Some(_) if !scraped => {
                self.at_key(
                    format!("{prefix}.scrape_interval"),
                    "needs `engine_metrics` or `gpu_metrics`: there is nothing to scrape",
                );
                false
            }
            Some(interval) if interval <= scrape.timeout => {
                self.at_key(
                    format!("{prefix}.scrape_interval"),
                    format!(
                        "{} is not longer than scrape.timeout ({}): a scrape must end before the next one starts",
                        humantime::format_duration(interval),
                        humantime::format_duration(scrape.timeout)
                    ),
                );
                false
            }
            Some(_) => false,
            None => route.engine_metrics.is_some() || route.gpu_metrics.is_some(),
        }
    }

    pub(crate) fn slo_by_model(
        &mut self,
        key: &str,
        entries: &Spanned<raw::Entries>,
        names: Option<&[String]>,
    ) -> Vec<(String, String)> {
        self.class_map(key, entries, names, "model", |model| {
            if model.is_empty() {
                Err("model name must not be empty".to_owned())
            } else {
                Ok(model.to_owned())
            }
        })
    }

    pub(crate) fn slo_by_operation(
        &mut self,
        key: &str,
        entries: &Spanned<raw::Entries>,
        names: Option<&[String]>,
    ) -> Vec<(Operation, String)> {
        self.class_map(key, entries, names, "operation", |name| {
            Operation::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
                format!("unknown operation `{name}` (one of {})", known.join(", "))
            })
        })
    }

    /// A mapping of `what` (read by `parse`) to SLO class, each entry
    /// checked, each `what` listed once.
    fn class_map<K: PartialEq>(
        &mut self,
        key: &str,
        entries: &Spanned<raw::Entries>,
        names: Option<&[String]>,
        what: &str,
        parse: impl Fn(&str) -> Result<K, String>,
    ) -> Vec<(K, String)> {
        let mut out: Vec<(K, String)> = Vec::with_capacity(entries.value.0.len());
        for (name, class) in &entries.value.0 {
            let entry_key = format!("{key}.{name}");
            let k = match parse(name) {
                Ok(k) => k,
                Err(message) => {
                    self.at(raw::pos(class), entry_key, message);
                    continue;
                }
            };
            if out.iter().any(|(seen, _)| *seen == k) {
                self.at(
                    raw::pos(class),
                    entry_key,
                    format!("{what} `{name}` is listed twice"),
                );
                continue;
            }
            if let Some(class) =
                self.value(Some(class), &entry_key, |text| check_class(names, text))
            {
                out.push((k, class));
            }
        }
        out
    }
}

/// Whether every request `later` accepts is also accepted by `earlier`, so
/// that `later`, listed after it, can never be chosen.
pub(crate) fn covers(earlier: &RouteMatch, later: &RouteMatch) -> bool {
    let prefix = later.path_prefix.starts_with(&earlier.path_prefix);
    let host = match (&earlier.host, &later.host) {
        (None, _) => true,
        (Some(a), Some(b)) => a == b,
        (Some(_), None) => false,
    };
    let methods = match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(a), Some(b)) => b.iter().all(|method| a.contains(method)),
        (Some(_), None) => false,
    };
    prefix && host && methods
}

/// Reads a PEM file of certificate authorities (`tls.ca_file`, relative to
/// `base`), each of which must be usable as a trust anchor.
pub(crate) fn read_roots(base: &Path, text: &str) -> Result<super::super::TlsRoots, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let file = base.join(text.trim());
    let pem = std::fs::read(&file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "`{}` is not a PEM file of certificates: {e}",
                file.display()
            )
        })?;
    if certificates.is_empty() {
        return Err(format!(
            "`{}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)",
            file.display()
        ));
    }
    let mut store = rustls::RootCertStore::empty();
    for (i, cert) in certificates.iter().enumerate() {
        store.add(cert.clone()).map_err(|e| {
            format!(
                "certificate {} of `{}` cannot be a trust anchor: {e}",
                i + 1,
                file.display()
            )
        })?;
    }
    Ok(super::super::TlsRoots {
        file,
        certificates: certificates.into_iter().map(|c| c.to_vec()).collect(),
    })
}

/// An SLO class named by a route: a label value, and a defined class when
/// SLO files are configured (`names`).
pub(crate) fn check_class(names: Option<&[String]>, text: &str) -> Result<String, String> {
    if !is_label_value(text) {
        return Err(format!(
            "invalid SLO class `{text}`: must match [a-zA-Z0-9_.:-]+"
        ));
    }
    match names {
        Some(names) if !names.iter().any(|n| n == text) => Err(if names.is_empty() {
            format!("unknown SLO class `{text}`: the slo_files define no class")
        } else {
            format!(
                "unknown SLO class `{text}`: not defined in slo_files (defined: {})",
                names.join(", ")
            )
        }),
        _ => Ok(text.to_owned()),
    }
}

/// `slo_request_headers` and `slo_request_max`: the caps of declared
/// objectives when the route reads them.
fn slo_request_max(route: &RawRoute) -> Option<Caps> {
    let mut caps = Caps::default();
    if let Some(max) = &route.slo_request_max {
        for (kind, cap) in [
            (ObjectiveKind::Ttft, max.ttft),
            (ObjectiveKind::Tpot, max.tpot),
            (ObjectiveKind::E2el, max.e2el),
        ] {
            if let Some(cap) = cap {
                caps.0[kind as usize] = cap;
            }
        }
    }
    route.slo_request_headers.then_some(caps)
}

/// Whether a match was read without a problem. A bad value leaves its
/// kind's stand-in, which no valid match holds (an empty path prefix, an
/// empty host, an empty method list); such a match is left out of the
/// shadowing check, as what it accepts is not known.
fn read_whole(matcher: &RouteMatch) -> bool {
    !matcher.path_prefix.is_empty()
        && matcher.host.as_ref().is_none_or(|host| !host.is_empty())
        && matcher
            .methods
            .as_ref()
            .is_none_or(|methods| !methods.is_empty())
}
