//! The recorder of a metered request, and the one fan-out of its end.
//!
//! The meter reports to one recorder per request, [`RequestObserver`]. As the
//! stream flows it touches only what the request owns: its resolved
//! Prometheus handles (atomics) and its own sketch of ITL gaps, so a token
//! takes no shared lock and allocates nothing. When the request finishes
//! (exactly once: the meter takes its recorder with `Option::take`), it is
//! judged against its SLO class once, and the finished request
//! ([`Finished`]: summary, verdict, time to headers, the moment it ended)
//! is handed to each observer in turn: the Prometheus recorder, the live
//! series (with the ITL sketch), the access log, and the OpenTelemetry
//! export's queue (never waited for). Its exemplars name its trace, else
//! its `x-request-id`.
//!
//! The observers are values the wiring owns ([`Observers`], made by `app`
//! and held by the `Proxy`): the metrics (whose registry and live windows the admin
//! listener reads), when the process logs, the access log's writer, and,
//! when configured, the OTLP export; with them, the [`Policy`] of the
//! configuration in force and the readings of its engines. A request's
//! SLO class, tenant and labels are
//! resolved once, when it starts ([`Observers::request`]), with the
//! occupancy it meets then (`occupancy.rs`), and made final when the upstream answers
//! (and, for a request that named no model, when its response names one);
//! every observer reads the same [`Labels`] and occupancy.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use http::HeaderMap;

use super::access::{AccessLog, Entry, REQUEST_ID_HEADER};
use super::class::Policy;
use super::labels::Labels;
use super::metrics::{
    ChargePlan, ExemplarId, LiveRequest, Metrics, ReceivingBody, RequestRecorder, Sessions,
};
use super::occupancy::{EngineOccupancy, Occupancy};
use super::occurrence::Occurrence;
use super::otlp::{Exported, Otlp};
use super::request::{Finished, Gaps, Started};
use super::sessions::{self, Ended, Place as SessionPlace, Tally};
use super::tab::Tab;
use super::trace::Trace;
use crate::config::Config;
use crate::scrape::Readings;
use meter::{ParseError, Recorder, Summary};
use slo::SloClass;
use slo::live::Live;
use slo::sketch::Sketch;

/// Everything that observes requests, shared by every request of a proxy
/// (and kept across reloads), with the policy of the proxy's
/// configuration.
#[derive(Clone)]
pub struct Observers {
    metrics: Arc<Metrics>,
    /// `None` when the process writes no access log (the library used on
    /// its own).
    access: Option<Arc<AccessLog>>,
    /// The OpenTelemetry export, when configured.
    otlp: Option<Arc<Otlp>>,
    /// What the configuration in force says of how its requests are
    /// observed.
    policy: Arc<Policy>,
    /// The latest readings of the routes' engines and GPUs in force, when
    /// any route names one: a request's load at arrival reads them.
    readings: Option<Readings>,
    /// The configuration's routes with GPUs, where a request opens its
    /// tab.
    charges: ChargePlan,
}

impl Observers {
    /// The observers, with the default policy until they are
    /// [`configured`](Self::configured).
    pub fn new(metrics: Arc<Metrics>, access: Option<AccessLog>, otlp: Option<Arc<Otlp>>) -> Self {
        Self {
            metrics,
            access: access.map(Arc::new),
            otlp,
            policy: Arc::default(),
            readings: None,
            charges: ChargePlan::default(),
        }
    }

    /// The same observers, for the requests of `config`, whose engines
    /// and GPUs are read from `readings` (none when `None`), charged as
    /// `charges` (its plan) says.
    pub fn configured(
        &self,
        config: &Config,
        readings: Option<&Readings>,
        charges: ChargePlan,
    ) -> Self {
        Self {
            policy: Arc::new(Policy::of(config)),
            readings: readings.cloned(),
            charges,
            ..self.clone()
        }
    }

    /// The trace of a metered request with `headers`, which are rewritten
    /// for the upstream as the configuration's `trace_context` asks.
    pub fn trace(&self, headers: &mut HeaderMap) -> Option<Trace> {
        Trace::of_request(self.policy.trace_context, headers)
    }

    /// The metrics the observers record into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Counts what the proxy reports of itself.
    pub fn count(&self, occurrence: Occurrence<'_>) {
        self.metrics.count(occurrence);
    }

    /// Tells the observers of a route in force, so that its own counters
    /// read 0 from the start: its upstream's retries and, when it limits
    /// its requests in flight, its rejections.
    pub fn declare_route(&self, route: &crate::config::Route) {
        self.metrics
            .declare_route(&route.name, route.max_in_flight.is_some());
    }

    /// Counts a request whose body is read ahead, until the guard drops.
    pub fn receiving_body(&self, route: &str) -> ReceivingBody {
        self.metrics.receiving_body(route)
    }

    /// The place of a request of `labels` in its session, when it names
    /// one and sessions are followed; the sessions a full table evicted to
    /// hold it end here.
    fn session(&self, r: &Started<'_>, labels: &Labels) -> Option<(Arc<Sessions>, SessionPlace)> {
        let keys = self.policy.session_keys.as_deref()?;
        let (named, hashed) = sessions::key_of(keys, &r.parts.headers, r.body, r.api);
        let named = named?;
        let sessions = self.metrics.sessions();
        let route: Arc<str> = labels.route().into();
        let tenant: Arc<str> = labels.tenant().into();
        let (place, evicted) = sessions.start(named, hashed, &route, &tenant, r.at);
        for ended in &evicted {
            self.session_ended(ended, r.at);
        }
        Some((sessions.clone(), place))
    }

    /// Observes a session that ended at `at`: its families, its windows
    /// and its line.
    pub fn session_ended(&self, ended: &Ended, at: Instant) {
        let currency = self.charges.currency();
        self.metrics.sessions().ended(ended, currency, at);
        if let Some(access) = &self.access {
            access.session(ended, currency);
        }
    }

    /// Ends the sessions idle past their timeout at `now`.
    pub fn sweep_sessions(&self, now: Instant) {
        for ended in self.metrics.sessions().sweep(now) {
            self.session_ended(&ended, now);
        }
    }

    /// The recorder of a request that starts now: its SLO class, tenant
    /// and labels resolved, counted in flight in the metrics and in its
    /// live series.
    pub fn request(&self, r: Started<'_>) -> RequestObserver {
        let route = &r.route.name;
        let headers = &r.parts.headers;
        let operation = r.api.operation(r.parts.uri.path());
        let chosen = self
            .policy
            .choose(r.route, headers, r.model(), operation, |objective| {
                self.count(Occurrence::DeclarationRefused { route, objective });
            });
        let tenant = r
            .route
            .tenant
            .as_ref()
            .map(|source| super::tenant::of_request(source, headers));
        let labels = Labels::resolve(
            self.metrics.bounds(),
            route,
            r.model(),
            chosen.label,
            tenant,
            operation,
        );
        // Exemplars name the request's trace, else the id its client gave.
        let exemplar = match r.trace {
            Some(t) => Some(ExemplarId::Trace(t.trace_id.0)),
            None => headers
                .get(REQUEST_ID_HEADER)
                .and_then(|id| ExemplarId::request(id.as_bytes())),
        };
        // Its kind of turn; a body of an API with conversations that could
        // not be read is counted, under `none`.
        let turn = r.body.map_or(meter::Turn::None, |b| b.turn);
        if meter::has_conversations(r.api) && r.body.is_none_or(|b| b.unreadable) {
            self.count(Occurrence::TurnUnread { route });
        }
        let session = self.session(&r, &labels);
        let prometheus = self.metrics.request(&labels, exemplar);
        // Its tab: in flight from now on, and charged its share of its
        // route's GPUs. Its load at arrival: the requests in flight by
        // route and model label now, itself included, and the engine's
        // figures where it is scraped.
        let (tab, count) = Tab::open(
            self.metrics.concurrency(),
            &self.charges,
            &labels,
            Instant::now(),
        );
        let occupancy = Occupancy {
            in_flight: count,
            engine: self
                .readings
                .as_ref()
                .and_then(|r| EngineOccupancy::of(r, route, labels.model())),
        };
        let class = chosen.class;
        let live = self
            .metrics
            .live_request(&labels, class.as_ref().map(|c| c.window));
        let access = self
            .access
            .as_ref()
            .map(|log| (log.clone(), Entry::new(&r, tenant)));
        let otlp = self
            .otlp
            .as_ref()
            .map(|otlp| Box::new(Exported::new(otlp, &r)));
        RequestObserver {
            labels,
            prometheus,
            live,
            tenants: tenant.map(|_| self.metrics.live().clone()),
            access,
            otlp,
            class,
            headers: None,
            itl: Sketch::new(),
            gaps: Gaps::default(),
            occupancy,
            tab,
            turn,
            session,
            stall_threshold: self.policy.stall_threshold,
            slow_reader_share: self.policy.slow_reader_share,
        }
    }
}

#[cfg(test)]
impl Observers {
    /// Observers of a registry of their own, with the default metrics
    /// settings, no access log and no export.
    pub(crate) fn detached() -> Self {
        let metrics = Metrics::new(
            &crate::config::MetricsSettings::default(),
            &[],
            prometheus::Registry::new(),
        )
        .unwrap();
        Self::new(Arc::new(metrics), None, None)
    }
}

/// The recorder of one metered request: what it observes as it flows, and
/// the fan-out of its end.
pub struct RequestObserver {
    /// Its labels, which every observer reads.
    labels: Labels,
    prometheus: RequestRecorder,
    live: LiveRequest,
    /// For a request with a tenant: the live windows that hold its
    /// tenant's series.
    tenants: Option<Arc<Live>>,
    access: Option<(Arc<AccessLog>, Entry)>,
    /// What the OpenTelemetry export needs of it, when there is one.
    otlp: Option<Box<Exported>>,
    /// The request's SLO class, when its `slo` names a defined one.
    class: Option<Arc<SloClass>>,
    /// Its time to response headers, when they came.
    headers: Option<Duration>,
    /// Its ITL gaps, gathered here (no shared state, no lock) and handed to
    /// the live series at the end.
    itl: Sketch,
    /// Its stalls and longest gap.
    gaps: Gaps,
    /// The requests and engine figures it met when it was sent.
    occupancy: Occupancy,
    /// Its place among the requests in flight and its share of its
    /// route's GPUs, until it finishes.
    tab: Tab,
    /// Its kind of turn, from its body.
    turn: meter::Turn,
    /// Its place in its session, when it names one, and the table.
    session: Option<(Arc<Sessions>, SessionPlace)>,
    stall_threshold: Duration,
    slow_reader_share: f64,
}

impl Recorder for RequestObserver {
    fn response_headers(&mut self, elapsed: Duration, status: u16) {
        // The labels are final now that the upstream answered.
        let moved = self.labels.admit(status);
        if moved {
            self.tab.relabelled(&self.labels);
        }
        self.prometheus.response_headers(&self.labels, elapsed);
        self.headers = Some(elapsed);
        if let Some(live) = &self.tenants {
            self.live
                .start_tenant(live, self.labels.tenant(), Instant::now());
        }
    }

    fn response_model(&mut self, model: &str) {
        // A request that named no model is labelled with it from now on.
        if self.labels.response_model(model) {
            self.tab.relabelled(&self.labels);
        }
        self.prometheus.labels_final(&self.labels);
    }

    fn response_id(&mut self, id: &str) {
        if let Some((sessions, place)) = &mut self.session {
            sessions.respond(place, id);
        }
    }

    fn first_token(&mut self, ttft: Duration) {
        self.prometheus.first_token(ttft);
    }

    fn first_visible_token(&mut self, ttft: Duration) {
        self.prometheus.first_visible_token(&self.labels, ttft);
    }

    fn inter_token(&mut self, gap: Duration) {
        self.prometheus.inter_token(gap);
        self.itl.add(gap);
        self.gaps.add(gap, self.stall_threshold);
    }

    fn parse_error(&mut self, error: ParseError) {
        self.prometheus.parse_error(&self.labels, error);
    }

    fn finish(&mut self, summary: &Summary) {
        // A name still waiting for an answer never got one.
        self.labels.settle();
        let slow_reader = super::request::slow_reader(
            summary.elapsed,
            summary.client_wait,
            self.slow_reader_share,
        );
        let judged = self
            .class
            .as_deref()
            .map(|class| (class, slo::judge(class, summary, slow_reader)));
        // Good when judged good; without a class, when it ended ok.
        let good = match judged {
            Some((_, verdict)) => verdict.label() == Some("good"),
            None => summary.outcome == meter::Outcome::Ok,
        };
        let at = Instant::now();
        let charged = self.tab.close(at, &self.labels, good);
        if let Some((sessions, place)) = &self.session {
            let tally = Tally {
                input_tokens: summary.usage.input.unwrap_or(0),
                cached_tokens: summary.usage.cached_input.unwrap_or(0),
                output_tokens: summary.output_tokens.map_or(0, |(n, _)| n),
                gpu_seconds: charged.map_or(0.0, |c| c.gpu_seconds),
                joules: charged.and_then(|c| c.joules),
                cost: charged.and_then(|c| c.cost),
                good,
            };
            let tenant = Some(self.labels.tenant().into());
            sessions.finish(place, at, tally, tenant);
        }
        let finished = Finished {
            summary,
            turn: self.turn,
            session: self.session.as_ref().map(|(_, place)| place),
            labels: &self.labels,
            judged,
            charged,
            headers: self.headers,
            at,
            gaps: self.gaps,
            slow_reader,
            occupancy: self.occupancy,
        };
        self.prometheus.finish(&finished);
        if let Some(live) = &self.tenants
            && !self.live.has_tenant()
        {
            self.live
                .start_tenant(live, self.labels.tenant(), finished.at);
        }
        // The OTLP export records each gap of the stream with the newest
        // names: taken from the sketch before the live series take it.
        let chunk_gaps = match &self.otlp {
            Some(otlp) if otlp.wants_chunk_gaps() => self.itl.values().collect(),
            _ => Vec::new(),
        };
        self.live.finish(&finished, std::mem::take(&mut self.itl));
        if let Some((log, entry)) = &self.access {
            log.write(entry, &finished);
        }
        if let Some(otlp) = self.otlp.take() {
            otlp.submit(&finished, chunk_gaps);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::metrics::EngineSources;
    use meter::{Api, Limits, StreamMeter};

    fn observers() -> Observers {
        Observers::detached()
    }

    static ROUTE: std::sync::LazyLock<crate::config::Route> = std::sync::LazyLock::new(|| {
        super::super::request::route("  - name: chat\n    upstream: http://127.0.0.1:8000\n")
    });

    /// A body naming model `m`.
    static FACTS: std::sync::LazyLock<meter::RequestFacts> =
        std::sync::LazyLock::new(|| meter::RequestFacts {
            model: Some("m".to_owned()),
            ..Default::default()
        });

    /// A request of route `chat` for model `m`, without trace or tenant.
    fn started(parts: &http::request::Parts) -> Started<'_> {
        Started {
            route: &ROUTE,
            api: Api::OpenAi,
            body: Some(&FACTS),
            at: Instant::now(),
            parts,
            client: "127.0.0.1:1".parse().unwrap(),
            trace: None,
        }
    }

    fn count(text: &str, series: &str) -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse().unwrap())
    }

    /// A 4 s pause in a stream is one stall of 4 s; gaps at or under the
    /// threshold are not stalls; the longest gap is kept.
    #[tokio::test(start_paused = true)]
    async fn a_pause_longer_than_the_threshold_is_one_stall_of_its_length() {
        let mut gaps = Gaps::default();
        let threshold = Duration::from_secs(1);
        for ms in [20, 1000, 4000, 30] {
            gaps.add(Duration::from_millis(ms), threshold);
        }
        assert_eq!(gaps.stalls, 1);
        assert_eq!(gaps.stalled, Duration::from_secs(4));
        assert_eq!(gaps.longest, Some(Duration::from_secs(4)));

        let o = observers();
        let (parts, ()) = http::Request::post("/v1/chat/completions")
            .body(())
            .unwrap()
            .into_parts();
        let t0 = Instant::now();
        let recorder = o.request(started(&parts));
        let mut meter = StreamMeter::new(t0, Api::OpenAi, Limits::default(), recorder);
        meter.response_head(t0, 200, Some(b"text/event-stream"), None);
        let chunk =
            bytes::Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        for ms in [10, 30, 4030, 4050, 5550] {
            meter.data(t0 + Duration::from_millis(ms), &chunk);
        }
        meter.end(t0 + Duration::from_millis(5600));
        drop(meter);
        let text = o.metrics().encode(false, EngineSources::default());
        assert_eq!(count(&text, "llm_stalls_total{"), 2.0, "{text}");
        assert!(
            (count(&text, "llm_stalled_seconds_total{") - 5.5).abs() < 1e-9,
            "{text}"
        );
    }

    /// A finished request reaches the Prometheus recorder and the live
    /// series once each, whichever way it ends and however often the meter
    /// is told.
    #[tokio::test(start_paused = true)]
    async fn a_finished_request_is_handed_to_each_observer_once() {
        let o = observers();
        let (parts, ()) = http::Request::post("/v1/chat/completions")
            .body(())
            .unwrap()
            .into_parts();
        let t0 = Instant::now();
        let recorder = o.request(started(&parts));
        let mut meter = StreamMeter::new(t0, Api::OpenAi, Limits::default(), recorder);
        let text = o.metrics().encode(false, EngineSources::default());
        assert_eq!(count(&text, "llm_requests_in_flight{"), 1.0, "{text}");
        meter.response_head(t0, 200, Some(b"text/event-stream"), None);
        let chunk =
            bytes::Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        meter.data(t0 + Duration::from_millis(10), &chunk);
        meter.data(t0 + Duration::from_millis(30), &chunk);
        meter.end(t0 + Duration::from_millis(40));
        meter.end(t0 + Duration::from_millis(50));
        drop(meter);
        let text = o.metrics().encode(false, EngineSources::default());
        assert_eq!(count(&text, "llm_requests_in_flight{"), 0.0, "{text}");
        assert_eq!(count(&text, "llm_requests_total{"), 1.0, "{text}");
        assert_eq!(
            count(&text, "llm_inter_token_latency_seconds_count{"),
            1.0,
            "{text}"
        );
        let series = o.metrics().live().series("chat", "", "");
        let (window, _) = series.window(Instant::now(), 0);
        assert_eq!(window.requests, 1);
        assert_eq!(window.itl.count(), 1, "the ITL sketch reached the windows");
    }

    /// A request's latency observations carry exemplars naming it (its
    /// trace, else its `x-request-id`) in the OpenMetrics exposition: its
    /// TTFT, TPOT and E2EL in their buckets, and its largest ITL gap; a
    /// request with neither leaves none.
    #[tokio::test(start_paused = true)]
    async fn latency_observations_carry_exemplars() {
        let o = observers();
        let run = |id: Option<&str>, gaps: &[u64]| {
            let mut request = http::Request::post("/v1/chat/completions");
            if let Some(id) = id {
                request = request.header("x-request-id", id);
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            let t0 = Instant::now();
            let recorder = o.request(started(&parts));
            let mut meter = StreamMeter::new(t0, Api::OpenAi, Limits::default(), recorder);
            meter.response_head(t0, 200, Some(b"text/event-stream"), None);
            let chunk = bytes::Bytes::from_static(
                b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            );
            let mut at = t0 + Duration::from_millis(20);
            meter.data(at, &chunk);
            for &gap in gaps {
                at += Duration::from_millis(gap);
                meter.data(at, &chunk);
            }
            meter.end(at);
        };
        run(Some("req-1"), &[10, 700, 30]);
        let text = o.metrics().encode(true, EngineSources::default());
        let exemplar = |family: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(family) && l.contains(" # {"))
                .collect()
        };
        let ttft = exemplar("llm_time_to_first_token_seconds_bucket{");
        assert_eq!(ttft.len(), 1, "{text}");
        assert!(
            ttft[0].contains(r#"le="0.025"} 1 # {request_id="req-1"} 0.02 "#),
            "{}",
            ttft[0]
        );
        let itl = exemplar("llm_inter_token_latency_seconds_bucket{");
        assert_eq!(itl.len(), 1, "{text}");
        assert!(
            itl[0].contains(r#"le="1"} 3 # {request_id="req-1"} 0.7 "#),
            "{}",
            itl[0]
        );
        let e2el = exemplar("llm_e2e_request_latency_seconds_bucket{");
        assert!(e2el.len() == 1 && e2el[0].contains(" 0.76 "), "{e2el:?}");
        let tpot = exemplar("llm_time_per_output_token_seconds_bucket{");
        assert!(tpot.len() == 1 && tpot[0].contains(" 0.24666"), "{tpot:?}");
        // A request without an id moves no exemplar; a later one with an
        // id takes its bucket's.
        run(None, &[10]);
        let before = o.metrics().encode(true, EngineSources::default());
        assert_eq!(
            before.matches(r#" # {request_id="req-1"}"#).count(),
            4,
            "{before}"
        );
        assert_eq!(before.matches(" # {").count(), 4, "{before}");
        run(Some("req-2"), &[10, 700, 30]);
        let after = o.metrics().encode(true, EngineSources::default());
        assert_eq!(
            after.matches(r#" # {request_id="req-2"}"#).count(),
            4,
            "{after}"
        );
        assert_eq!(after.matches(" # {").count(), 4, "{after}");
        assert!(after.ends_with("# EOF\n"));
        // The Prometheus text format has none.
        assert!(
            !o.metrics()
                .encode(false, EngineSources::default())
                .contains(" # {")
        );
    }
}
