//! The proxy's own health, under `tokenmeter_`: what it reports of itself
//! ([`Occurrence`]s: unrouted, passthrough, refused and retried requests), its
//! listeners' connections, its configuration's reloads, the telemetry it
//! lost (log lines, OTLP), and its build. One owner that registers its
//! families, in four parts that each hold one concern.

use std::sync::OnceLock;

use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::register::Register;
use crate::observe::occurrence::{
    GatewayReasons, HandshakeFailure, Listener, Occurrence, Rejection, Shed,
};

/// The proxy's own families.
pub(super) struct Health {
    occurrences: Occurrences,
    connections: Connections,
    reloads: Reloads,
    losses: Losses,
}

/// What the proxy reports of requests it forwards without metering them,
/// or refuses.
struct Occurrences {
    unrouted: IntCounter,
    passthrough: IntCounterVec,
    rejected: IntCounterVec,
    declarations_refused: IntCounterVec,
    turns_unread: IntCounterVec,
    upstream_retries: IntCounterVec,
    gateway_shed: IntCounterVec,
    /// The `reason` values of `gateway_shed` so far.
    gateway_reasons: GatewayReasons,
}

/// The listeners' connections.
struct Connections {
    open: IntGaugeVec,
    max: IntGaugeVec,
    /// Requests whose body is read ahead, by route.
    receiving_body: IntGaugeVec,
    /// Indexed by `Shed as usize`, each series made at start.
    shed: [IntCounter; 3],
    /// By listener, then reason (their `ALL` order).
    tls_handshake_failures: [[IntCounter; 5]; 2],
}

/// The configuration's reloads.
struct Reloads {
    reloads: IntCounterVec,
    last_success: Gauge,
    last_successful: IntGauge,
}

/// The telemetry lost: log lines and OTLP.
struct Losses {
    log_lines_dropped: IntCounter,
    /// Where `log_lines_dropped` is read from at each exposition (the
    /// process's log writer), once the binary has set it.
    log_drops: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    otlp_dropped: IntCounterVec,
    otlp_failures: IntCounterVec,
}

impl Health {
    pub(super) fn register(r: Register<'_>) -> Result<Self, prometheus::Error> {
        let health = Health {
            occurrences: Occurrences {
                unrouted: r.counter(names::UNROUTED)?,
                passthrough: r.counters(names::PASSTHROUGH)?,
                rejected: r.counters(names::REJECTED)?,
                declarations_refused: r.counters(names::DECLARATIONS_REFUSED)?,
                turns_unread: r.counters(names::TURN_UNREAD)?,
                upstream_retries: r.counters(names::UPSTREAM_RETRIES)?,
                gateway_shed: r.counters(names::GATEWAY_SHED)?,
                gateway_reasons: GatewayReasons::default(),
            },
            connections: Connections {
                open: r.gauges(names::OPEN_CONNECTIONS)?,
                max: r.gauges(names::MAX_CONNECTIONS)?,
                receiving_body: r.gauges(names::RECEIVING_BODY)?,
                shed: {
                    let shed = r.counters(names::SHED_CONNECTIONS)?;
                    Shed::ALL.map(|reason| shed.with_label_values(&[reason.as_str()]))
                },
                tls_handshake_failures: {
                    let failed = r.counters(names::TLS_HANDSHAKE_FAILURES)?;
                    Listener::ALL.map(|listener| {
                        HandshakeFailure::ALL.map(|reason| {
                            failed.with_label_values(&[listener.as_str(), reason.as_str()])
                        })
                    })
                },
            },
            reloads: Reloads {
                reloads: r.counters(names::RELOADS)?,
                last_success: r.float_gauge(names::LAST_RELOAD_SUCCESS)?,
                last_successful: r.gauge(names::LAST_RELOAD_SUCCESSFUL)?,
            },
            losses: Losses {
                log_lines_dropped: r.counter(names::LOG_LINES_DROPPED)?,
                log_drops: OnceLock::new(),
                otlp_dropped: r.counters(names::OTLP_DROPPED)?,
                otlp_failures: r.counters(names::OTLP_EXPORT_FAILURES)?,
            },
        };
        for result in ["success", "failure"] {
            health.reloads.reloads.with_label_values(&[result]);
        }
        health.reloads.last_successful.set(1);
        r.gauges(names::BUILD_INFO)?
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        Ok(health)
    }

    /// Counts what the proxy reports of itself.
    pub(super) fn count(&self, occurrence: Occurrence<'_>) {
        let e = &self.occurrences;
        match occurrence {
            Occurrence::Unrouted => e.unrouted.inc(),
            Occurrence::Passthrough { route } => e.passthrough.with_label_values(&[route]).inc(),
            Occurrence::Rejected { route, reason } => e
                .rejected
                .with_label_values(&[route, reason.as_str()])
                .inc(),
            Occurrence::DeclarationRefused { route, objective } => e
                .declarations_refused
                .with_label_values(&[route, objective.as_str()])
                .inc(),
            Occurrence::TurnUnread { route } => {
                e.turns_unread.with_label_values(&[route]).inc();
            }
            Occurrence::Retried { route, race } => e
                .upstream_retries
                .with_label_values(&[route, race.as_str()])
                .inc(),
            Occurrence::ShedByGateway { route, reason } => e
                .gateway_shed
                .with_label_values(&[route, &e.gateway_reasons.label(reason)])
                .inc(),
            Occurrence::Shed(reason) => self.connections.shed[reason as usize].inc(),
            Occurrence::Handshake(listener, reason) => {
                self.connections.tls_handshake_failures[listener as usize][reason as usize].inc()
            }
        }
    }

    /// Makes the series of a route's own counters, at 0: its upstream's
    /// retries, and, when it limits its requests in flight (`limited`),
    /// its rejections.
    pub(super) fn declare_route(&self, route: &str, limited: bool) {
        for race in [h1::Race::Closed, h1::Race::Reset] {
            self.occurrences
                .upstream_retries
                .with_label_values(&[route, race.as_str()]);
        }
        if limited {
            self.occurrences
                .rejected
                .with_label_values(&[route, Rejection::MaxInFlight.as_str()]);
        }
    }

    /// The gauge of requests of `route` whose body is read ahead.
    pub(super) fn receiving_body(&self, route: &str) -> IntGauge {
        self.connections.receiving_body.with_label_values(&[route])
    }

    /// The gauge of `listener`'s open connections, its limit `max` set.
    pub(super) fn connections(&self, listener: &str, max: usize) -> IntGauge {
        let c = &self.connections;
        c.max
            .with_label_values(&[listener])
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        c.open.with_label_values(&[listener])
    }

    /// Counts a configuration reload; on success, `unix_time` is when the
    /// new config was loaded. Start-up counts as a success without
    /// counting a reload.
    pub(super) fn config_loaded(&self, reload: Option<bool>, unix_time: f64) {
        let r = &self.reloads;
        match reload {
            None => r.last_success.set(unix_time),
            Some(true) => {
                r.reloads.with_label_values(&["success"]).inc();
                r.last_success.set(unix_time);
                r.last_successful.set(1);
            }
            Some(false) => {
                r.reloads.with_label_values(&["failure"]).inc();
                r.last_successful.set(0);
            }
        }
    }

    /// Reads `tokenmeter_log_lines_dropped_total` from `dropped` (a
    /// running total) at each exposition. Only the first source set is
    /// used.
    pub(super) fn count_log_drops(&self, dropped: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.losses.log_drops.set(Box::new(dropped));
    }

    /// Brings the counters read from elsewhere up to date, for the
    /// exposition that follows.
    pub(super) fn refresh(&self) {
        let l = &self.losses;
        if let Some(dropped) = l.log_drops.get() {
            let (now, counted) = (dropped(), l.log_lines_dropped.get());
            if now > counted {
                l.log_lines_dropped.inc_by(now - counted);
            }
        }
    }

    /// The counters of what the OTLP export loses (each series made, so
    /// it reads 0 from the start).
    pub(super) fn otlp_counters(&self) -> crate::observe::otlp::Counters {
        let l = &self.losses;
        let dropped = |signal, reason| l.otlp_dropped.with_label_values(&[signal, reason]);
        crate::observe::otlp::Counters {
            metrics_queue_full: dropped("metrics", "queue_full"),
            traces_queue_full: dropped("traces", "queue_full"),
            traces_export_failed: dropped("traces", "export_failed"),
            metrics_failures: l.otlp_failures.with_label_values(&["metrics"]),
            traces_failures: l.otlp_failures.with_label_values(&["traces"]),
        }
    }
}
