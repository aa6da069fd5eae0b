//! The occupancy a metered request meets when it is sent: the requests in
//! flight to its route and model then, itself included, and, where the
//! route's engine is scraped, the engine's running and waiting requests
//! and KV-cache use at its latest fresh scrape. Its load, the one number
//! its latency–load curve counts it at (docs/metrics.md, "The
//! latency–load curve and its knee"), is read from it.
//!
//! Named apart from `load`, which in code means loading a file (the
//! configuration's `Config::load`).
//!
//! The requests in flight are counted per route and model label, across
//! classes and tenants, by the live windows' owner
//! (`metrics::windows`), with the one count type and its lock-free map.

use crate::scrape::{Latest, Page, Reading, Readings};
use slo::found::Found;
use slo::in_flight::InFlight;
use telemetry::EngineFigures;

/// What one request met when it was sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Occupancy {
    /// Requests in flight to its route and model label then, itself
    /// included.
    pub in_flight: u64,
    /// Its engine's figures, where the route's engine is scraped and the
    /// reading is fresh and names the model (or no model).
    pub engine: Option<EngineOccupancy>,
}

/// An engine's figures for one model at its latest fresh scrape, each
/// where its page has it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineOccupancy {
    pub running: Option<u64>,
    pub waiting: Option<u64>,
    /// A share, 0 to 1.
    pub kv_cache_usage: Option<f64>,
}

impl EngineOccupancy {
    /// `route`'s engine figures for `model` in `readings`, when its latest
    /// reading is fresh: the figures of the model the page names so, else
    /// those of a page that names no model (a server of one model), as
    /// [`Readings::engine_load`] reads them.
    pub fn of(readings: &Readings, route: &str, model: &str) -> Option<Self> {
        let latest = readings.latest(route, Page::Engine)?;
        Self::of_reading(&latest, model)
    }

    fn of_reading(latest: &Latest, model: &str) -> Option<Self> {
        let Reading::Engine(engine) = &latest.reading else {
            return None;
        };
        Some(Self::from(&engine.of_model(model)?.figures))
    }

    /// Running plus waiting, when both are known: the load the engine
    /// carries, every replica's requests and any other client's.
    pub fn requests(&self) -> Option<u64> {
        Some(self.running? + self.waiting?)
    }
}

impl From<&EngineFigures> for EngineOccupancy {
    fn from(f: &EngineFigures) -> Self {
        // Gauges of counts, written as floats by the servers' clients.
        let count = |v: Option<f64>| {
            v.filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v.round() as u64)
        };
        Self {
            running: count(f.running),
            waiting: count(f.waiting),
            kv_cache_usage: f.kv_cache_usage.filter(|v| v.is_finite()),
        }
    }
}

impl Occupancy {
    /// The load the request's curve counts it at: the engine's running
    /// plus waiting requests where both are known, else the requests in
    /// flight.
    pub fn curve(&self) -> u64 {
        self.engine
            .and_then(|e| e.requests())
            .unwrap_or(self.in_flight)
    }
}

/// The load on `route` and `model` now: the engine's running plus waiting
/// requests where its reading is fresh and has both, else the requests in
/// flight counted `by_model`. What the headroom is read against.
pub fn now(
    by_model: &Found<InFlight, 2>,
    readings: Option<&Readings>,
    route: &str,
    model: &str,
) -> u64 {
    readings
        .and_then(|r| EngineOccupancy::of(r, route, model))
        .and_then(|e| e.requests())
        .unwrap_or_else(|| by_model.find([route, model]).map_or(0, |c| c.now()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use telemetry::{EngineReading, ModelReading};
    use tokio::time::Instant;

    fn engine(models: Vec<ModelReading>) -> Latest {
        Latest {
            at: Instant::now(),
            reading: Reading::Engine(EngineReading {
                models,
                ..Default::default()
            }),
        }
    }

    fn model(name: Option<&str>, running: f64, waiting: Option<f64>) -> ModelReading {
        ModelReading {
            model: name.map(str::to_owned),
            figures: EngineFigures {
                running: Some(running),
                waiting,
                kv_cache_usage: Some(0.5),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_curve_reads_the_engine_where_it_has_both_counts() {
        let latest = engine(vec![
            model(Some("a"), 3.0, Some(2.0)),
            model(None, 1.0, None),
        ]);
        let a = EngineOccupancy::of_reading(&latest, "a").unwrap();
        assert_eq!(
            a,
            EngineOccupancy {
                running: Some(3),
                waiting: Some(2),
                kv_cache_usage: Some(0.5)
            }
        );
        let occupancy = Occupancy {
            in_flight: 1,
            engine: Some(a),
        };
        assert_eq!(occupancy.curve(), 5);
        // A model the page does not name reads the page's unnamed figures,
        // which lack the waiting count: the in-flight count it is.
        let b = EngineOccupancy::of_reading(&latest, "b").unwrap();
        assert_eq!(b.requests(), None);
        let occupancy = Occupancy {
            in_flight: 4,
            engine: Some(b),
        };
        assert_eq!(occupancy.curve(), 4);
        assert_eq!(Occupancy::default().curve(), 0);
        let named_only = engine(vec![model(Some("a"), 1.0, Some(0.0))]);
        assert_eq!(EngineOccupancy::of_reading(&named_only, "b"), None);
    }
}
