"""A test OTLP/HTTP receiver that decodes real protobuf requests (opentelemetry-proto), optionally
answering each request only after ``delay_s`` (a slow collector), and a 'blackhole' that accepts
connections and never answers."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(kvs):
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver:
    def __init__(self, status: int = 200, delay_s: float = 0.0):
        self.spans: list[dict] = []
        self.delay_s = delay_s
        self.metric_names: set[str] = set()
        self.requests = 0
        self.status = status
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver._lock:
                    receiver.requests += 1
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)  # a slow collector: the answer comes late, then in full
                if receiver.status != 200:
                    self.send_response(receiver.status)
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver._add_spans(req)
                    resp = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    with receiver._lock:
                        for rm in req.resource_metrics:
                            for sm in rm.scope_metrics:
                                receiver.metric_names.update(m.name for m in sm.metrics)
                    resp = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = resp.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _add_spans(self, req):
        out = []
        for rs in req.resource_spans:
            res = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        {
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex() or None,
                            "name": s.name,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "attributes": _attrs(s.attributes),
                            "resource": res,
                            "status": s.status.code,
                        }
                    )
        with self._lock:
            self.spans.extend(out)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class Blackhole:
    """Accepts TCP connections and reads forever without answering."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()
