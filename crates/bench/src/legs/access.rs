//! Metering accuracy's pairing: the proxy's TTFT of each request, read from
//! its access log, matched with the client's by `x-request-id`.

use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use crate::load::{LoadResult, REQUEST_ID_PREFIX};

/// The proxy's TTFT of each measured stream against the client's, matched
/// by `x-request-id`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pairing {
    /// The client's and the proxy's TTFT of each paired request,
    /// nanoseconds.
    pub ttft_ns: Vec<(u64, u64)>,
    /// Streams the client measured that no access line matched.
    pub unpaired: u64,
}

/// Pairs the client's TTFT of each measured stream with the `ttft_ms` of
/// the access-log line carrying its `x-request-id`, reading the proxy's log
/// from byte `from` (where it stood when the run began). The log writer
/// flushes on its own thread: lines still missing are waited for, up to
/// 5 s, before they count as unpaired.
pub(super) async fn pair_with_access_log(
    load: &LoadResult,
    log: &Path,
    from: u64,
) -> anyhow::Result<Pairing> {
    use std::io::Seek as _;
    // Nothing to pair (a non-streamed scenario): the log, which can hold a
    // line for each of a million requests, is not read.
    if load.ttft_by_request.is_empty() {
        return Ok(Pairing::default());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut new = Vec::new();
        std::fs::File::open(log)
            .and_then(|mut f| {
                f.seek(std::io::SeekFrom::Start(from))?;
                f.read_to_end(&mut new)
            })
            .with_context(|| format!("reading {}", log.display()))?;
        let proxy = access_ttfts(&String::from_utf8_lossy(&new));
        let pairing = pair(&load.ttft_by_request, &proxy);
        if pairing.unpaired == 0 || std::time::Instant::now() >= deadline {
            return Ok(pairing);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each bench request's TTFT in an access log (JSON lines), by the number
/// in its `x-request-id`, in nanoseconds (the log gives microseconds).
pub fn access_ttfts(log: &str) -> std::collections::HashMap<u64, u64> {
    log.lines()
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            if v["target"] != "tokenmeter::access" {
                return None;
            }
            let f = &v["fields"];
            let id = f["request_id"]
                .as_str()?
                .strip_prefix(REQUEST_ID_PREFIX)?
                .parse()
                .ok()?;
            let ms = f["ttft_ms"].as_f64()?;
            Some((id, (ms * 1e6).round() as u64))
        })
        .collect()
}

/// Matches the client's `(id, ttft)` list with the proxy's by id.
pub fn pair(client: &[(u64, u64)], proxy: &std::collections::HashMap<u64, u64>) -> Pairing {
    let mut out = Pairing::default();
    for &(id, client_ns) in client {
        match proxy.get(&id) {
            Some(&proxy_ns) => out.ttft_ns.push((client_ns, proxy_ns)),
            None => out.unpaired += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pairs_access_lines_with_the_clients_requests_by_id() {
        // Lines as `--log-format json` writes them: other targets, other
        // ids, a line with no TTFT and a torn last line are skipped.
        let log = r#"{"timestamp":"t","level":"WARN","fields":{"message":"slow"},"target":"tokenmeter::proxy"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000003","ttft_ms":2.0415},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000004","ttft_ms":1.9},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"other-0000000005","ttft_ms":1.0},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000006","status":502},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000007","ttft_ms":1"#;
        let proxy = access_ttfts(log);
        assert_eq!(proxy.len(), 2, "{proxy:?}");
        assert_eq!(proxy[&3], 2_041_500);
        assert_eq!(proxy[&4], 1_900_000);

        let client = [
            (3, 2_100_000),
            (4, 1_899_000),
            (5, 1_000_000),
            (7, 1_000_000),
        ];
        let p = pair(&client, &proxy);
        assert_eq!(
            p.ttft_ns,
            vec![(2_100_000, 2_041_500), (1_899_000, 1_900_000)]
        );
        assert_eq!(p.unpaired, 2);
    }

    #[tokio::test]
    async fn lines_written_after_the_run_began_are_the_only_ones_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("tokenmeter.log");
        let line = |id: u64, ms: f64| {
            format!(
                "{{\"fields\":{{\"request_id\":\"bench-{id:010}\",\"ttft_ms\":{ms}}},\"target\":\"tokenmeter::access\"}}\n"
            )
        };
        // The previous round's request 0 had another TTFT.
        let earlier = line(0, 9.0);
        std::fs::write(&log, format!("{earlier}{}", line(0, 2.0))).unwrap();
        let mut load = LoadResult::empty().unwrap();
        load.ttft_by_request = vec![(0, 2_000_100)];
        let p = pair_with_access_log(&load, &log, earlier.len() as u64)
            .await
            .unwrap();
        assert_eq!(p.ttft_ns, vec![(2_000_100, 2_000_000)]);
        assert_eq!(p.unpaired, 0);
    }
}
