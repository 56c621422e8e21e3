"""Loopback servers for the remote-store tests: an S3 server (moto in
server mode) and a fault-injecting HTTP proxy in front of it.

The proxy forwards each request to the server and, for the requests a
fault is armed for, misbehaves instead: added latency, a connection reset,
a 503 SlowDown, a 429 Too Many Requests, a body cut short, or no answer
at all."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("latency", "reset", "503", "429", "truncate", "hang")


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog of 5 would hold back some of a burst of
    # new connections (a gather's concurrent requests) until others end.
    request_queue_size = 128


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 (a free port) in front of `upstream`
    (``host:port``). :meth:`arm` sets a fault for the next `count` GET
    requests with a ``Range`` header (the reads of records and table pages;
    listings and probes pass), or for all of them with ``count=None``.

    It also counts the ranged GETs in flight: from a request's arrival
    until its answer starts (a client may send its next request as soon as
    it has this answer) or it ends without one; :attr:`peak` is the most
    seen at once since :meth:`reset_peak`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.fault: str | None = None
        self.remaining: int | None = 0
        self.delay = 0.0
        self.hit = 0
        #: ``(path, Range header)`` of every ranged GET forwarded or faulted.
        self.ranged_gets: list[tuple[str, str]] = []
        self.in_flight = 0
        self.peak = 0
        #: Ranged GETs are held until this many are in flight (see :meth:`hold`).
        self.gate: int | None = None
        self.settle = 0.0
        self.gate_open = threading.Event()
        self.lock = threading.Lock()
        self.release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            #: Whether this request is a ranged GET still counted in flight.
            counted = False

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                self.counted = self.command == "GET" and self.headers.get("Range") is not None
                if self.counted:
                    proxy._arrived()
                    proxy._pass_gate()
                try:
                    self._answer()
                finally:
                    self._done()

            def _done(self) -> None:
                if self.counted:
                    self.counted = False
                    proxy._left()

            def send_response(self, code: int, message: str | None = None) -> None:
                self._done()
                super().send_response(code, message)

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._take(self.command, self.path, self.headers.get("Range"))
                if fault == "hang":
                    proxy.release.wait(60)
                    self.close_connection = True
                    return
                if fault == "reset":
                    # SO_LINGER 0: close sends RST, not FIN.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                if fault in ("503", "429"):
                    code = b"SlowDown" if fault == "503" else b"TooManyRequests"
                    text = (
                        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>' + code + b"</Code>"
                        b"<Message>Please reduce your request rate.</Message></Error>"
                    )
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                if fault == "latency":
                    time.sleep(proxy.delay)
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items()}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if fault == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(
        self, fault: str | None, count: int | None = None, delay: float = 0.0, method: str = "GET"
    ) -> None:
        """Arms `fault` for ranged GETs, with ``method="PUT"`` for every
        PUT (the parts of an upload and whole-object writes), or with
        ``method="ANY"`` for every request (a latency on each round trip:
        listings, probes and whole-object reads too)."""
        with self.lock:
            self.fault, self.remaining, self.delay, self.hit = fault, count, delay, 0
            self.method = method
            self.release.clear()

    def reset_peak(self) -> None:
        """Starts a new :attr:`peak` from the ranged GETs in flight now."""
        with self.lock:
            self.peak = self.in_flight

    def hold(self, count: int, settle: float = 0.2) -> None:
        """Holds the ranged GETs that arrive until `count` of them are in
        flight at once (at most 30 s), then lets them all go `settle`
        seconds later (time for any arriving beyond `count` to be counted
        in :attr:`peak`); once. A client that keeps up to `count` requests
        in flight reaches exactly `count`, however slowly they arrive."""
        with self.lock:
            self.gate, self.settle = count, settle
            self.gate_open = threading.Event()

    def _pass_gate(self) -> None:
        with self.lock:
            gate, opened, settle = self.gate, self.gate_open, self.settle
            reached = gate is not None and self.in_flight >= gate
        if gate is None:
            return
        if reached:
            time.sleep(settle)
            with self.lock:
                if self.gate_open is opened:
                    self.gate = None
            opened.set()
        else:
            opened.wait(30)

    def _arrived(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _left(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def _take(self, method: str, path: str, range_header: str | None) -> str | None:
        if method == "GET" and range_header is not None:
            with self.lock:
                self.ranged_gets.append((path, range_header))
        wanted = getattr(self, "method", "GET")
        if wanted != "ANY" and (method != wanted or (wanted == "GET" and range_header is None)):
            return None
        with self.lock:
            if self.fault is None or self.remaining == 0:
                return None
            if self.remaining is not None:
                self.remaining -= 1
            self.hit += 1
            return self.fault

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_options(endpoint: str, **ours: Any) -> dict[str, Any]:
    """The storage options that reach the test S3 server at `endpoint`,
    with loaderx's own keys `ours`."""
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "aws_region": "us-east-1",
        "aws_allow_http": True,
        **ours,
    }


def start_s3(bucket: str) -> tuple[Any, Any]:
    """An S3 server on 127.0.0.1 (moto in server mode) holding an empty
    `bucket`: the server (``stop()`` it) and a boto3 client of it, whose
    ``endpoint`` attribute is the server's URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    client.endpoint = endpoint
    return server, client
