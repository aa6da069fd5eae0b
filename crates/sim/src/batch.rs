//! The batch-limited mode ([`SimConfig::slots`](super::SimConfig::slots)):
//! a fixed number of slots, a FIFO queue in front of them, and the engine
//! state a vLLM serves on `GET /metrics`.
//!
//! A completion request joins the queue when it arrives and takes a slot
//! when one is free, in arrival order (tokio's semaphore is fair); its
//! schedule starts then, so the wait is part of its time to first token,
//! and its prefill and decode hold the slot until its last frame is sent
//! (or the client leaves). Each slot holds an equal share of the KV cache
//! while it runs, so the KV cache usage is the share of slots in use. The
//! prefix cache is looked up once per request, when it takes its slot (as
//! vLLM's scheduler does): its prompt tokens are queries, the
//! `x-sim-cached-tokens` of them hits.
//!
//! This module does no I/O and reads no clock.

use std::fmt::Write as _;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// The engine state of one simulator in batch-limited mode.
#[derive(Debug)]
pub(crate) struct Batch {
    slots: NonZeroU32,
    /// One permit per slot; fair, so the queue is first come, first served.
    permits: Arc<Semaphore>,
    running: AtomicU64,
    waiting: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found.
    prefix_queries: AtomicU64,
    prefix_hits: AtomicU64,
    /// The `model_name` label: the configured model, as vLLM labels its
    /// samples with the name it serves, whatever a request asked for.
    model: String,
    /// Unix seconds at start, for the counters' `_created` samples.
    created: f64,
}

impl Batch {
    pub(crate) fn new(slots: NonZeroU32, model: String, created: f64) -> Self {
        Self {
            slots,
            permits: Arc::new(Semaphore::new(slots.get() as usize)),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            prefix_queries: AtomicU64::new(0),
            prefix_hits: AtomicU64::new(0),
            model,
            created,
        }
    }

    /// Queues a request of `prompt_tokens`, `cached_tokens` of them in the
    /// prefix cache. The request holds its place from the first poll of the
    /// returned future, and counts as waiting until it has a slot or is
    /// dropped.
    fn enqueue(self: &Arc<Self>, prompt_tokens: u64, cached_tokens: u64) -> Pin<Box<Queued>> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let acquire = Box::pin(Arc::clone(&self.permits).acquire_owned());
        Box::pin(Queued {
            batch: Arc::clone(self),
            acquire,
            prompt_tokens,
            cached_tokens: cached_tokens.min(prompt_tokens),
            admitted: false,
        })
    }

    /// The engine state as vLLM's Prometheus endpoint writes it (text
    /// format 0.0.4, from Python's client: sorted labels, float values,
    /// `_total` counters with their `_created` samples).
    pub(crate) fn render(&self) -> String {
        let running = self.running.load(Ordering::Relaxed);
        let labels = format!("engine=\"0\",model_name=\"{}\"", escape(&self.model));
        let usage = running as f64 / f64::from(self.slots.get());
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: f64| {
            // Writing to a String cannot fail.
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {}\n",
                float(value)
            );
        };
        family(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            running as f64,
        );
        family(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            self.waiting.load(Ordering::Relaxed) as f64,
        );
        family(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            usage,
        );
        for (name, help, counter) in [
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                &self.prefix_queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                &self.prefix_hits,
            ),
        ] {
            let value = counter.load(Ordering::Relaxed) as f64;
            family(&format!("{name}_total"), "counter", help, value);
            family(&format!("{name}_created"), "gauge", help, self.created);
        }
        out
    }
}

/// Where a request stands when it arrives: running at once, or queued.
#[derive(Debug)]
pub(crate) enum Admission {
    Running(Slot),
    Queued(Pin<Box<Queued>>),
}

impl Batch {
    /// Admits a request of `prompt_tokens`, `cached_tokens` of them in the
    /// prefix cache: it takes a free slot at once, or joins the end of the
    /// queue now (its place is kept from here, whoever polls it later).
    pub(crate) fn admit(self: &Arc<Self>, prompt_tokens: u64, cached_tokens: u64) -> Admission {
        let mut queued = self.enqueue(prompt_tokens, cached_tokens);
        // The first poll takes the place in the queue; whoever waits for
        // the slot later polls again with its own waker.
        match queued
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(slot) => Admission::Running(slot),
            Poll::Pending => Admission::Queued(queued),
        }
    }
}

/// A request in the queue; resolves to its [`Slot`].
pub(crate) struct Queued {
    batch: Arc<Batch>,
    acquire: Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// Set once the slot is taken: the request no longer waits.
    admitted: bool,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("prompt_tokens", &self.prompt_tokens)
            .field("admitted", &self.admitted)
            .finish_non_exhaustive()
    }
}

impl Future for Queued {
    type Output = Slot;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Slot> {
        let this = &mut *self;
        if this.admitted {
            // Polled again after its slot was handed out: nothing more to
            // give, and no slot to count twice.
            return Poll::Pending;
        }
        let permit = match this.acquire.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(permit) => permit.ok(),
        };
        this.admitted = true;
        let batch = &this.batch;
        batch.waiting.fetch_sub(1, Ordering::Relaxed);
        batch.running.fetch_add(1, Ordering::Relaxed);
        batch
            .prefix_queries
            .fetch_add(this.prompt_tokens, Ordering::Relaxed);
        batch
            .prefix_hits
            .fetch_add(this.cached_tokens, Ordering::Relaxed);
        Poll::Ready(Slot {
            batch: Arc::clone(batch),
            _permit: permit,
        })
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.admitted {
            // The client left while queued.
            self.batch.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A slot held by a running request; dropping it frees the slot for the
/// first request in the queue.
#[derive(Debug)]
pub(crate) struct Slot {
    batch: Arc<Batch>,
    /// `None` only if the semaphore were closed, which it never is.
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.batch.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A value as vLLM's page shows it: Python's `repr` (`2.0`, `0.75`), and
/// past six integer digits the mantissa and exponent that Python's
/// Prometheus client writes to look like Go (`1.7649124519e+09`).
fn float(value: f64) -> String {
    let repr = if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    };
    match repr.split_once('.') {
        Some((whole, fraction)) if value > 0.0 && whole.len() > 6 => {
            let (first, rest) = whole.split_at(1);
            let mantissa = format!("{first}.{rest}{fraction}");
            let mantissa = mantissa.trim_end_matches(['0', '.']);
            format!("{mantissa}e+0{}", whole.len() - 1)
        }
        _ => repr,
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format wants.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn batch(slots: u32) -> Arc<Batch> {
        Arc::new(Batch::new(
            NonZeroU32::new(slots).unwrap(),
            "m".to_owned(),
            1.5e9,
        ))
    }

    fn figures(batch: &Batch) -> (u64, u64, u64, u64) {
        (
            batch.running.load(Ordering::Relaxed),
            batch.waiting.load(Ordering::Relaxed),
            batch.prefix_queries.load(Ordering::Relaxed),
            batch.prefix_hits.load(Ordering::Relaxed),
        )
    }

    #[tokio::test]
    async fn slots_are_taken_in_arrival_order() {
        let batch = batch(1);
        let first = batch.enqueue(10, 4).await;
        let mut second = batch.enqueue(6, 9);
        let mut third = batch.enqueue(5, 0);
        assert!(futures_poll(&mut second).is_pending());
        assert!(futures_poll(&mut third).is_pending());
        assert_eq!(figures(&batch), (1, 2, 10, 4));
        drop(first);
        assert!(futures_poll(&mut third).is_pending());
        let second = second.await;
        assert_eq!(figures(&batch), (1, 1, 16, 10));
        drop(third);
        assert_eq!(figures(&batch), (1, 0, 16, 10));
        drop(second);
        assert_eq!(figures(&batch), (0, 0, 16, 10));
    }

    fn futures_poll(queued: &mut Pin<Box<Queued>>) -> Poll<Slot> {
        queued
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn the_page_is_vllms() {
        let batch = Batch::new(NonZeroU32::new(4).unwrap(), "a\"b".to_owned(), 1.5e9);
        batch.running.store(3, Ordering::Relaxed);
        let page = batch.render();
        assert!(page.starts_with(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{engine=\"0\",model_name=\"a\\\"b\"} 3.0\n"
        ));
        assert!(
            page.contains("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a\\\"b\"} 0.75\n")
        );
        assert!(page.contains("# TYPE vllm:prefix_cache_hits_total counter\n"));
        assert!(page.contains(
            "vllm:prefix_cache_hits_created{engine=\"0\",model_name=\"a\\\"b\"} 1.5e+09\n"
        ));
    }

    #[test]
    fn values_are_written_as_pythons_client_writes_them() {
        assert_eq!(float(0.0), "0.0");
        assert_eq!(float(2.0), "2.0");
        assert_eq!(float(0.75), "0.75");
        assert_eq!(float(40960.0), "40960.0");
        assert_eq!(float(8_128_902.0), "8.128902e+06");
        assert_eq!(float(1_764_912_451.928_559_8), "1.7649124519285598e+09");
        assert_eq!(float(1e9), "1e+09");
    }
}
