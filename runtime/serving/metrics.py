"""GET /metrics in the Prometheus text format (prometheus_client, one registry per application): requests
by route and status, latency, queue depth, batch sizes, tokens generated and their rate.

The request metrics come from an ASGI wrapper around the whole application, so every route is counted the
same way, streams included (a stream's latency runs to its last byte)."""

import time
from typing import Any

from onnxformer.runtime.serving.tasks import require

# Latency buckets from a fast embedding (milliseconds) to a long generation (minutes).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """The server's metrics, registered in a registry of their own (so two apps in one process, as in the
    tests, count apart)."""

    def __init__(self) -> None:
        require("prometheus_client", "serve")
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        kw: dict[str, Any] = {"registry": self.registry}
        self.requests = Counter(
            "onnxformer_requests",
            "HTTP requests answered, by route and status code",
            ["route", "status"],
            **kw,
        )
        self.latency = Histogram(
            "onnxformer_request_seconds",
            "Time from a request's arrival to its last byte, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            **kw,
        )
        self.queue_depth = Gauge("onnxformer_queue_depth", "Requests waiting for a batch", ["batcher"], **kw)
        self.rejected = Counter(
            "onnxformer_rejected", "Requests refused with 503 because the queue was full", ["batcher"], **kw
        )
        self.batch_size = Histogram(
            "onnxformer_batch_rows",
            "Rows (texts or prompts) per batch run",
            ["batcher"],
            buckets=BATCH_BUCKETS,
            **kw,
        )
        self.tokens = Counter("onnxformer_generated_tokens", "Tokens generated", **kw)
        self.tokens_per_second = Gauge(
            "onnxformer_tokens_per_second", "Tokens generated per second by the last generation batch", **kw
        )

    def generated(self, tokens: int, seconds: float) -> None:
        self.tokens.inc(tokens)
        if seconds > 0:
            self.tokens_per_second.set(tokens / seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class Measured:
    """ASGI middleware: counts each HTTP request by route (a known path, else "other": unbounded label
    values would grow the registry without bound) and status, and times it to its last byte."""

    def __init__(self, app: Any, metrics: Metrics, routes: frozenset[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        started, status = time.perf_counter(), 500

        async def counted(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
