//! Hot reload: the config file and its SLO files, read again on a change
//! (watched with `notify`) or on SIGHUP, validated, and swapped in.
//!
//! A reload runs [`Config::load`] with the command-line overrides the
//! process started with. When the new config is valid, a new [`InForce`]
//! (the config, its forwarding service with its routes, upstream clients,
//! SLO classes and limits, and its scrapes) is built and stored whole in
//! the [`ArcSwap`] every new request reads once; requests already running
//! keep the forwarding service they started with, so their streams,
//! routes and classes are untouched. When it is invalid, every error is logged and the
//! running proxy stays. Both are counted in `tokenmeter_config_reload_total`.
//!
//! Settings that belong to sockets or the metrics registry (listen
//! addresses, metric namespace, model label bounds, buckets) cannot change
//! in a running process: a reload that changes them still applies the rest,
//! and logs a warning that a restart is needed.
//!
//! Reloads are serialised by one lock held from reading the files to the
//! swap, so a slow reload can never overwrite a newer one.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigErrors, Overrides, Sources};

use crate::in_force::{BuildError, InForce};
use crate::observe::metrics::{Metrics, merged_buckets};
use slo::ObjectiveKind;

/// How long the files must be quiet after a change before they are read:
/// editors and `kubectl` write in bursts (truncate, write, rename, chmod).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Where the running config came from, so it can be read again.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The main config file.
    pub path: PathBuf,
    /// The command-line values that override it, applied again on reload.
    pub overrides: Overrides,
    /// Whether to watch the files and reload on a change (SIGHUP and
    /// [`super::Running::reload`] work either way).
    pub watch: bool,
}

/// Why a reload was refused; the running config stays in every case.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("nothing to reload: the proxy was started without a config file")]
    NoFile,
    #[error("the new config is invalid; the running one is kept:\n{0}")]
    Invalid(ConfigErrors),
    #[error("setting up upstream TLS failed; the running config is kept: {0}")]
    Tls(rustls::Error),
    #[error("reading the config failed: {0}")]
    Task(String),
    #[error("the new config's engine and GPU scrapes cannot start; the running config is kept")]
    Scrape(#[source] crate::scrape::Error),
}

impl ReloadError {
    /// A short, bounded name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ReloadError::NoFile => "no_file",
            ReloadError::Invalid(_) => "invalid",
            ReloadError::Tls(_) => "tls",
            ReloadError::Task(_) => "task",
            ReloadError::Scrape(_) => "scrape",
        }
    }
}

/// A reload that took effect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reloaded {
    /// Changed settings that only a restart applies (also logged).
    pub restart_needed: Vec<String>,
}

/// How to replace what is in force.
pub(super) struct Reloader {
    source: Option<ConfigSource>,
    /// What is in force, the config among it.
    in_force: Arc<ArcSwap<InForce>>,
    metrics: Arc<Metrics>,
    /// Held from reading the files to the swap: reloads one at a time.
    /// It guards whether the last reload failed, which decides what an
    /// unchanged config means to the watcher.
    serial: tokio::sync::Mutex<LastReload>,
    /// The config the process started with (the first snapshot's, shared):
    /// the settings a reload cannot change are compared against it.
    started: Arc<Config>,
    /// The process's shutdown, under which a reload's new scrapes run.
    shutdown: CancellationToken,
}

/// How the last reload went, as `tokenmeter_config_last_reload_successful`
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastReload {
    /// It took effect (or none was tried).
    Succeeded,
    /// It was refused: the running config is older than the files were.
    Failed,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Reloader {
    pub(super) fn new(
        source: Option<ConfigSource>,
        in_force: Arc<ArcSwap<InForce>>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        metrics.config_loaded(None, unix_now());
        let started = in_force.load().config().clone();
        Self {
            source,
            in_force,
            metrics,
            serial: tokio::sync::Mutex::new(LastReload::Succeeded),
            started,
            shutdown,
        }
    }

    /// What is in force with `config`, replacing `previous`: with the
    /// running scraper when the two scrape the same targets, else with a
    /// new one.
    fn rebuild(&self, previous: &InForce, config: Arc<Config>) -> Result<InForce, ReloadError> {
        let observers = previous.proxy().observers();
        let scrapes =
            |charges: &_| super::scrapes::scraper(&config, charges, Some(previous), &self.shutdown);
        InForce::build(
            config.clone(),
            observers,
            Some(previous),
            scrapes,
            |plan, observers| previous.proxy().reloaded(plan, observers),
        )
        .map_err(|e| match e {
            BuildError::Scrape(e) => ReloadError::Scrape(e),
            BuildError::Tls(e) => ReloadError::Tls(e),
        })
    }

    /// Reads the files again and swaps the new config in if it is valid.
    /// With `only_if_changed`, a config equal to the running one is left
    /// alone and not counted (the watcher sees events that change nothing),
    /// unless the last reload failed: files put back as the running config
    /// is are a reload that succeeds, which nothing needs to be rebuilt for.
    pub(super) async fn reload(
        &self,
        trigger: &'static str,
        only_if_changed: bool,
    ) -> Option<Result<Reloaded, ReloadError>> {
        let Some(source) = &self.source else {
            return Some(Err(ReloadError::NoFile));
        };
        let mut last = self.serial.lock().await;
        let (path, overrides) = (source.path.clone(), source.overrides.clone());
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path, &overrides)).await;
        let previous = self.in_force.load_full();
        let result = match loaded {
            Err(e) => Err(ReloadError::Task(e.to_string())),
            Ok(Err(errors)) => Err(ReloadError::Invalid(errors)),
            Ok(Ok(config)) => {
                let unchanged = only_if_changed && config == **previous.config();
                if unchanged && *last == LastReload::Succeeded {
                    tracing::debug!(trigger, "config files touched but unchanged");
                    return None;
                }
                let config = Arc::new(config);
                // The files are the running config again: what is in force
                // stays, and its restart warnings were given when it came in.
                let next = if unchanged {
                    None
                } else {
                    Some(self.rebuild(&previous, config.clone()))
                };
                match next {
                    None => {
                        tracing::info!(trigger, "config files are the running config again");
                        Ok(Reloaded::default())
                    }
                    Some(Err(e)) => Err(e),
                    Some(Ok(next)) => {
                        self.in_force.store(Arc::new(next));
                        self.metrics.set_slo_targets(&config.slo_classes);
                        let restart_needed = restart_needed(&self.started, &config);
                        Ok(Reloaded { restart_needed })
                    }
                }
            }
        };
        *last = match result {
            Ok(_) => LastReload::Succeeded,
            Err(_) => LastReload::Failed,
        };
        let current = self.in_force.load();
        let current = current.config();
        match &result {
            Ok(reloaded) => {
                self.metrics.config_loaded(Some(true), unix_now());
                tracing::info!(
                    trigger,
                    routes = current.routes.len(),
                    slo_classes = current.slo_classes.len(),
                    "config reloaded"
                );
                for setting in &reloaded.restart_needed {
                    tracing::warn!(trigger, "{setting}: takes effect only after a restart");
                }
            }
            Err(e) => {
                self.metrics.config_loaded(Some(false), unix_now());
                if let ReloadError::Invalid(errors) = e {
                    for error in &errors.0 {
                        tracing::error!(
                            trigger,
                            file = %error.file,
                            line = error.line,
                            key = %error.key,
                            "config reload rejected: {}",
                            error.message
                        );
                    }
                }
                tracing::error!(
                    trigger,
                    kind = e.kind(),
                    "config reload failed: {e}; the running config is kept"
                );
            }
        }
        Some(result)
    }

    fn sources(&self) -> Sources {
        self.in_force.load().config().sources.clone()
    }
}

/// What differs between the config the process started with and `new`
/// among the settings only a restart applies (declared with the config
/// types), and the SLO thresholds the running histograms cannot read.
fn restart_needed(started: &Config, new: &Config) -> Vec<String> {
    let mut out = started.restart_only_changes(new);
    // The histograms keep the bounds they were registered with; a new
    // threshold that is not one of them cannot be read exactly from `le`.
    let b = &started.metrics.buckets;
    for (kind, configured) in [
        (ObjectiveKind::Ttft, &b.time_to_first_token),
        (ObjectiveKind::Tpot, &b.time_per_output_token),
        (ObjectiveKind::E2el, &b.e2e_request_latency),
    ] {
        let registered = merged_buckets(configured, &started.slo_classes, kind);
        for class in &new.slo_classes {
            if let Some(objective) = class.objective(kind) {
                let t = objective.threshold.as_secs_f64();
                if !registered.contains(&t) {
                    out.push(format!(
                        "SLO class {} {} threshold {t}s is not a bucket bound of the running histogram (judging and /slo use it now; `le` reads it exactly)",
                        class.name,
                        kind.as_str()
                    ));
                }
            }
        }
    }
    out
}

/// The files and directories to watch for one config.
#[derive(Clone, Debug, Default, PartialEq)]
struct WatchSet {
    files: Vec<PathBuf>,
    patterns: Vec<glob::Pattern>,
    dirs: Vec<(PathBuf, bool)>,
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn has_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

impl WatchSet {
    /// Directories rather than files are watched: editors and Kubernetes
    /// replace a file by renaming another over it, which ends a watch on
    /// the file itself.
    fn new(sources: &Sources) -> Self {
        let mut set = WatchSet::default();
        let add_dir = |dirs: &mut Vec<(PathBuf, bool)>, dir: PathBuf, recursive: bool| match dirs
            .iter_mut()
            .find(|(d, _)| *d == dir)
        {
            Some((_, r)) => *r |= recursive,
            None => dirs.push((dir, recursive)),
        };
        for file in &sources.files {
            let file = absolute(file);
            if let Some(parent) = file.parent() {
                add_dir(&mut set.dirs, parent.to_path_buf(), false);
            }
            set.files.push(file);
        }
        for pattern in &sources.patterns {
            let pattern = absolute(pattern);
            let Some(text) = pattern.to_str() else {
                continue;
            };
            if let Ok(p) = glob::Pattern::new(text) {
                set.patterns.push(p);
            }
            // The deepest directory above the first component with a glob.
            let mut base = PathBuf::new();
            let mut rest = 0;
            for component in pattern.components() {
                let part = component.as_os_str().to_string_lossy();
                if rest > 0 || (matches!(component, Component::Normal(_)) && has_glob(&part)) {
                    rest += 1;
                } else {
                    base.push(component);
                }
            }
            add_dir(&mut set.dirs, base, rest > 1 || text.contains("**"));
        }
        set
    }

    fn relevant(&self, path: &Path) -> bool {
        self.files.iter().any(|f| f == path)
            || self.patterns.iter().any(|p| p.matches_path(path))
            // A Kubernetes ConfigMap volume swaps a `..data` symlink.
            || (path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".."))
                && path
                    .parent()
                    .is_some_and(|d| self.dirs.iter().any(|(w, _)| w == d)))
    }

    /// Whether `event` can change the config: a change of content (not a
    /// read) of one of its files.
    fn triggers(&self, event: &notify::Event) -> bool {
        is_change(&event.kind) && event.paths.iter().any(|p| self.relevant(p))
    }

    /// Starts watching; directories that do not exist are skipped (a glob
    /// directory created later is seen after the next reload). Only the
    /// events that [trigger](Self::triggers) a reload, and errors, are
    /// sent on `tx`: the other files of a watched directory (a log written
    /// beside the config) may change at every request, and each of their
    /// events would wake the runtime and restart the debounce.
    fn watch(
        &self,
        tx: mpsc::Sender<notify::Result<notify::Event>>,
    ) -> Option<Box<dyn notify::Watcher + Send>> {
        let set = self.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.as_ref().is_ok_and(|e| !set.triggers(e)) {
                return;
            }
            // A full queue already holds events that trigger a reload.
            let _ = tx.try_send(event);
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch the config files; reload with SIGHUP");
                return None;
            }
        };
        for (dir, recursive) in &self.dirs {
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match watcher.watch(dir, mode) {
                Ok(()) => tracing::debug!(dir = %dir.display(), "watching"),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch a config directory")
                }
            }
        }
        Some(Box::new(watcher))
    }
}

/// Whether an event can mean changed content (reads, including the
/// reloader's own, must not trigger a reload).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        _ => true,
    }
}

/// Starts watching `sources` and reloading on changes, until `stop`. The
/// watch is in place when this returns.
pub(super) fn spawn_watcher(
    reloader: Arc<Reloader>,
    sources: &Sources,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = mpsc::channel(256);
    let mut set = WatchSet::new(sources);
    let mut watcher = set.watch(tx.clone());
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                event = rx.recv() => event,
                () = stop.cancelled() => return,
            };
            let Some(event) = event else { return };
            if let Err(e) = event {
                tracing::warn!(error = %e, "config watch error");
                continue;
            }
            // Wait for a quiet period: every further change restarts it.
            loop {
                tokio::select! {
                    more = rx.recv() => if more.is_none() { return },
                    () = tokio::time::sleep(DEBOUNCE) => break,
                    () = stop.cancelled() => return,
                }
            }
            if let Some(Ok(_)) = reloader.reload("watch", true).await {
                let new = WatchSet::new(&reloader.sources());
                if new != set {
                    // Drop the old watch first so its events stop.
                    drop(watcher.take());
                    set = new;
                    watcher = set.watch(tx.clone());
                }
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn connection_settings_need_a_restart() {
        let started = Config::parse(
            "routes: [{name: a, upstream: 'http://127.0.0.1:1'}]\n",
            "t.yaml",
            &Default::default(),
        )
        .unwrap();
        let mut new = started.clone();
        assert!(restart_needed(&started, &new).is_empty());
        new.proxy.request_head_timeout = Duration::from_secs(5);
        new.proxy.max_connections = Some(10);
        new.admin.max_connections = 8;
        new.proxy.overload_threshold = 0.5;
        new.proxy.overload_timeout = Duration::from_secs(1);
        let said = restart_needed(&started, &new);
        assert_eq!(said.len(), 5, "{said:?}");
        for key in [
            "proxy.request_head_timeout",
            "proxy.max_connections",
            "admin.max_connections",
            "proxy.overload_threshold",
            "proxy.overload_timeout",
        ] {
            assert!(said.iter().any(|s| s.starts_with(key)), "{key}: {said:?}");
        }
    }

    #[test]
    fn watch_set_covers_files_globs_and_their_directories() {
        let sources = Sources {
            files: vec!["/etc/tm/main.yaml".into(), "/etc/tm/slo/a.yaml".into()],
            patterns: vec!["/etc/tm/slo/*.yaml".into(), "/srv/slo/**/*.yaml".into()],
        };
        let set = WatchSet::new(&sources);
        assert_eq!(
            set.dirs,
            vec![
                (PathBuf::from("/etc/tm"), false),
                (PathBuf::from("/etc/tm/slo"), false),
                (PathBuf::from("/srv/slo"), true),
            ]
        );
        assert!(set.relevant(Path::new("/etc/tm/main.yaml")));
        assert!(set.relevant(Path::new("/etc/tm/slo/new.yaml")));
        assert!(set.relevant(Path::new("/srv/slo/team/x.yaml")));
        assert!(set.relevant(Path::new("/etc/tm/..data")));
        assert!(!set.relevant(Path::new("/etc/tm/other.txt")));
        assert!(!set.relevant(Path::new("/etc/tm/slo/notes.md")));

        // What the watcher passes on: changes of the config's files only.
        let event = |kind, path: &str| notify::Event::new(kind).add_path(path.into());
        let write = EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any));
        assert!(set.triggers(&event(write, "/etc/tm/main.yaml")));
        assert!(set.triggers(&event(write, "/etc/tm/slo/new.yaml")));
        assert!(!set.triggers(&event(write, "/etc/tm/tokenmeter.log")));
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(!set.triggers(&event(read, "/etc/tm/main.yaml")));
    }

    #[test]
    fn reads_are_not_changes() {
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
        assert!(is_change(&EventKind::Remove(
            notify::event::RemoveKind::File
        )));
    }
}
