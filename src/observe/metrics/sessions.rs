//! The sessions open on this replica and their families (docs/metrics.md,
//! "Sessions and turns"): the table (`observe::sessions`) behind one lock,
//! which a request takes when it starts, when its response names its id,
//! and when it ends; a session's figures observed when it ends; the gaps
//! as they close; the open sessions counted at each exposition; and the
//! routes' sessions and turns over the live windows, for `/slo`
//! (`slo::live::sessions`: each request's turn as it ends, each session
//! as it ends).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGaugeVec};
use slo::live::sessions::{RouteSessions, SessionEnd, SessionWindows, SessionsReport};
use tokio::time::Instant;

use super::register::Register;
use crate::config::SessionSettings;
use crate::observe::sessions::{Ended, Named, Place, Reason, Table, Tally};

/// Seconds a session lasts, or spends in the model.
const DURATION_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0,
];
/// Requests in a session.
const TURN_BUCKETS: [f64; 14] = [
    1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0, 89.0, 144.0, 233.0, 377.0, 1000.0,
];
/// Seconds between a response and the session's next request.
const GAP_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// GPU-seconds of a session.
const GPU_SECONDS_BUCKETS: [f64; 11] = [
    0.1, 0.5, 1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0,
];
/// Money of a session, in `cost.currency`.
const COST_BUCKETS: [f64; 9] = [0.0001, 0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 10.0, 100.0];

/// The table and the families.
pub struct Sessions {
    table: Mutex<Table>,
    duration: HistogramVec,
    turns: HistogramVec,
    model: HistogramVec,
    gaps: HistogramVec,
    gpu_seconds: HistogramVec,
    cost: HistogramVec,
    total: IntCounterVec,
    active: IntGaugeVec,
    ended: IntCounterVec,
    hashed: IntCounter,
    /// The routes' sessions and turns over the live windows.
    windows: SessionWindows,
}

impl Sessions {
    pub(super) fn register(r: Register<'_>) -> Result<Arc<Self>, prometheus::Error> {
        let defaults = SessionSettings::default();
        let ended = r.counters(names::SESSIONS_ENDED)?;
        for reason in Reason::ALL {
            ended.with_label_values(&[reason.as_str()]);
        }
        Ok(Arc::new(Self {
            table: Mutex::new(Table::new(defaults.idle_timeout, defaults.max_sessions)),
            duration: r.histograms(names::SESSION_DURATION, &DURATION_BUCKETS)?,
            turns: r.histograms(names::SESSION_TURNS, &TURN_BUCKETS)?,
            model: r.histograms(names::SESSION_MODEL, &DURATION_BUCKETS)?,
            gaps: r.histograms(names::SESSION_GAPS, &GAP_BUCKETS)?,
            gpu_seconds: r.histograms(names::SESSION_GPU_SECONDS, &GPU_SECONDS_BUCKETS)?,
            cost: r.histograms(names::SESSION_COST, &COST_BUCKETS)?,
            total: r.counters(names::SESSIONS_TOTAL)?,
            active: r.gauges(names::SESSIONS_ACTIVE)?,
            ended,
            hashed: r.counter(names::SESSION_KEYS_HASHED)?,
            windows: SessionWindows::new(Instant::now()),
        }))
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Each operation leaves the table whole between statements.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bounds of a configuration: from now on (a smaller table evicts
    /// as sessions start).
    pub fn configure(&self, settings: &SessionSettings) {
        let mut table = self.table();
        table.idle_timeout = settings.idle_timeout;
        table.max = settings.max_sessions.max(1);
    }

    /// A request of `route` and `tenant`, naming its session as `named`
    /// (its key `hashed`), starts at `at`: its place, and the sessions a
    /// full table evicted, which the caller ends.
    pub fn start(
        &self,
        named: Named,
        hashed: bool,
        route: &Arc<str>,
        tenant: &Arc<str>,
        at: Instant,
    ) -> (Place, Vec<Ended>) {
        if hashed {
            self.hashed.inc();
        }
        let (place, evicted) = self.table().start(named, route, tenant, at);
        if let Some(gap) = place.gap {
            self.gaps.with_label_values(&[route]).observe(secs(gap));
        }
        (place, evicted)
    }

    /// The response of the request at `place` names its Responses API id.
    pub fn respond(&self, place: &mut Place, id: &str) {
        self.table().respond(place, id);
    }

    /// The request at `place` ended at `at`, adding `tally`, its tenant
    /// label final as `tenant`.
    pub fn finish(&self, place: &Place, at: Instant, tally: Tally, tenant: Option<Arc<str>>) {
        self.table().finish(place, at, tally, tenant);
    }

    /// The sessions idle past the timeout at `now`, ended.
    pub fn sweep(&self, now: Instant) -> Vec<Ended> {
        self.table().sweep(now)
    }

    /// Observes the figures of a session that ended at `at`; `currency`
    /// is the cost's.
    pub fn ended(&self, e: &Ended, currency: &str, at: Instant) {
        let f = &e.figures;
        let route: &str = &f.route;
        self.windows.route(route).ended(
            at,
            &SessionEnd {
                key: &e.key,
                tenant: &f.tenant,
                turns: f.turns,
                duration: f.duration(),
                model: f.model,
                gaps: f.gaps,
                gap_count: f.gap_count,
                tokens: f.tally.input_tokens + f.tally.output_tokens,
                gpu_seconds: f.tally.gpu_seconds,
                cost: f.tally.cost,
                currency,
                good: f.tally.good,
            },
        );
        self.ended.with_label_values(&[e.reason.as_str()]).inc();
        self.duration
            .with_label_values(&[route])
            .observe(secs(f.duration()));
        self.turns
            .with_label_values(&[route])
            .observe(f.turns as f64);
        self.model
            .with_label_values(&[route])
            .observe(secs(f.model));
        if f.tally.gpu_seconds > 0.0 {
            self.gpu_seconds
                .with_label_values(&[route])
                .observe(f.tally.gpu_seconds);
        }
        if let Some(cost) = f.tally.cost {
            self.cost
                .with_label_values(&[route, currency])
                .observe(cost);
        }
        let good = if f.tally.good { "true" } else { "false" };
        self.total
            .with_label_values(&[route, &f.tenant, good])
            .inc();
    }

    /// The windows of `route`'s turns and sessions, which each of its
    /// requests is told into when it ends.
    pub fn route_windows(&self, route: &str) -> Arc<RouteSessions> {
        self.windows.route(route)
    }

    /// Every route's sessions open now and its turns and sessions over
    /// the live windows at `now`.
    pub fn report(&self, now: Instant) -> SessionsReport {
        let active: Vec<(Arc<str>, u64)> = self.table().active().into_iter().collect();
        self.windows.report(now, &active)
    }

    /// The open sessions by route, for the exposition that follows.
    pub(super) fn refresh(&self) {
        let active = self.table().active();
        self.active.reset();
        for (route, n) in active {
            self.active
                .with_label_values(&[&route])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
