//! The `routes`: each route as read (its keys typed, the rules across
//! them `validate.rs`'s), completed: `--upstream` applied, its CA file
//! read. Without a file, `--upstream` is the one route.

use std::path::Path;

use super::super::raw::RawConfig;
use super::super::{Route, Upstream};

use super::checker::Checker;

impl Checker<'_> {
    /// The routes, each completed; a route whose required keys are missing
    /// or bad is left out (a config with any problem is refused anyway).
    pub(crate) fn routes(
        &mut self,
        raw: &RawConfig,
        upstream_override: Option<&Upstream>,
        base: &Path,
    ) -> Vec<Route> {
        if self.locator.is_none() {
            return self.flags_route(upstream_override).into_iter().collect();
        }
        let Some(raw_routes) = self.required_list(&raw.routes, "routes", "route") else {
            return Vec::new();
        };
        raw_routes
            .iter()
            .enumerate()
            .filter_map(|(i, route)| {
                self.route(
                    &format!("routes[{i}]"),
                    &route.value,
                    upstream_override,
                    base,
                )
            })
            .collect()
    }

    /// The route of a configuration from flags alone: every request to
    /// `--upstream`, which is then required.
    fn flags_route(&mut self, upstream: Option<&Upstream>) -> Option<Route> {
        let Some(upstream) = upstream else {
            if !self.reported("--upstream") {
                self.flag(
                    "--upstream",
                    "required when no config file is given (an upstream base URL such as http://127.0.0.1:8000)",
                );
            }
            return None;
        };
        Route::with_defaults("default", upstream.clone())
            .map_err(|error| self.flag("--upstream", error.to_string()))
            .ok()
    }

    /// One route completed: the upstream `--upstream` gives, its CA file
    /// read when its `tls` applies, `slo_request_max` kept only with
    /// `slo_request_headers`.
    fn route(
        &mut self,
        prefix: &str,
        read: &Route,
        upstream_override: Option<&Upstream>,
        base: &Path,
    ) -> Option<Route> {
        let mut route = read.clone();
        let upstream = self.route_upstream(prefix, read, upstream_override);
        route.tls_roots = read
            .tls_roots
            .as_ref()
            .filter(|_| super::validate::tls_applies(upstream, read))
            .and_then(|tls| match read_roots(base, &tls.file.to_string_lossy()) {
                Ok(roots) => Some(roots),
                Err(message) => {
                    self.at_key(format!("{prefix}.tls.ca_file"), message);
                    None
                }
            });
        route.slo_request_max = read
            .slo_request_headers
            .then(|| read.slo_request_max.unwrap_or_default());
        route.upstream = upstream?.clone();
        let whole = !route.name.is_empty() && super::validate::read_whole(&route.matcher);
        whole.then_some(route)
    }
}

/// Reads a PEM file of certificate authorities (`tls.ca_file`, relative to
/// `base`), each of which must be usable as a trust anchor.
pub(crate) fn read_roots(base: &Path, text: &str) -> Result<super::super::TlsRoots, String> {
    let file = base.join(text.trim());
    let certificates = super::super::server_tls::read_certificates(&file)?;
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
