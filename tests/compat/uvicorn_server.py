"""A plain ASGI app under uvicorn, streaming an OpenAI chat completion.

Usage: uvicorn_server.py h11|httptools EVENTS_FILE

Prints its port, then serves on 127.0.0.1 until stdin closes:
- POST /v1/chat/completions: 200 text/event-stream, each event of
  EVENTS_FILE its own write;
- GET/HEAD /v1/models: a small JSON body;
- GET /stats: {"connections": N}, the connections (distinct client
  addresses, host and port) that made any other request.

Idle keep-alive connections are closed after 1 s (`--timeout-keep-alive 1`),
and uvicorn sends no `Keep-Alive` header saying so.
"""

import asyncio
import json
import sys

from shared import (
    EVENT_DELAY_SECONDS,
    MODELS,
    exit_when_stdin_closes,
    listen,
    load_events,
    require,
)

HTTP, EVENTS_FILE = sys.argv[1], sys.argv[2]
require("uvicorn", HTTP)
import uvicorn  # noqa: E402

EVENTS = load_events(EVENTS_FILE)
clients = set()


async def respond(send, status, content_type, body):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        more = message.get("more_body", False)
    path, method = scope["path"], scope["method"]
    if path == "/stats":
        body = json.dumps({"connections": len(clients)}).encode()
        await respond(send, 200, b"application/json", body)
        return
    clients.add(tuple(scope["client"]))
    if path == "/v1/models" and method in ("GET", "HEAD"):
        await respond(send, 200, b"application/json", MODELS)
    elif path == "/v1/chat/completions" and method == "POST":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        for event in EVENTS:
            await asyncio.sleep(EVENT_DELAY_SECONDS)
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await respond(send, 404, b"application/json", b'{"error":"not found"}')


def main():
    sock = listen()
    exit_when_stdin_closes()
    config = uvicorn.Config(
        app,
        http=HTTP,
        timeout_keep_alive=1,
        lifespan="off",
        # The client address is the connection's: uvicorn would otherwise
        # take the proxy's `X-Forwarded-For` (with port 0) as the client.
        proxy_headers=False,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
