// A server on Node's `http` module streaming an OpenAI chat completion.
//
// Usage: node node_server.js EVENTS_FILE
//
// Prints its port, then serves on 127.0.0.1 until stdin closes:
// - POST /v1/chat/completions: 200 text/event-stream, each event of
//   EVENTS_FILE its own write;
// - GET/HEAD /v1/models: a small JSON body;
// - GET /stats: {"connections": N}, the connections (distinct client
//   addresses, host and port) that made any other request.
//
// Idle keep-alive connections are closed after 1 s (`keepAliveTimeout`),
// which Node announces in a `Keep-Alive: timeout=1` header.
'use strict';

const fs = require('fs');
const http = require('http');

// Each event is written on its own, this long after the one before.
const EVENT_DELAY_MS = 10;
const MODELS = Buffer.from(
  '{"object":"list","data":[{"id":"m1","object":"model","owned_by":"compat"}]}',
);

const events = fs
  .readFileSync(process.argv[2], 'latin1')
  .split('\n\n')
  .filter((event) => event.length > 0)
  .map((event) => Buffer.from(event + '\n\n', 'latin1'));
const clients = new Set();

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function respond(res, status, body) {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': body.length,
  });
  res.end(body);
}

async function handle(req, res) {
  const path = req.url.split('?')[0];
  if (path === '/stats') {
    respond(res, 200, Buffer.from(JSON.stringify({ connections: clients.size })));
    return;
  }
  clients.add(`${req.socket.remoteAddress}:${req.socket.remotePort}`);
  if (path === '/v1/models' && (req.method === 'GET' || req.method === 'HEAD')) {
    respond(res, 200, MODELS);
  } else if (path === '/v1/chat/completions' && req.method === 'POST') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    for (const event of events) {
      await sleep(EVENT_DELAY_MS);
      if (res.destroyed) return;
      res.write(event);
    }
    res.end();
  } else {
    respond(res, 404, Buffer.from('{"error":"not found"}'));
  }
}

const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    handle(req, res).catch((err) => {
      process.stderr.write(`${err.stack}\n`);
      res.destroy();
    });
  });
});
server.keepAliveTimeout = 1000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${server.address().port}\n`);
});

// The test holds stdin's other end; a test process that dies closes it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
