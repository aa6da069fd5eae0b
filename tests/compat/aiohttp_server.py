"""An aiohttp server streaming an OpenAI chat completion.

Usage: aiohttp_server.py EVENTS_FILE

Prints its port, then serves on 127.0.0.1 until stdin closes:
- POST /v1/chat/completions: 200 text/event-stream, each event of
  EVENTS_FILE its own write;
- GET/HEAD /v1/models: a small JSON body;
- GET /stats: {"connections": N}, the connections (distinct client
  addresses, host and port) that made any other request.

Idle keep-alive connections are closed after 1 s (`keepalive_timeout=1`),
and aiohttp sends no `Keep-Alive` header saying so.
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

require("aiohttp")
from aiohttp import web  # noqa: E402

EVENTS = load_events(sys.argv[1])
clients = set()


def note(request):
    clients.add(request.transport.get_extra_info("peername"))


async def models(request):
    note(request)
    return web.Response(body=MODELS, content_type="application/json")


async def chat(request):
    await request.read()
    note(request)
    response = web.StreamResponse(
        status=200,
        headers={"content-type": "text/event-stream", "cache-control": "no-cache"},
    )
    await response.prepare(request)
    for event in EVENTS:
        await asyncio.sleep(EVENT_DELAY_SECONDS)
        await response.write(event)
    await response.write_eof()
    return response


async def stats(request):
    body = json.dumps({"connections": len(clients)}).encode()
    return web.Response(body=body, content_type="application/json")


async def main():
    sock = listen()
    exit_when_stdin_closes()
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, keepalive_timeout=1, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
