//! What one request touches: its Prometheus recorder, with the label
//! handles resolved once, and its live series.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::deferred::Deferred;
use super::exemplars::{ExemplarId, Exemplified};
use super::families::{Count, Counters, Families, Histograms, Later, STATUS_CLASS_LABELS};
use super::held::HeldItl;
use crate::observe::labels::Labels;
use crate::observe::request::Finished;
use meter::{ParseError, Summary};
use slo::aggregate::Aggregate;
use slo::capacity::{Capacity, LoadSample, knee};
use slo::live::sessions::RouteSessions;
use slo::live::{Live, LiveSeries};
use slo::sketch::Sketch;
use slo::{SloClass, Verdict};

/// A request's live series, told when it starts and fed once when it
/// finishes (`/slo`, the error budget, the history).
pub struct LiveRequest {
    pub(super) series: Arc<LiveSeries>,
    /// The compliance window of the request's class, when it has one.
    pub(super) class_window: Option<Duration>,
    /// The series of its tenant's requests, once its tenant label is final.
    pub(super) tenant: Option<Arc<LiveSeries>>,
    /// The latency–load curves, which a judged request is folded into by
    /// its load at arrival.
    pub(super) capacity: Arc<Capacity>,
    /// Its route's turns over the live windows.
    pub(super) turns: Arc<RouteSessions>,
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
        let usage = &s.usage;
        self.turns
            .turn(f.at, f.turn, s.ttft, usage.input, usage.cached_input);
        if let Some((class, verdict)) = f.judged
            && on_curve(f.labels, class)
            && let Some(sample) = LoadSample::new(class, s, verdict)
        {
            let l = f.labels;
            self.capacity.curve(l.route(), l.model(), l.slo()).record(
                f.at,
                f.occupancy.curve(),
                &sample,
            );
        }
    }
}

/// The Prometheus recorder of one request: the series of its histograms'
/// label set are found up front (once its labels are final), those of its
/// counters' label set when it finishes, each set once, without a lock
/// (`families.rs`). Its label values are the request's [`Labels`], which its
/// recorder (`RequestObserver`) holds and hands to each call that needs them.
pub struct RequestRecorder {
    pub(super) families: Arc<Families>,
    /// The series of its histograms' label set; `None` only while a name
    /// the histograms carry is pending, until the response head.
    pub(super) handles: Option<Arc<Histograms>>,
    /// What it observed after its response head while `handles` waited
    /// for the model its response names.
    pub(super) deferred: Option<Box<Deferred>>,
    /// Its ITL gaps not yet on its series, from its first gap (boxed: a
    /// forwarded body stays in its allocation size class).
    pub(super) itl: Option<Box<HeldItl>>,
    /// What its exemplars name, when it can be found again.
    pub(super) exemplar: Option<ExemplarId>,
    /// Its largest ITL gap so far (seconds): the ITL exemplar.
    pub(super) max_gap: Option<f64>,
}

impl RequestRecorder {
    pub(super) fn resolve_handles(&self, labels: &Labels) -> Arc<Histograms> {
        let f = &self.families;
        let labels = labels.histograms();
        f.histogram_series
            .get(labels, || Histograms::new(f, labels))
    }

    /// The series of the counters' label set of `labels`.
    fn counters(&self, labels: &Labels) -> Arc<Counters> {
        let labels = labels.counters();
        self.families
            .counter_series
            .get(labels, || Counters::new(labels))
    }

    /// Makes this request the exemplar of `h`'s bucket of `value`, when it
    /// has an id.
    pub(super) fn exemplify(&self, h: Exemplified, value: f64) {
        if let (Some(id), Some(series)) = (&self.exemplar, &self.handles) {
            series.exemplars(&self.families).set(h, value, id);
        }
    }
}

pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The index in [`STATUS_CLASS_LABELS`] of `status`'s class.
fn status_index(status: Option<u16>) -> usize {
    match status {
        Some(s @ 100..=599) => usize::from(s / 100 - 1),
        _ => 5,
    }
}

/// `2xx`..`5xx`, or `none` when the client received no status.
pub fn status_class(status: Option<u16>) -> &'static str {
    STATUS_CLASS_LABELS[status_index(status)]
}

/// What the meter reports as the stream flows, observed on the handles
/// resolved for this request (atomics, no lock), but for the ITL gaps,
/// which the request holds and publishes each second (`held.rs`).
impl RequestRecorder {
    /// The response head came `elapsed` after the request's, and the
    /// upstream's answer made `labels` final. The stream's series are
    /// resolved here if they waited for it.
    pub fn response_headers(&mut self, labels: &Labels, elapsed: Duration) {
        if self.handles.is_none() && !labels.histograms_wait() {
            self.handles = Some(self.resolve_handles(labels));
        }
        match &self.handles {
            Some(h) => h.headers.observe(secs(elapsed)),
            None => {
                self.deferred = Some(Box::new(Deferred {
                    headers: Some(secs(elapsed)),
                    ..Deferred::default()
                }));
            }
        }
    }

    /// The response named the model that `labels` now carry: its series
    /// are resolved, and what it observed while they waited is observed on
    /// them.
    pub fn labels_final(&mut self, labels: &Labels) {
        if self.handles.is_none() && !labels.histograms_wait() {
            self.handles = Some(self.resolve_handles(labels));
            self.replay();
        }
    }

    /// Observes on the resolved series what was deferred, and the ITL
    /// gaps held while they waited.
    fn replay(&mut self) {
        let Some(h) = &self.handles else {
            return;
        };
        if let Some(itl) = &mut self.itl {
            itl.publish(&self.families.histograms.itl_buckets, &h.itl);
        }
        let Some(d) = self.deferred.take() else {
            return;
        };
        if let Some(v) = d.headers {
            h.headers.observe(v);
        }
        if let Some(v) = d.ttft_visible {
            h.later(&self.families, Later::TtftVisible).observe(v);
        }
        if let Some(v) = d.ttft {
            h.ttft.observe(v);
            self.exemplify(Exemplified::Ttft, v);
        }
    }

    pub fn first_visible_token(&mut self, labels: &Labels, ttft: Duration) {
        if let Some(d) = self.deferred.as_mut().filter(|_| self.handles.is_none()) {
            d.ttft_visible = Some(secs(ttft));
            return;
        }
        let f = &self.families;
        match &self.handles {
            Some(h) => h.later(f, Later::TtftVisible).observe(secs(ttft)),
            // No response head yet (a first token comes after one): the
            // series of its labels as they stand.
            None => self
                .resolve_handles(labels)
                .later(f, Later::TtftVisible)
                .observe(secs(ttft)),
        }
    }

    pub fn first_token(&mut self, ttft: Duration) {
        if let Some(h) = &self.handles {
            h.ttft.observe(secs(ttft));
            self.exemplify(Exemplified::Ttft, secs(ttft));
        } else if let Some(d) = &mut self.deferred {
            d.ttft = Some(secs(ttft));
        }
    }

    /// A gap between token events: held in the request's own state, and
    /// published on its series once the gaps held span a second
    /// (`held.rs`).
    pub fn inter_token(&mut self, gap: Duration) {
        let gap = secs(gap);
        let bounds = &self.families.histograms.itl_buckets;
        let series = self.handles.as_ref().map(|h| &h.itl);
        let native = self.families.native;
        let itl = self
            .itl
            .get_or_insert_with(|| Box::new(HeldItl::new(native)));
        if itl.hold(bounds, series, gap)
            && let Some(series) = series
        {
            itl.publish(bounds, series);
        }
        if self.exemplar.is_some() && self.max_gap.is_none_or(|max| gap > max) {
            self.max_gap = Some(gap);
        }
    }

    pub fn parse_error(&mut self, labels: &Labels, error: ParseError) {
        self.families
            .parse_errors
            .with_label_values(&[labels.route(), error.kind()])
            .inc();
    }

    /// Counts the finished request and observes what its summary holds,
    /// and its verdict.
    pub fn finish(&mut self, finished: &Finished<'_>) {
        let s = finished.summary;
        let l = finished.labels;
        let h = match self.handles.clone() {
            Some(h) => h,
            None => {
                let h = self.resolve_handles(l);
                self.handles = Some(h.clone());
                h
            }
        };
        self.replay();
        if let Some(gap) = self.max_gap {
            self.exemplify(Exemplified::Itl, gap);
        }
        let f = &*self.families;
        let c = self.counters(l);
        c.requests(f, s.outcome, status_index(s.status)).inc();
        let gaps = finished.gaps;
        if gaps.stalls > 0 {
            c.count(f, Count::Stalls).inc_by(u64::from(gaps.stalls));
            c.stalled_seconds(f).inc_by(gaps.stalled.as_secs_f64());
        }
        if !s.server.is_empty() {
            observe_server_phases(f, &h, &c, s);
        }
        if s.status.is_some() {
            h.later(f, Later::ClientWait).observe(secs(s.client_wait));
        }
        if let Some(d) = s.proxy_time {
            h.later(f, Later::ProxyTime).observe(secs(d));
        }
        if finished.slow_reader {
            c.count(f, Count::SlowReaders).inc();
        }
        if let Some(d) = s.e2el {
            h.e2el.observe(secs(d));
            self.exemplify(Exemplified::E2el, secs(d));
        }
        if let Some(d) = s.tpot {
            h.tpot.observe(secs(d));
            self.exemplify(Exemplified::Tpot, secs(d));
        }
        if let Some((n, source)) = s.output_tokens {
            c.output_tokens(f, source).inc_by(n);
            if s.e2el.is_some() {
                h.later(f, Later::OutputTokens).observe(n as f64);
            }
        }
        if let Some(n) = s.usage.input {
            c.count(f, Count::InputTokens).inc_by(n);
            if s.e2el.is_some() {
                h.later(f, Later::InputTokens).observe(n as f64);
            }
        }
        if let Some(n) = s.usage.cached_input {
            c.count(f, Count::CachedInputTokens).inc_by(n);
        }
        if let Some(n) = s.usage.reasoning {
            c.count(f, Count::ReasoningOutputTokens).inc_by(n);
        }
        count_turn(f, finished);
        if let Some((class, verdict)) = finished.judged {
            count_verdict(f, &c, class, verdict, s);
            if on_curve(l, class) && verdict.label().is_some() {
                count_load(f, &c, class, verdict, finished.occupancy.curve());
            }
        }
    }
}

/// Counts the finished request under its kind of turn: its TTFT, and its
/// input and cached input tokens as the upstream reported them.
fn count_turn(f: &Families, finished: &Finished<'_>) {
    let (s, l, f) = (finished.summary, finished.labels, &f.turns);
    let t = f.series([l.route(), l.model(), l.slo(), finished.turn.as_str()]);
    t.requests(f).inc();
    if let Some(d) = s.ttft {
        t.ttft(f).observe(secs(d));
    }
    if let Some(n) = s.usage.input {
        t.prompt_tokens(f).inc_by(n);
    }
    if let Some(n) = s.usage.cached_input {
        t.cached_prompt_tokens(f).inc_by(n);
    }
}

/// Whether requests of `labels`, judged against `class`, are kept on a
/// latency–load curve: those of the classes of the SLO files that have a
/// target. A request judged against the bounds it declared has no target
/// to hold a bucket to.
fn on_curve(labels: &Labels, class: &SloClass) -> bool {
    labels.slo() != slo::declared::DECLARED
        && (!class.objectives.is_empty() || class.goodput.target.is_some())
}

/// Counts a judged request by the load it met at arrival, `load`: its
/// verdict and violations in the bucket of that load. Every series of the
/// bucket is touched, as [`count_verdict`] does, so that its ratios are
/// defined from its first request.
fn count_load(f: &Families, c: &Counters, class: &SloClass, verdict: Verdict, load: u64) {
    let bucket = knee::bucket_index(load).min(knee::BUCKETS - 1);
    for good in [true, false] {
        let counter = c.slo_load_requests(f, bucket, good);
        if verdict.label() == Some(if good { "good" } else { "bad" }) {
            counter.inc();
        }
    }
    let violations = verdict.violations();
    for objective in &class.objectives {
        let counter = c.slo_load_violations(f, bucket, objective.kind);
        if violations.contains(objective.kind) {
            counter.inc();
        }
    }
}

/// Observes the server's own phases of a request that reported any, and
/// the time outside the engine (docs/metrics.md, "Where the time goes").
fn observe_server_phases(f: &Families, h: &Histograms, c: &Counters, s: &Summary) {
    for (which, phase) in [
        (Later::ServerQueue, s.server.queue),
        (Later::ServerPrefill, s.server.prefill),
        (Later::ServerDecode, s.server.decode),
    ] {
        if let Some(seconds) = phase {
            h.later(f, which).observe(seconds);
        }
    }
    match s.outside_engine() {
        Some(outside) if outside >= 0.0 => h.later(f, Later::OutsideEngine).observe(outside),
        Some(_) => c.count(f, Count::OutsideEngineNegative).inc(),
        None => {}
    }
}

/// Counts the SLO verdict of a finished request. Every series of the class
/// is touched, so good, bad and each objective read 0 (not absent) until
/// something happens, and ratios are defined from the first request on.
fn count_verdict(f: &Families, c: &Counters, class: &SloClass, verdict: Verdict, s: &Summary) {
    for good in [true, false] {
        let counter = c.slo_requests(f, good);
        if verdict.label() == Some(if good { "good" } else { "bad" }) {
            counter.inc();
        }
    }
    let violations = verdict.violations();
    for objective in &class.objectives {
        let counter = c.slo_violations(f, objective.kind);
        if violations.contains(objective.kind) {
            counter.inc();
        }
    }
    let good_tokens = c.good_output_tokens(f);
    if let (Verdict::Good { .. }, Some((n, _))) = (verdict, s.output_tokens) {
        good_tokens.inc_by(n);
    }
}
