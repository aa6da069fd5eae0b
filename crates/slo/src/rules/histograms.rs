//! Which histograms the generated rules, SLO objects and dashboard query,
//! and the PromQL each kind is read with.
//!
//! A classic histogram is a `<name>_bucket` series per bound, with
//! `<name>_count` and `<name>_sum`; a percentile needs `le` kept through
//! the sum, and a share within a bound needs that bound to be a bucket's.
//! A native histogram is one series under the histogram's own name:
//! `histogram_quantile` reads it without `le`, `histogram_count` and
//! `histogram_sum` give its count and sum, and `histogram_fraction`
//! gives the share of observations up to any bound, so a threshold need
//! not be a bucket edge. Prometheus ingests only the native form of a
//! histogram it scrapes natively (unless told to keep the classic one as
//! well), so the queries follow what the scraper stores.

use std::time::Duration;

/// The histograms queried: classic (the default, since Prometheus 3 still
/// leaves native histograms off) or native.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Histograms {
    #[default]
    Classic,
    Native,
}

impl Histograms {
    /// The `p` quantile of `metric{matchers}` rated over `window`, summed
    /// by `by` (a comma-separated list, possibly empty).
    pub fn quantile(self, p: &str, metric: &str, matchers: &str, by: &str, window: &str) -> String {
        match self {
            Histograms::Classic => {
                let by = if by.is_empty() {
                    "le".to_owned()
                } else {
                    format!("{by}, le")
                };
                format!(
                    "histogram_quantile({p}, sum by ({by}) (rate({metric}_bucket{{{matchers}}}[{window}])))"
                )
            }
            Histograms::Native => format!(
                "histogram_quantile({p}, {})",
                summed(by, &format!("rate({metric}{{{matchers}}}[{window}])"))
            ),
        }
    }

    /// The rate of the observations' sum, summed by `by`.
    pub fn sum_rate(self, metric: &str, matchers: &str, by: &str, window: &str) -> String {
        self.part("_sum", "histogram_sum", metric, matchers, by, window)
    }

    /// The rate of the observations' count, summed by `by`.
    pub fn count_rate(self, metric: &str, matchers: &str, by: &str, window: &str) -> String {
        self.part("_count", "histogram_count", metric, matchers, by, window)
    }

    fn part(
        self,
        suffix: &str,
        function: &str,
        metric: &str,
        matchers: &str,
        by: &str,
        window: &str,
    ) -> String {
        match self {
            Histograms::Classic => summed(
                by,
                &format!("rate({metric}{suffix}{{{matchers}}}[{window}])"),
            ),
            Histograms::Native => format!(
                "{function}({})",
                summed(by, &format!("rate({metric}{{{matchers}}}[{window}])"))
            ),
        }
    }

    /// The share of observations at or below `bound`, rated over `window`
    /// and summed by `by`: classic, the bucket of that bound (which must be
    /// one) over the count; native, `histogram_fraction` from 0, which
    /// interpolates within the bucket the bound falls in.
    pub fn fraction_within(
        self,
        bound: Duration,
        metric: &str,
        matchers: &str,
        by: &str,
        window: &str,
    ) -> String {
        let le = bound_label(bound);
        match self {
            Histograms::Classic => format!(
                "{}\n/\n{}",
                summed(
                    by,
                    &format!("rate({metric}_bucket{{{matchers},le=\"{le}\"}}[{window}])")
                ),
                self.count_rate(metric, matchers, by, window)
            ),
            Histograms::Native => format!(
                "histogram_fraction(0, {le}, {})",
                summed(by, &format!("rate({metric}{{{matchers}}}[{window}])"))
            ),
        }
    }

    /// What a heatmap of `metric{matchers}` shows: the increase of each
    /// bucket (classic, one series per `le`) or of the histogram (native,
    /// which Grafana draws from its own buckets).
    pub fn heatmap(self, metric: &str, matchers: &str, window: &str) -> String {
        match self {
            Histograms::Classic => {
                format!("sum by (le) (increase({metric}_bucket{{{matchers}}}[{window}]))")
            }
            Histograms::Native => format!("sum(increase({metric}{{{matchers}}}[{window}]))"),
        }
    }
}

/// `sum by (by) (inner)`, or `sum(inner)` when `by` is empty.
fn summed(by: &str, inner: &str) -> String {
    if by.is_empty() {
        format!("sum({inner})")
    } else {
        format!("sum by ({by}) ({inner})")
    }
}

/// A bound in seconds as the exporter writes its `le` label (`0.5`, `3`).
pub fn bound_label(bound: Duration) -> String {
    format!("{}", bound.as_secs_f64())
}

/// A duration as a Prometheus duration: the largest whole unit of days,
/// hours, minutes or seconds (`28d`, `6h`, `90s`), or milliseconds below
/// a whole second (`500ms`, Prometheus's finest unit, to which a finer
/// duration is rounded, at least 1ms).
pub fn prom_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        let ms = (d.as_secs_f64() * 1000.0).round().max(1.0);
        return format!("{ms}ms");
    }
    let s = d.as_secs().max(1);
    for (unit, secs) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s.is_multiple_of(secs) {
            return format!("{}{unit}", s / secs);
        }
    }
    format!("{s}s")
}
