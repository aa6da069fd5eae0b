//! Which routes share their GPUs: a route's GPU set (docs/metrics.md,
//! "Chargeback"). The routes that read the same GPUs (the same
//! `gpu_metrics` page and `gpu_select`) or name the same `gpu_set` are one
//! set, whose GPU time is counted once and divided among the requests of
//! all of them; a route with `gpus` and no `gpu_set` is a set of its own.
//!
//! The grouping is a function of the routes alone, so that the checker
//! (`load/validate.rs`, which reports the routes of a set that disagree)
//! and the charge plan (which holds a ledger per set) find the same sets.

use super::{GpuSelect, Route};

/// What a set is across configurations: what a reload carries its ledger
/// by. The URL in it is the page's as written, credentials and all: it
/// has no `Debug`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum GpuSetId {
    /// Its `gpu_set` name.
    Named(String),
    /// Its GPU page's URL and selection (each list sorted, without
    /// repeats).
    Page(String, GpuSelect),
    /// The route of a set of one with `gpus`.
    Route(String),
}

/// One set of GPUs and the routes in front of it.
#[derive(Clone)]
pub struct GpuSet {
    pub id: GpuSetId,
    /// Its `gpu_set` label value: its `gpu_set` name, else the name of
    /// its one route, else its routes' names sorted and joined with `+`.
    pub name: String,
    /// Its routes, as indices into the routes given, in their order.
    pub routes: Vec<usize>,
}

/// The GPU page and selection of `route`, the selection normalized, when
/// it has a page.
pub(crate) fn page_of(route: &Route) -> Option<(String, GpuSelect)> {
    let page = route.gpu_metrics.as_ref()?;
    let norm = |values: &[String]| {
        let mut v = values.to_vec();
        v.sort();
        v.dedup();
        v
    };
    let select = GpuSelect {
        gpu: norm(&route.gpu_select.gpu),
        uuid: norm(&route.gpu_select.uuid),
        hostname: norm(&route.gpu_select.hostname),
    };
    Some((page.url.to_string(), select))
}

/// The routes joined in sets: two routes are in one set when they name
/// the same `gpu_set` or read the same page and selection, and so are the
/// routes joined to either. Each group of routes with GPUs or a
/// `gpu_set`, in the order of its first route.
pub(crate) fn groups<'r>(routes: impl IntoIterator<Item = &'r Route>) -> Vec<Vec<usize>> {
    let routes: Vec<&Route> = routes.into_iter().collect();
    let has = |r: &Route| r.gpus.is_some() || r.gpu_metrics.is_some() || r.gpu_set.is_some();
    // Each route's group, by the index of the group's first route.
    let mut group: Vec<usize> = (0..routes.len()).collect();
    for i in 0..routes.len() {
        for j in 0..i {
            let (a, b) = (routes[j], routes[i]);
            let named = a.gpu_set.is_some() && a.gpu_set == b.gpu_set;
            let paged = a.gpu_metrics.is_some() && page_of(a) == page_of(b);
            if has(a) && has(b) && (named || paged) && group[i] != group[j] {
                let (from, to) = (group[i].max(group[j]), group[i].min(group[j]));
                group
                    .iter_mut()
                    .filter(|g| **g == from)
                    .for_each(|g| *g = to);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        if !has(route) {
            continue;
        }
        match groups.iter_mut().find(|g| group[g[0]] == group[i]) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// The GPU sets of `routes` (a valid configuration's: the routes of a set
/// agree), each with its identity and name, in the order of their first
/// routes. A route with no GPUs is in none.
pub fn gpu_sets<'r>(routes: impl IntoIterator<Item = &'r Route>) -> Vec<GpuSet> {
    let routes: Vec<&Route> = routes.into_iter().collect();
    let mut sets = Vec::new();
    for members in groups(routes.iter().copied()) {
        let first = routes[members[0]];
        if first.gpus.is_none() && first.gpu_metrics.is_none() {
            continue;
        }
        let named = members.iter().find_map(|&i| routes[i].gpu_set.clone());
        let id = match (&named, page_of(first)) {
            (Some(name), _) => GpuSetId::Named(name.clone()),
            (None, Some((url, select))) => GpuSetId::Page(url, select),
            (None, None) => GpuSetId::Route(first.name.clone()),
        };
        let name = named.unwrap_or_else(|| {
            let mut names: Vec<&str> = members.iter().map(|&i| routes[i].name.as_str()).collect();
            names.sort_unstable();
            names.join("+")
        });
        sets.push(GpuSet {
            id,
            name,
            routes: members,
        });
    }
    sets
}
