//! Everything that happens *about* a request, apart from forwarding it:
//! what is observed of a metered request as it flows and when it ends,
//! and where it goes.
//!
//! The forwarding code (`proxy`) knows this module by its face alone, the
//! items re-exported here: it describes a request that starts
//! ([`Started`]: its route, API, model, head, client and trace), gets its
//! recorder ([`Observers::request`], an [`RequestObserver`] that the meter
//! reports to), and reports what it does itself as typed [`Occurrence`]s
//! (`Observers::count`). It decides no label, no SLO class and no tenant,
//! and names no metrics type. Behind that face:
//!
//! - [`recorder`]: the recorder of one request and the one fan-out of its
//!   end: the SLO verdict, then each observer in turn;
//! - [`labels`]: a request's labels, resolved once and read by every
//!   observer, and the bounds of `model` and `tenant`;
//! - [`occupancy`]: what a request met when it was sent (the requests in
//!   flight to its route and model, the engine's figures), whose load its
//!   latency–load curve counts it at;
//! - [`class`]: the SLO class of a request, and the policy of the
//!   configuration in force;
//! - [`occurrence`]: what the proxy reports of itself;
//! - [`metrics`]: the Prometheus registry of the catalogue's families, the
//!   per-request Prometheus recorder, the live series behind `/slo`, the
//!   exemplars and the OpenMetrics exposition;
//! - [`access`]: the access log's line per request;
//! - [`otlp`]: the OpenTelemetry export, on a runtime of its own;
//! - [`trace`]: the W3C trace context a request carries or is given;
//! - [`tenant`]: the tenant a request is attributed to;
//! - [`request`]: a request as the observers see it, when it starts and
//!   when it ends.
//!
//! None of it reads a clock for a request's numbers: every duration comes
//! from the forwarding path, through the meter. The one clock it reads
//! (`recorder.rs`) dates a request in the live windows, when its head
//! arrives and when it ends, as the windows' own `now`.

pub mod access;
pub mod class;
pub mod labels;
pub mod metrics;
pub mod occupancy;
pub mod occurrence;
pub mod otlp;
pub mod recorder;
pub mod request;
pub mod sessions;
pub mod tab;
pub mod tenant;
pub mod trace;

pub use occurrence::{HandshakeFailure, Listener, Occurrence, Rejection, Shed};
pub use recorder::{Observers, RequestObserver};
pub use request::{Finished, Gaps, Started};
pub use trace::Trace;

/// The meter of one request, reporting to its observers.
pub type Meter = meter::StreamMeter<RequestObserver>;
