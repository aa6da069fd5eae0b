//! [`Found`]: what a request finds by its label values, looked up without
//! a lock: its Prometheus series (a `with_label_values` hashes the label
//! values and takes its family's map lock, and a request would do so a
//! dozen times), its live series and its latency–load curve.
//!
//! A request hashes its label values once and reads a map that is replaced
//! whole (never locked) when a label set is added: once in the process's
//! life, since what is found is never removed and the label values are
//! bounded by the proxy before they get here, so the map holds no more
//! entries than there are label sets.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

/// What a request finds by its label values: `N` of them.
pub struct Found<V, const N: usize> {
    sets: ArcSwap<Sets<V, N>>,
    /// Held by the one adding a label set, so two that add at once do not
    /// lose one another's.
    adding: Mutex<()>,
}

/// The label sets by the hash of their values (several when two hash
/// alike).
type Sets<V, const N: usize> = HashMap<u64, Vec<Arc<Entry<V, N>>>, BuildHasherDefault<Hashed>>;

/// The hasher of a key that is a hash already: it passes it through.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input is folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

struct Entry<V, const N: usize> {
    labels: [Box<str>; N],
    value: Arc<V>,
}

impl<V, const N: usize> std::fmt::Debug for Found<V, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Found")
            .field("label_sets", &self.len())
            .finish()
    }
}

impl<V, const N: usize> Default for Found<V, N> {
    fn default() -> Self {
        Found {
            sets: ArcSwap::default(),
            adding: Mutex::new(()),
        }
    }
}

impl<V, const N: usize> Found<V, N> {
    /// What `labels` found, made by `make` if no request had them yet.
    pub fn get(&self, labels: [&str; N], make: impl FnOnce() -> V) -> Arc<V> {
        let hash = hash(labels);
        if let Some(v) = find(&self.sets.load(), hash, labels) {
            return v;
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let sets = self.sets.load_full();
        if let Some(v) = find(&sets, hash, labels) {
            return v;
        }
        let value = Arc::new(make());
        let mut grown = Sets::clone(&sets);
        grown.entry(hash).or_default().push(Arc::new(Entry {
            labels: labels.map(Box::from),
            value: value.clone(),
        }));
        self.sets.store(Arc::new(grown));
        value
    }

    /// What `labels` found, if any request had them.
    pub fn find(&self, labels: [&str; N]) -> Option<Arc<V>> {
        find(&self.sets.load(), hash(labels), labels)
    }

    /// Everything found so far, in no particular order.
    pub fn values(&self) -> Vec<Arc<V>> {
        let sets = self.sets.load();
        sets.values().flatten().map(|e| e.value.clone()).collect()
    }

    /// Everything found so far with its label values, in no particular
    /// order.
    pub fn entries(&self) -> Vec<([Box<str>; N], Arc<V>)> {
        let sets = self.sets.load();
        sets.values()
            .flatten()
            .map(|e| (e.labels.clone(), e.value.clone()))
            .collect()
    }

    /// How many label sets were found.
    pub fn len(&self) -> usize {
        self.sets.load().values().map(Vec::len).sum()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn hash<const N: usize>(labels: [&str; N]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    labels.hash(&mut h);
    h.finish()
}

fn find<V, const N: usize>(sets: &Sets<V, N>, hash: u64, labels: [&str; N]) -> Option<Arc<V>> {
    let entries = sets.get(&hash)?;
    entries
        .iter()
        .find(|e| e.labels.iter().map(|l| &**l).eq(labels))
        .map(|e| e.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_set_is_made_once_and_found_again() {
        let found: Found<u32, 2> = Found::default();
        let mut made = 0;
        let a = found.get(["r", "m"], || {
            made += 1;
            1
        });
        let again = found.get(["r", "m"], || {
            made += 1;
            2
        });
        assert_eq!((*a, *again, made), (1, 1, 1));
        // Values that join into the same text are another label set.
        let other = found.get(["rm", ""], || 3);
        assert_eq!((*other, found.len()), (3, 2));
    }

    #[test]
    fn label_sets_added_from_many_threads_are_all_kept() {
        let found: Arc<Found<usize, 1>> = Arc::default();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let found = found.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let name = format!("{}", (i * 4 + t) % 120);
                        assert_eq!(*found.get([&name], || (i * 4 + t) % 120), (i * 4 + t) % 120);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(found.len(), 120);
    }
}
