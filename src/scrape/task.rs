//! The task of one target: a scrape every interval, its reading or its
//! failure into the target's slot, and a log line per episode of failure.
//!
//! The page is parsed on the blocking pool: a page of a few MiB takes
//! milliseconds to read, time the runtime's threads owe to forwarding.

use std::sync::Arc;

use telemetry::{Limits, parse, read_engine, read_gpus};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::fetch::Endpoint;
use super::store::{Latest, Reading, TargetState};
use super::target::{Failure, Kind, Target};

/// What the task of one target needs.
pub(super) struct Job {
    pub(super) target: Target,
    pub(super) endpoint: Endpoint,
    /// The target's slot in the store (the store is shared: `slot` indexes
    /// it).
    pub(super) slots: Arc<[TargetState]>,
    pub(super) slot: usize,
}

impl Job {
    /// Scrapes until `stop` fires.
    pub(super) async fn run(self, stop: CancellationToken) {
        let Some(slot) = self.slots.get(self.slot) else {
            return;
        };
        let interval = self.target.interval;
        let spread = interval / 10;
        let first = spread.mul_f64(fastrand::f64());
        let mut ticks = tokio::time::interval_at(Instant::now() + first, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut failing = false;
        // The engine's previous reading, of which the prefix cache's
        // counters give the hit rate over the span since.
        let mut previous: Option<telemetry::EngineReading> = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.scrape() => outcome,
            };
            let now = Instant::now();
            match outcome {
                Ok(reading) => {
                    let reading = match reading {
                        Reading::Engine(engine) => {
                            let engine = engine.with_hit_rates_since(previous.as_ref());
                            previous = Some(engine.clone());
                            Reading::Engine(engine)
                        }
                        gpu @ Reading::Gpu(_) => gpu,
                    };
                    slot.store(Latest { at: now, reading });
                    if failing {
                        failing = false;
                        tracing::info!(
                            route = %self.target.route,
                            source = slot.page.as_str(),
                            url = %self.target.shown_url,
                            "scrape recovered"
                        );
                    }
                }
                Err(failure) => {
                    slot.fail(failure.reason(), now);
                    if !failing {
                        failing = true;
                        tracing::warn!(
                            route = %self.target.route,
                            source = slot.page.as_str(),
                            url = %self.target.shown_url,
                            reason = failure.reason().as_str(),
                            error = %Chain(&failure),
                            "scrape failing; its figures are removed after {} intervals",
                            super::target::STALE_AFTER_INTERVALS
                        );
                    } else {
                        tracing::debug!(
                            route = %self.target.route,
                            source = slot.page.as_str(),
                            reason = failure.reason().as_str(),
                            error = %Chain(&failure),
                            "scrape failed"
                        );
                    }
                }
            }
            slot.attempted();
        }
    }

    /// One scrape, within the target's timeout.
    async fn scrape(&self) -> Result<Reading, Failure> {
        let timeout = self.target.timeout;
        let fetch = self.endpoint.fetch(self.target.max_body);
        let body = tokio::time::timeout(timeout, fetch)
            .await
            .map_err(|_| Failure::Timeout(timeout))??;
        let kind = self.target.kind.clone();
        tokio::task::spawn_blocking(move || read(&body, &kind))
            .await
            .map_err(Failure::Reader)?
    }
}

/// The page's reading, or why it has none.
fn read(body: &[u8], kind: &Kind) -> Result<Reading, Failure> {
    let page = parse(body, &Limits::default()).map_err(Failure::Parse)?;
    match kind {
        Kind::Engine => {
            let engine = read_engine(&page);
            if engine.server.is_none() {
                return Err(Failure::Unrecognized("inference server's figures"));
            }
            Ok(Reading::Engine(engine))
        }
        Kind::Gpu(selector) => {
            let gpus = read_gpus(&page);
            if gpus.gpus.is_empty() {
                return Err(Failure::Unrecognized("GPU"));
            }
            Ok(Reading::Gpu(gpus.aggregate(selector)))
        }
    }
}

/// An error and its causes, on one line.
struct Chain<'a>(&'a dyn std::error::Error);

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}
