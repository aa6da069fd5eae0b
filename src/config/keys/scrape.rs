//! The keys of `scrape`: how the routes' pages are scraped.

use super::super::ScrapeSettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `scrape`.
pub(super) static SCRAPE: Table = Table {
    fields: fields_of::<ScrapeSettings>,
    keys: &[
        key(
            "interval",
            "duration",
            "`5s`",
            "How often each page is fetched, where a route gives no `scrape_interval`.",
        ),
        key(
            "timeout",
            "duration",
            "`2s`",
            "How long one fetch may take, the body read included; past it the scrape fails. \
            Must be below the interval of every route scraped (`scrape_interval`, else \
            `scrape.interval`), so that a slow page never has two fetches in flight.",
        ),
        key(
            "max_body",
            "size",
            "`4MiB`",
            "Largest page read; a larger one fails the scrape.",
        ),
    ],
};
