"""Where a running tritonserver answers (its HTTP, gRPC and metrics endpoints) and how to reach it: TLS, a CA
file, and headers sent with every request (a remote server behind a proxy that wants a token). Header values
are secrets: they are never part of repr or any message."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoints:
    http: str  # host:port
    grpc: str
    metrics: str
    http_tls: bool = False  # https:// for HTTP (infer, generate, health)
    grpc_tls: bool = False  # grpcs://
    metrics_tls: bool = False
    ca_file: str | None = None  # trusted CA for TLS (default: the system's)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def http_url(self, path: str) -> str:
        return f"{'https' if self.http_tls else 'http'}://{self.http}{path}"

    def metrics_url(self) -> str:
        return f"{'https' if self.metrics_tls else 'http'}://{self.metrics}/metrics"

    def header_dict(self) -> dict[str, str]:
        """The headers with lower-case names: gRPC metadata requires them, HTTP does not mind."""
        return {name.lower(): value for name, value in self.headers}

    def grpc_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.header_dict().items())

    def grpc_client(self):
        import tritonclient.grpc as grpcclient

        certificates = self.ca_file if self.grpc_tls else None
        return grpcclient.InferenceServerClient(self.grpc, ssl=self.grpc_tls, root_certificates=certificates)

    def http_client(self, timeout_s: float):
        import tritonclient.http as httpclient

        options = {"ca_certs": self.ca_file} if self.http_tls and self.ca_file else {}
        return httpclient.InferenceServerClient(
            self.http, ssl=self.http_tls, ssl_options=options, network_timeout=timeout_s, connection_timeout=timeout_s
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None

    def open(self, url: str, body: bytes | None = None, timeout: float = 10.0, content_type: str = "application/json"):
        """urllib's urlopen with this server's headers and CA (the caller closes the answer)."""
        headers = {**self.header_dict(), **({"Content-Type": content_type} if body is not None else {})}
        request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
        return urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context())  # noqa: S310 (our URLs)

    def get(self, url: str, timeout: float = 2.0) -> tuple[int, bytes]:
        """(status, body) of a GET; an HTTP error status is returned, not raised."""
        try:
            with self.open(url, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
