"""What an operator sees of each request: its id in the logs, its span, its metrics.

The servicer wraps each Call, StreamCall and Match in :meth:`Observer.call` /
:meth:`Observer.match`; everything optional (metrics, traces) is None when not
asked for, and the request id is always set (the JSON log format prints it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from bitong.v1 import agent_pb2 as pb

from .metrics import UNKNOWN_TOOL, Metrics, outcome
from ..registry.snapshot import Snapshot
from .requestlog import new_request_id, request_id
from .tracing import Tracing

__all__ = ["Observer", "Observed"]

Metadata = Sequence[tuple[str, str | bytes]]


class Observed:
    """Filled in by the RPC: the result it answered with (or the MatchResponse)."""

    __slots__ = ("result", "match", "span")

    def __init__(self) -> None:
        self.result: pb.CallResult | None = None
        self.match: pb.MatchResponse | None = None
        self.span: Any = None


class Observer:
    """Metrics and tracing for one sidecar (either may be None)."""

    def __init__(self, metrics: Metrics | None = None, tracing: Tracing | None = None) -> None:
        self.metrics = metrics
        self.tracing = tracing

    def swapped(self, snap: Snapshot, swapped: bool = True) -> None:
        if self.metrics is not None:
            self.metrics.snapshot(snap, swapped)

    @contextlib.contextmanager
    def call(self, rpc: str, tool: str, known: bool, metadata: Metadata) -> Iterator[Observed]:
        """Around one Call/StreamCall; ``known``: ``tool`` is registered (else its label is ``(unknown)``)."""
        token = request_id.set(new_request_id(metadata))
        seen = Observed()
        if self.metrics is None and self.tracing is None:   # nothing to time or label: the request id alone
            try:
                yield seen
            finally:
                request_id.reset(token)
            return
        started = time.perf_counter()
        metrics = self.metrics
        if metrics is not None:
            metrics.in_flight.inc()
        label = "refused"   # an RPC that ends without a result was refused (limits, policy, authentication)
        try:
            with self._span(f"bitong.v1.ToolAgent/{rpc}", metadata, {"bitong.tool": tool[:200]}) as span:
                seen.span = span
                try:
                    yield seen
                except asyncio.CancelledError:
                    label = "cancelled"
                    raise
                else:
                    if seen.result is not None:
                        label = outcome(seen.result)
                finally:
                    if span is not None:
                        self._finish_span(span, seen.result, label)
        finally:
            if metrics is not None:
                metrics.in_flight.dec()
                metrics.call(rpc, tool if known else UNKNOWN_TOOL, label, time.perf_counter() - started, seen.result)
            request_id.reset(token)

    def _finish_span(self, span: Any, result: pb.CallResult | None, label: str) -> None:
        span.set_attribute("bitong.outcome", label)
        if result is None:
            return
        span.set_attribute("bitong.executor", result.executor)
        span.set_attribute("bitong.attempts", result.attempts)
        span.set_attribute("bitong.exit_code", result.exit_code)
        if label in ("failed", "timed_out") and self.tracing is not None:
            self.tracing.error(span, result.error or label)

    @contextlib.contextmanager
    def match(self, metadata: Metadata) -> Iterator[Observed]:
        token = request_id.set(new_request_id(metadata))
        seen = Observed()
        if self.metrics is None and self.tracing is None:
            try:
                yield seen
            finally:
                request_id.reset(token)
            return
        started = time.perf_counter()
        try:
            with self._span("bitong.v1.ToolAgent/Match", metadata, {}) as span:
                seen.span = span
                yield seen
                if span is not None and seen.match is not None:
                    span.set_attribute("bitong.found", seen.match.found)
                    if seen.match.candidates:
                        span.set_attribute("bitong.tool", seen.match.candidates[0].name)
        finally:
            if self.metrics is not None:
                self.metrics.match(seen.match.found if seen.match is not None else None,
                                   time.perf_counter() - started)
            request_id.reset(token)

    @contextlib.contextmanager
    def _span(self, name: str, metadata: Metadata, attributes: dict[str, Any]) -> Iterator[Any]:
        if self.tracing is None:
            yield None
            return
        attributes = {"rpc.system": "grpc", "rpc.service": "bitong.v1.ToolAgent", **attributes}
        with self.tracing.span(name, metadata, attributes) as span:
            yield span
