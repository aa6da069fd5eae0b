//! The ledger on a told clock: shares by hand, and the sum that closes.

use super::*;
use std::collections::HashMap;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[track_caller]
fn assert_closes(t: &Totals) {
    let sum = t.charged + t.in_flight + t.other_replicas + t.idle;
    for (what, got, want) in [
        ("gpu_seconds", sum.gpu_seconds, t.total.gpu_seconds),
        ("joules", sum.joules, t.total.joules),
        ("cost", sum.cost, t.total.cost),
    ] {
        assert!(
            close(got, want),
            "{what}: parts {got} against total {want} in {t:?}"
        );
    }
}

#[test]
fn requests_in_flight_share_the_gpus_and_the_rest_is_idle() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(2), Some(3.6)));
    // Idle for 1 s, then a alone for 1 s, a and b for 2 s, b alone for 1 s.
    let a = ledger.open(t0 + secs(1.0));
    let b = ledger.open(t0 + secs(2.0));
    let charged_a = a.close(t0 + secs(4.0), 0);
    let charged_b = b.close(t0 + secs(5.0), 0);
    // a: 1 s × 2 GPUs + 2 s × 2 GPUs / 2 = 4; b: 2 + 2 = 4.
    assert!(close(charged_a.gpu_seconds, 4.0), "{charged_a:?}");
    assert!(close(charged_b.gpu_seconds, 4.0), "{charged_b:?}");
    // 3.6 an hour per GPU: 0.001 a GPU-second.
    assert!(close(charged_a.cost, 0.004), "{charged_a:?}");
    assert_eq!(charged_a.joules, 0.0, "no page, no energy");
    let t = ledger.totals(t0 + secs(6.0));
    assert!(
        close(t.idle.gpu_seconds, 4.0),
        "1 s before and 1 s after: {t:?}"
    );
    assert!(close(t.total.gpu_seconds, 12.0));
    assert_eq!(t.in_flight, Charge::default());
    assert_closes(&t);
}

#[test]
fn requests_still_in_flight_hold_what_they_accrued() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(1), None));
    let a = ledger.open(t0);
    let b = ledger.open(t0 + secs(1.0));
    let t = ledger.totals(t0 + secs(3.0));
    // a: 1 + 2/2, b: 2/2.
    assert!(close(t.in_flight.gpu_seconds, 3.0), "{t:?}");
    assert_eq!(t.charged, Charge::default());
    assert_closes(&t);
    drop(a);
    drop(b);
    let t = ledger.totals(Instant::now().max(t0 + secs(3.0)));
    assert!(t.in_flight.gpu_seconds.abs() < 1e-9, "{t:?}");
    assert_closes(&t);
}

#[test]
fn a_stale_gpu_reading_stops_the_time_and_the_shares_at_once() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    let fresh = secs(3.0);
    let a = ledger.open(t0);
    // No reading yet: nothing counted.
    let reading = gpus(&[("a", None, None), ("b", None, None)]);
    ledger.read_gpus(t0 + secs(1.0), &reading, fresh);
    // Fresh until 4 s; the page goes away; read again at 10 s.
    ledger.read_gpus(t0 + secs(10.0), &reading, fresh);
    let charged = a.close(t0 + secs(11.0), 0);
    // 1..4 and 10..11 at 2 GPUs.
    assert!(close(charged.gpu_seconds, 8.0), "{charged:?}");
    let t = ledger.totals(t0 + secs(11.0));
    assert!(close(t.total.gpu_seconds, 8.0), "{t:?}");
    assert_closes(&t);
}

#[test]
fn the_engines_load_leaves_the_other_replicas_their_part() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(1), None));
    let fresh = secs(100.0);
    // The engine runs 4 requests, 1 of them this replica's.
    let a = ledger.open(t0);
    ledger.read_engine(t0, Some(4.0), fresh);
    let charged = a.close(t0 + secs(8.0), 0);
    assert!(close(charged.gpu_seconds, 2.0), "{charged:?}");
    // Nothing of ours in flight, the engine busy: all the others'.
    let t = ledger.totals(t0 + secs(10.0));
    assert!(close(t.other_replicas.gpu_seconds, 8.0), "{t:?}");
    assert_eq!(t.idle.gpu_seconds, 0.0);
    // More of ours than the engine says: ours split the whole.
    let (b, c) = (ledger.open(t0 + secs(10.0)), ledger.open(t0 + secs(10.0)));
    ledger.read_engine(t0 + secs(10.0), Some(1.0), fresh);
    let (b, c) = (b.close(t0 + secs(12.0), 0), c.close(t0 + secs(12.0), 0));
    assert!(close(b.gpu_seconds + c.gpu_seconds, 2.0), "{b:?} {c:?}");
    // The engine idle: idle.
    ledger.read_engine(t0 + secs(12.0), Some(0.0), fresh);
    let t = ledger.totals(t0 + secs(13.0));
    assert!(close(t.idle.gpu_seconds, 1.0), "{t:?}");
    assert_closes(&t);
}

#[test]
fn this_replicas_own_requests_move_the_engines_load_between_readings() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(1), None));
    let fresh = secs(100.0);
    // The engine runs this replica's two requests and nothing else.
    let (a, b) = (ledger.open(t0), ledger.open(t0));
    ledger.read_engine(t0, Some(2.0), fresh);
    // b ends: the engine now runs a alone, though its page still says 2.
    let b = b.close(t0 + secs(2.0), 0);
    assert!(close(b.gpu_seconds, 1.0), "{b:?}");
    // c starts: the engine runs a and c, as the page said.
    let c = ledger.open(t0 + secs(4.0));
    let a = a.close(t0 + secs(6.0), 0);
    assert!(close(a.gpu_seconds, 1.0 + 2.0 + 1.0), "{a:?}");
    // c alone until 8, then nothing: its page's 2 are both gone.
    let c = c.close(t0 + secs(8.0), 0);
    assert!(close(c.gpu_seconds, 1.0 + 2.0), "{c:?}");
    let t = ledger.totals(t0 + secs(10.0));
    assert_eq!(t.other_replicas.gpu_seconds, 0.0, "{t:?}");
    assert!(close(t.idle.gpu_seconds, 2.0), "{t:?}");
    assert_closes(&t);
}

/// GPUs of a reading: (id, energy counter in mJ, power in W).
fn gpus(list: &[(&str, Option<f64>, Option<f64>)]) -> Vec<GpuSample> {
    list.iter()
        .map(|&(id, energy_millijoules, power_watts)| GpuSample {
            id: id.into(),
            energy_millijoules,
            power_watts,
        })
        .collect()
}

/// GPUs `ids` whose counters read `mj`.
fn counters(ids: &[&str], mj: f64) -> Vec<GpuSample> {
    let list: Vec<_> = ids.iter().map(|id| (*id, Some(mj), None)).collect();
    gpus(&list)
}

#[test]
fn energy_follows_the_counter_and_a_reset_is_not_a_negative() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    let fresh = secs(30.0);
    let read =
        |at: f64, mj: f64| ledger.read_gpus(t0 + secs(at), &counters(&["a", "b"], mj), fresh);
    read(0.0, 1_000_000.0);
    let a = ledger.open(t0);
    // 250 W a GPU over 10 s: 5,000 J, all a's (it was alone in flight).
    read(10.0, 3_500_000.0);
    let charged = a.close(t0 + secs(15.0), 0);
    assert!(close(charged.joules, 5_000.0), "{charged:?}");
    // Its last 5 s await the counters' next move.
    let t = ledger.totals(t0 + secs(15.0));
    assert!(close(t.awaiting_energy, 10.0), "{t:?}");
    read(20.0, 6_000_000.0);
    let (t, by_key) = ledger.snapshot(t0 + secs(20.0));
    assert!(close(by_key[0].1.joules, 7_500.0), "{by_key:?}");
    assert!(close(t.idle.joules, 2_500.0), "{t:?}");
    // The drivers reload: the counters go back; the span has no energy.
    read(25.0, 1_000.0);
    let t = ledger.totals(t0 + secs(25.0));
    assert_eq!(t.energy_resets, 2, "one a GPU");
    assert!(close(t.total.joules, 10_000.0), "{t:?}");
    read(30.0, 1_001_000.0);
    let t = ledger.totals(t0 + secs(31.0));
    assert!(
        close(t.total.joules, 10_000.0 + 2_000.0),
        "200 W for 5 s on 2 GPUs: {t:?}"
    );
    assert_eq!(t.energy_resets, 2);
    assert_closes(&t);
}

#[test]
fn a_gpu_that_joins_brings_no_lifetime_energy_and_one_that_leaves_is_no_reset() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    let fresh = secs(3.0);
    // 100 W a GPU: 100,000 mJ a second; c and d have run for years.
    let at = |s: f64, lifetime: f64| lifetime + 100_000.0 * s;
    let read = |s: f64, ids: &[(&str, f64)]| {
        let list: Vec<_> = ids
            .iter()
            .map(|&(id, life)| (id, Some(at(s, life)), None))
            .collect();
        ledger.read_gpus(t0 + secs(s), &gpus(&list), fresh);
    };
    let two = [("a", 0.0), ("b", 5e12)];
    let four = [("a", 0.0), ("b", 5e12), ("c", 9e15), ("d", 7e15)];
    for s in 0..=4 {
        read(f64::from(s), &two);
    }
    // c and d join at 5 s: their first reading is their baseline.
    for s in 5..=9 {
        read(f64::from(s), &four);
    }
    // c and d leave.
    for s in 10..=12 {
        read(f64::from(s), &two);
    }
    let t = ledger.totals(t0 + secs(12.0));
    // a and b: 12 s; c and d: 5 to 9 s.
    let want = 100.0 * (2.0 * 12.0 + 2.0 * 4.0);
    assert!(close(t.total.joules, want), "{t:?}");
    assert_eq!(t.energy_resets, 0);
    assert_eq!(t.implausible_samples, 0);
    assert_closes(&t);
}

#[test]
fn an_implausible_sample_is_skipped_and_counted() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    let fresh = secs(3.0);
    let read = |s: f64, mj: f64| ledger.read_gpus(t0 + secs(s), &counters(&["a"], mj), fresh);
    let a = ledger.open(t0);
    read(0.0, 1e9);
    read(1.0, 1e9 + 300_000.0);
    // Under telemetry's cap of 1e17 mJ, far above 5 kW over 1 s.
    read(2.0, 9e16);
    read(3.0, 1e9 + 900_000.0);
    let t = ledger.totals(t0 + secs(3.0));
    assert_eq!(t.implausible_samples, 1);
    assert!(close(t.total.joules, 900.0), "300 W for 3 s: {t:?}");
    // The counter really jumps: twice implausible, then a new baseline
    // (the span of the jump has no energy).
    read(4.0, 5e16);
    read(5.0, 5e16 + 10.0);
    read(6.0, 5e16 + 300_010.0);
    let t = ledger.totals(t0 + secs(6.0));
    assert_eq!(t.implausible_samples, 3);
    assert!(close(t.total.joules, 900.0 + 300.0), "{t:?}");
    let charged = a.close(t0 + secs(6.0), 0);
    assert!(close(charged.joules, 1_200.0), "{charged:?}");
    assert_closes(&ledger.totals(t0 + secs(6.0)));
}

#[test]
fn a_counter_refreshed_less_often_than_read_charges_each_its_own_time() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    let fresh = secs(3.0);
    // 1 GPU at 250 W whose page refreshes every 3 s, read every second.
    let mj = |s: u32| 250_000.0 * f64::from(s - s % 3);
    ledger.read_gpus(t0, &counters(&["g"], mj(0)), fresh);
    // a runs 0.5..2.5 s, just before the refresh at 3; b 3.5..5.5, after
    // it; each is alone.
    let mut a = Some(ledger.open(t0 + secs(0.5)));
    let mut b = None;
    for s in 1..=9 {
        if s == 3 {
            a.take().unwrap().close(t0 + secs(2.5), 1);
        }
        if s == 4 {
            b = Some(ledger.open(t0 + secs(3.5)));
        }
        if s == 6 {
            b.take().unwrap().close(t0 + secs(5.5), 2);
        }
        ledger.read_gpus(t0 + secs(f64::from(s)), &counters(&["g"], mj(s)), fresh);
        assert_closes(&ledger.totals(t0 + secs(f64::from(s))));
    }
    let (_, by_key) = ledger.snapshot(t0 + secs(9.0));
    let of = |k: u8| by_key.iter().find(|(key, _)| *key == k).unwrap().1;
    for k in [1, 2] {
        let c = of(k);
        assert!(close(c.gpu_seconds, 2.0), "{c:?}");
        assert!(close(c.joules / c.gpu_seconds, 250.0), "key {k}: {c:?}");
    }
}

#[test]
fn without_the_counter_the_power_usage_is_integrated() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, None));
    ledger.read_gpus(t0, &gpus(&[("a", None, Some(300.0))]), secs(30.0));
    let t = ledger.totals(t0 + secs(2.0));
    assert!(close(t.idle.joules, 600.0), "{t:?}");
    assert_closes(&t);
}

#[test]
fn a_new_price_applies_from_when_it_is_configured() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(1), Some(3600.0)));
    let a = ledger.open(t0);
    ledger.configure(t0 + secs(10.0), Gpus::Fixed(1), Some(7200.0));
    let charged = a.close(t0 + secs(20.0), 0);
    assert!(close(charged.cost, 10.0 + 20.0), "{charged:?}");
    assert!(close(charged.gpu_seconds, 20.0), "{charged:?}");
}

#[test]
fn a_time_told_late_never_integrates_backwards() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0 + secs(5.0), Gpus::Fixed(1), None));
    let a = ledger.open(t0);
    let charged = a.close(t0 + secs(4.0), 0);
    assert_eq!(charged, Charge::default());
    let t = ledger.totals(t0 + secs(6.0));
    assert!(close(t.total.gpu_seconds, 1.0), "{t:?}");
    assert_closes(&t);
}

/// A small linear congruential generator from `seed`: the same day every
/// run. Each call gives a number below its argument.
fn day(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    }
}

#[test]
fn the_sum_closes_at_every_step_of_a_random_day() {
    let mut next = day(0x2545_f491_4f6c_dd1d);
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, Some(2.5)));
    let fresh = secs(3.0);
    let mut open = Vec::new();
    let mut now = t0;
    let mut energy = 0.0;
    let mut charged = Charge::default();
    for _ in 0..5_000 {
        now += Duration::from_millis(next(400));
        match next(6) {
            0 | 1 => open.push(ledger.open(now)),
            2 if !open.is_empty() => {
                let i = next(open.len() as u64) as usize;
                charged += open.swap_remove(i).close(now, (i % 3) as u8);
            }
            3 => {
                energy += next(1000) as f64 * 1000.0;
                let n = next(4) as usize;
                let with_counter = next(5) > 0;
                let list: Vec<GpuSample> = (0..n)
                    .map(|i| GpuSample {
                        id: ["a", "b", "c"][i % 3].into(),
                        energy_millijoules: with_counter.then_some(energy),
                        power_watts: Some(next(700) as f64),
                    })
                    .collect();
                ledger.read_gpus(now, &list, fresh);
            }
            4 => ledger.read_engine(now, Some(next(8) as f64), fresh),
            _ => {}
        }
        let t = ledger.totals(now);
        assert_closes(&t);
        for part in [t.total, t.charged, t.in_flight, t.other_replicas, t.idle] {
            assert!(
                part.gpu_seconds >= -1e-6 && part.joules >= -1e-6 && part.cost >= -1e-6,
                "{t:?}"
            );
        }
    }
    let (t, by_key) = ledger.snapshot(now);
    assert!(by_key.len() > 1, "{by_key:?}");
    let keyed = by_key
        .iter()
        .fold(Charge::default(), |sum, (_, c)| sum + *c);
    assert!(close(keyed.gpu_seconds, charged.gpu_seconds), "{by_key:?}");
    assert!(close(keyed.cost, charged.cost), "{by_key:?}");
    assert!(
        close(t.charged.gpu_seconds, charged.gpu_seconds),
        "{t:?} {charged:?}"
    );
    assert!(t.total.gpu_seconds > 0.0 && t.total.joules > 0.0);
}

/// The parts of a window from the point `(id, totals, by_key)` to `now`:
/// the requests that ended in it by key, in flight, other replicas and
/// idle; and its total.
fn window(
    ledger: &Ledger<u8>,
    now: Instant,
    (id, before, keyed_before): &(u64, Totals, Vec<(u8, Charge)>),
) -> (HashMap<u8, Charge>, Charge, Charge, Charge) {
    let (t, keyed, since) = ledger.snapshot_since(now, &[*id]);
    let since = since[0].clone().expect("the point is kept");
    let mut ended: HashMap<u8, Charge> = keyed.into_iter().collect();
    for (k, c) in keyed_before {
        *ended.get_mut(k).unwrap() = ended[k] - *c;
    }
    for (k, c) in since.ended {
        *ended.get_mut(&k).unwrap() = ended[&k] - c;
    }
    let in_flight = t.in_flight - since.still_in_flight;
    let rest = t.other_replicas - before.other_replicas + t.idle - before.idle;
    (ended, in_flight, rest, t.total - before.total)
}

#[track_caller]
fn assert_window_closes(parts: &(HashMap<u8, Charge>, Charge, Charge, Charge)) {
    let (ended, in_flight, rest, total) = parts;
    let sum = ended.values().fold(*in_flight + *rest, |s, c| s + *c);
    for (what, got, want) in [
        ("gpu_seconds", sum.gpu_seconds, total.gpu_seconds),
        ("joules", sum.joules, total.joules),
        ("cost", sum.cost, total.cost),
    ] {
        let err = (got - want).abs();
        assert!(
            err <= 1e-6 * want.abs().max(1.0),
            "{what}: parts {got} against total {want} in {parts:?}"
        );
    }
    for c in ended.values().chain([in_flight, rest]) {
        assert!(
            c.gpu_seconds >= -1e-6 && c.joules >= -1e-6 && c.cost >= -1e-6,
            "{parts:?}"
        );
    }
}

#[test]
fn a_window_counts_only_what_accrued_inside_it() {
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Fixed(2), Some(3.6)));
    // a from 0 to 30 s, across the point at 10; b from 15 on.
    let a = ledger.open(t0);
    let point = ledger.point(t0 + secs(10.0));
    let b = ledger.open(t0 + secs(15.0));
    let whole = a.close(t0 + secs(30.0), 1);
    // a: 15 s alone on 2 GPUs, 15 shared: 45 GPU-seconds in all.
    assert!(close(whole.gpu_seconds, 45.0), "{whole:?}");
    let parts = window(&ledger, t0 + secs(40.0), &point);
    assert_window_closes(&parts);
    let (ended, in_flight, rest, total) = parts;
    assert!(close(total.gpu_seconds, 60.0), "{total:?}");
    // a, in the window: 5 s alone, then 15 s shared.
    assert!(close(ended[&1].gpu_seconds, 25.0), "{ended:?}");
    assert!(close(ended[&1].cost, 0.025), "{ended:?}");
    // b: 15 s shared, then 10 alone.
    assert!(close(in_flight.gpu_seconds, 35.0), "{in_flight:?}");
    assert_eq!(rest.gpu_seconds, 0.0);
    // A point forgotten starts no window.
    ledger.keep_points(|id| id != point.0);
    let (_, _, since) = ledger.snapshot_since(t0 + secs(40.0), &[point.0]);
    assert_eq!(since, vec![None]);
    drop(b);
}

#[test]
fn every_window_closes_through_a_random_day_with_energy() {
    let mut next = day(0x9e37_79b9_7f4a_7c15);
    let t0 = Instant::now();
    let ledger = Arc::new(Ledger::<u8>::new(t0, Gpus::Scraped, Some(2.5)));
    let fresh = secs(3.0);
    let mut open = Vec::new();
    let mut points = Vec::new();
    let mut now = t0;
    let mut energy = 0.0;
    for step in 0..4_000 {
        now += Duration::from_millis(next(400));
        match next(7) {
            0 | 1 => open.push(ledger.open(now)),
            2 if !open.is_empty() => {
                let i = next(open.len() as u64) as usize;
                open.swap_remove(i).close(now, (i % 3) as u8);
            }
            // The counters move on some readings only (a page refreshed
            // less often than read).
            3 => {
                if next(3) == 0 {
                    energy += next(1000) as f64 * 1000.0;
                }
                let list: Vec<GpuSample> = ["a", "b"]
                    .iter()
                    .map(|id| GpuSample {
                        id: (*id).into(),
                        energy_millijoules: Some(energy),
                        power_watts: None,
                    })
                    .collect();
                ledger.read_gpus(now, &list, fresh);
            }
            4 => ledger.read_engine(now, Some(next(8) as f64), fresh),
            5 if step % 5 == 0 => {
                points.push(ledger.point(now));
                // Forget some, as the history thins its points.
                if points.len() > 6 {
                    let gone = points.remove(next(3) as usize).0;
                    ledger.keep_points(|id| id != gone);
                }
            }
            _ => {}
        }
        if step % 50 == 0 {
            for p in &points {
                assert_window_closes(&window(&ledger, now, p));
            }
        }
    }
    assert!(points.len() > 3);
    let (t, _) = ledger.snapshot(now);
    assert!(t.total.joules > 0.0 && t.charged.joules > 0.0, "{t:?}");
}
