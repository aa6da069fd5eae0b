//! The rules of what is in force: the forwarding service holds no
//! configuration, and the export path is handed the snapshot in force
//! rather than reaching back up to it.

use super::{Crates, workspace};

/// Every path that the non-test code of the root crate's module `top`
/// (and its children) writes, with where it leads, as `file: path -> lead`.
fn paths_of(crates: &Crates, top: &str) -> Vec<(String, Vec<String>)> {
    let prefix = ["tokenmeter", top].map(String::from);
    let mut out = Vec::new();
    for (path, module) in crates.modules.range(prefix.to_vec()..) {
        if !path.starts_with(&prefix) {
            break;
        }
        for r in module.refs.iter().chain(module.imports.values()) {
            let to = crates.leads_to(path, r, 0);
            out.push((format!("{}: {}", module.file.display(), r.join("::")), to));
        }
    }
    out
}

/// The forwarding service holds no configuration: it is built from a
/// configuration's parts, and what is in force (`/config`, the listeners'
/// TLS and limits, the admin credentials) is `in_force`'s.
#[test]
fn the_forwarding_service_names_no_configuration() {
    let crates = workspace();
    let config = ["tokenmeter", "config", "Config"].map(String::from);
    let found: Vec<String> = paths_of(&crates, "proxy")
        .into_iter()
        .filter(|(_, to)| to.starts_with(&config))
        .map(|(at, _)| at)
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Nothing on the export path reaches back up to what is in force: the
/// exposition and `/slo` are handed the snapshot's readings, and no part
/// of the wiring, the admin listener or the observers keeps a weak handle
/// to the snapshot or a scraper of its own.
#[test]
fn the_export_path_is_handed_what_is_in_force() {
    let crates = workspace();
    let mut found = Vec::new();
    for top in ["app", "admin", "in_force", "observe"] {
        for (at, to) in paths_of(&crates, top) {
            if to.iter().any(|s| s == "Weak" || s == "downgrade") {
                found.push(format!("{at} (a weak handle)"));
            }
        }
    }
    let scraper = ["tokenmeter", "scrape", "Scraper"].map(String::from);
    for (at, to) in paths_of(&crates, "observe") {
        if to.starts_with(&scraper) {
            found.push(format!("{at} (observe holds no scraper)"));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
