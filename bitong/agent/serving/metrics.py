"""Prometheus metrics of a serving sidecar (``bitong serve --metrics 127.0.0.1:PORT``).

One :class:`Metrics` owns its own ``CollectorRegistry`` (not the process-wide
default), so two sidecars in one process, as in the tests, never share counts.
prometheus-client is imported only here, and only when metrics are asked for.

Label values are bounded: ``tool`` is a registered tool's name, or
``(unknown)`` for a name no tool has (a caller must not be able to grow the
series without end by calling made-up names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bitong.v1 import agent_pb2 as pb

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from ..registry.snapshot import Snapshot

__all__ = ["OUTCOMES", "Metrics", "outcome", "parse_address"]

# What became of a Call: it ran and succeeded, ran and failed, ran out of time, was refused before
# anything ran (unknown tool, bad parameters, limits, policy, a refused confirmation), waits for a
# confirmation, or was cancelled (the caller went away, the server shut down).
OUTCOMES = ("ok", "failed", "timed_out", "refused", "needs_confirmation", "cancelled")
UNKNOWN_TOOL = "(unknown)"

# Calls run from milliseconds (a shell echo) to minutes (a build); Match is milliseconds.
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_MATCH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def outcome(result: pb.CallResult) -> str:
    """The outcome label of a call that answered with a result."""
    if result.ok:
        return "ok"
    if result.needs_confirmation:
        return "needs_confirmation"
    if result.cancelled:
        return "cancelled"
    if result.timed_out:
        return "timed_out"
    if not result.found or len(result.param_errors) or result.attempts == 0:
        return "refused"   # nothing ran (no executor attempt): unknown tool, bad parameters, a confirmation refused
    return "failed"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as (host, port); ValueError that says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--metrics {text}: give HOST:PORT, such as 127.0.0.1:9464")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--metrics {text}: the port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--metrics {text}: the port {number} is out of range (0-65535)")
    return (host[1:-1] if host.startswith("[") and host.endswith("]") else host), number


class Metrics:
    """The sidecar's counters, gauges and histograms, and the HTTP endpoint that serves them."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.calls = Counter("bitong_calls", "Calls (Call and StreamCall) by tool and outcome",
                             ["tool", "outcome"], registry=r)
        self.call_seconds = Histogram("bitong_call_duration_seconds", "Call and StreamCall latency, as served",
                                      ["rpc"], buckets=_CALL_BUCKETS, registry=r)
        self.match_seconds = Histogram("bitong_match_duration_seconds", "Match latency, as served",
                                       buckets=_MATCH_BUCKETS, registry=r)
        self.matches = Counter("bitong_matches", "Match requests answered, by found (true/false)", ["found"],
                               registry=r)
        self.output_bytes = Counter("bitong_output_bytes", "Bytes of tool output sent to callers",
                                    ["stream"], registry=r)
        self.in_flight = Gauge("bitong_calls_in_flight", "Calls being served now", registry=r)
        self.tools = Gauge("bitong_registry_tools", "Tools serving in the current snapshot", registry=r)
        self.load_errors = Gauge("bitong_registry_load_errors", "Files that fail to load in the current snapshot",
                                 registry=r)
        self.reloads = Counter("bitong_registry_reloads", "Snapshot swaps since start (files changed, vectors in)",
                               registry=r)
        self.generation = Gauge("bitong_registry_generation", "The current snapshot's generation", registry=r)
        self.watchers = Gauge("bitong_watchers", "WatchTools streams open now", registry=r)
        # Children resolved once: labels() takes a lock and builds a key each time (~8 us a call, measured).
        # Both found series exist from the start, so a found rate is computable at once.
        self._found = {True: self.matches.labels("true"), False: self.matches.labels("false")}
        self._rpc = {rpc: self.call_seconds.labels(rpc) for rpc in ("Call", "StreamCall")}
        self._stdout = self.output_bytes.labels("stdout")
        self._stderr = self.output_bytes.labels("stderr")
        self._calls: dict[tuple[str, str], Any] = {}   # (tool, outcome): as many as the registry's names allow
        self._server: WSGIServer | None = None
        self.address = ""

    def serve(self, listen: str) -> str:
        """Serve ``/metrics`` on ``HOST:PORT`` in a daemon thread; the URL (OSError when it cannot bind)."""
        from prometheus_client import start_http_server

        host, port = parse_address(listen)
        self._server, _thread = start_http_server(port, host, registry=self.registry)
        bound = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{bound}"
        return f"http://{self.address}/metrics"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self, snap: Snapshot, swapped: bool) -> None:
        self.tools.set(len(snap.tools))
        self.load_errors.set(len(snap.errors))
        self.generation.set(snap.generation)
        if swapped:
            self.reloads.inc()

    def call(self, rpc: str, tool: str, label: str, seconds: float, result: pb.CallResult | None) -> None:
        child = self._calls.get((tool, label))
        if child is None:
            child = self._calls[(tool, label)] = self.calls.labels(tool, label)
        child.inc()
        self._rpc[rpc].observe(seconds)
        if result is not None:
            out = len(result.output) + result.streamed_stdout_bytes
            err = len(result.stderr) + result.streamed_stderr_bytes
            if out:
                self._stdout.inc(out)
            if err:
                self._stderr.inc(err)

    def match(self, found: bool | None, seconds: float) -> None:
        self.match_seconds.observe(seconds)
        if found is not None:
            self._found[found].inc()
