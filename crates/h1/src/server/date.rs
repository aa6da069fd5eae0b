//! The `Date` of a response (RFC 9110 §6.6.1), formatted once a second per
//! thread.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An IMF-fixdate is this long: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [0; LEN] }) };
}

/// Appends the current date to `out`.
pub(super) fn write(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with_borrow_mut(|cached| {
        if cached.second != second {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
            if text.len() == LEN {
                cached.text.copy_from_slice(text.as_bytes());
                cached.second = second;
            } else {
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.text);
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_date_is_an_imf_fixdate_of_now() {
        let mut out = Vec::new();
        super::write(&mut out);
        let text = std::str::from_utf8(&out).unwrap();
        let parsed = httpdate::parse_http_date(text).unwrap();
        let off = std::time::SystemTime::now()
            .duration_since(parsed)
            .unwrap_or_default();
        assert!(off < std::time::Duration::from_secs(2), "{text}");
        assert!(text.ends_with(" GMT"), "{text}");
    }
}
