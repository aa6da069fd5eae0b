//! The routes' engines and GPUs as tokenmeter's own families: at each
//! exposition, the latest fresh reading of each target of the scraper in
//! force, under the names of docs/metrics.md ("Engine and GPU"), whatever
//! the server; the scrapes' failures as counters (the GPU-seconds are
//! counted in `charges.rs`); and
//! output tokens per GPU-second over the live windows.
//!
//! The figures are read from the readings of the configuration in force,
//! which the exposition is handed (`Metrics::encode`), never kept: a
//! gauge has a sample only while its target's reading is fresh, so a
//! figure of an endpoint gone wrong disappears rather than freezing. The
//! counters are this exporter's own, fed with what each scraper counted
//! since the last exposition: a reload that starts a new scraper (whose
//! counts start from 0) leaves them growing.
//!
//! Nothing here is on a request's path: the exposition reads the scraper's
//! store (atomic loads) and the live windows' report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounterVec, Opts};
use tokio::time::Instant;

use slo::live::Live;
use telemetry::Spread;

use super::charges::{ChargePlan, FixedGpus};
use crate::scrape::{Page, Reading, Readings, Reason};

use names::Family;

/// The families of the engines' and GPUs' figures, filled at each
/// exposition.
pub(super) struct Engines {
    /// The live windows, for output tokens per GPU-second.
    live: Arc<Live>,
    engine: EngineGauges,
    gpu: GpuGauges,
    good_per_gpu: GaugeVec,
    tokens_per_gpu: GaugeVec,
    failures: IntCounterVec,
    /// What was already added to the counters from the scraper last read;
    /// its lock also keeps two expositions from filling the gauges at once.
    counted: Mutex<Counted>,
}

/// The engines' own figures, by route (and model).
struct EngineGauges {
    info: GaugeVec,
    running: GaugeVec,
    waiting: GaugeVec,
    kv_cache: GaugeVec,
    prefix_hit: GaugeVec,
}

/// The route's GPUs: their count, and each figure's mean and maximum.
struct GpuGauges {
    count: GaugeVec,
    utilization: GaugeVec,
    framebuffer: GaugeVec,
    graphics: GaugeVec,
    sm: GaugeVec,
    dram: GaugeVec,
}

/// The scraper's counts as of the last exposition.
#[derive(Default)]
struct Counted {
    /// [`Readings::id`] of the scraper they are of.
    scraper: u64,
    failures: HashMap<(Arc<str>, Page, Reason), u64>,
}

impl Engines {
    pub(super) fn new(namespace: &str, live: Arc<Live>) -> Result<Self, prometheus::Error> {
        let gauges = |f: Family| GaugeVec::new(Opts::new(f.name(namespace), f.help), f.labels);
        let f = names::SCRAPE_FAILURES;
        let failures = IntCounterVec::new(Opts::new(f.name(namespace), f.help), f.labels)?;
        Ok(Self {
            live,
            engine: EngineGauges {
                info: gauges(names::ENGINE_INFO)?,
                running: gauges(names::ENGINE_RUNNING)?,
                waiting: gauges(names::ENGINE_WAITING)?,
                kv_cache: gauges(names::ENGINE_KV_CACHE)?,
                prefix_hit: gauges(names::ENGINE_PREFIX_HIT)?,
            },
            gpu: GpuGauges {
                count: gauges(names::GPUS)?,
                utilization: gauges(names::GPU_UTILIZATION)?,
                framebuffer: gauges(names::GPU_FRAMEBUFFER_USED)?,
                graphics: gauges(names::GPU_GRAPHICS_ENGINE_ACTIVE)?,
                sm: gauges(names::GPU_SM_ACTIVE)?,
                dram: gauges(names::GPU_DRAM_ACTIVE)?,
            },
            good_per_gpu: gauges(names::GOOD_TOKENS_PER_GPU_SECOND)?,
            tokens_per_gpu: gauges(names::TOKENS_PER_GPU_SECOND)?,
            failures,
            counted: Mutex::new(Counted::default()),
        })
    }

    /// The exporter, its families registered with `r`.
    pub(super) fn register(
        r: super::register::Register<'_>,
        live: Arc<Live>,
    ) -> Result<Arc<Self>, prometheus::Error> {
        let telemetry = Arc::new(Self::new(r.namespace, live)?);
        r.registry
            .register(Box::new(EnginesCollector(telemetry.clone())))?;
        Ok(telemetry)
    }

    /// Fills the families from `readings` (those of the configuration in
    /// force; `None` when no route names an endpoint) at `now`, for the
    /// exposition that follows.
    pub(super) fn refresh(&self, readings: Option<&Readings>, fixed: &[FixedGpus], now: Instant) {
        let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        self.fill(&mut counted, readings, fixed, now);
    }

    fn gauges(&self) -> [&GaugeVec; 13] {
        let (e, g) = (&self.engine, &self.gpu);
        [
            &e.info,
            &e.running,
            &e.waiting,
            &e.kv_cache,
            &e.prefix_hit,
            &g.count,
            &g.utilization,
            &g.framebuffer,
            &g.graphics,
            &g.sm,
            &g.dram,
            &self.good_per_gpu,
            &self.tokens_per_gpu,
        ]
    }

    /// Every family with a sample, as last filled.
    fn families(&self) -> Vec<MetricFamily> {
        self.gauges()
            .into_iter()
            .flat_map(|g| g.collect())
            .chain(self.failures.collect())
            .filter(|family| !family.get_metric().is_empty())
            .collect()
    }

    /// Fills every family from `readings` and the routes of `fixed` GPUs
    /// at `now`.
    fn fill(
        &self,
        counted: &mut Counted,
        readings: Option<&Readings>,
        fixed: &[FixedGpus],
        now: Instant,
    ) {
        for gauge in self.gauges() {
            gauge.reset();
        }
        if let Some(readings) = readings {
            self.count(counted, readings);
        }
        for route in self.report(readings, fixed, now).routes {
            let name = route.route.as_str();
            if let Some(engine) = &route.engine {
                self.engine
                    .info
                    .with_label_values(&[name, engine.server])
                    .set(1.0);
                for m in &engine.models {
                    let labels = [name, m.model.as_str()];
                    for (family, value) in [
                        (&self.engine.running, m.running),
                        (&self.engine.waiting, m.waiting),
                        (&self.engine.kv_cache, m.kv_cache_usage_ratio),
                        (&self.engine.prefix_hit, m.prefix_cache_hit_ratio),
                    ] {
                        if let Some(value) = value {
                            family.with_label_values(&labels).set(value);
                        }
                    }
                }
            }
            if let Some(gpus) = &route.gpus {
                let g = &self.gpu;
                g.count.with_label_values(&[name]).set(gpus.count as f64);
                for (family, figure) in [
                    (&g.utilization, gpus.utilization_ratio),
                    (&g.framebuffer, gpus.framebuffer_used_bytes),
                    (&g.graphics, gpus.graphics_engine_active_ratio),
                    (&g.sm, gpus.sm_active_ratio),
                    (&g.dram, gpus.dram_active_ratio),
                ] {
                    for (stat, value) in [("mean", figure.mean), ("max", figure.max)] {
                        if let Some(value) = value {
                            family.with_label_values(&[name, stat]).set(value);
                        }
                    }
                }
            }
            for rate in &route.per_gpu_second {
                let labels = [name, rate.slo.as_str(), rate.window];
                self.tokens_per_gpu
                    .with_label_values(&labels)
                    .set(rate.output_tokens);
                if let Some(good) = rate.good_output_tokens {
                    self.good_per_gpu.with_label_values(&labels).set(good);
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
                failure.page.as_str(),
                failure.reason.as_str(),
            ]);
            let key = (failure.route, failure.page, failure.reason);
            let before = counted.failures.insert(key, failure.count).unwrap_or(0);
            counter.inc_by(failure.count.saturating_sub(before));
        }
    }
}

/// The engines' and GPUs' figures of each route, as `/slo` and the live
/// page may show them: what the families hold at this moment, by route.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq)]
pub struct TelemetryReport {
    pub routes: Vec<RouteTelemetry>,
}

/// One route's fresh figures; a part with no fresh reading is `None`.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct RouteTelemetry {
    pub route: String,
    pub engine: Option<EngineView>,
    pub gpus: Option<GpuView>,
    /// Output tokens per GPU-second over each live window, per class.
    pub per_gpu_second: Vec<PerGpuSecond>,
}

#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct EngineView {
    /// `vllm`, `sglang`, `tgi` or `llamacpp`.
    pub server: &'static str,
    pub models: Vec<EngineModelView>,
}

#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct EngineModelView {
    /// As the server labels it; empty for a server of one model.
    pub model: String,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_cache_usage_ratio: Option<f64>,
    pub prefix_cache_hit_ratio: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct GpuView {
    pub count: usize,
    pub utilization_ratio: MeanMax,
    pub framebuffer_used_bytes: MeanMax,
    pub graphics_engine_active_ratio: MeanMax,
    pub sm_active_ratio: MeanMax,
    pub dram_active_ratio: MeanMax,
}

/// A figure over the route's GPUs: the mean over those that report it and
/// the busiest's; both `None` when none does.
#[derive(Debug, Clone, Copy, serde::Serialize, PartialEq)]
pub struct MeanMax {
    pub mean: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct PerGpuSecond {
    pub slo: String,
    pub window: &'static str,
    /// `None` for requests of no class, which are not judged.
    pub good_output_tokens: Option<f64>,
    pub output_tokens: f64,
}

impl Engines {
    /// The fresh figures of `readings` (the configuration in force's; `None`
    /// when no route names an endpoint) at `now`, by route (in the order of
    /// their targets), then the routes of `fixed` GPUs (their count, no
    /// figure), with output tokens per GPU-second over the live windows of
    /// each route whose GPUs are known: the window's token rates over the
    /// GPUs the route has now.
    pub(super) fn report(
        &self,
        readings: Option<&Readings>,
        fixed: &[FixedGpus],
        now: Instant,
    ) -> TelemetryReport {
        let mut routes: Vec<RouteTelemetry> = Vec::new();
        let snapshots = readings.map(|r| r.snapshot_at(now)).unwrap_or_default();
        for snapshot in snapshots {
            let at = match routes.iter().position(|r| *r.route == *snapshot.route) {
                Some(at) => at,
                None => {
                    routes.push(RouteTelemetry {
                        route: snapshot.route.to_string(),
                        engine: None,
                        gpus: None,
                        per_gpu_second: Vec::new(),
                    });
                    routes.len() - 1
                }
            };
            let route = &mut routes[at];
            match &snapshot.latest.reading {
                Reading::Engine(engine) => {
                    route.engine = engine.server.map(|server| EngineView {
                        server: server.as_str(),
                        models: engine
                            .models
                            .iter()
                            .map(|m| EngineModelView {
                                model: m.model.clone().unwrap_or_default(),
                                running: m.figures.running,
                                waiting: m.figures.waiting,
                                kv_cache_usage_ratio: m.figures.kv_cache_usage,
                                prefix_cache_hit_ratio: m.figures.prefix_cache_hit_rate,
                            })
                            .collect(),
                    });
                }
                Reading::Gpu(a) => {
                    let view = |s: Spread, scale: f64| MeanMax {
                        mean: s.mean.map(|v| v * scale),
                        max: s.max.map(|v| v * scale),
                    };
                    route.gpus = Some(GpuView {
                        count: a.count,
                        utilization_ratio: view(a.utilization_percent, 0.01),
                        framebuffer_used_bytes: view(a.framebuffer_used_mib, 1024.0 * 1024.0),
                        graphics_engine_active_ratio: view(a.graphics_engine_active, 1.0),
                        sm_active_ratio: view(a.sm_active, 1.0),
                        dram_active_ratio: view(a.dram_active, 1.0),
                    });
                }
            }
        }
        // A route with counted GPUs may have its engine scraped: one entry.
        for (route, count) in fixed {
            let counted = Some(GpuView::counted(*count as usize));
            match routes.iter_mut().find(|r| *r.route == **route) {
                Some(scraped) => scraped.gpus = counted,
                None => routes.push(RouteTelemetry {
                    route: route.to_string(),
                    engine: None,
                    gpus: counted,
                    per_gpu_second: Vec::new(),
                }),
            }
        }
        if routes
            .iter()
            .any(|r| r.gpus.as_ref().is_some_and(|g| g.count > 0))
        {
            let live = self.live.report(now, "");
            for route in &mut routes {
                let Some(count) = route.gpus.as_ref().map(|g| g.count).filter(|n| *n > 0) else {
                    continue;
                };
                for series in live.series.iter().filter(|s| s.route == route.route) {
                    for window in &series.windows {
                        route.per_gpu_second.push(PerGpuSecond {
                            slo: series.slo.clone(),
                            window: window.window,
                            good_output_tokens: window
                                .goodput
                                .as_ref()
                                .map(|g| g.token_rate / count as f64),
                            output_tokens: window.output_token_rate / count as f64,
                        });
                    }
                }
            }
        }
        TelemetryReport { routes }
    }
}

/// The engines and GPUs of the snapshot in force, as the exposition and
/// `/slo` read them: the latest readings of its scrapes (`None` when no
/// route names a page), the routes whose GPUs it counts, and the ledgers
/// of its routes with GPUs.
#[derive(Clone, Copy, Default)]
pub struct EngineSources<'a> {
    pub readings: Option<&'a Readings>,
    pub fixed: &'a [FixedGpus],
    /// Its ledgers, whose families the exposition fills.
    pub charges: Option<&'a ChargePlan>,
}

impl GpuView {
    /// `count` GPUs whose figures are unknown.
    fn counted(count: usize) -> Self {
        let unknown = MeanMax {
            mean: None,
            max: None,
        };
        Self {
            count,
            utilization_ratio: unknown,
            framebuffer_used_bytes: unknown,
            graphics_engine_active_ratio: unknown,
            sm_active_ratio: unknown,
            dram_active_ratio: unknown,
        }
    }
}

/// The exporter as the registry holds it.
pub(super) struct EnginesCollector(pub(super) Arc<Engines>);

impl Collector for EnginesCollector {
    fn desc(&self) -> Vec<&Desc> {
        let t = &self.0;
        t.gauges()
            .into_iter()
            .flat_map(|g| g.desc())
            .chain(t.failures.desc())
            .collect()
    }

    /// The families as the exposition's [`Engines::refresh`] filled them.
    fn collect(&self) -> Vec<MetricFamily> {
        self.0.families()
    }
}

#[cfg(test)]
mod tests;
