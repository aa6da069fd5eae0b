//! The keys of `proxy`: forwarding behaviour shared by all routes.

use super::super::ProxySettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `proxy`.
pub(super) static PROXY: Table = Table {
    fields: fields_of::<ProxySettings>,
    keys: &[
        key(
            "max_request_body",
            "size",
            "`4MiB`",
            "Largest request body read ahead to learn `model` and `stream`. A larger body is \
            still forwarded, as it streams in, and the request is metered with an unknown \
            model.",
        ),
        key(
            "max_retry_body",
            "size",
            "`64KiB`",
            "Largest request body held whole so that the request can be sent again, once, on \
            a new connection when the upstream closes a reused one under it before answering \
            (the keep-alive race: uvicorn, behind vLLM and SGLang, closes idle connections \
            after 5 s). Only a close that comes while the request goes out or within a \
            second of its last byte is the race: an upstream that closes later without \
            answering had the request (a crash, a restart), and the request is not sent \
            twice. A metered request's body is read ahead up to `max_request_body` anyway; \
            an unmetered one's (files, model lists, any `protocol: none` route) is read \
            ahead up to this before it is sent. A larger body, or one with a \
            `Content-Length` over this, is forwarded as it streams in and is never sent \
            twice: the client gets the `502`.",
        ),
        key(
            "max_request_head",
            "size",
            "`8KiB`",
            "Largest request head (request line and headers) a client may send; a larger one \
            is answered `431 Request Header Fields Too Large`. From `8KiB` to `1MiB`. A client \
            connection's read buffer grows to hold a head up to this size, so it also bounds \
            memory per connection. Applied when the listener starts: a reload that \
            changes it logs that a restart is needed.",
        )
        .restart(" bytes"),
        key(
            "request_head_timeout",
            "duration",
            "`30s`",
            "How long a client connection may take to send a request head, counted from when \
            it opens or its last response ended: a connection that sends nothing, trickles \
            its head or sits idle between requests longer is closed.",
        )
        .restart("s"),
        key(
            "max_connections",
            "integer ≥ 1",
            "from the open-file limit",
            "Most client connections open at once on the proxy listener; more wait in the \
            kernel's accept queue until one closes (`tokenmeter_open_connections` and \
            `tokenmeter_max_connections` show where it stands). By default, at start the \
            process raises its open-file limit to the hard limit and takes half of what is \
            left after a reserve of 64 and the admin listener's share, since each client \
            connection can hold an upstream connection too.",
        )
        .restart(""),
        key(
            "overload_threshold",
            "percentage",
            "`90%`",
            "Share of `proxy.max_connections` open at which the proxy listener is overloaded \
            and sheds connections that have not reached the upstream, until the open \
            connections fall a tenth of the limit below it. While overloaded, connections \
            idle between requests are closed first, at once (gracefully: the end of a last \
            response the client has not yet taken is still written, for up to \
            `proxy.overload_timeout`); a connection that has sent no complete request head \
            within `proxy.overload_timeout` of opening is closed; a request whose body, read \
            ahead, has not all arrived within `proxy.overload_timeout` of its head is \
            answered `408` (`client_timeout`). A request already sent to the upstream is \
            never shed. Each is counted in `tokenmeter_shed_connections_total{reason}`; the \
            start and end of each episode are logged once, at warn. So a few hundred stalled \
            clients cannot keep new ones out: they are reaped a limit's worth at a time, \
            every overload timeout at most.",
        )
        .restart(""),
        key(
            "overload_timeout",
            "duration",
            "`3s`",
            "While the proxy listener is overloaded, how long a connection that has not \
            reached the upstream may take to send its request head (from when it opened) and \
            the body read ahead (from its head).",
        )
        .restart("s"),
        key(
            "upstream_idle_connections",
            "count",
            "`256`",
            "Idle kept-alive connections kept per upstream for later requests (`0` keeps \
            none). A connection whose response ended beyond this many is closed, so memory \
            comes back after a burst. 256 is vLLM's default `max_num_seqs`.",
        ),
        key(
            "upstream_idle_timeout",
            "duration",
            "`90s`",
            "How long an idle upstream connection is kept, HTTP/1.1 or HTTP/2 (an HTTP/2 \
            connection is also PINGed every 10 s, and closed when a PING goes 10 s \
            unanswered). Servers that close idle connections sooner (uvicorn, behind vLLM \
            and SGLang, after 5 s) are handled: a closed connection is never reused.",
        ),
        key(
            "max_response_body",
            "size",
            "`16MiB`",
            "Largest non-streamed response body kept to read its usage at the end.",
        ),
        key(
            "x_forwarded",
            "boolean",
            "`true`",
            "Add `X-Forwarded-For` (the client's address appended to any it sent), \
            `X-Forwarded-Proto` and `X-Forwarded-Host` to forwarded requests. A client's own \
            `X-Forwarded-Proto` and `X-Forwarded-Host` are replaced, unless it is one of \
            `trusted_proxies`.",
        ),
        key(
            "trusted_proxies",
            "list of addresses or CIDR ranges",
            "none",
            "Clients whose `X-Forwarded-Proto` and `X-Forwarded-Host` are passed on as they \
            sent them: the proxies in front of this one (`[10.0.0.0/8, \"::1\"]`). An IPv4 \
            client seen as `::ffff:a.b.c.d` matches its IPv4 range.",
        ),
        key(
            "shutdown_grace",
            "duration",
            "`30s`",
            "On SIGTERM/SIGINT, how long in-flight requests may take to finish before the \
            process exits anyway.",
        ),
    ],
};
