"""OpenTelemetry traces, optional (``pip install 'bitong[otel]'``).

A span per Call, StreamCall and Match, child of the caller's span when the
request's gRPC metadata carries W3C trace context (``traceparent``,
``tracestate``). Without the extra installed nothing here imports anything
and every span is None: tracing costs a caller nothing it did not ask for.

Where spans go is the standard OTEL_* variables' business: ``bitong serve``
installs an SDK provider with the OTLP exporter when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
set, or ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console`` (the
exporter reads its endpoint, headers and timeout from the same variables);
``OTEL_SDK_DISABLED=true`` turns it off. A provider the embedding program
set itself is left alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["Tracing", "available", "configure_from_env"]

log = logging.getLogger("bitong.tracing")


def available() -> bool:
    """True when the OpenTelemetry API can be imported here."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def configure_from_env() -> str | None:
    """Install the SDK's provider with the exporters the OTEL_* variables ask for; what was set up, or None."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names and (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        names = ["otlp"]
    names = [n for n in names if n != "none"]
    if not names:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        log.warning("OTEL_* variables ask for traces, but the OpenTelemetry SDK is not installed: "
                    "pip install 'bitong[otel]'; serving without traces")
        return None
    if type(trace.get_tracer_provider()).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return "the program's own tracer provider"
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "bitong")}))
    for name in names:
        exporter: SpanExporter
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            otlp = _otlp_exporter(env)
            if otlp is None:
                continue
            exporter = otlp
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s: bitong knows otlp, console and none; ignored", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return ", ".join(names)


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    """The OTLP exporter for OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: grpc (the default, in the extra) or
    http/protobuf (opentelemetry-exporter-otlp-proto-http, installed separately); None with a warning."""
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as OverGrpc

            return OverGrpc()
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as OverHttp

            return OverHttp()
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        log.warning("OTLP over %s needs %s (pip install %s); serving without traces", protocol, package, package)
        return None
    log.warning("OTLP protocol %s: bitong knows grpc and http/protobuf; serving without traces", protocol)
    return None


class Tracing:
    """Spans from one tracer provider (the global one unless given: tests pass their own)."""

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.propagate import extract

        self._trace = trace
        self._extract = extract
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("bitong")

    @contextmanager
    def span(self, name: str, metadata: Sequence[tuple[str, str | bytes]], attributes: dict[str, Any]
             ) -> Iterator[Any]:
        """A server span, child of the trace context in ``metadata`` when there is one."""
        carrier = {key.lower(): value for key, value in metadata if isinstance(value, str)}
        parent = self._extract(carrier)
        with self.tracer.start_as_current_span(name, context=parent, kind=self._trace.SpanKind.SERVER,
                                               attributes=attributes, record_exception=True,
                                               set_status_on_exception=True) as span:
            yield span

    def error(self, span: Any, description: str) -> None:
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))
