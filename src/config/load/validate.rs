//! The rules across keys, in one place: each key was read and checked on
//! its own (its kind, `kind.rs`); what needs two keys, a key and a file, or
//! a key and the command line is checked here, and every problem is
//! reported at the key it names, located in the file by its path.
//!
//! The rules: the two listeners' addresses; each route's required `name`
//! and `upstream` (which `--upstream` may give instead), names unique, no
//! route shadowed by an earlier one; `tls` only where something is `https`;
//! SLO classes defined by the `slo_files`, and `slo_header` only with them;
//! a tenant by header or by API keys, one of the two, and API keys with
//! their `keys`; `gpu_select` only with `gpu_metrics`, `scrape_interval` only with a page
//! to scrape, `gpus` not with `gpu_metrics`, `gpu_hourly_cost` only with
//! one of the two, and `scrape.timeout` below the interval of every scraped
//! route; `gpu_set` only with GPUs, named as no route outside it, and the
//! routes of one GPU set agreeing on its GPUs and price.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::super::gpu_set::{groups, page_of};
use super::super::raw::{RawConfig, Segment};
use super::super::{Route, RouteMatch, ScrapeSettings, Upstream};
use super::checker::{Checker, Origin};

/// What the rules need beyond the file: the command line's part.
pub(crate) struct Given<'k> {
    /// The proxy's address in force and where it came from.
    pub listen: (SocketAddr, Origin<'k>),
    /// The admin listener's.
    pub admin: (SocketAddr, Origin<'k>),
    /// Whether `--upstream` was given (valid or not): it replaces every
    /// route's upstream, which the file may then leave out.
    pub upstream_flag: bool,
    /// The upstream `--upstream` gives, when it is valid.
    pub upstream: Option<&'k Upstream>,
}

impl Checker<'_> {
    /// Checks every rule across keys, recording each problem.
    pub(crate) fn validate(&mut self, raw: &RawConfig, given: &Given<'_>) {
        self.listeners(given);
        let scrape = raw.scrape.unwrap_or_default();
        let routes: Vec<&Route> = raw
            .routes
            .iter()
            .flat_map(|routes| routes.value.iter().map(|route| &route.value))
            .collect();
        let mut on_shared_interval = false;
        for (i, route) in routes.iter().enumerate() {
            let prefix = format!("routes[{i}]");
            self.required(&prefix, given.upstream_flag);
            self.tls(&prefix, route, given.upstream);
            self.classes(&prefix, route);
            self.tenant(&prefix);
            on_shared_interval |= self.scrape_targets(&prefix, route, &scrape);
        }
        self.shared_interval(on_shared_interval, &scrape);
        self.unique_names(&routes);
        self.gpu_sets(&routes);
        self.shadowing(&routes);
        self.session_keys(raw);
    }

    /// Each `sessions.keys` entry names a header or a body field, one of
    /// the two.
    fn session_keys(&mut self, raw: &RawConfig) {
        let Some(sessions) = &raw.sessions else {
            return;
        };
        // The default keys are not written: nothing to check.
        if !self.given("sessions.keys") {
            return;
        }
        for i in 0..sessions.keys.len() {
            let key = format!("sessions.keys[{i}]");
            let header = self.given(&format!("{key}.header"));
            let body = self.given(&format!("{key}.body"));
            match (header, body) {
                (true, true) => self.at_key(key, "give `header` or `body`, not both"),
                (false, false) => self.at_key(
                    key,
                    "needs `header` (a request header) or `body` (`conversation` or `previous_response_id`)",
                ),
                _ => {}
            }
        }
    }

    /// The proxy and the admin listener on two addresses (port 0 asks the
    /// OS for a free port each, so it can be shared).
    fn listeners(&mut self, given: &Given<'_>) {
        let ((listen, listen_origin), (admin, admin_origin)) = (given.listen, given.admin);
        if listen == admin && listen.port() != 0 {
            // Point at the admin address if one was given (file or flag),
            // else at the proxy address, which then collides with the default.
            let origin = match admin_origin {
                Origin::Default => listen_origin,
                given => given,
            };
            self.report(
                origin,
                format!("the proxy and the admin listener cannot share the address {listen}"),
            );
        }
    }

    /// A route's `name`, and its `upstream` unless `--upstream` gives it.
    fn required(&mut self, prefix: &str, upstream_flag: bool) {
        for (key, needed) in [("name", true), ("upstream", !upstream_flag)] {
            // A key written with a bad value is reported as that.
            let key = format!("{prefix}.{key}");
            if needed && !self.given(&key) && !self.reported(&key) {
                let pos = self.position(prefix);
                self.at(pos, key, "required key is missing");
            }
        }
    }

    /// The upstream a route takes: `--upstream`'s, else its own when the
    /// file gives a good one.
    pub(crate) fn route_upstream<'r>(
        &self,
        prefix: &str,
        route: &'r Route,
        upstream_override: Option<&'r Upstream>,
    ) -> Option<&'r Upstream> {
        let key = format!("{prefix}.upstream");
        let own = (self.given(&key) && !self.reported(&key)).then_some(&route.upstream);
        upstream_override.or(own)
    }

    /// `tls` only where the upstream or a page is `https`.
    fn tls(&mut self, prefix: &str, route: &Route, flag: Option<&Upstream>) {
        let upstream = self.route_upstream(prefix, route, flag);
        if !self.given(&format!("{prefix}.tls")) || tls_applies(upstream, route) {
            return;
        }
        let pages = route.engine_metrics.is_some() || route.gpu_metrics.is_some();
        self.at_key(
            format!("{prefix}.tls"),
            if pages {
                "applies only to an https upstream, engine_metrics or gpu_metrics"
            } else {
                "applies only to an https upstream"
            },
        );
    }

    /// The SLO classes a route names are defined by the `slo_files`, when
    /// there are any, and a client may declare one only then.
    fn classes(&mut self, prefix: &str, route: &Route) {
        let Some(names) = self.slo_names.clone() else {
            let key = format!("{prefix}.slo_header");
            if route.slo_header.is_some() || self.given(&key) {
                // Whatever its value, the key may not be given at all.
                self.errors.retain(|e| e.key != key);
                self.at_key(
                    key,
                    "needs `slo_files`: a client may only declare a class defined there",
                );
            }
            return;
        };
        if let Some(class) = &route.slo {
            self.defined(&names, vec![], &format!("{prefix}.slo"), class);
        }
        let by_model = route.slo_by_model.iter().map(|(m, c)| (m.as_str(), c));
        let by_operation = route.slo_by_operation.iter().map(|(o, c)| (o.name(), c));
        for (section, entries) in [
            ("slo_by_model", by_model.collect::<Vec<_>>()),
            ("slo_by_operation", by_operation.collect()),
        ] {
            for (entry, class) in entries {
                let path = vec![
                    Segment::Key(section.to_owned()),
                    Segment::Key(entry.to_owned()),
                ];
                self.defined(&names, path, &format!("{prefix}.{section}.{entry}"), class);
            }
        }
    }

    /// Whether `class` is among `names`; if not, says so at `key` (which
    /// `within`, the path under the route, locates when its last key holds
    /// a `.`).
    fn defined(&mut self, names: &[String], within: Vec<Segment>, key: &str, class: &str) {
        if names.iter().any(|n| n == class) {
            return;
        }
        let message = if names.is_empty() {
            format!("unknown SLO class `{class}`: the slo_files define no class")
        } else {
            format!(
                "unknown SLO class `{class}`: not defined in slo_files (defined: {})",
                names.join(", ")
            )
        };
        let pos = match within.as_slice() {
            [] => self.position(key),
            _ => {
                let route = key.split('.').next().unwrap_or_default();
                self.position_under(route, &within)
            }
        };
        self.at(pos, key, message);
    }

    /// A route's `tenant` comes from a header or API keys, one of the two,
    /// and API keys need their `keys`.
    fn tenant(&mut self, prefix: &str) {
        let key = format!("{prefix}.tenant");
        if !self.given(&key) {
            return;
        }
        // A header written but bad is reported already, not as missing.
        let header = self.given(&format!("{key}.header"));
        let api_keys = self.given(&format!("{key}.api_keys"));
        match (header, api_keys) {
            (true, true) => self.at_key(key, "give `header` or `api_keys`, not both"),
            (false, false) => self.at_key(
                key,
                "needs `header` (a request header naming the tenant) or `api_keys`",
            ),
            (false, true) if !self.given(&format!("{key}.api_keys.keys")) => {
                let pos = self.position(&key);
                self.at(
                    pos,
                    format!("{key}.api_keys.keys"),
                    "required key is missing",
                );
            }
            _ => {}
        }
    }

    /// The rules of a route's scrape and GPU keys: `gpu_select` needs
    /// `gpu_metrics`, `gpus` goes without it, `gpu_hourly_cost` needs one of
    /// them, `scrape_interval` a page to scrape, and a route's own
    /// interval must be longer than `scrape.timeout`. Returns whether the
    /// route is scraped on `scrape.interval`, which is checked once.
    fn scrape_targets(&mut self, prefix: &str, route: &Route, scrape: &ScrapeSettings) -> bool {
        // A page written but bad is reported already, not as missing.
        let gpu = route.gpu_metrics.is_some() || self.given(&format!("{prefix}.gpu_metrics"));
        let scraped = gpu
            || route.engine_metrics.is_some()
            || self.given(&format!("{prefix}.engine_metrics"));
        if self.given(&format!("{prefix}.gpu_select")) && !gpu {
            self.at_key(
                format!("{prefix}.gpu_select"),
                "needs `gpu_metrics`: it selects GPUs of that page",
            );
        }
        // Two sources of one count would each say how many GPUs there are.
        let fixed = route.gpus.is_some() || self.given(&format!("{prefix}.gpus"));
        if fixed && gpu {
            self.at_key(
                format!("{prefix}.gpus"),
                "not with `gpu_metrics`, which counts the route's GPUs: give one of the two",
            );
        }
        if self.given(&format!("{prefix}.gpu_hourly_cost")) && !fixed && !gpu {
            self.at_key(
                format!("{prefix}.gpu_hourly_cost"),
                "needs `gpus` or `gpu_metrics`: it prices the route's GPU-seconds",
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

    /// `scrape.timeout` below `scrape.interval` when a route is scraped on
    /// it, said at the timeout when the file gives one, else at the
    /// interval.
    fn shared_interval(&mut self, used: bool, scrape: &ScrapeSettings) {
        // A bad interval's stand-in is zero, which is reported already.
        if !used || scrape.timeout < scrape.interval || scrape.interval.is_zero() {
            return;
        }
        let (timeout, interval) = (
            humantime::format_duration(scrape.timeout),
            humantime::format_duration(scrape.interval),
        );
        if self.given("scrape.timeout") {
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

    fn unique_names(&mut self, routes: &[&Route]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, route) in routes.iter().enumerate() {
            let name = route.name.as_str();
            if !name.is_empty()
                && let Some(first) = names.insert(name, i)
            {
                let key = format!("routes[{i}].name");
                let message = format!("duplicate route name `{name}` (also routes[{first}])");
                self.at_key(key.clone(), message);
                // Said before what is wrong with the name itself (read
                // earlier), as it is wrong whatever the name.
                if let Some(first) = self.errors.iter().position(|e| e.key == key)
                    && let Some(duplicate) = self.errors.pop()
                {
                    self.errors.insert(first, duplicate);
                }
            }
        }
    }

    /// The GPU sets (`config/gpu_set.rs`): a `gpu_set` names GPUs the
    /// route has and no route outside the set (its label value would be
    /// that route's), and the routes of a set (the same `gpu_set`, or the
    /// same page and selection) give the same GPUs, price and name, each
    /// difference said at the later route's key.
    fn gpu_sets(&mut self, routes: &[&Route]) {
        let gpus = |r: &Route| r.gpus.is_some() || r.gpu_metrics.is_some();
        for set in groups(routes.iter().copied()) {
            let Some(&first) = set.iter().find(|&&i| gpus(routes[i])) else {
                for i in set {
                    self.at_route_key(
                        i,
                        "gpu_set",
                        "needs `gpus` or `gpu_metrics`: it names the GPUs the route shares"
                            .to_owned(),
                    );
                }
                continue;
            };
            let f = routes[first];
            for &i in &set {
                let r = routes[i];
                let outside = |name: &String| {
                    (0..routes.len()).find(|j| routes[*j].name == *name && !set.contains(j))
                };
                if let Some(name) = &r.gpu_set
                    && let Some(other) = outside(name)
                {
                    let message = format!(
                        "`{name}` is the name of routes[{other}], which is not in the set: name the set apart"
                    );
                    self.at_route_key(i, "gpu_set", message);
                }
                if i == first {
                    continue;
                }
                if !gpus(r) {
                    let message =
                        "needs `gpus` or `gpu_metrics`: it names the GPUs the route shares";
                    self.at_route_key(i, "gpu_set", message.to_owned());
                    continue;
                }
                let (page, page_f) = (page_of(r), page_of(f));
                let differs = [
                    (
                        "gpu_set",
                        r.gpu_set.is_some() && f.gpu_set.is_some() && r.gpu_set != f.gpu_set,
                    ),
                    ("gpus", r.gpus != f.gpus),
                    (
                        "gpu_metrics",
                        page.as_ref().map(|p| &p.0) != page_f.as_ref().map(|p| &p.0),
                    ),
                    (
                        "gpu_select",
                        page.as_ref().map(|p| &p.1) != page_f.as_ref().map(|p| &p.1),
                    ),
                    ("gpu_hourly_cost", r.gpu_hourly_cost != f.gpu_hourly_cost),
                ];
                if let Some((key, _)) = differs.into_iter().find(|(_, d)| *d) {
                    let message = format!(
                        "differs from routes[{first}] (`{}`), in the same GPU set: the routes of a set (the same `gpu_set`, or the same `gpu_metrics` and `gpu_select`) share its GPUs and price",
                        f.name
                    );
                    self.at_route_key(i, key, message);
                }
            }
        }
    }

    /// Records a problem at `routes[i].key`: where its value is written,
    /// else where the route is.
    fn at_route_key(&mut self, i: usize, key: &str, message: String) {
        let (prefix, key) = (format!("routes[{i}]"), format!("routes[{i}].{key}"));
        let pos = self.position(&key).or_else(|| self.position(&prefix));
        self.at(pos, key, message);
    }

    /// No route accepts only requests an earlier one takes. A match with a
    /// bad value is left out: what it accepts is not known.
    fn shadowing(&mut self, routes: &[&Route]) {
        let matches: Vec<Option<RouteMatch>> = routes
            .iter()
            .map(|route| Some(route.matcher.clone()).filter(read_whole))
            .collect();
        for (j, later) in matches.iter().enumerate() {
            let Some(later) = later else {
                continue;
            };
            let shadowing = matches[..j].iter().position(|earlier| {
                earlier
                    .as_ref()
                    .is_some_and(|earlier| covers(earlier, later))
            });
            if let Some(i) = shadowing {
                let key = match self.given(&format!("routes[{j}].match")) {
                    true => format!("routes[{j}].match"),
                    false => format!("routes[{j}]"),
                };
                self.at_key(
                    key,
                    format!(
                        "route can never match: shadowed by routes[{i}], which accepts every request this one does (put the more specific route first)"
                    ),
                );
            }
        }
    }
}

/// Whether a route's `tls` applies: its upstream (`None`: not known, as
/// missing or bad) or one of its pages is `https`.
pub(crate) fn tls_applies(upstream: Option<&Upstream>, route: &Route) -> bool {
    let https_page = [&route.engine_metrics, &route.gpu_metrics]
        .into_iter()
        .flatten()
        .any(|page| page.url.scheme_str() == Some("https"));
    https_page || upstream.is_none_or(|u| u.scheme == http::uri::Scheme::HTTPS)
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

/// Whether a match was read without a problem. A bad value leaves its
/// kind's stand-in, which no valid match holds (an empty path prefix, an
/// empty host, an empty method list); such a match is left out of the
/// shadowing check, as what it accepts is not known.
pub(crate) fn read_whole(matcher: &RouteMatch) -> bool {
    !matcher.path_prefix.is_empty()
        && matcher.host.as_ref().is_none_or(|host| !host.is_empty())
        && matcher
            .methods
            .as_ref()
            .is_none_or(|methods| !methods.is_empty())
}
