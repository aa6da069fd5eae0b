//! A DCGM-shaped page the chargeback tests drive and record: what it
//! served, and when (each page is made as its GET is accepted).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One page as served: when it was made, and each GPU's counter, `None`
/// for a spiked one.
pub type ServedPage = (tokio::time::Instant, Vec<(&'static str, Option<f64>)>);

/// A DCGM-shaped page, made at each GET: GPUs drawing 200 W each from
/// their own lifetime counters, a set that the test changes, one
/// implausible sample on demand, and counters frozen at the end; every
/// page served is kept with the moment it was made, so the truth is what
/// the page said, as the proxy could have read it.
pub struct Dcgm {
    pub began: Instant,
    /// The GPUs on the page now: (UUID, lifetime millijoules).
    pub set: std::sync::Mutex<Vec<(&'static str, f64)>>,
    /// The next page's first GPU reads implausibly high.
    pub spike: std::sync::atomic::AtomicBool,
    /// The counters stop growing from this many seconds after `began`.
    pub frozen: std::sync::Mutex<Option<f64>>,
    /// Every page served.
    pub served: std::sync::Mutex<Vec<ServedPage>>,
}

/// What a reader of the pages served must have counted: at least `low`,
/// at most `high` joules.
#[derive(Debug)]
pub struct Truth {
    pub low: f64,
    pub high: f64,
}

impl Dcgm {
    /// GPUs `set` drawing 200 W each, from now.
    pub fn new(set: Vec<(&'static str, f64)>) -> Self {
        Self {
            began: Instant::now(),
            set: std::sync::Mutex::new(set),
            spike: false.into(),
            frozen: std::sync::Mutex::new(None),
            served: std::sync::Mutex::default(),
        }
    }

    /// Stops the counters from now on.
    pub fn freeze(&self) {
        *self.frozen.lock().unwrap() = Some(self.began.elapsed().as_secs_f64());
    }

    /// Returns once `n` more pages have been made: the reader of the page
    /// has stored every page before the last of them, since it asks for
    /// the next page only after it has the last.
    pub async fn pages_more(&self, n: usize) {
        let until = self.served.lock().unwrap().len() + n;
        while self.served.lock().unwrap().len() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn page(&self) -> String {
        let made = tokio::time::Instant::now();
        let mut elapsed = self.began.elapsed().as_secs_f64();
        if let Some(frozen) = *self.frozen.lock().unwrap() {
            elapsed = elapsed.min(frozen);
        }
        let spike = self.spike.swap(false, std::sync::atomic::Ordering::SeqCst);
        let mut text = String::new();
        let mut served = Vec::new();
        for (i, (uuid, lifetime)) in self.set.lock().unwrap().iter().enumerate() {
            let mj = lifetime + 200_000.0 * elapsed;
            let shown = if spike && i == 0 { mj + 9e16 } else { mj };
            text += &format!(
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"{i}\",UUID=\"{uuid}\"}} {shown}\n"
            );
            served.push((*uuid, (shown == mj).then_some(mj)));
        }
        self.served.lock().unwrap().push((made, served));
        text
    }

    /// The joules the pages served say, as a reader that kept a GPU's
    /// baseline for `fresh_for` and failed `failures` scrapes could have
    /// counted them: each GPU's growth between two pages in a row that both
    /// show it (a spiked sample skipped, its baseline kept). The reader
    /// stamps a page once it has it, and asks for the next only after
    /// that, so its readings of pages `k - 1` and `k` came between the
    /// makings of pages `k - 1` and `k + 1`: a growth is surely counted
    /// when those are at most `fresh_for` apart, even with the failed
    /// scrapes falling where they stretch it most (and, with failures, not
    /// on a GPU's first or last page, which a failed scrape may have
    /// missed). At most, every growth is counted.
    pub fn truth(&self, fresh_for: Duration, failures: usize) -> Truth {
        let served = self.served.lock().unwrap();
        let at: Vec<tokio::time::Instant> = served.iter().map(|(t, _)| *t).collect();
        // The longest the reader's gap around the step into page `i` can
        // have been, with up to `failures` pages on either side missed;
        // `None` when no page has been made after it to bound it.
        let widest = |i: usize| -> Option<Duration> {
            let mut widest = Duration::ZERO;
            for a in i.saturating_sub(failures + 1)..i {
                for b in i..i + failures + 1 {
                    widest = widest.max(*at.get(b + 1)? - at[a]);
                }
            }
            Some(widest)
        };
        let mut last: BTreeMap<&str, f64> = BTreeMap::new();
        let shown_on = |page: usize, uuid: &str| {
            served
                .get(page)
                .is_some_and(|(_, p)| p.iter().any(|(u, _)| *u == uuid))
        };
        let (mut low, mut high) = (0.0, 0.0);
        for (i, (_, page)) in served.iter().enumerate() {
            let mut now = BTreeMap::new();
            for (uuid, mj) in page {
                match mj {
                    Some(mj) => {
                        if let Some(before) = last.get(uuid) {
                            let joules = (mj - before) / 1000.0;
                            let edge = failures > 0
                                && (!shown_on(i.wrapping_sub(2), uuid) || !shown_on(i + 1, uuid));
                            high += joules;
                            if widest(i).is_some_and(|w| w <= fresh_for) && !edge {
                                low += joules;
                            }
                        }
                        now.insert(*uuid, *mj);
                    }
                    // Skipped: the baseline stays.
                    None => {
                        if let Some(before) = last.get(uuid) {
                            now.insert(*uuid, *before);
                        }
                    }
                }
            }
            last = now;
        }
        Truth { low, high }
    }
}
