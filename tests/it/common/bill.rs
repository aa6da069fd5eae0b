//! What the chargeback tests read of a scrape: a GPU set's parts against
//! its total, and figures near each other.

use super::{Sample, sum};

/// The parts of GPU set `set`'s quantity (`seconds`, `energy_joules`,
/// `cost`) and its total, from one scrape: the requests' charges, in
/// flight, other replicas and idle, which must add up to the total.
pub fn parts_and_total(s: &[Sample], set: &str, quantity: &str) -> (f64, f64) {
    let of = [("gpu_set", set)];
    let in_flight = match quantity {
        "seconds" => "llm_gpu_in_flight_seconds".to_owned(),
        q => format!("llm_gpu_in_flight_{q}"),
    };
    let parts = sum(s, &format!("llm_request_gpu_{quantity}_total"), &of)
        + sum(s, &in_flight, &of)
        + sum(s, &format!("llm_gpu_other_replicas_{quantity}_total"), &of)
        + sum(s, &format!("llm_gpu_idle_{quantity}_total"), &of);
    let whole = match quantity {
        "seconds" => "llm_gpu_seconds_total".to_owned(),
        q => format!("llm_gpu_{q}_total"),
    };
    (parts, sum(s, &whole, &of))
}

/// `got` within the share `within` of `want`.
#[track_caller]
pub fn assert_near(got: f64, want: f64, within: f64, what: &str) {
    let err = (got - want).abs() / want.abs().max(1e-12);
    assert!(
        err <= within,
        "{what}: {got} against {want} ({:.3} %)",
        err * 100.0
    );
}
