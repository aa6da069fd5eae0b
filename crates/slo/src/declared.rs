//! Objectives a client declares for one request, in the headers gateways
//! and schedulers send (llm-d's `x-llm-d-slo-ttft-ms` and
//! `x-llm-d-slo-tpot-ms`, with their former names `x-slo-ttft-ms` and
//! `x-slo-tpot-ms` still read, and `x-slo-e2el-ms`): read into a class of
//! the request's own, named [`DECLARED`], against which it is judged
//! instead of its route's class.

use std::time::Duration;

use crate::class::{DEFAULT_WINDOW, Goodput, Objective, ObjectiveKind, SloClass};

/// The `slo` label of requests judged against their declared objectives; no
/// class in the SLO files may take it.
pub const DECLARED: &str = "declared";

/// The header of each kind of objective, in milliseconds, and the name it
/// had before llm-d renamed it, still read as a deprecated alias when the
/// request does not send the new one. In [`ObjectiveKind::ALL`] order.
pub const HEADERS: [(ObjectiveKind, &str, Option<&str>); 3] = [
    (
        ObjectiveKind::Ttft,
        "x-llm-d-slo-ttft-ms",
        Some("x-slo-ttft-ms"),
    ),
    (
        ObjectiveKind::Tpot,
        "x-llm-d-slo-tpot-ms",
        Some("x-slo-tpot-ms"),
    ),
    (ObjectiveKind::E2el, "x-slo-e2el-ms", None),
];

/// A request's declaration, from `header`, the value of the request header
/// a (lowercase) name names: for each kind, its header's value, else its
/// alias's (the new name wins when both are sent, whatever either says).
pub fn values<'a>(header: impl Fn(&str) -> Option<&'a [u8]>) -> Values<'a> {
    HEADERS.map(|(_, name, alias)| header(name).or_else(|| alias.and_then(&header)))
}

/// The largest bound a client may declare for each kind: a larger one is
/// judged at this bound. In [`ObjectiveKind::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps(pub [Duration; 3]);

impl Default for Caps {
    /// TTFT 60 s, TPOT 10 s, E2EL an hour.
    fn default() -> Self {
        Caps([
            Duration::from_secs(60),
            Duration::from_secs(10),
            Duration::from_secs(3600),
        ])
    }
}

impl Caps {
    fn of(&self, kind: ObjectiveKind) -> Duration {
        self.0[kind as usize]
    }
}

/// The declaration of a request: each header's value, in
/// [`ObjectiveKind::ALL`] order, `None` where it sent none.
pub type Values<'a> = [Option<&'a [u8]>; 3];

/// Reads a request's declared objectives: `Ok(None)` when it declares
/// none; the objectives that are not plausible when any is not (then none
/// of its declaration is used).
pub fn declared(values: Values<'_>, caps: &Caps) -> Result<Option<SloClass>, Vec<ObjectiveKind>> {
    let mut objectives = Vec::new();
    let mut refused = Vec::new();
    for (kind, value) in ObjectiveKind::ALL.into_iter().zip(values) {
        let Some(value) = value else { continue };
        match bound(value) {
            Some(threshold) => objectives.push(Objective {
                kind,
                threshold: threshold.min(caps.of(kind)),
                // Each request has a class of its own: the target is never
                // read, only the threshold.
                target: 0.99,
            }),
            None => refused.push(kind),
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    if objectives.is_empty() {
        return Ok(None);
    }
    Ok(Some(SloClass {
        name: DECLARED.to_owned(),
        description: "Objectives the client declared for the request.".to_owned(),
        window: DEFAULT_WINDOW,
        goodput: Goodput {
            require: objectives.iter().map(|o| o.kind).collect(),
            target: None,
        },
        objectives,
        per_tenant_alerts: false,
        exclude_slow_readers: false,
    }))
}

/// The class `/slo` reports requests judged against their own
/// declarations under: no objectives of its own (each request had its
/// own), goodput without a target.
pub fn report_class() -> SloClass {
    SloClass {
        name: DECLARED.to_owned(),
        description: "Objectives the clients declared, per request.".to_owned(),
        window: DEFAULT_WINDOW,
        objectives: Vec::new(),
        goodput: Goodput {
            require: Vec::new(),
            target: None,
        },
        per_tenant_alerts: false,
        exclude_slow_readers: false,
    }
}

/// A declared bound in milliseconds: a positive decimal number (`250`,
/// `12.5`) of at most a day; anything else is not a plausible duration.
fn bound(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let ms: f64 = text.parse().ok()?;
    (ms > 0.0 && ms <= 86_400_000.0).then(|| Duration::from_secs_f64(ms / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        ttft: Option<&str>,
        tpot: Option<&str>,
        e2el: Option<&str>,
    ) -> Result<Option<SloClass>, Vec<ObjectiveKind>> {
        declared(
            [ttft, tpot, e2el].map(|v| v.map(str::as_bytes)),
            &Caps::default(),
        )
    }

    fn bounds(class: &SloClass) -> Vec<(ObjectiveKind, Duration)> {
        class
            .objectives
            .iter()
            .map(|o| (o.kind, o.threshold))
            .collect()
    }

    #[test]
    fn declared_bounds_become_the_requests_class() {
        let class = read(Some("250"), Some(" 12.5 "), None).unwrap().unwrap();
        assert_eq!(class.name, DECLARED);
        assert_eq!(
            bounds(&class),
            [
                (ObjectiveKind::Ttft, Duration::from_millis(250)),
                (ObjectiveKind::Tpot, Duration::from_micros(12_500)),
            ]
        );
        assert_eq!(
            class.goodput.require,
            [ObjectiveKind::Ttft, ObjectiveKind::Tpot]
        );
        assert_eq!(read(None, None, None), Ok(None));
    }

    #[test]
    fn llm_ds_names_win_over_their_deprecated_aliases() {
        let sent = |pairs: &'static [(&'static str, &'static str)]| {
            values(move |name| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_bytes())
            })
        };
        let got = sent(&[("x-slo-ttft-ms", "1"), ("x-llm-d-slo-ttft-ms", "600000")]);
        assert_eq!(got, [Some(&b"600000"[..]), None, None]);
        let got = sent(&[("x-slo-ttft-ms", "5"), ("x-slo-tpot-ms", "7")]);
        assert_eq!(got, [Some(&b"5"[..]), Some(&b"7"[..]), None]);
        let got = sent(&[("x-llm-d-slo-tpot-ms", "9"), ("x-slo-e2el-ms", "100")]);
        assert_eq!(got, [None, Some(&b"9"[..]), Some(&b"100"[..])]);
        // The new name's value is the one judged, even when it is refused.
        let got = sent(&[("x-llm-d-slo-tpot-ms", "soon"), ("x-slo-tpot-ms", "7")]);
        assert_eq!(
            declared(got, &Caps::default()),
            Err(vec![ObjectiveKind::Tpot])
        );
    }

    #[test]
    fn bounds_past_the_caps_are_judged_at_the_caps() {
        let class = read(Some("600000"), None, Some("86400000"))
            .unwrap()
            .unwrap();
        assert_eq!(
            bounds(&class),
            [
                (ObjectiveKind::Ttft, Duration::from_secs(60)),
                (ObjectiveKind::E2el, Duration::from_secs(3600)),
            ]
        );
    }

    #[test]
    fn implausible_values_refuse_the_whole_declaration() {
        for bad in [
            "0", "-5", "abc", "", "1e3", "NaN", "inf", "86400001", "1..2", "５",
        ] {
            assert_eq!(
                read(Some("200"), Some(bad), None),
                Err(vec![ObjectiveKind::Tpot]),
                "{bad:?}"
            );
        }
        assert_eq!(
            read(Some("x"), None, Some("0.0")),
            Err(vec![ObjectiveKind::Ttft, ObjectiveKind::E2el])
        );
        assert!(declared([Some(&[0xff, b'1'][..]), None, None], &Caps::default()).is_err());
    }
}
