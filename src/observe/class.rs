//! The SLO class of a request, chosen once when it starts, and how a
//! configuration's requests are observed ([`Policy`]).
//!
//! A request is judged against the objectives it declares for itself, when
//! its route reads them (`slo_request_max`) and it declares any; else
//! against the class it names in its route's `slo_header`, when that is a
//! defined class; else the class its route gives its model
//! (`slo_by_model`), else its operation (`slo_by_operation`), else the
//! route's own (`slo`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::config::{Config, MetricsSettings, Route, SessionKeySpec, TraceSettings};
use meter::Operation;
use slo::{ObjectiveKind, SloClass};

/// What a configuration says of how its requests are observed, beyond
/// the routes: its SLO classes, what a stall and a slow reader are, and
/// the trace context. A reload brings a new one; a request keeps what it
/// was given when it started.
pub struct Policy {
    /// The defined SLO classes by name: a class a client declares by header
    /// is used only if it is one of these, which bounds the `slo` label.
    classes: HashMap<String, Arc<SloClass>>,
    /// A gap between token events longer than this is a stall.
    pub stall_threshold: Duration,
    /// A request whose client held it up for more than this share of its
    /// time is a slow reader's.
    pub slow_reader_share: f64,
    /// How the trace context of a request is read and passed on.
    pub trace_context: TraceSettings,
    /// Where a request's session key is read, in order; `None` when
    /// sessions are not followed.
    pub session_keys: Option<Arc<[SessionKeySpec]>>,
}

impl Default for Policy {
    /// No classes, and the default settings.
    fn default() -> Self {
        let metrics = MetricsSettings::default();
        Self {
            classes: HashMap::new(),
            stall_threshold: metrics.stall_threshold,
            slow_reader_share: metrics.slow_reader_share,
            trace_context: TraceSettings::default(),
            session_keys: None,
        }
    }
}

/// A request's SLO class: the `slo` label, and the class it is judged
/// against, when the label names one (a request keeps it even if a reload
/// changes the classes while it runs).
pub struct Chosen<'a> {
    pub label: Option<&'a str>,
    pub class: Option<Arc<SloClass>>,
}

impl Policy {
    /// The policy of `config`.
    pub fn of(config: &Config) -> Self {
        Self {
            classes: config
                .slo_classes
                .iter()
                .map(|c| (c.name.clone(), Arc::new(c.clone())))
                .collect(),
            stall_threshold: config.metrics.stall_threshold,
            slow_reader_share: config.metrics.slow_reader_share,
            trace_context: config.trace_context,
            session_keys: config
                .sessions
                .enabled
                .then(|| config.sessions.keys.as_slice().into()),
        }
    }

    /// The class of a request of `route` with `headers`, naming `model`,
    /// for `operation`. Each objective it declares that is not a plausible
    /// duration is passed to `refused` (and the declaration not used).
    pub fn choose<'a>(
        &'a self,
        route: &'a Route,
        headers: &HeaderMap,
        model: Option<&str>,
        operation: Operation,
        refused: impl FnMut(ObjectiveKind),
    ) -> Chosen<'a> {
        if let Some(own) = declared_objectives(route, headers, refused) {
            return Chosen {
                label: Some(slo::declared::DECLARED),
                class: Some(own),
            };
        }
        let declared = self.declared_class(route, headers);
        let label = configured(route, model, operation, declared);
        Chosen {
            label,
            class: label.and_then(|name| self.classes.get(name)).cloned(),
        }
    }

    /// The SLO class the client declares in the route's `slo_header`, if
    /// it names a defined class.
    fn declared_class(&self, route: &Route, headers: &HeaderMap) -> Option<&str> {
        let value = headers.get(route.slo_header.as_ref()?)?.to_str().ok()?;
        self.classes
            .get_key_value(value.trim())
            .map(|(name, _)| name.as_str())
    }
}

/// The objectives the request declares for itself, when its route reads
/// them and it declares any: a class of its own. A declaration with a value
/// that is not a plausible duration is not used, and each such value is
/// passed to `refused`.
fn declared_objectives(
    route: &Route,
    headers: &HeaderMap,
    mut refused: impl FnMut(ObjectiveKind),
) -> Option<Arc<SloClass>> {
    let caps = route.slo_request_max.as_ref()?;
    let values = slo::declared::values(|name| headers.get(name).map(|v| v.as_bytes()));
    match slo::declared::declared(values, caps) {
        Ok(class) => class.map(Arc::new),
        Err(kinds) => {
            for kind in kinds {
                refused(kind);
            }
            tracing::debug!(route = %route.name, "declared objectives refused: not a positive number of milliseconds");
            None
        }
    }
}

/// The class the request declared (already checked to be defined), else
/// the one for its model, else the one for its operation, else the
/// route's.
fn configured<'a>(
    route: &'a Route,
    model: Option<&str>,
    operation: Operation,
    declared: Option<&'a str>,
) -> Option<&'a str> {
    declared
        .or_else(|| {
            let model = model?;
            route
                .slo_by_model
                .iter()
                .find(|(name, _)| name == model)
                .map(|(_, class)| class.as_str())
        })
        .or_else(|| {
            route
                .slo_by_operation
                .iter()
                .find(|(op, _)| *op == operation)
                .map(|(_, class)| class.as_str())
        })
        .or(route.slo.as_deref())
}
