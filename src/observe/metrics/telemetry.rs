//! The routes' engines and GPUs as tokenmeter's own families: at each
//! exposition, the latest fresh reading of each target of the scraper in
//! force, under the names of docs/metrics.md ("Engine and GPU"), whatever
//! the server; the scrapes' failures and the GPU-seconds as counters; and
//! output tokens per GPU-second over the live windows.
//!
//! The figures are read when the exposition is asked for, never kept: a
//! gauge has a sample only while its target's reading is fresh, so a
//! figure of an endpoint gone wrong disappears rather than freezing. The
//! counters are this exporter's own, fed with what each scraper counted
//! since the last exposition: a reload that starts a new scraper (whose
//! counts start from 0) leaves them growing.
//!
//! Nothing here is on a request's path: the exposition reads the scraper's
//! store (atomic loads) and the live windows' report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, GaugeVec, IntCounterVec, Opts};
use tokio::time::Instant;

use slo::live::Live;
use telemetry::{GpuAggregate, Spread};

use crate::scrape::{Reading, Readings, Reason, Source};

use names::Family;

/// Where the readings of the scraper in force are found, at each
/// exposition (none when no route names an endpoint).
type ReadingsOf = Box<dyn Fn() -> Option<Readings> + Send + Sync>;

/// The families of the engines' and GPUs' figures, filled at each
/// exposition.
pub(super) struct Telemetry {
    readings: OnceLock<ReadingsOf>,
    /// The live windows, for output tokens per GPU-second.
    live: Arc<Live>,
    engine_info: GaugeVec,
    running: GaugeVec,
    waiting: GaugeVec,
    kv_cache: GaugeVec,
    prefix_hit: GaugeVec,
    gpus: GaugeVec,
    utilization: GaugeVec,
    framebuffer: GaugeVec,
    graphics: GaugeVec,
    sm: GaugeVec,
    dram: GaugeVec,
    good_per_gpu: GaugeVec,
    tokens_per_gpu: GaugeVec,
    gpu_seconds: CounterVec,
    failures: IntCounterVec,
    /// What was already added to the counters from the scraper last read;
    /// its lock also keeps two expositions from filling the gauges at once.
    counted: Mutex<Counted>,
}

/// The scraper's counts as of the last exposition.
#[derive(Default)]
struct Counted {
    /// [`Readings::id`] of the scraper they are of.
    scraper: u64,
    failures: HashMap<(Arc<str>, Source, Reason), u64>,
    gpu_seconds: HashMap<Arc<str>, f64>,
}

impl Telemetry {
    pub(super) fn new(namespace: &str, live: Arc<Live>) -> Result<Self, prometheus::Error> {
        let gauges = |f: Family| GaugeVec::new(Opts::new(f.name(namespace), f.help), f.labels);
        let f = names::GPU_SECONDS;
        let gpu_seconds = CounterVec::new(Opts::new(f.name(namespace), f.help), f.labels)?;
        let f = names::SCRAPE_FAILURES;
        let failures = IntCounterVec::new(Opts::new(f.name(namespace), f.help), f.labels)?;
        Ok(Self {
            readings: OnceLock::new(),
            live,
            engine_info: gauges(names::ENGINE_INFO)?,
            running: gauges(names::ENGINE_RUNNING)?,
            waiting: gauges(names::ENGINE_WAITING)?,
            kv_cache: gauges(names::ENGINE_KV_CACHE)?,
            prefix_hit: gauges(names::ENGINE_PREFIX_HIT)?,
            gpus: gauges(names::GPUS)?,
            utilization: gauges(names::GPU_UTILIZATION)?,
            framebuffer: gauges(names::GPU_FRAMEBUFFER_USED)?,
            graphics: gauges(names::GPU_GRAPHICS_ENGINE_ACTIVE)?,
            sm: gauges(names::GPU_SM_ACTIVE)?,
            dram: gauges(names::GPU_DRAM_ACTIVE)?,
            good_per_gpu: gauges(names::GOOD_TOKENS_PER_GPU_SECOND)?,
            tokens_per_gpu: gauges(names::TOKENS_PER_GPU_SECOND)?,
            gpu_seconds,
            failures,
            counted: Mutex::new(Counted::default()),
        })
    }

    /// Reads the scraper in force from `readings` at each exposition. Only
    /// the first source set is used.
    pub(super) fn read_from(
        &self,
        readings: impl Fn() -> Option<Readings> + Send + Sync + 'static,
    ) {
        let _ = self.readings.set(Box::new(readings));
    }

    fn gauges(&self) -> [&GaugeVec; 13] {
        [
            &self.engine_info,
            &self.running,
            &self.waiting,
            &self.kv_cache,
            &self.prefix_hit,
            &self.gpus,
            &self.utilization,
            &self.framebuffer,
            &self.graphics,
            &self.sm,
            &self.dram,
            &self.good_per_gpu,
            &self.tokens_per_gpu,
        ]
    }

    /// Every family with a sample, as last filled.
    fn families(&self) -> Vec<MetricFamily> {
        self.gauges()
            .into_iter()
            .flat_map(|g| g.collect())
            .chain(self.gpu_seconds.collect())
            .chain(self.failures.collect())
            .filter(|family| !family.get_metric().is_empty())
            .collect()
    }

    /// Fills every family from `readings` at `now`.
    fn fill(&self, counted: &mut Counted, readings: Option<&Readings>, now: Instant) {
        for gauge in self.gauges() {
            gauge.reset();
        }
        let Some(readings) = readings else {
            return;
        };
        self.count(counted, readings);
        let mut gpus: Vec<(Arc<str>, usize)> = Vec::new();
        for snapshot in readings.snapshot_at(now) {
            let route = &*snapshot.route;
            match &snapshot.latest.reading {
                Reading::Engine(engine) => {
                    if let Some(server) = engine.server {
                        self.engine_info
                            .with_label_values(&[route, server.as_str()])
                            .set(1.0);
                    }
                    for model in &engine.models {
                        let labels = [route, model.model.as_deref().unwrap_or("")];
                        let f = &model.figures;
                        for (family, value) in [
                            (&self.running, f.running),
                            (&self.waiting, f.waiting),
                            (&self.kv_cache, f.kv_cache_usage),
                            (&self.prefix_hit, f.prefix_cache_hit_rate),
                        ] {
                            if let Some(value) = value {
                                family.with_label_values(&labels).set(value);
                            }
                        }
                    }
                }
                Reading::Gpu(aggregate) => {
                    self.gpu_figures(route, aggregate);
                    gpus.push((snapshot.route.clone(), aggregate.count));
                }
            }
        }
        self.per_gpu(&gpus, now);
    }

    fn gpu_figures(&self, route: &str, a: &GpuAggregate) {
        self.gpus.with_label_values(&[route]).set(a.count as f64);
        const MIB: f64 = 1024.0 * 1024.0;
        for (family, spread, scale) in [
            (&self.utilization, a.utilization_percent, 0.01),
            (&self.framebuffer, a.framebuffer_used_mib, MIB),
            (&self.graphics, a.graphics_engine_active, 1.0),
            (&self.sm, a.sm_active, 1.0),
            (&self.dram, a.dram_active, 1.0),
        ] {
            let Spread { mean, max, .. } = spread;
            for (stat, value) in [("mean", mean), ("max", max)] {
                if let Some(value) = value {
                    family.with_label_values(&[route, stat]).set(value * scale);
                }
            }
        }
    }

    /// Output tokens per GPU-second over each live window, of each route
    /// whose GPUs are known: the window's token rates over the GPUs the
    /// route has now.
    fn per_gpu(&self, gpus: &[(Arc<str>, usize)], now: Instant) {
        if gpus.iter().all(|(_, count)| *count == 0) {
            return;
        }
        let report = self.live.report(now, "");
        for series in &report.series {
            let Some(count) = gpus
                .iter()
                .find(|(route, count)| **route == *series.route && *count > 0)
                .map(|(_, count)| *count as f64)
            else {
                continue;
            };
            for window in &series.windows {
                let labels = [series.route.as_str(), series.slo.as_str(), window.window];
                self.tokens_per_gpu
                    .with_label_values(&labels)
                    .set(window.output_token_rate / count);
                if let Some(goodput) = &window.goodput {
                    self.good_per_gpu
                        .with_label_values(&labels)
                        .set(goodput.token_rate / count);
                }
            }
        }
    }

    /// Adds to the counters what the scraper counted since the last
    /// exposition (all of it, for a scraper not read before).
    fn count(&self, counted: &mut Counted, readings: &Readings) {
        if counted.scraper != readings.id() {
            *counted = Counted {
                scraper: readings.id(),
                ..Counted::default()
            };
        }
        for failure in readings.failures() {
            let counter = self.failures.with_label_values(&[
                &failure.route,
                failure.source.as_str(),
                failure.reason.as_str(),
            ]);
            let key = (failure.route, failure.source, failure.reason);
            let before = counted.failures.insert(key, failure.count).unwrap_or(0);
            counter.inc_by(failure.count.saturating_sub(before));
        }
        for (route, seconds) in readings.gpu_seconds() {
            let counter = self.gpu_seconds.with_label_values(&[&route]);
            let before = counted.gpu_seconds.insert(route, seconds).unwrap_or(0.0);
            if seconds > before {
                counter.inc_by(seconds - before);
            }
        }
    }
}

/// The exporter as the registry holds it.
pub(super) struct Registered(pub(super) Arc<Telemetry>);

impl Collector for Registered {
    fn desc(&self) -> Vec<&Desc> {
        let t = &self.0;
        t.gauges()
            .into_iter()
            .flat_map(|g| g.desc())
            .chain(t.gpu_seconds.desc())
            .chain(t.failures.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let t = &self.0;
        let mut counted = t.counted.lock().unwrap_or_else(|e| e.into_inner());
        let readings = t.readings.get().and_then(|of| of());
        t.fill(&mut counted, readings.as_ref(), Instant::now());
        t.families()
    }
}

#[cfg(test)]
mod tests;
