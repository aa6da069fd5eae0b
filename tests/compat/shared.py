"""What the Python compatibility servers share: the stream they serve, the
models body, the listening socket, and the watch on stdin that ends the
process when the test that started it is gone."""

import os
import socket
import sys
import threading

# Each event is written on its own, this long after the one before.
EVENT_DELAY_SECONDS = 0.010

MODELS = b'{"object":"list","data":[{"id":"m1","object":"model","owned_by":"compat"}]}'


def load_events(path):
    """The events of an SSE file, each with its blank-line terminator."""
    with open(path, "rb") as f:
        data = f.read()
    return [event + b"\n\n" for event in data.split(b"\n\n") if event]


def listen():
    """A listening socket on a free loopback port, its port printed on stdout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    print(sock.getsockname()[1], flush=True)
    return sock


def exit_when_stdin_closes():
    """Ends the process when stdin reaches its end: the test holds the other
    end, and a test process that dies closes it."""

    def watch():
        try:
            while sys.stdin.buffer.read1(4096):
                pass
        finally:
            os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def require(*modules):
    """Imports `modules`, or exits with what to install."""
    missing = []
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        sys.stderr.write(
            "missing Python packages: %s; install uvicorn, httptools, h11 and aiohttp "
            "into a virtual environment first on PATH (.ci/run's is target/venv)\n"
            % " ".join(missing)
        )
        sys.exit(3)
