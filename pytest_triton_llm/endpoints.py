"""Where a running tritonserver answers: its HTTP, gRPC and metrics endpoints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoints:
    http: str  # host:port
    grpc: str
    metrics: str
