#!/usr/bin/env python3
"""Decodes a Prometheus protobuf exposition (length-delimited
io.prometheus.client.MetricFamily messages, read from standard input) with
the client model's own definition, metrics.proto beside this file, compiled
by grpcio-tools' protoc, and prints it as JSON for tests/it/native.rs:
per family its name, help, type and series; per series its labels and
value, or its histogram: count, sum, classic buckets ([upper bound or null
for +Inf, cumulative count, whether it has an exemplar]), and the native
fields (schema, zero threshold and count, spans, deltas, exemplars).
A message the definition does not parse, or one with fields it does not
define, fails."""
import json, os, sys, tempfile

import grpc_tools
from grpc_tools import protoc
from google.protobuf.internal.decoder import _DecodeVarint

here = os.path.dirname(os.path.abspath(__file__))
out = tempfile.mkdtemp(prefix='tm-proto-')
wellknown = os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')
if protoc.main(['protoc', f'-I{here}', f'-I{wellknown}', f'--python_out={out}', os.path.join(here, 'metrics.proto')]) != 0:
    sys.exit('protoc failed on metrics.proto')
sys.path.insert(0, out)
import metrics_pb2  # noqa: E402


def finite(v):
    return None if v == float('inf') else v


def exemplar(e):
    return {'labels': {l.name: l.value for l in e.label}, 'value': e.value,
            'timestamp': e.timestamp.seconds + e.timestamp.nanos / 1e9}


def series(kind, m):
    s = {'labels': {l.name: l.value for l in m.label}}
    if kind == metrics_pb2.COUNTER:
        s['value'] = m.counter.value
    elif kind == metrics_pb2.GAUGE:
        s['value'] = m.gauge.value
    elif kind == metrics_pb2.HISTOGRAM:
        h = m.histogram
        s['histogram'] = {
            'count': h.sample_count, 'sum': h.sample_sum,
            'buckets': [[finite(b.upper_bound), b.cumulative_count, b.HasField('exemplar')] for b in h.bucket],
            'bucket_exemplars': [exemplar(b.exemplar) for b in h.bucket if b.HasField('exemplar')],
            'native': h.HasField('schema'),
            'schema': h.schema, 'zero_threshold': h.zero_threshold, 'zero_count': h.zero_count,
            'spans': [[sp.offset, sp.length] for sp in h.positive_span],
            'deltas': list(h.positive_delta),
            'negative_spans': len(h.negative_span),
            'exemplars': [exemplar(e) for e in h.exemplars],
        }
    return s


def unknown(message):
    """Whether `message` or any message in it holds fields metrics.proto does not define."""
    from google.protobuf.unknown_fields import UnknownFieldSet
    if len(UnknownFieldSet(message)) > 0:
        return True
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = value if field.is_repeated else [value]
        if any(unknown(v) for v in values):
            return True
    return False


data = sys.stdin.buffer.read()
pos, families = 0, []
while pos < len(data):
    size, pos = _DecodeVarint(data, pos)
    mf = metrics_pb2.MetricFamily()
    mf.ParseFromString(data[pos:pos + size])
    pos += size
    if unknown(mf):
        sys.exit(f'{mf.name}: fields metrics.proto does not define')
    families.append({'name': mf.name, 'help': mf.help, 'type': metrics_pb2.MetricType.Name(mf.type),
                     'metrics': [series(mf.type, m) for m in mf.metric]})
if pos != len(data):
    sys.exit('the last message runs past the end')
json.dump(families, sys.stdout)
