//! The `routes`: each route built from its typed keys (the rules across
//! keys are `validate.rs`'s), its CA file read.

use std::path::Path;

use super::super::raw::{RawConfig, RawRoute};
use super::super::{Protocol, Route, RouteMatch, Upstream};

use super::checker::Checker;
use slo::ObjectiveKind;
use slo::declared::Caps;

impl Checker<'_> {
    /// The routes, one for each in the file whose required keys are there
    /// and good (a config with any problem is refused anyway).
    pub(crate) fn routes(
        &mut self,
        raw: &RawConfig,
        upstream_override: Option<&Upstream>,
        base: &Path,
    ) -> Vec<Route> {
        let Some(raw_routes) = self.required_list(&raw.routes, "routes", "route") else {
            return Vec::new();
        };
        raw_routes
            .iter()
            .enumerate()
            .filter_map(|(i, raw_route)| {
                self.route(
                    &format!("routes[{i}]"),
                    &raw_route.value,
                    upstream_override,
                    base,
                )
            })
            .collect()
    }

    /// Builds one route, reading its CA file when its `tls` applies.
    fn route(
        &mut self,
        prefix: &str,
        route: &RawRoute,
        upstream_override: Option<&Upstream>,
        base: &Path,
    ) -> Option<Route> {
        // A file upstream is checked even when overridden: the file should
        // be valid on its own.
        let upstream = upstream_override.or(route.upstream.as_ref());
        let tls_roots = route
            .tls
            .as_ref()
            .filter(|_| super::validate::tls_applies(upstream, route))
            .and_then(|tls| tls.ca_file.as_deref())
            .and_then(|text| match read_roots(base, text) {
                Ok(roots) => Some(roots),
                Err(message) => {
                    self.at_key(format!("{prefix}.tls.ca_file"), message);
                    None
                }
            });
        let tenant = route
            .tenant
            .as_ref()
            .and_then(|field| self.tenant(&format!("{prefix}.tenant"), field));
        let matcher = route.matcher.clone().unwrap_or_default();
        if !read_whole(&matcher) {
            return None;
        }
        Some(Route {
            name: route.name.clone()?,
            matcher,
            upstream: upstream?.clone(),
            protocol: route.protocol.unwrap_or(Protocol::Auto),
            timeouts: route.timeouts.unwrap_or_default(),
            preserve_host: route.preserve_host,
            strip_prefix: route.strip_prefix,
            max_in_flight: route.max_in_flight,
            tls_roots,
            slo: route.slo.clone(),
            slo_by_model: route.slo_by_model.clone(),
            slo_by_operation: route.slo_by_operation.clone(),
            slo_header: route.slo_header.clone(),
            slo_request_max: slo_request_max(route),
            tenant,
            otel_provider_name: route.otel_provider_name.clone(),
            engine_metrics: route.engine_metrics.clone(),
            gpu_metrics: route.gpu_metrics.clone(),
            gpu_select: route.gpu_select.clone().unwrap_or_default(),
            scrape_interval: route.scrape_interval,
        })
    }
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
pub(crate) fn read_whole(matcher: &RouteMatch) -> bool {
    !matcher.path_prefix.is_empty()
        && matcher.host.as_ref().is_none_or(|host| !host.is_empty())
        && matcher
            .methods
            .as_ref()
            .is_none_or(|methods| !methods.is_empty())
}
