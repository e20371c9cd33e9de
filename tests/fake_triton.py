"""A Triton front that answers only what a test scripts: HTTP routes (a status and a body, or a dropped connection)
and gRPC ServerReady, on 127.0.0.1. It stands for a broken or odd server in tests of the plugin's setup errors; the
suites never talk to it."""

from __future__ import annotations

import json
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

DROP = object()  # a route that closes the connection without an answer (a network error on the client's side)


class _Ready(service_pb2_grpc.GRPCInferenceServiceServicer):
    def ServerReady(self, request, context):  # noqa: N802 - the generated service's name
        return service_pb2.ServerReadyResponse(ready=True)


class FakeTriton:
    """`routes` maps (method, path) to (status, body) or DROP; a dict or list body is sent as JSON."""

    def __init__(self, routes: dict):
        self.routes = routes
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                route = fake.routes.get((method, self.path))
                if route is DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, body = route or (404, {"error": f"no route {self.path}"})
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._answer("GET")

            def do_POST(self):  # noqa: N802
                self._answer("POST")

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_Ready(), self.grpc)
        self.grpc_port = self.grpc.add_insecure_port("127.0.0.1:0")

    @property
    def options(self) -> list[str]:
        return [
            "--triton-url",
            f"grpc://127.0.0.1:{self.grpc_port}",
            "--triton-http-url",
            f"http://127.0.0.1:{self.http.server_address[1]}",
        ]

    def __enter__(self) -> FakeTriton:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.grpc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.grpc.stop(None)
