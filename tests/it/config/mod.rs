//! Config loading at the library boundary: the shipped example configs load,
//! and bad configs report every problem at once with file, line and key.

mod errors;
mod loading;
mod otlp;
mod overrides;
mod scrape;
mod slo_files;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokenmeter::config::{
    Buckets, Config, ConfigError, ConfigErrors, Overrides, Protocol, ProxySettings, Timeouts,
};

const CONFIG_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config");

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, "test.yaml", &Overrides::default())
}

fn errors_of(text: &str) -> Vec<ConfigError> {
    match parse(text) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(ConfigErrors(errors)) => errors,
    }
}

/// `(line, key)` of each error, in order.
fn lines_and_keys(errors: &[ConfigError]) -> Vec<(Option<u64>, &str)> {
    errors.iter().map(|e| (e.line, e.key.as_str())).collect()
}

/// The message of the first error at `key` (empty if there is none).
fn message_of<'a>(errors: &'a [ConfigError], key: &str) -> &'a str {
    errors
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.message.as_str())
        .unwrap_or_default()
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("test address")
}

fn example_configs() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(CONFIG_DIR)
        .expect("config/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.sort();
    paths
}
