"""The gRPC sidecar: proto in, proto out, nothing else.

The servicer converts requests to calls on :class:`~agent.service.ToolAgent`
and maps the gRPC deadline to the call's deadline; all logic lives there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from .cache import CacheAgent
from .config import Config
from .executors import Executors
from .executors.base import STDOUT
from .executors.sandbox import Sandbox
from .listen import DEFAULT_LISTEN, grpc_address
from .registry import Registry
from .service import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, LimitExceeded, Limits, ToolAgent

__all__ = ["DEFAULT_LISTEN", "SERVICE_NAME", "Servicer", "Sidecar", "serve", "grpc_address"]

log = logging.getLogger("bitong.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolAgent"].full_name
# Call collects output in one message; leave room above the largest max_output_bytes.
_MESSAGE_LIMIT = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", _MESSAGE_LIMIT),
                    ("grpc.max_receive_message_length", _MESSAGE_LIMIT)]


# Stop the tool this much before the caller's deadline (at most), so the result
# with the output so far reaches the caller instead of a bare DEADLINE_EXCEEDED.
_REPLY_MARGIN_S = 0.05


_Context = grpc.aio.ServicerContext[Any, Any]


def _deadline(context: _Context) -> float | None:
    remaining: float | None = context.time_remaining()   # None without a deadline (the stubs say float)
    if remaining is None:
        return None
    return time.monotonic() + remaining - min(_REPLY_MARGIN_S, remaining * 0.1)


def _params(request: pb.CallRequest, limits: Limits) -> dict[str, Any]:
    """The Struct as plain Python, after its size is checked (LimitExceeded).

    Not json_format.MessageToDict: that raises on +Inf/NaN (a Value can hold
    them), which reached the caller as UNKNOWN; here they stay floats and the
    schema check answers them in words.
    """
    if not request.HasField("params"):
        return {}
    fields = request.params.fields
    if len(fields) > limits.max_params:
        raise LimitExceeded(INVALID_ARGUMENT, f"{len(fields)} parameters; the limit is max_params "
                                              f"{limits.max_params}")
    size = request.params.ByteSize()
    if size > limits.max_params_bytes:
        raise LimitExceeded(INVALID_ARGUMENT, f"parameters are {size} bytes; the limit is max_params_bytes "
                                              f"{limits.max_params_bytes}")
    return {key: _value(value) for key, value in fields.items()}


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return value.number_value   # a float, +Inf and NaN included: params.validate answers them in words
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return {k: _value(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(v) for v in value.list_value.values]
    return None   # null_value, or no kind set


class Servicer(pb_grpc.ToolAgentServicer):
    """Match runs on a small thread pool (its CPU work must not stall other calls); Call on the loop."""

    def __init__(self, agent: ToolAgent, match_pool: concurrent.futures.ThreadPoolExecutor | None = None) -> None:
        self.agent = agent
        self.limits = agent.limits
        self.match_pool = match_pool or concurrent.futures.ThreadPoolExecutor(
            self.limits.match_workers, thread_name_prefix="bitong-match")
        self.matches = 0   # running or waiting for a thread

    async def Match(self, request: pb.MatchRequest, context: _Context) -> pb.MatchResponse:
        try:
            self.agent.check_intent(request.intent)   # before a thread or the index is touched
            if self.matches >= self.limits.max_match_queued:
                raise LimitExceeded(RESOURCE_EXHAUSTED, (
                    f"too many Match requests: {self.matches} running or waiting (max_match_queued "
                    f"{self.limits.max_match_queued}, match_workers {self.limits.match_workers}); try again later"))
        except LimitExceeded as exc:
            await _abort(context, exc)
        self.matches += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.match_pool, functools.partial(
                self.agent.match, request.intent, request.top_k, explain=request.explain))
        finally:
            self.matches -= 1

    async def ListTools(self, request: pb.ListToolsRequest,
                        context: _Context) -> pb.ListToolsResponse:
        return self.agent.list_tools()

    async def Call(self, request: pb.CallRequest, context: _Context) -> pb.CallResult:
        try:
            return await self.agent.call(request.tool, _params(request, self.limits),
                                         confirm_token=request.confirm_token, deadline=_deadline(context))
        except LimitExceeded as exc:
            await _abort(context, exc)

    async def StreamCall(self, request: pb.CallRequest, context: _Context) -> None:
        """Server streaming by context.write (not a generator): the chunks, then the result."""
        # context.write() returns when gRPC flow control takes the message: a slow
        # reader slows the executor's reading instead of growing a buffer here.
        async def sink(stream: int, data: bytes) -> None:
            event = pb.CallEvent()  # fields set in place: a nested constructor copies the bytes again
            event.chunk.stream = pb.OutputChunk.STDOUT if stream == STDOUT else pb.OutputChunk.STDERR
            event.chunk.data = data
            await context.write(event)

        try:
            result = await self.agent.call(request.tool, _params(request, self.limits),
                                           confirm_token=request.confirm_token, deadline=_deadline(context),
                                           sink=sink)
        except LimitExceeded as exc:
            await _abort(context, exc)
        await context.write(pb.CallEvent(result=result))


async def _abort(context: _Context, exc: LimitExceeded) -> NoReturn:
    """Answer with the limit's status code and message (raises, ending the RPC)."""
    await context.abort(grpc.StatusCode[exc.code], exc.message)


class Sidecar:
    """A running server: the registry, its cache agent, and the gRPC endpoint."""

    def __init__(self, roots: Sequence[str], listen: str = DEFAULT_LISTEN, *, config: Config | None = None,
                 vocabulary: Any = None, embedder: Any = None, threshold: float | None = None, poll_s: float = 0.5,
                 grace_s: float = 30.0, state_path: str | None = None, limits: Limits | None = None,
                 sandbox: Sandbox | None = None) -> None:
        self.registry = Registry(roots, vocabulary=vocabulary, embedder=embedder)
        self.cache = CacheAgent(self.registry, poll_s=poll_s, state_path=state_path)
        self.agent = ToolAgent(self.registry, executors=Executors(config, sandbox=sandbox), threshold=threshold,
                               limits=limits)
        self.match_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.servicer: Servicer | None = None
        self.listen = listen
        self.grace_s = grace_s
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0

    async def start(self) -> None:
        snap = await self.cache.start()
        for err in snap.errors:
            log.error("%s", err)
        self.server = grpc.aio.server(options=_CHANNEL_OPTIONS)
        self.match_pool = concurrent.futures.ThreadPoolExecutor(self.agent.limits.match_workers,
                                                                thread_name_prefix="bitong-match")
        self.servicer = Servicer(self.agent, self.match_pool)
        pb_grpc.add_ToolAgentServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # reflection: grpcurl and other generic clients discover the contract without the .proto
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        self.port = self.server.add_insecure_port(grpc_address(self.listen))
        if self.port == 0 and not self.listen.startswith("unix:"):
            raise OSError(f"cannot listen on {self.listen}")
        await self.server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("bitong serving %d tools on %s (watch: %s)", len(snap.tools), self.address, self.cache.mode)

    @property
    def address(self) -> str:
        if self.listen.startswith("unix:"):
            return grpc_address(self.listen)
        host = self.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop taking calls, let those in flight finish (up to the grace period), stop watching."""
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.server is not None:
            await self.server.stop(self.grace_s if grace_s is None else grace_s)
        if self.match_pool is not None:
            self.match_pool.shutdown(wait=False, cancel_futures=True)
        await self.cache.stop()


async def serve(roots: Sequence[str], listen: str = DEFAULT_LISTEN, **options: Any) -> None:
    """Run until SIGTERM or SIGINT, then drain the calls in flight and exit."""
    sidecar = Sidecar(roots, listen, **options)
    await sidecar.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"bitong: serving on {sidecar.address}", flush=True)
    await stop.wait()
    log.info("signal received: draining calls in flight")
    await sidecar.stop()
