//! The table on a told clock: turns, model time as a union, gaps, ends by
//! idle time and eviction, and the Responses lineage.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(k: &str) -> Named {
    Named::Key(k.into())
}

fn added(input: u64, cached: u64) -> Tally {
    Tally {
        input_tokens: input,
        cached_tokens: cached,
        output_tokens: 10,
        gpu_seconds: 0.5,
        joules: None,
        cost: Some(0.25),
        good: true,
    }
}

struct Rig {
    table: Table,
    t0: Instant,
    route: Arc<str>,
    tenant: Arc<str>,
}

impl Rig {
    fn new(idle: Duration, max: usize) -> Self {
        Self {
            table: Table::new(idle, max),
            t0: Instant::now(),
            route: "chat".into(),
            tenant: "team-a".into(),
        }
    }

    fn start(&mut self, named: Named, at: u64) -> (Place, Vec<Ended>) {
        let at = self.t0 + ms(at);
        self.table.start(named, &self.route, &self.tenant, at)
    }

    fn finish(&mut self, place: &Place, at: u64, add: Tally) {
        self.table.finish(place, self.t0 + ms(at), add, None);
    }

    fn sweep(&mut self, at: u64) -> Vec<Ended> {
        self.table.sweep(self.t0 + ms(at))
    }
}

#[test]
fn an_agent_task_with_tool_gaps_and_overlapping_requests() {
    let mut r = Rig::new(Duration::from_secs(60), 100);
    // Turn 1: 0..1000; a tool runs 1000..1500; turns 2 and 3 overlap
    // (sub-agents): 1500..2500 and 2000..3000; the person reads until
    // 4000; turn 4: 4000..4200.
    let (t1, _) = r.start(key("s"), 0);
    assert_eq!((t1.turn, t1.gap), (1, None));
    r.finish(&t1, 1000, added(100, 0));
    let (t2, _) = r.start(key("s"), 1500);
    assert_eq!(t2.gap, Some(ms(500)));
    let (t3, _) = r.start(key("s"), 2000);
    assert_eq!((t3.turn, t3.gap), (3, None), "overlapping: no gap");
    r.finish(&t2, 2500, added(150, 90));
    r.finish(&t3, 3000, added(150, 90));
    let (t4, _) = r.start(key("s"), 4000);
    assert_eq!(t4.gap, Some(ms(1000)));
    r.finish(&t4, 4200, added(200, 150));
    assert!(r.sweep(60_000).is_empty(), "idle 55.8 s only");
    let ended = r.sweep(64_200);
    let [
        Ended {
            key,
            reason,
            figures: f,
        },
    ] = ended.as_slice()
    else {
        panic!("{ended:?}");
    };
    assert_eq!((&**key, *reason), ("s", Reason::Idle));
    assert_eq!(f.turns, 4);
    assert_eq!(f.duration(), ms(4200));
    assert_eq!(f.model, ms(1000 + 1500 + 200), "the union of the spans");
    assert_eq!((f.gaps, f.gap_count), (ms(1500), 2));
    assert_eq!(f.duration(), f.model + f.gaps);
    assert_eq!(
        (
            f.tally.input_tokens,
            f.tally.cached_tokens,
            f.tally.output_tokens
        ),
        (600, 330, 40)
    );
    let t = &f.tally;
    assert!((t.gpu_seconds - 2.0).abs() < 1e-12 && t.cost == Some(1.0) && t.joules.is_none());
    assert!(f.tally.good);
    assert_eq!(r.table.len(), 0);
}

#[test]
fn a_session_with_a_request_in_flight_is_not_idle() {
    let mut r = Rig::new(Duration::from_secs(10), 100);
    let (t1, _) = r.start(key("long"), 0);
    assert!(r.sweep(30_000).is_empty());
    assert_eq!(r.table.active().get("chat"), Some(&1));
    r.finish(&t1, 31_000, added(1, 0));
    assert!(r.sweep(40_000).is_empty());
    let ended = r.sweep(41_000);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].figures.model, ms(31_000));
}

#[test]
fn a_full_table_evicts_the_session_idle_the_longest() {
    let mut r = Rig::new(Duration::from_secs(300), 2);
    let (a, _) = r.start(key("a"), 0);
    r.finish(&a, 10, added(1, 0));
    let (b, _) = r.start(key("b"), 20);
    r.finish(&b, 30, added(1, 0));
    // a again: it is now the newest.
    let (a2, _) = r.start(key("a"), 40);
    r.finish(&a2, 50, added(1, 0));
    let (_, evicted) = r.start(key("c"), 60);
    assert_eq!(evicted.len(), 1);
    assert_eq!(
        (&*evicted[0].key, evicted[0].reason),
        ("b", Reason::Evicted)
    );
    assert_eq!(r.table.len(), 2);
    // A request of an evicted session that ends later changes nothing.
    r.finish(&b, 70, added(1, 0));
    assert_eq!(r.table.len(), 2);
}

#[test]
fn a_flood_of_keys_never_holds_more_than_the_bound() {
    let mut r = Rig::new(Duration::from_secs(300), 1000);
    let mut evicted = 0;
    for i in 0..20_000u64 {
        let (place, out) = r.start(Named::Key(format!("k{i}").into()), i);
        evicted += out.len();
        r.finish(&place, i, added(1, 0));
        assert!(r.table.len() <= 1000);
    }
    assert_eq!(evicted, 19_000);
    assert_eq!(r.table.order.len(), r.table.sessions.len());
}

#[test]
fn a_responses_chain_is_one_session_from_its_first_request() {
    let mut r = Rig::new(Duration::from_secs(60), 100);
    // The first request names no previous response: a candidate.
    let (mut first, _) = r.start(Named::Candidate, 0);
    r.table.respond(&mut first, "resp_1");
    assert_eq!(&*first.key, "resp_1");
    r.finish(&first, 1000, added(10, 0));
    assert!(r.table.active().is_empty(), "a candidate is no session yet");
    let (mut second, _) = r.start(Named::Previous("resp_1".into()), 3000);
    assert_eq!(
        (&*second.key, second.turn, second.gap),
        ("resp_1", 2, Some(ms(2000)))
    );
    r.table.respond(&mut second, "resp_2");
    r.finish(&second, 4000, added(20, 10));
    let (mut third, _) = r.start(Named::Previous("resp_2".into()), 4500);
    assert_eq!((&*third.key, third.turn), ("resp_1", 3));
    r.table.respond(&mut third, "resp_3");
    r.finish(&third, 5000, added(30, 20));
    assert_eq!(r.table.active().get("chat"), Some(&1));
    let ended = r.sweep(65_000);
    assert_eq!(ended.len(), 1);
    let f = &ended[0].figures;
    assert_eq!((f.turns, f.duration(), f.model), (3, ms(5000), ms(2500)));
    assert!(r.table.responses.is_empty(), "its ids go with it");
}

#[test]
fn a_candidate_never_followed_is_not_a_session_and_an_unknown_id_starts_one() {
    let mut r = Rig::new(Duration::from_secs(60), 100);
    let (mut lone, _) = r.start(Named::Candidate, 0);
    r.table.respond(&mut lone, "resp_x");
    r.finish(&lone, 100, added(1, 0));
    // A candidate whose response names no id is dropped at once.
    let (nameless, _) = r.start(Named::Candidate, 200);
    r.finish(&nameless, 300, added(1, 0));
    assert_eq!(r.table.len(), 1);
    assert!(r.sweep(70_000).is_empty(), "the candidate ends uncounted");
    // Another replica's response: a session keyed by it.
    let (other, _) = r.start(Named::Previous("resp_elsewhere".into()), 80_000);
    assert_eq!((&*other.key, other.turn), ("resp_elsewhere", 1));
    r.finish(&other, 80_500, added(1, 0));
    assert_eq!(r.sweep(200_000).len(), 1);
}

#[test]
fn one_bad_request_makes_the_session_not_good() {
    let mut r = Rig::new(Duration::from_secs(1), 10);
    let (a, _) = r.start(key("s"), 0);
    r.finish(&a, 10, added(1, 0));
    let (b, _) = r.start(key("s"), 20);
    r.finish(
        &b,
        30,
        Tally {
            good: false,
            ..added(1, 0)
        },
    );
    let ended = r.sweep(5_000);
    assert!(!ended[0].figures.tally.good);
}

#[test]
fn a_request_whose_session_was_evicted_leaves_the_next_session_of_its_key_alone() {
    let mut r = Rig::new(Duration::from_secs(300), 1);
    let (old, _) = r.start(key("a"), 0);
    // A full table: b evicts a, whose request is still in flight.
    let (b, evicted) = r.start(key("b"), 10);
    assert_eq!(evicted.len(), 1);
    r.finish(&b, 20, added(1, 0));
    // a starts again: a new session of the same key.
    let (new, evicted) = r.start(key("a"), 30);
    assert_eq!((evicted.len(), new.turn), (1, 1));
    // The old request ends: nothing of it reaches the new session.
    r.finish(&old, 40, added(1000, 0));
    r.finish(&new, 50, added(5, 0));
    let ended = r.sweep(1_000_000);
    let f = &ended[0].figures;
    assert_eq!((f.turns, f.tally.input_tokens, f.model), (1, 5, ms(20)));
}

#[test]
fn a_full_table_evicts_candidates_before_sessions() {
    let mut r = Rig::new(Duration::from_secs(300), 3);
    let (a, _) = r.start(key("a"), 0);
    r.finish(&a, 10, added(1, 0));
    // Two one-off Responses requests, newer than the session.
    for (at, id) in [(20, "resp_1"), (30, "resp_2")] {
        let (mut one, _) = r.start(Named::Candidate, at);
        r.table.respond(&mut one, id);
        r.finish(&one, at + 5, added(1, 0));
    }
    assert_eq!(r.table.len(), 3);
    // A new session: the older candidate goes, uncounted, not `a`.
    let (b, evicted) = r.start(key("b"), 40);
    assert!(
        evicted.is_empty(),
        "a candidate is never a session that ended"
    );
    r.finish(&b, 45, added(1, 0));
    assert!(r.table.sessions.contains_key("a"));
    assert!(!r.table.sessions.contains_key("resp_1"));
    // The other candidate, followed, is a session: no longer first to go.
    let (c, _) = r.start(Named::Previous("resp_2".into()), 50);
    r.finish(&c, 55, added(1, 0));
    let (_, evicted) = r.start(key("d"), 60);
    assert_eq!(evicted.len(), 1);
    assert_eq!(&*evicted[0].key, "a", "then the session idle the longest");
    assert_eq!(r.table.order.len(), r.table.sessions.len());
    assert!(r.table.candidates.is_empty());
}
