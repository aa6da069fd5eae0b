//! What kind of value a typed key holds: the `deserialize_with` (and, for
//! durations, `with`) functions the config types name on their fields.
//!
//! Each reads the text written and checks it with the same parser and the
//! same message as everywhere else in loading; a bad value is recorded with
//! its location and does not stop the reading (see `raw/field.rs`), so
//! every problem of a file is reported at once. The stand-in each gives for
//! a bad value is never used: a config with a problem is refused.

use std::time::Duration;

use serde::Deserializer;

use super::IpNet;
use super::load::values::{
    parse_bool, parse_duration, parse_ip_net, parse_percentage, parse_positive_count, parse_size,
};
use super::raw::field::{checked, checked_list};

/// A duration (`500ms`, `30s`, `10m`, `1h 30m`), greater than zero; shown
/// in seconds.
pub(super) mod duration {
    use super::*;

    pub(in super::super) use super::super::show::secs as serialize;

    pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        checked(d, Duration::ZERO, parse_duration)
    }
}

/// A size: bytes (`4194304`) or with a unit (`512KiB`, `4MiB`, `100kB`).
pub(super) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, parse_size)
}

/// The largest request head: a size from 8 KiB (hyper's floor) to 1 MiB.
pub(super) fn request_head_size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, |text| match parse_size(text)? {
        n if (8 * 1024..=1024 * 1024).contains(&n) => Ok(n),
        n => Err(format!("{n} bytes: must be from 8KiB to 1MiB")),
    })
}

/// A whole number, at least 1, where leaving the key out means "none set".
pub(super) fn optional_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    checked(d, None, |text| parse_positive_count(text).map(Some))
}

/// A whole number of idle connections, `0` keeping none.
pub(super) fn idle_count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, 0, |text| {
        text.trim()
            .parse::<usize>()
            .map_err(|_| format!("invalid count `{text}`: expected a whole number (0 keeps none)"))
    })
}

/// `true` or `false` (YAML 1.2's core spellings).
pub(super) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    checked(d, false, parse_bool)
}

/// A percentage, `1%` to `100%`, held as a share (0.01 to 1).
pub(super) fn percentage<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    checked(d, 1.0, parse_percentage)
}

/// A list of addresses or CIDR ranges (`10.0.0.0/8`, `::1`).
pub(super) fn ip_nets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    checked_list(d, parse_ip_net)
}
