//! An inference server's own page read into the same few figures whatever
//! the server: requests running and waiting, KV cache usage, and the prefix
//! cache's queries and hits (or its hit rate), per model.
//!
//! The server is told from the names on the page. What each name means was
//! read from each server's source, not guessed from its spelling:
//!
//! | figure | vLLM | SGLang | TGI | llama.cpp (`--metrics`) |
//! |---|---|---|---|---|
//! | running | `vllm:num_requests_running` | `sglang:num_running_reqs` | `tgi_batch_current_size` | `llamacpp:requests_processing` |
//! | waiting | `vllm:num_requests_waiting` | `sglang:num_queue_reqs` | `tgi_queue_size` | `llamacpp:requests_deferred` |
//! | KV cache usage, 0..1 | `vllm:kv_cache_usage_perc` (a ratio despite its name: "1 means 100 percent usage"; before 0.9 `vllm:gpu_cache_usage_perc`) | `sglang:token_usage` (tokens held over the pool's) | — | `llamacpp:kv_cache_usage_ratio` (cells used over `n_ctx`; recent builds no longer write it) |
//! | prefix cache queries, hits (counters, in tokens) | `vllm:prefix_cache_queries`, `vllm:prefix_cache_hits` (with or without `_total`; before 0.9 `vllm:gpu_prefix_cache_*`) | — | — | — |
//! | prefix cache hit rate, 0..1 | — | `sglang:cache_hit_rate` | — | — |
//!
//! vLLM and SGLang label every sample with `model_name` (SGLang's oldest
//! releases with `name`); TGI and llama.cpp serve one model and name none,
//! which gives one entry without a model. A model's samples that differ in
//! other labels (vLLM's `engine` index under data parallelism, SGLang's
//! `tp_rank`, `dp_rank`...) are one model's parts: counts and counters are
//! added up, ratios averaged.
//!
//! Reading never fails: a name the reader does not use is counted in
//! [`EngineReading::ignored`], a figure's sample whose value cannot be one
//! (not finite, negative, a ratio above 1) in [`EngineReading::refused`],
//! and a figure the page does not hold stays `None`, which is "unknown",
//! never zero.

use std::collections::BTreeMap;

use crate::parse::{Page, Sample};

/// The inference servers whose pages are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Server {
    Vllm,
    Sglang,
    Tgi,
    LlamaCpp,
}

impl Server {
    /// Every server, in the order a tie in detection is broken.
    pub const ALL: [Server; 4] = [Self::Vllm, Self::Sglang, Self::Tgi, Self::LlamaCpp];

    /// A short, fixed name, usable as a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Tgi => "tgi",
            Self::LlamaCpp => "llamacpp",
        }
    }

    /// The prefix every name of the server's page starts with.
    fn prefix(self) -> &'static str {
        match self {
            Self::Vllm => "vllm:",
            Self::Sglang => "sglang:",
            Self::Tgi => "tgi_",
            Self::LlamaCpp => "llamacpp:",
        }
    }

    /// The labels that name the model, in order of preference.
    fn model_labels(self) -> &'static [&'static str] {
        match self {
            Self::Vllm => &["model_name"],
            Self::Sglang => &["model_name", "name"],
            Self::Tgi | Self::LlamaCpp => &[],
        }
    }

    /// Where each figure is read from: for each, its names in order of
    /// preference; the first one the page holds is read, the others are
    /// ignored (a vLLM that writes both the current and the deprecated name
    /// of a figure writes the same value twice).
    fn sources(self) -> &'static [(Figure, &'static [&'static str])] {
        match self {
            Self::Vllm => &[
                (Figure::Running, &["vllm:num_requests_running"]),
                (Figure::Waiting, &["vllm:num_requests_waiting"]),
                (
                    Figure::KvCacheUsage,
                    &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
                ),
                (
                    Figure::PrefixQueries,
                    &[
                        "vllm:prefix_cache_queries_total",
                        "vllm:prefix_cache_queries",
                        "vllm:gpu_prefix_cache_queries_total",
                        "vllm:gpu_prefix_cache_queries",
                    ],
                ),
                (
                    Figure::PrefixHits,
                    &[
                        "vllm:prefix_cache_hits_total",
                        "vllm:prefix_cache_hits",
                        "vllm:gpu_prefix_cache_hits_total",
                        "vllm:gpu_prefix_cache_hits",
                    ],
                ),
            ],
            Self::Sglang => &[
                (Figure::Running, &["sglang:num_running_reqs"]),
                (Figure::Waiting, &["sglang:num_queue_reqs"]),
                (Figure::KvCacheUsage, &["sglang:token_usage"]),
                (Figure::PrefixHitRate, &["sglang:cache_hit_rate"]),
            ],
            Self::Tgi => &[
                (Figure::Running, &["tgi_batch_current_size"]),
                (Figure::Waiting, &["tgi_queue_size"]),
            ],
            Self::LlamaCpp => &[
                (Figure::Running, &["llamacpp:requests_processing"]),
                (Figure::Waiting, &["llamacpp:requests_deferred"]),
                (Figure::KvCacheUsage, &["llamacpp:kv_cache_usage_ratio"]),
            ],
        }
    }

    /// Whether `name` is one this server's figures are read from.
    fn reads(self, name: &str) -> bool {
        self.sources()
            .iter()
            .any(|(_, names)| names.contains(&name))
    }
}

/// The canonical figures of one model; `None` is "the page did not say".
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineFigures {
    /// Requests being processed (in the running batch).
    pub running: Option<f64>,
    /// Requests queued, waiting for room in the batch.
    pub waiting: Option<f64>,
    /// Share of the KV cache in use, 0 to 1.
    pub kv_cache_usage: Option<f64>,
    /// Prompt tokens looked up in the prefix cache (a counter).
    pub prefix_cache_queries: Option<f64>,
    /// Of those, the tokens found (a counter).
    pub prefix_cache_hits: Option<f64>,
    /// The server's own recent hit rate, 0 to 1, for a server that writes
    /// a rate rather than counters; for one that writes counters, the rate
    /// between two readings ([`EngineReading::with_hit_rates_since`]).
    pub prefix_cache_hit_rate: Option<f64>,
}

/// The figures of one model, or of the server when it names no model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReading {
    pub model: Option<String>,
    pub figures: EngineFigures,
}

/// What one engine page said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineReading {
    /// The server the names are of; `None` when the page is none of them.
    pub server: Option<Server>,
    /// One entry per model, in the order of their names (the entry without
    /// a model first); empty when the page holds none of the figures.
    pub models: Vec<ModelReading>,
    /// Samples not read: other metrics, another server's, a deprecated name
    /// beside its current one.
    pub ignored: usize,
    /// Samples of a figure whose value cannot be that figure.
    pub refused: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    Running,
    Waiting,
    KvCacheUsage,
    PrefixQueries,
    PrefixHits,
    PrefixHitRate,
}

impl Figure {
    /// Ratios are averaged over a model's parts; counts and counters are
    /// added up.
    fn is_ratio(self) -> bool {
        matches!(self, Self::KvCacheUsage | Self::PrefixHitRate)
    }

    fn plausible(self, value: f64) -> bool {
        value.is_finite() && value >= 0.0 && (!self.is_ratio() || value <= 1.0)
    }

    fn slot(self, figures: &mut EngineFigures) -> &mut Option<f64> {
        match self {
            Self::Running => &mut figures.running,
            Self::Waiting => &mut figures.waiting,
            Self::KvCacheUsage => &mut figures.kv_cache_usage,
            Self::PrefixQueries => &mut figures.prefix_cache_queries,
            Self::PrefixHits => &mut figures.prefix_cache_hits,
            Self::PrefixHitRate => &mut figures.prefix_cache_hit_rate,
        }
    }
}

/// Tells the server from the names on the page: the one with most samples
/// of its figures, else the one with most names of its own; ties go to the
/// first of [`Server::ALL`].
pub fn detect(page: &Page) -> Option<Server> {
    let most = |count: &dyn Fn(Server, &Sample) -> bool| {
        let mut best: Option<(Server, usize)> = None;
        for server in Server::ALL {
            let n = page.samples().iter().filter(|s| count(server, s)).count();
            if n > 0 && best.is_none_or(|(_, top)| n > top) {
                best = Some((server, n));
            }
        }
        best.map(|(server, _)| server)
    };
    most(&|server, sample| server.reads(&sample.name))
        .or_else(|| most(&|server, sample| sample.name.starts_with(server.prefix())))
}

/// Reads the engine's figures per model; see the module documentation.
pub fn read_engine(page: &Page) -> EngineReading {
    let Some(server) = detect(page) else {
        return EngineReading {
            ignored: page.samples().len(),
            ..EngineReading::default()
        };
    };
    let mut reading = EngineReading {
        server: Some(server),
        ..EngineReading::default()
    };
    // Per model, per figure: the sum of the values and how many there were.
    let mut sums: BTreeMap<Option<&str>, Vec<(Figure, f64, u32)>> = BTreeMap::new();
    let mut used = 0;
    for (figure, names) in server.sources() {
        let Some(name) = names
            .iter()
            .find(|name| page.samples().iter().any(|s| s.name == **name))
        else {
            continue;
        };
        for sample in page.samples().iter().filter(|s| s.name == *name) {
            used += 1;
            if !figure.plausible(sample.value) {
                reading.refused += 1;
                continue;
            }
            let model = server
                .model_labels()
                .iter()
                .find_map(|label| sample.label(label));
            let entry = sums.entry(model).or_default();
            match entry.iter_mut().find(|(f, _, _)| f == figure) {
                Some((_, sum, n)) => {
                    *sum += sample.value;
                    *n += 1;
                }
                None => entry.push((*figure, sample.value, 1)),
            }
        }
    }
    reading.ignored = page.samples().len() - used;
    reading.models = sums
        .into_iter()
        .map(|(model, figures)| {
            let mut out = EngineFigures::default();
            for (figure, sum, n) in figures {
                let value = if figure.is_ratio() {
                    sum / f64::from(n)
                } else {
                    sum
                };
                *figure.slot(&mut out) = Some(value);
            }
            ModelReading {
                model: model.map(str::to_owned),
                figures: out,
            }
        })
        .collect();
    reading
}

impl EngineReading {
    /// The figures of `model`, or else the server's figures that name no
    /// model (a server of one model, such as llama.cpp's).
    pub fn of_model(&self, model: &str) -> Option<&ModelReading> {
        self.models
            .iter()
            .find(|m| m.model.as_deref() == Some(model))
            .or_else(|| self.models.iter().find(|m| m.model.is_none()))
    }

    /// This reading, with the prefix cache's hit rate of each model whose
    /// server writes counters rather than a rate, over the span since
    /// `earlier` (the same engine's previous reading): the hits added over
    /// the queries added. A span without queries keeps `earlier`'s rate
    /// (that of the latest lookups); with no earlier reading of the model,
    /// or counters that went back (the engine restarted), the rate is
    /// unknown.
    #[must_use]
    pub fn with_hit_rates_since(mut self, earlier: Option<&EngineReading>) -> Self {
        for model in &mut self.models {
            let figures = &mut model.figures;
            if figures.prefix_cache_hit_rate.is_some() {
                continue;
            }
            let (Some(queries), Some(hits)) =
                (figures.prefix_cache_queries, figures.prefix_cache_hits)
            else {
                continue;
            };
            let Some(before) = earlier
                .and_then(|e| e.models.iter().find(|m| m.model == model.model))
                .map(|m| m.figures)
            else {
                continue;
            };
            let (Some(q0), Some(h0)) = (before.prefix_cache_queries, before.prefix_cache_hits)
            else {
                continue;
            };
            let (dq, dh) = (queries - q0, hits - h0);
            figures.prefix_cache_hit_rate = if dq < 0.0 || dh < 0.0 || dh > dq {
                None
            } else if dq == 0.0 {
                before.prefix_cache_hit_rate
            } else {
                Some(dh / dq)
            };
        }
        self
    }
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::parse::{Limits, parse};

    fn read(text: &str) -> EngineReading {
        read_engine(&parse(text.as_bytes(), &Limits::default()).unwrap())
    }

    #[test]
    fn parts_of_a_model_add_up_and_ratios_average() {
        let r = read(
            r#"vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
"#,
        );
        assert_eq!(r.server, Some(Server::Vllm));
        assert_eq!(r.models.len(), 1);
        let f = r.models[0].figures;
        assert_eq!(f.running, Some(5.0));
        assert_eq!(f.kv_cache_usage, Some(0.375));
        assert_eq!(f.prefix_cache_hits, Some(15.0));
        assert_eq!((f.waiting, f.prefix_cache_queries), (None, None));
        assert_eq!((r.ignored, r.refused), (1, 0));
    }

    #[test]
    fn each_model_is_an_entry_of_its_own() {
        let r = read(
            "vllm:num_requests_waiting{model_name=\"b\"} 1\n\
             vllm:num_requests_waiting{model_name=\"a\"} 2\n\
             vllm:num_requests_waiting 4\n",
        );
        let models: Vec<_> = r
            .models
            .iter()
            .map(|m| (m.model.as_deref(), m.figures.waiting))
            .collect();
        assert_eq!(
            models,
            [
                (None, Some(4.0)),
                (Some("a"), Some(2.0)),
                (Some("b"), Some(1.0))
            ]
        );
    }

    #[test]
    fn the_deprecated_name_is_read_only_alone() {
        let both = read(
            "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n\
             vllm:kv_cache_usage_perc{model_name=\"m\"} 0.4\n",
        );
        assert_eq!(both.models[0].figures.kv_cache_usage, Some(0.4));
        assert_eq!(both.ignored, 1);
        let old = read("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n");
        assert_eq!(old.models[0].figures.kv_cache_usage, Some(0.9));
    }

    #[test]
    fn implausible_values_are_refused_not_read() {
        let r = read(
            "sglang:token_usage{model_name=\"m\"} 1.5\n\
             sglang:num_running_reqs{model_name=\"m\"} NaN\n\
             sglang:num_queue_reqs{model_name=\"m\"} -1\n\
             sglang:cache_hit_rate{model_name=\"m\"} 0.25\n",
        );
        assert_eq!(r.refused, 3);
        assert_eq!(r.models[0].figures.prefix_cache_hit_rate, Some(0.25));
        assert_eq!(r.models[0].figures.kv_cache_usage, None);
    }

    #[test]
    fn detection_follows_the_figures_then_the_prefix() {
        assert_eq!(read("foo 1\nbar 2").server, None);
        assert_eq!(read("foo 1\nbar 2").ignored, 2);
        assert_eq!(
            read("lmcache:hits 1\nvllm:cache_config_info{a=\"b\"} 1").server,
            Some(Server::Vllm)
        );
        let mixed = read("vllm:foo 1\nvllm:bar 1\ntgi_queue_size 4\n");
        assert_eq!(mixed.server, Some(Server::Tgi));
        assert_eq!(mixed.models[0].model, None);
        assert_eq!(mixed.models[0].figures.waiting, Some(4.0));
        assert!(read("").models.is_empty());
    }

    #[test]
    fn counters_give_a_hit_rate_over_the_span_between_readings() {
        let page = |q: u32, h: u32| {
            read(&format!(
                "vllm:num_requests_running{{model_name=\"m\"}} 1\nvllm:prefix_cache_queries_total{{model_name=\"m\"}} {q}\nvllm:prefix_cache_hits_total{{model_name=\"m\"}} {h}\n"
            ))
        };
        let rate = |r: &EngineReading| r.models[0].figures.prefix_cache_hit_rate;
        let first = page(100, 10).with_hit_rates_since(None);
        assert_eq!(rate(&first), None);
        let second = page(200, 60).with_hit_rates_since(Some(&first));
        assert_eq!(rate(&second), Some(0.5));
        // No lookups since: the latest lookups' rate stays.
        let third = page(200, 60).with_hit_rates_since(Some(&second));
        assert_eq!(rate(&third), Some(0.5));
        // The engine restarted: unknown until the next span.
        let fourth = page(10, 1).with_hit_rates_since(Some(&third));
        assert_eq!(rate(&fourth), None);
        // A server that writes its own rate keeps it.
        let sglang = read("sglang:cache_hit_rate{model_name=\"m\"} 0.25\n");
        assert_eq!(
            sglang.clone().with_hit_rates_since(Some(&second)).models[0]
                .figures
                .prefix_cache_hit_rate,
            Some(0.25)
        );
    }
}
