//! What one request touches: its Prometheus recorder, with the label
//! handles resolved once, and its live series.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{Histogram, IntGauge};
use tokio::time::Instant;

use super::exemplars::{ExemplarId, Exemplified, SeriesExemplars};
use super::families::Families;
use crate::observe::request::Finished;
use meter::{ParseError, Summary};
use slo::aggregate::Aggregate;
use slo::live::{Live, Series};
use slo::sketch::Sketch;
use slo::{SloClass, Verdict};

/// Names not yet admitted to a label slot: each is, once the upstream
/// answers the request with a 2xx, if a slot is still free (so that names
/// clients make up, which upstreams refuse, never take the slots of real
/// ones). Until then the request is labelled `other` for it. Boxed: only
/// the first requests of a new name carry it.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) model: Option<String>,
    pub(super) tenant: Option<String>,
}

/// A request's live series, told when it starts and fed once when it
/// finishes (`/slo`, the error budget, the history).
pub struct LiveRequest {
    pub(super) series: Arc<Series>,
    /// The compliance window of the request's class, when it has one.
    pub(super) class_window: Option<Duration>,
    /// The series of its tenant's requests, once its tenant label is final.
    pub(super) tenant: Option<Arc<Series>>,
}

impl LiveRequest {
    /// The request's tenant label is final (at its response head, or at
    /// its end when no head came): from `now` it is in flight in that
    /// tenant's series too.
    pub fn start_tenant(&mut self, live: &Live, tenant: &str, now: Instant) {
        let series = live.tenant_series(&self.series, tenant);
        series.start(now);
        self.tenant = Some(series);
    }

    /// Whether its tenant's series is known.
    pub fn has_tenant(&self) -> bool {
        self.tenant.is_some()
    }

    /// Folds the finished request, with `itl`, the sketch of its ITL gaps
    /// gathered while it streamed, into its series (and its tenant's),
    /// under each series' lock.
    pub fn finish(&self, f: &Finished<'_>, itl: Sketch) {
        let s = f.summary;
        let request = Aggregate::request(s, f.judged.map(|(_, v)| v), itl, f.headers);
        let input_ttft = s.usage.input.zip(s.ttft.map(|d| d.as_secs_f64()));
        for series in std::iter::once(&self.series).chain(&self.tenant) {
            series.record(f.at, &request, self.class_window, input_ttft);
        }
    }
}

/// The Prometheus recorder of one request: handles of the series touched
/// while the stream flows are resolved up front; the rest are counted when
/// it finishes.
pub struct RequestRecorder {
    pub(super) families: Arc<Families>,
    /// The names waiting for a 2xx to be admitted as labels.
    pub(super) pending: Option<Box<Pending>>,
    /// The series observed while the stream flows; `None` only while a
    /// name the histograms carry is pending, until the response head.
    pub(super) handles: Option<Handles>,
    pub(super) in_flight: IntGauge,
    pub(super) route: String,
    pub(super) model: String,
    pub(super) slo: String,
    /// Empty when the route attributes no tenant.
    pub(super) tenant: String,
    /// What it asks of the model (`chat`, `embeddings`...).
    pub(super) operation: &'static str,
    /// What its exemplars name, when it can be found again.
    pub(super) exemplar: Option<ExemplarId>,
    /// Its largest ITL gap so far (seconds): the ITL exemplar.
    pub(super) max_gap: Option<f64>,
}

impl RequestRecorder {
    /// The `tenant` label of its counters (empty when its route has no
    /// tenant; `other` while its name is pending).
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The labels of the counters.
    pub(super) fn labels(&self) -> [&str; 5] {
        [
            &self.route,
            &self.model,
            &self.slo,
            &self.tenant,
            self.operation,
        ]
    }

    /// The labels of the histograms: the tenant only when asked for.
    pub fn histogram_labels(&self) -> [&str; 5] {
        let tenant = if self.families.tenant_histograms {
            self.tenant.as_str()
        } else {
            ""
        };
        [&self.route, &self.model, &self.slo, tenant, self.operation]
    }

    /// Whether the histograms' labels wait for a pending name.
    pub(super) fn histograms_wait(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| {
            p.model.is_some() || (self.families.tenant_histograms && p.tenant.is_some())
        })
    }

    pub(super) fn resolve_handles(&self) -> Handles {
        let labels = self.histogram_labels();
        let f = &self.families;
        let exemplars = self.exemplar.as_ref().map(|_| f.exemplars.series(&labels));
        Handles {
            ttft: f.ttft.with_label_values(&labels),
            headers: f.headers.with_label_values(&labels),
            itl: f.itl.with_label_values(&labels),
            tpot: f.tpot.with_label_values(&labels),
            e2el: f.e2el.with_label_values(&labels),
            exemplars,
        }
    }

    /// Makes this request the exemplar of `h`'s bucket of `value`, when it
    /// has an id.
    pub(super) fn exemplify(&self, h: Exemplified, value: f64) {
        let series = self.handles.as_ref().and_then(|h| h.exemplars.as_ref());
        if let (Some(id), Some(series)) = (&self.exemplar, series) {
            series.set(h, value, id);
        }
    }
}

pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `2xx`..`5xx`, or `none` when the client received no status.
pub fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        _ => "none",
    }
}

/// The histogram series of a request, resolved once.
pub(super) struct Handles {
    pub(super) ttft: Histogram,
    pub(super) headers: Histogram,
    pub(super) itl: Histogram,
    pub(super) tpot: Histogram,
    e2el: Histogram,
    /// The exemplars of its series, when the request has an id.
    pub(super) exemplars: Option<Arc<SeriesExemplars>>,
}

impl RequestRecorder {
    /// The upstream answered with `status`: each pending name is admitted
    /// on a 2xx (if a slot is free), and this request moves to its label;
    /// otherwise it stays `other`. Either way its stream's series are
    /// resolved here.
    pub(super) fn admit(&mut self, status: u16) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let answered = (200..300).contains(&status);
        let f = self.families.clone();
        if let Some(name) = pending.model {
            if answered && f.models.labeler.admit(&name) {
                let in_flight = f
                    .in_flight
                    .with_label_values(&[&self.route, &name, &self.slo]);
                in_flight.inc();
                self.in_flight.dec();
                self.in_flight = in_flight;
                self.model = name;
            } else {
                f.models.overflow.inc();
            }
        }
        if let Some(name) = pending.tenant {
            if answered && f.tenants.labeler.admit(&name) {
                self.tenant = name;
            } else {
                f.tenants.overflow.inc();
            }
        }
        if self.handles.is_none() {
            self.handles = Some(self.resolve_handles());
        }
    }
}

/// What the meter reports as the stream flows, observed on the handles
/// resolved for this request (atomics: no lock, no allocation).
impl RequestRecorder {
    pub fn response_headers(&mut self, elapsed: Duration, status: u16) {
        self.admit(status);
        if let Some(h) = &self.handles {
            h.headers.observe(secs(elapsed));
        }
    }

    pub fn first_visible_token(&mut self, ttft: Duration) {
        // Once per request, so resolving the handle here costs nothing per token.
        self.families
            .ttft_visible
            .with_label_values(&self.histogram_labels())
            .observe(secs(ttft));
    }

    pub fn first_token(&mut self, ttft: Duration) {
        if let Some(h) = &self.handles {
            h.ttft.observe(secs(ttft));
            self.exemplify(Exemplified::Ttft, secs(ttft));
        }
    }

    pub fn inter_token(&mut self, gap: Duration) {
        if let Some(h) = &self.handles {
            let gap = secs(gap);
            h.itl.observe(gap);
            if self.exemplar.is_some() && self.max_gap.is_none_or(|max| gap > max) {
                self.max_gap = Some(gap);
            }
        }
    }

    pub fn parse_error(&mut self, error: ParseError) {
        self.families
            .parse_errors
            .with_label_values(&[self.route.as_str(), error.kind()])
            .inc();
    }

    /// Counts the finished request and observes what its summary holds,
    /// and its verdict.
    pub fn finish(&mut self, finished: &Finished<'_>) {
        let s = finished.summary;
        self.in_flight.dec();
        if let Some(pending) = self.pending.take() {
            // Never admitted (no response head came): reported as `other`.
            if pending.model.is_some() {
                self.families.models.overflow.inc();
            }
            if pending.tenant.is_some() {
                self.families.tenants.overflow.inc();
            }
        }
        if self.handles.is_none() {
            self.handles = Some(self.resolve_handles());
        }
        if let Some(gap) = self.max_gap {
            self.exemplify(Exemplified::Itl, gap);
        }
        let labels = self.labels();
        let [route, model, slo, tenant, operation] = labels;
        let histogram = self.histogram_labels();
        let f = &self.families;
        f.requests
            .with_label_values(&[
                route,
                model,
                slo,
                tenant,
                operation,
                s.outcome.as_str(),
                status_class(s.status),
            ])
            .inc();
        let gaps = finished.gaps;
        if gaps.stalls > 0 {
            f.stalls
                .with_label_values(&labels)
                .inc_by(u64::from(gaps.stalls));
            f.stalled_seconds
                .with_label_values(&labels)
                .inc_by(gaps.stalled.as_secs_f64());
        }
        if !s.server.is_empty() {
            self.observe_server_phases(s);
        }
        if s.status.is_some() {
            f.client_wait
                .with_label_values(&histogram)
                .observe(secs(s.client_wait));
        }
        if let Some(d) = s.proxy_time {
            f.proxy_time.with_label_values(&histogram).observe(secs(d));
        }
        if finished.slow_reader {
            f.slow_readers.with_label_values(&labels).inc();
        }
        if let Some(h) = &self.handles {
            if let Some(d) = s.e2el {
                h.e2el.observe(secs(d));
                self.exemplify(Exemplified::E2el, secs(d));
            }
            if let Some(d) = s.tpot {
                h.tpot.observe(secs(d));
                self.exemplify(Exemplified::Tpot, secs(d));
            }
        }
        if let Some((n, source)) = s.output_tokens {
            f.output_tokens_total
                .with_label_values(&[route, model, slo, tenant, operation, source.as_str()])
                .inc_by(n);
            if s.e2el.is_some() {
                f.output_tokens
                    .with_label_values(&histogram)
                    .observe(n as f64);
            }
        }
        if let Some(n) = s.usage.input {
            f.input_tokens_total.with_label_values(&labels).inc_by(n);
            if s.e2el.is_some() {
                f.input_tokens
                    .with_label_values(&histogram)
                    .observe(n as f64);
            }
        }
        if let Some(n) = s.usage.cached_input {
            f.cached_input_tokens_total
                .with_label_values(&labels)
                .inc_by(n);
        }
        if let Some(n) = s.usage.reasoning {
            f.reasoning_output_tokens_total
                .with_label_values(&labels)
                .inc_by(n);
        }
        if let Some((class, verdict)) = finished.judged {
            self.count_verdict(class, verdict, s);
        }
    }
}

impl RequestRecorder {
    /// Observes the server's own phases of a request that reported any,
    /// and the time outside the engine (docs/metrics.md, "Where the time
    /// goes").
    fn observe_server_phases(&self, s: &Summary) {
        let f = &self.families;
        let histogram = self.histogram_labels();
        for (family, phase) in [
            (&f.server_queue, s.server.queue),
            (&f.server_prefill, s.server.prefill),
            (&f.server_decode, s.server.decode),
        ] {
            if let Some(seconds) = phase {
                family.with_label_values(&histogram).observe(seconds);
            }
        }
        match s.outside_engine() {
            Some(outside) if outside >= 0.0 => {
                f.outside_engine
                    .with_label_values(&histogram)
                    .observe(outside);
            }
            Some(_) => f
                .outside_engine_negative
                .with_label_values(&self.labels())
                .inc(),
            None => {}
        }
    }

    /// Counts the SLO verdict of a finished request. Every series of the
    /// class is touched, so good, bad and each objective read 0 (not
    /// absent) until something happens, and ratios are defined from the
    /// first request on.
    pub(super) fn count_verdict(&self, class: &SloClass, verdict: Verdict, s: &Summary) {
        let f = &self.families;
        let labels = self.labels();
        let [route, model, slo, tenant, operation] = labels;
        for label in ["good", "bad"] {
            let counter = f
                .slo_requests
                .with_label_values(&[route, model, slo, tenant, operation, label]);
            if verdict.label() == Some(label) {
                counter.inc();
            }
        }
        let violations = verdict.violations();
        for objective in &class.objectives {
            let kind = objective.kind;
            let counter = f.slo_violations.with_label_values(&[
                route,
                model,
                slo,
                tenant,
                operation,
                kind.as_str(),
            ]);
            if violations.contains(kind) {
                counter.inc();
            }
        }
        let good_tokens = f.slo_good_output_tokens.with_label_values(&labels);
        if let (Verdict::Good { .. }, Some((n, _))) = (verdict, s.output_tokens) {
            good_tokens.inc_by(n);
        }
    }
}
