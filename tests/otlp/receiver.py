#!/usr/bin/env python3
"""An OTLP receiver for tests/it/otlp.rs, built on the official OTLP protobuf
definitions (PyPI `opentelemetry-proto`) and gRPC (`grpcio`): gRPC and
HTTP/protobuf (POST /v1/metrics, /v1/traces), both on 127.0.0.1.

    receiver.py --grpc-port P --http-port Q [--seconds 120] [--discard]

A port of 0 is one of the system's choosing. Prints `ready P Q` (the ports
it listens on) once both listen, then one JSON line per export request
received: {"via": "grpc"|"http", "signal": "metrics"|"traces", "headers":
{name: value} (the HTTP headers, or the gRPC metadata, names lowercase),
"request": <the request as protobuf's JSON mapping>}; with --discard, nothing (a
collector that costs its host little, for benchmarks). Exits by itself
after --seconds.
"""
import argparse
import gzip
import json
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as msvc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as msvc_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsvc_grpc

LOCK = threading.Lock()
DISCARD = False


def emit(via, signal, request, headers):
    if DISCARD:
        return
    line = json.dumps({
        "via": via,
        "signal": signal,
        "headers": {k.lower(): v for k, v in headers},
        "request": MessageToDict(request),
    })
    with LOCK:
        print(line, flush=True)


class MetricsSvc(msvc_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        emit("grpc", "metrics", request, context.invocation_metadata())
        return msvc.ExportMetricsServiceResponse()


class TraceSvc(tsvc_grpc.TraceServiceServicer):
    def Export(self, request, context):
        emit("grpc", "traces", request, context.invocation_metadata())
        return tsvc.ExportTraceServiceResponse()


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        kinds = {
            "/v1/metrics": ("metrics", msvc.ExportMetricsServiceRequest, msvc.ExportMetricsServiceResponse),
            "/v1/traces": ("traces", tsvc.ExportTraceServiceRequest, tsvc.ExportTraceServiceResponse),
        }
        if self.path not in kinds or "protobuf" not in self.headers.get("Content-Type", ""):
            return self.reply(404, b"")
        signal, request_type, response_type = kinds[self.path]
        if not DISCARD:
            request = request_type()
            request.ParseFromString(body)
            emit("http", signal, request, self.headers.items())
        self.reply(200, response_type().SerializeToString())

    def reply(self, code, data):
        self.send_response(code)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--discard", action="store_true")
    a = ap.parse_args()
    global DISCARD
    DISCARD = a.discard
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    msvc_grpc.add_MetricsServiceServicer_to_server(MetricsSvc(), server)
    tsvc_grpc.add_TraceServiceServicer_to_server(TraceSvc(), server)
    grpc_port = server.add_insecure_port(f"127.0.0.1:{a.grpc_port}")
    server.start()
    httpd = ThreadingHTTPServer(("127.0.0.1", a.http_port), Http)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(f"ready {grpc_port} {httpd.server_address[1]}", flush=True)
    time.sleep(a.seconds)
    httpd.shutdown()
    server.stop(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
