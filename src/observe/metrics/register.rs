//! How an owner of families registers them: each family named, labelled
//! and described by the catalogue ([`names`]), under the configured
//! namespace, into the registry the app composes.

use prometheus::core::Collector;
use prometheus::{
    CounterVec, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use names::Family;

/// The registry and namespace an owner registers its families in.
#[derive(Clone, Copy)]
pub(super) struct Register<'a> {
    pub(super) registry: &'a Registry,
    pub(super) namespace: &'a str,
}

impl Register<'_> {
    fn opts(&self, f: Family) -> Opts {
        Opts::new(f.name(self.namespace), f.help)
    }

    /// Registers `c`, and returns it.
    pub(super) fn add<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    pub(super) fn histograms(
        &self,
        f: Family,
        buckets: &[f64],
    ) -> Result<HistogramVec, prometheus::Error> {
        let opts = HistogramOpts::new(f.name(self.namespace), f.help).buckets(buckets.to_vec());
        self.add(HistogramVec::new(opts, f.labels)?)
    }

    pub(super) fn counters(&self, f: Family) -> Result<IntCounterVec, prometheus::Error> {
        self.add(IntCounterVec::new(self.opts(f), f.labels)?)
    }

    pub(super) fn float_counters(&self, f: Family) -> Result<CounterVec, prometheus::Error> {
        self.add(CounterVec::new(self.opts(f), f.labels)?)
    }

    pub(super) fn counter(&self, f: Family) -> Result<IntCounter, prometheus::Error> {
        self.add(IntCounter::new(f.name(self.namespace), f.help)?)
    }

    pub(super) fn gauges(&self, f: Family) -> Result<IntGaugeVec, prometheus::Error> {
        self.add(IntGaugeVec::new(self.opts(f), f.labels)?)
    }

    pub(super) fn float_gauges(&self, f: Family) -> Result<GaugeVec, prometheus::Error> {
        self.add(GaugeVec::new(self.opts(f), f.labels)?)
    }

    pub(super) fn gauge(&self, f: Family) -> Result<IntGauge, prometheus::Error> {
        self.add(IntGauge::new(f.name(self.namespace), f.help)?)
    }

    pub(super) fn float_gauge(&self, f: Family) -> Result<Gauge, prometheus::Error> {
        self.add(Gauge::new(f.name(self.namespace), f.help)?)
    }
}
