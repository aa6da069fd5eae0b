//! The keys of `trace_context`: the W3C trace context of metered requests.

use super::super::TraceSettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `trace_context`.
pub(super) static TRACE_CONTEXT: Table = Table {
    fields: fields_of::<TraceSettings>,
    keys: &[
        key(
            "join",
            "boolean",
            "`false`",
            "Take part in the client's trace as a span of the proxy's own: the upstream is \
            sent a `traceparent` with the client's trace id and flags and a new parent id, \
            the proxy's span (`tracestate` unchanged), so the upstream's spans (vLLM, SGLang \
            and TGI read `traceparent`) hang under the proxy's. Off, `traceparent` and \
            `tracestate` reach the upstream as the client sent them, and the upstream's \
            spans are children of the client's.",
        ),
        key(
            "start",
            "boolean",
            "`false`",
            "Start a trace for a metered request that comes without a valid `traceparent` \
            (none, one that breaks the specification's rules, or two): a new random trace \
            id, sampled, the proxy's span as its root, sent to the upstream in \
            `traceparent`; a `tracestate` sent without a valid `traceparent` is dropped, as \
            the specification asks.",
        ),
    ],
};
