//! `/slo`'s sessions as text: per route, the sessions open now, then per
//! window the sessions that ended (their model and outside time), the
//! follow-up cache-hit ratio, TTFT p50/p90 by kind of turn, and the
//! costliest sessions with their keys shortened.

use std::fmt::Write as _;

use slo::live::sessions::SessionsReport;

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s * 1000.0))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

/// The report as text: a block per route.
pub fn render_text(report: &SessionsReport) -> String {
    let mut out = String::new();
    for route in &report.routes {
        let _ = writeln!(
            out,
            "sessions  route {}  active {}",
            route.route, route.active
        );
        let _ = writeln!(
            out,
            "{:<6} {:>8} {:>7} {:>10} {:>10} {:>7} {:>10}  ttft p50/p90 ms by turn (requests)",
            "window", "ended", "turns", "model_s", "outside_s", "model", "cache_hit"
        );
        for w in &route.windows {
            let turns: Vec<String> = w
                .turns
                .iter()
                .filter(|t| t.requests > 0)
                .map(|t| {
                    format!(
                        "{} {}/{} ({})",
                        t.turn,
                        ms(t.ttft.p50),
                        ms(t.ttft.p90),
                        t.requests
                    )
                })
                .collect();
            let e = &w.ended;
            let _ = writeln!(
                out,
                "{:<6} {:>8} {:>7} {:>10.3} {:>10.3} {:>7} {:>10}  {}",
                w.window,
                e.sessions,
                e.turns,
                e.model_seconds,
                e.gap_seconds,
                pct(w.model_share),
                pct(w.follow_up_cache_hit_ratio),
                turns.join("  ")
            );
            for s in &w.costliest {
                let cost = match (s.cost, s.currency.as_deref()) {
                    (Some(c), Some(cur)) => format!("{c:.6} {cur}"),
                    _ => "-".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "         costliest {:<10} tenant {:<12} turns {:>4}  {:>9.3} s  gpu {:>9.3} s  cost {}",
                    s.key, s.tenant, s.turns, s.duration_seconds, s.gpu_seconds, cost
                );
            }
        }
        out.push('\n');
    }
    out
}
