//! A request's labels (`route`, `model`, `slo`, `tenant`, `operation`),
//! resolved once when it starts and final once the upstream answers (or,
//! for a request that named no model, once the response names one), and
//! the bounds of the two its client chooses (`model`, `tenant`): an
//! allow-list, or the first names the upstream answered with a 2xx (the
//! last quarter of a model's slots only for names answered twice), then
//! `other`.
//!
//! Every observer of a request reads the same [`Labels`]: the Prometheus
//! recorder, the live series, the access log and the OpenTelemetry
//! export. None of them decides a label of its own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus::IntCounter;
use tokio::time::Instant;

use crate::config::{LabelBounds, MetricsSettings};

/// The label of a request whose body could not be read for its model.
pub const UNKNOWN: &str = "unknown";
/// The label of a name past the bounds.
pub const OTHER: &str = "other";

/// The bounds of the labels clients choose, shared by every request and
/// kept across reloads (they are the metrics' start-up settings).
pub struct Bounds {
    models: Bounded,
    tenants: Bounded,
    /// Whether the histograms carry the tenant (else their `tenant` is
    /// empty).
    tenant_histograms: bool,
}

impl Bounds {
    /// The bounds `settings` give, each name past them counted in its
    /// `overflow` counter.
    pub fn new(
        settings: &MetricsSettings,
        model_overflow: IntCounter,
        tenant_overflow: IntCounter,
    ) -> Self {
        Self {
            models: Bounded {
                labeler: Labeler::new(&settings.models).with_reserve(),
                overflow: model_overflow,
            },
            tenants: Bounded {
                labeler: Labeler::new(&settings.tenants.bounds),
                overflow: tenant_overflow,
            },
            tenant_histograms: settings.tenants.histograms,
        }
    }
}

/// Names not yet admitted to a label slot: each is, once the upstream
/// answers the request with a 2xx, if a slot is still free (so that names
/// clients make up, which upstreams refuse, never take the slots of real
/// ones). Until then the request is labelled `other` for it. Boxed: only
/// the first requests of a new name carry it.
struct Pending {
    bounds: Arc<Bounds>,
    model: Option<String>,
    tenant: Option<String>,
}

/// The label values of one request.
pub struct Labels {
    route: String,
    /// Its model's name, `unknown` (it named none) or `other`.
    model: String,
    /// Its SLO class's name; empty when it has none.
    slo: String,
    /// Its tenant's name, `unknown` or `other`; empty when its route
    /// attributes no tenant.
    tenant: String,
    /// What it asks of the model (`chat`, `embeddings`...).
    operation: &'static str,
    /// Whether the histograms carry the tenant.
    tenant_histograms: bool,
    /// The names waiting for a 2xx to be admitted as labels.
    pending: Option<Box<Pending>>,
    /// For a request that named no model, until its response names one or
    /// it ends: the bounds its response's model is labelled by.
    from_response: Option<Arc<Bounds>>,
    /// Whether the upstream answered with a 2xx (once its head came).
    answered: bool,
}

impl Labels {
    /// The labels of a request of `route`, under the SLO class `slo`, for
    /// `operation`, naming `model` and attributed to `tenant` (`None`: its
    /// route attributes none), both bounded by `bounds`.
    pub fn resolve(
        bounds: &Arc<Bounds>,
        route: &str,
        model: Option<&str>,
        slo: Option<&str>,
        tenant: Option<&str>,
        operation: meter::Operation,
    ) -> Self {
        let (mut model_pending, mut tenant_pending) = (None, None);
        let mut from_response = None;
        let model = match model.filter(|m| !m.is_empty()) {
            None => {
                from_response = Some(bounds.clone());
                UNKNOWN.to_owned()
            }
            Some(name) => bounds.models.label(name, &mut model_pending),
        };
        let tenant = match tenant {
            None => String::new(),
            Some("" | UNKNOWN) => UNKNOWN.to_owned(),
            Some(OTHER) => {
                bounds.tenants.overflow.inc();
                OTHER.to_owned()
            }
            Some(name) => bounds.tenants.label(name, &mut tenant_pending),
        };
        let pending = (model_pending.is_some() || tenant_pending.is_some()).then(|| {
            Box::new(Pending {
                bounds: bounds.clone(),
                model: model_pending,
                tenant: tenant_pending,
            })
        });
        Self {
            route: route.to_owned(),
            model,
            slo: slo.unwrap_or("").to_owned(),
            tenant,
            operation: operation.name(),
            tenant_histograms: bounds.tenant_histograms,
            pending,
            from_response,
            answered: false,
        }
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The `slo` label: empty when the request has no class.
    pub fn slo(&self) -> &str {
        &self.slo
    }

    /// The `tenant` label of its counters (empty when its route has no
    /// tenant; `other` while its name is pending).
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The labels of the counters.
    pub fn counters(&self) -> [&str; 5] {
        [
            &self.route,
            &self.model,
            &self.slo,
            &self.tenant,
            self.operation,
        ]
    }

    /// The labels of the histograms: the tenant only when asked for.
    pub fn histograms(&self) -> [&str; 5] {
        let tenant = if self.tenant_histograms {
            self.tenant.as_str()
        } else {
            ""
        };
        [&self.route, &self.model, &self.slo, tenant, self.operation]
    }

    /// Whether the histograms' labels wait for a pending name, or for the
    /// model a response names.
    pub fn histograms_wait(&self) -> bool {
        self.from_response.is_some()
            || self.pending.as_ref().is_some_and(|p| {
                p.model.is_some() || (self.tenant_histograms && p.tenant.is_some())
            })
    }

    /// The response named `model` (not empty): a request that named none
    /// takes it as its label, bounded as a request's name is (admitted to a
    /// slot only if the upstream answered with a 2xx). Returns whether the
    /// `model` label changed.
    pub fn response_model(&mut self, model: &str) -> bool {
        let Some(bounds) = self.from_response.take() else {
            return false;
        };
        let models = &bounds.models;
        let label = match models.labeler.label(model) {
            Label::Use => Some(model),
            Label::Pending if self.answered && models.labeler.admit(model, Instant::now()) => {
                Some(model)
            }
            Label::Pending | Label::Other => None,
        };
        self.model = match label {
            Some(name) => name.to_owned(),
            None => {
                models.overflow.inc();
                OTHER.to_owned()
            }
        };
        true
    }

    /// The upstream answered with `status`: each pending name is admitted
    /// on a 2xx (if a slot is free), and the request moves to its label;
    /// otherwise it stays `other`, counted. Returns whether the `model`
    /// label changed.
    pub fn admit(&mut self, status: u16) -> bool {
        let answered = (200..300).contains(&status);
        self.answered = answered;
        let Some(pending) = self.pending.take() else {
            return false;
        };
        let bounds = &pending.bounds;
        let mut moved = false;
        if let Some(name) = pending.model {
            if answered && bounds.models.labeler.admit(&name, Instant::now()) {
                self.model = name;
                moved = true;
            } else {
                bounds.models.overflow.inc();
            }
        }
        if let Some(name) = pending.tenant {
            if answered && bounds.tenants.labeler.admit(&name, Instant::now()) {
                self.tenant = name;
            } else {
                bounds.tenants.overflow.inc();
            }
        }
        moved
    }

    /// The request ended: a name still pending was never admitted (no
    /// answer came), and is reported (and counted) as `other`; a request
    /// whose response named no model stays `unknown`.
    pub fn settle(&mut self) {
        self.from_response = None;
        if let Some(pending) = self.pending.take() {
            if pending.model.is_some() {
                pending.bounds.models.overflow.inc();
            }
            if pending.tenant.is_some() {
                pending.bounds.tenants.overflow.inc();
            }
        }
    }
}

/// The bounds of one label clients choose, and the counter of the requests
/// reported as `other` for it.
struct Bounded {
    labeler: Labeler,
    /// Counts the requests reported as `other` for it.
    overflow: IntCounter,
}

impl Bounded {
    /// The label of a request naming `name` (not empty), or `other` while
    /// it is pending (set in `pending`) or refused (counted).
    fn label(&self, name: &str, pending: &mut Option<String>) -> String {
        match self.labeler.label(name) {
            Label::Use => name.to_owned(),
            Label::Pending => {
                *pending = Some(name.to_owned());
                OTHER.to_owned()
            }
            Label::Other => {
                self.overflow.inc();
                OTHER.to_owned()
            }
        }
    }
}

/// Bounds the values of a label clients choose (`model`, `tenant`).
///
/// Without an allow-list, a name takes a slot once the upstream answers it
/// with a 2xx, and keeps it for the life of the process: a slot is never
/// given to another name, so no series of a counter disappears and comes
/// back counting from 0 under another meaning. With a reserve (`model`),
/// the last quarter of the slots go only to names answered twice within
/// [`PROBATION`]: clients that make up names against an upstream that
/// answers anything (llama.cpp's server ignores `model`) take at most the
/// first three quarters with names sent once, and a real model, which is
/// asked again, still finds a slot.
struct Labeler {
    allow: Option<HashSet<String>>,
    max_distinct: usize,
    /// How many of the slots go only to names answered twice.
    reserve: usize,
    /// The names admitted, read without a lock: nearly every request names
    /// one of them. Replaced whole, under the lock of `admissions`, when a
    /// name is admitted (at most `max_distinct` times).
    admitted: ArcSwap<HashSet<String>>,
    admissions: Mutex<Admissions>,
}

/// How long a name's first 2xx counts towards a reserved slot.
const PROBATION: Duration = Duration::from_secs(3600);

/// The fewest names answered once that are remembered for a reserved slot.
const MIN_CANDIDATES: usize = 1024;

/// The names answered once, waiting for a second 2xx for a reserved slot.
#[derive(Default)]
struct Admissions {
    /// When each candidate was first answered.
    candidates: HashMap<String, Instant>,
    /// The candidates in the order they came, oldest first, to forget the
    /// oldest past the bound (an entry whose time is not its name's in
    /// `candidates` any more is stale).
    order: VecDeque<(String, Instant)>,
}

impl Labeler {
    fn new(cfg: &LabelBounds) -> Self {
        Self {
            allow: cfg.allow.as_ref().map(|a| a.iter().cloned().collect()),
            max_distinct: cfg.max_distinct,
            reserve: 0,
            admitted: ArcSwap::default(),
            admissions: Mutex::new(Admissions::default()),
        }
    }

    /// The same bounds, keeping a quarter of the slots for names answered
    /// twice.
    fn with_reserve(self) -> Self {
        Self {
            reserve: self.max_distinct / 4,
            ..self
        }
    }

    /// What label a request naming `name` gets: its own, `other` for now
    /// (a name not admitted yet while slots are free), or `other` for good
    /// (not allow-listed, or no slot left).
    fn label(&self, name: &str) -> Label {
        match &self.allow {
            Some(allow) if allow.contains(name) => Label::Use,
            Some(_) => Label::Other,
            None => {
                let admitted = self.admitted.load();
                if admitted.contains(name) {
                    Label::Use
                } else if admitted.len() < self.max_distinct {
                    Label::Pending
                } else {
                    Label::Other
                }
            }
        }
    }

    /// Admits `name` to a label slot (the upstream answered it at `now`),
    /// if it has one or one is free to it.
    fn admit(&self, name: &str, now: Instant) -> bool {
        if let Some(allow) = &self.allow {
            return allow.contains(name);
        }
        // Only a name that was pending comes here: under the lock, which
        // every admission holds.
        let mut admissions = self.admissions.lock().unwrap_or_else(|e| e.into_inner());
        let admitted = self.admitted.load_full();
        if admitted.contains(name) {
            return true;
        }
        let taken = admitted.len();
        if taken >= self.max_distinct {
            return false;
        }
        if taken + self.reserve < self.max_distinct
            || admissions.answered_twice(name, now, self.cap())
        {
            admissions.candidates.remove(name);
            let mut next = HashSet::clone(&admitted);
            next.insert(name.to_owned());
            self.admitted.store(Arc::new(next));
            return true;
        }
        false
    }

    /// How many candidates are remembered at most.
    fn cap(&self) -> usize {
        MIN_CANDIDATES.max(self.max_distinct.saturating_mul(4))
    }
}

impl Admissions {
    /// Whether `name`, answered at `now`, was answered before within
    /// [`PROBATION`]; if not, it is remembered as answered now (the oldest
    /// candidate forgotten past `cap`).
    fn answered_twice(&mut self, name: &str, now: Instant, cap: usize) -> bool {
        if let Some(&first) = self.candidates.get(name)
            && now.saturating_duration_since(first) <= PROBATION
        {
            return true;
        }
        self.candidates.insert(name.to_owned(), now);
        self.order.push_back((name.to_owned(), now));
        while self.order.len() > cap {
            if let Some((old, at)) = self.order.pop_front()
                && self.candidates.get(&old) == Some(&at)
            {
                self.candidates.remove(&old);
            }
        }
        false
    }
}

/// What label a request's name gets.
#[derive(Debug, PartialEq, Eq)]
enum Label {
    Use,
    /// Not admitted yet: `other` until the upstream answers it with a 2xx.
    Pending,
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;
    use meter::Operation;

    /// Bounds of `settings`, with their overflow counters (model, tenant).
    fn bounds(settings: &MetricsSettings) -> (Arc<Bounds>, IntCounter, IntCounter) {
        let models = IntCounter::new("models", "models").unwrap();
        let tenants = IntCounter::new("tenants", "tenants").unwrap();
        let bounds = Bounds::new(settings, models.clone(), tenants.clone());
        (Arc::new(bounds), models, tenants)
    }

    #[test]
    fn labels_are_bounded_and_taken_only_on_an_answer() {
        let now = Instant::now();
        let l = Labeler::new(&LabelBounds {
            allow: None,
            max_distinct: 2,
        });
        // A name waits for the upstream's answer; asking again does not
        // take a slot.
        assert_eq!(l.label("a"), Label::Pending);
        assert_eq!(l.label("a"), Label::Pending);
        assert!(l.admit("a", now));
        assert_eq!(l.label("a"), Label::Use);
        assert_eq!(l.label("b"), Label::Pending);
        assert_eq!(l.label("c"), Label::Pending);
        assert!(l.admit("c", now));
        // The slots are taken: b's answer came too late.
        assert!(!l.admit("b", now));
        assert_eq!(l.label("b"), Label::Other);
        assert_eq!(l.label("c"), Label::Use);
        let l = Labeler::new(&LabelBounds {
            allow: Some(vec!["x".into()]),
            max_distinct: 100,
        });
        assert_eq!(l.label("x"), Label::Use);
        assert_eq!(l.label("y"), Label::Other);
        assert!(l.admit("x", now) && !l.admit("y", now));
    }

    /// Threads that admit more names than there are slots, at once: the
    /// slots are taken exactly once each, and every admitted name reads
    /// back as its own label without the lock.
    #[test]
    fn concurrent_admissions_take_each_slot_once() {
        let now = Instant::now();
        let l = Labeler::new(&LabelBounds {
            allow: None,
            max_distinct: 50,
        });
        let admitted: Vec<String> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|t| {
                    let l = &l;
                    scope.spawn(move || {
                        (0..40)
                            .map(|i| format!("m{}", (i * 4 + t) % 80))
                            .filter(|name| l.admit(name, now))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let distinct: HashSet<&String> = admitted.iter().collect();
        assert_eq!(distinct.len(), 50, "{admitted:?}");
        for name in &distinct {
            assert_eq!(l.label(name), Label::Use, "{name}");
        }
        assert_eq!(l.label("m-new"), Label::Other);
    }

    /// Past three quarters of the slots, a name takes one only when
    /// answered twice within the probation; no slot is given twice.
    #[test]
    fn the_last_slots_go_to_names_answered_twice() {
        let now = Instant::now();
        let l = Labeler::new(&LabelBounds {
            allow: None,
            max_distinct: 8,
        })
        .with_reserve();
        for name in ["a", "b", "c", "d", "e", "f"] {
            assert!(l.admit(name, now), "{name}: a free slot");
        }
        // One-shot names take none of the two reserved.
        for i in 0..5000 {
            assert!(!l.admit(&format!("made-up-{i}"), now));
        }
        assert!(l.label("made-up-4999") == Label::Pending);
        assert!(!l.admit("real", now));
        assert!(l.admit("real", now + Duration::from_secs(1)));
        assert_eq!(l.label("real"), Label::Use);
        // A second answer after the probation starts it again.
        assert!(!l.admit("late", now));
        let later = now + PROBATION + Duration::from_secs(1);
        assert!(!l.admit("late", later));
        assert!(l.admit("late", later + Duration::from_secs(1)));
        // Full: every other name is `other` for good.
        assert_eq!(l.label("x"), Label::Other);
        assert!(!l.admit("x", later) && !l.admit("x", later));
        let admissions = l.admissions.lock().unwrap();
        assert!(admissions.order.len() <= l.cap() && admissions.candidates.len() <= l.cap());
    }

    /// A request's labels: names bounded, `unknown` and `other` for what
    /// names none or no usable one, the tenant empty for a route without
    /// one and on the histograms unless asked for.
    #[test]
    fn a_requests_labels() {
        let mut settings = MetricsSettings::default();
        settings.tenants.bounds.max_distinct = 1;
        let (b, _, tenants) = bounds(&settings);
        let chat = Operation::Chat;
        let r = Labels::resolve(&b, "r", None, None, None, chat);
        assert_eq!(r.counters(), ["r", UNKNOWN, "", "", "chat"]);
        let r = Labels::resolve(&b, "r", Some("m"), Some("s"), Some(UNKNOWN), chat);
        assert_eq!(r.counters(), ["r", OTHER, "s", UNKNOWN, "chat"]);
        let mut r = Labels::resolve(&b, "r", Some("m"), Some("s"), Some("acme"), chat);
        assert_eq!(r.counters(), ["r", OTHER, "s", OTHER, "chat"]);
        assert!(r.admit(200), "the model label moved");
        assert_eq!(r.counters(), ["r", "m", "s", "acme", "chat"]);
        assert_eq!(r.histograms(), ["r", "m", "s", "", "chat"]);
        // The one slot is taken: another tenant is `other`, counted.
        let r = Labels::resolve(&b, "r", Some("m"), Some("s"), Some("globex"), chat);
        assert_eq!(r.counters(), ["r", "m", "s", OTHER, "chat"]);
        let _ = Labels::resolve(&b, "r", Some("m"), Some("s"), Some(OTHER), chat);
        assert_eq!(tenants.get(), 2);
        // Refused by the upstream: never admitted.
        settings.tenants.histograms = true;
        let (b, models, _) = bounds(&settings);
        let mut r = Labels::resolve(&b, "r", Some("m"), None, Some("acme"), chat);
        assert!(r.histograms_wait());
        assert!(!r.admit(404));
        assert_eq!(r.counters(), ["r", OTHER, "", OTHER, "chat"]);
        assert!(!r.histograms_wait());
        let mut r = Labels::resolve(&b, "r", Some("m"), None, Some("acme"), chat);
        r.admit(200);
        assert_eq!(r.histograms(), ["r", "m", "", "acme", "chat"]);
        // Never answered: counted as `other` when it ends.
        let mut r = Labels::resolve(&b, "r", Some("n"), None, None, chat);
        let before = models.get();
        r.settle();
        assert_eq!(models.get(), before + 1);
        assert_eq!(r.model(), OTHER);
    }

    /// A request that named no model takes its response's, bounded as a
    /// request's name is; one whose response names none stays `unknown`.
    #[test]
    fn a_request_naming_no_model_takes_its_responses() {
        let mut settings = MetricsSettings::default();
        settings.models.max_distinct = 1;
        let (b, models, _) = bounds(&settings);
        let chat = Operation::Chat;
        let mut r = Labels::resolve(&b, "r", None, None, None, chat);
        assert!(r.histograms_wait());
        assert!(!r.admit(200));
        assert!(r.histograms_wait(), "its response has not named it yet");
        assert!(r.response_model("tiny"));
        assert_eq!(r.model(), "tiny");
        assert!(!r.histograms_wait());
        assert!(!r.response_model("other-name"), "final once named");
        // The one slot is taken.
        let mut r = Labels::resolve(&b, "r", None, None, None, chat);
        r.admit(200);
        assert!(r.response_model("big"));
        assert_eq!((r.model(), models.get()), (OTHER, 1));
        // Named by a request, the response's name is not used.
        let mut r = Labels::resolve(&b, "r", Some("tiny"), None, None, chat);
        assert!(!r.response_model("big"));
        assert_eq!(r.model(), "tiny");
        let mut r = Labels::resolve(&b, "r", None, None, None, chat);
        r.admit(200);
        r.settle();
        assert_eq!(r.model(), UNKNOWN);
        assert!(!r.histograms_wait());
    }
}
