#!/usr/bin/env python3
"""Instructions per non-streamed request of whole tokenmeter processes (user
space, every thread), counted by callgrind, like benches/proxy-instructions.sh
but for requests rather than chunks.

    benches/request-instructions.py BIN [BIN...]    # e.g. OLD_BIN NEW_BIN

Each binary serves (under callgrind, metering on, `protocol: auto`) in front of
`tokenmeter sim` (ttft 0, 10 tokens at 1 ms, one JSON body per request), twice:
N1 (200) and N2 (1,000) POST /v1/chat/completions requests with
`"stream": false`, from 4 threads, each on one keep-alive connection. The
figure is (instructions(N2) - instructions(N1)) / (N2 - N1): start-up and
shutdown cancel out. A fixed count of requests, not a duration, so the
figure does not depend on how fast the loaded machine let them go. The
simulator is target/release/tokenmeter (or $SIM_BIN). Needs valgrind.
N1, N2 and STREAM=1 (streamed requests) can be set in the environment,
and ACCESS=json or ACCESS=text runs the proxy with its access log on, in
that format (`tokenmeter bench` runs json; the default leaves logging at
`warn`);
ATTRIBUTION=1 turns on tenant attribution by API key (the route's
`tenant.api_keys`, one key listed) and `trace_context.join`, and each
request carries that key (`Authorization: Bearer`) and a `traceparent`: the
figure with and without it is what attributing a request costs;
SLO=1 judges every request against an SLO class (TTFT p95 <= 500 ms and
goodput), so the figure with and without it is what judging a request
costs: its live series and its latency–load curve;
OTLP=http or OTLP=grpc turns on the OpenTelemetry export (metrics and
spans, default intervals) to tests/otlp/receiver.py (needs PyPI's
opentelemetry-proto and grpcio), so the figure with and without it is what
exporting a request costs, the exporter's task and the SDK's thread
included;
GPUS=1 gives the route one GPU at a price (`gpus: 1`, `gpu_hourly_cost`),
so every request is charged its share of it: the figure with and without
it is what chargeback costs a request (a binary without those keys
refuses the config);
KEEP=DIR keeps the callgrind profile of each binary's N2 run in DIR
(DIR/<n>.cg.<pid>, n counting the binaries from 1), for
`callgrind_annotate DIR/1.cg.*`.
CALLGRIND_ARGS adds options to callgrind's (say
`--separate-callers8=_rjem_malloc`, so that KEEP's profile tells which
calls allocate).
Beside the instructions it prints the allocations per request (calls to
jemalloc's allocating entry points, benches/callgrind-calls.py), by the
same difference."""
import glob, hashlib, http.client, importlib.util, json, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time

_spec = importlib.util.spec_from_file_location('callgrind_calls', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'callgrind-calls.py'))
callgrind_calls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(callgrind_calls)

SIM_BIN = os.environ.get('SIM_BIN') or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'target', 'release', 'tokenmeter')
def free_port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(p, t=60):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(('127.0.0.1', p), 0.5).close(); return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f'port {p} never opened')

def run(binary, n, stream, keep_as=None):
    d = tempfile.mkdtemp(prefix='tm-fwd-req-')
    simp, px, adm = free_port(), free_port(), free_port()
    sim = subprocess.Popen([SIM_BIN, 'sim', '--listen', f'127.0.0.1:{simp}', '--ttft-ms', '0', '--itl-ms', '1', '--tokens', '10'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = os.path.join(d, 'c.yaml')
    headers = {'content-type': 'application/json'}
    top, route = '', ''
    if os.environ.get('ATTRIBUTION') == '1':
        key = 'sk-bench-0123456789abcdef'
        top = 'trace_context: {join: true}\n'
        route = f"    tenant:\n      api_keys:\n        keys: {{{hashlib.sha256(key.encode()).hexdigest()}: bench}}\n"
        headers['authorization'] = f'Bearer {key}'
        headers['traceparent'] = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
    if os.environ.get('SLO') == '1':
        open(os.path.join(d, 'slo.yaml'), 'w').write(
            'classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 500ms}\n    goodput: {target: 0.9}\n')
        top += 'slo_files: [slo.yaml]\n'
        route += '    slo: chat\n'
    if os.environ.get('GPUS') == '1':
        route += '    gpus: 1\n    gpu_hourly_cost: 2.5\n'
    receiver = None
    otlp = os.environ.get('OTLP')
    if otlp:
        gp, hp = free_port(), free_port()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'otlp', 'receiver.py')
        receiver = subprocess.Popen([sys.executable, script, '--grpc-port', str(gp), '--http-port', str(hp), '--seconds', '1800'],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if receiver.stdout.readline().split()[:1] != ['ready']:
            raise SystemExit('the OTLP receiver did not start')
        threading.Thread(target=lambda: [None for _ in receiver.stdout], daemon=True).start()
        if otlp == 'grpc':
            top += f'otlp: {{endpoint: "http://127.0.0.1:{gp}", protocol: grpc}}\n'
        else:
            top += f'otlp: {{endpoint: "http://127.0.0.1:{hp}"}}\n'
    open(cfg, 'w').write(f"listen: 127.0.0.1:{px}\nadmin:\n  listen: 127.0.0.1:{adm}\n{top}routes:\n  - name: bench\n    upstream: http://127.0.0.1:{simp}\n    protocol: auto\n{route}")
    access = os.environ.get('ACCESS')
    env = dict(os.environ, TOKENMETER_LOG='warn,tokenmeter::access=info' if access else 'warn')
    log = ['--log-format', access] if access else []
    extra = os.environ.get('CALLGRIND_ARGS', '').split()
    prox = subprocess.Popen(['valgrind', '--tool=callgrind', f'--callgrind-out-file={d}/cg.%p', *extra, binary, 'serve', *log, '--config', cfg],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_port(simp); wait_port(px)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream})
    per = n // 4
    errs = []
    def worker():
        c = http.client.HTTPConnection('127.0.0.1', px, timeout=30)
        for _ in range(per):
            c.request('POST', '/v1/chat/completions', body, headers)
            r = c.getresponse(); r.read()
            if r.status != 200: errs.append(r.status)
        c.close()
    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    prox.send_signal(signal.SIGTERM); prox.wait(120)
    sim.send_signal(signal.SIGTERM); sim.wait(30)
    if receiver:
        receiver.kill(); receiver.wait(30)
    if errs: raise SystemExit(f'errors: {errs[:5]}')
    total = 0
    for f in glob.glob(f'{d}/cg.*'):
        for line in open(f):
            if line.startswith('summary:'): total += int(line.split()[1])
    allocations = callgrind_calls.calls(glob.glob(f'{d}/cg.*'))
    keep = os.environ.get('KEEP')
    if keep and keep_as:
        os.makedirs(keep, exist_ok=True)
        for f in glob.glob(f'{d}/cg.*'):
            shutil.copy(f, os.path.join(keep, f'{keep_as}.{os.path.basename(f)}'))
    shutil.rmtree(d, ignore_errors=True)
    return total, allocations, per * 4

stream = os.environ.get('STREAM', '0') == '1'
n1, n2 = int(os.environ.get('N1', '200')), int(os.environ.get('N2', '1000'))
print(f"{'binary':30} {'instr/request':>14} {'allocs/request':>15} {'requests':>9}")
for k, b in enumerate(sys.argv[1:], 1):
    i1, a1, c1 = run(b, n1, stream)
    i2, a2, c2 = run(b, n2, stream, keep_as=str(k))
    print(f"{b:30} {(i2 - i1) // (c2 - c1):>14} {(a2 - a1) / (c2 - c1):>15.2f} {c2 - c1:>9}", flush=True)
