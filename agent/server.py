"""The gRPC sidecar: proto in, proto out, nothing else.

The servicer converts requests to calls on :class:`~agent.service.ToolAgent`
and maps the gRPC deadline to the call's deadline; all logic lives there.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any, AsyncIterator, Sequence

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from .cache import CacheAgent
from .config import Config
from .executors import Executors
from .executors.base import STDOUT
from .listen import DEFAULT_LISTEN, grpc_address
from .registry import Registry
from .service import ToolAgent

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


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return time.monotonic() + remaining - min(_REPLY_MARGIN_S, remaining * 0.1)


def _params(request: pb.CallRequest) -> dict[str, Any]:
    return json_format.MessageToDict(request.params) if request.HasField("params") else {}


class Servicer(pb_grpc.ToolAgentServicer):
    def __init__(self, agent: ToolAgent) -> None:
        self.agent = agent

    async def Match(self, request: pb.MatchRequest, context: grpc.aio.ServicerContext) -> pb.MatchResponse:
        return self.agent.match(request.intent, request.top_k, explain=request.explain)

    async def ListTools(self, request: pb.ListToolsRequest,
                        context: grpc.aio.ServicerContext) -> pb.ListToolsResponse:
        return self.agent.list_tools()

    async def Call(self, request: pb.CallRequest, context: grpc.aio.ServicerContext) -> pb.CallResult:
        return await self.agent.call(request.tool, _params(request), confirm_token=request.confirm_token,
                                     deadline=_deadline(context))

    async def StreamCall(self, request: pb.CallRequest,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[pb.CallEvent]:
        # context.write() returns when gRPC flow control takes the message: a slow
        # reader slows the executor's reading instead of growing a buffer here.
        async def sink(stream: int, data: bytes) -> None:
            event = pb.CallEvent()  # fields set in place: a nested constructor copies the bytes again
            event.chunk.stream = pb.OutputChunk.STDOUT if stream == STDOUT else pb.OutputChunk.STDERR
            event.chunk.data = data
            await context.write(event)

        result = await self.agent.call(request.tool, _params(request), confirm_token=request.confirm_token,
                                       deadline=_deadline(context), sink=sink)
        await context.write(pb.CallEvent(result=result))


class Sidecar:
    """A running server: the registry, its cache agent, and the gRPC endpoint."""

    def __init__(self, roots: Sequence[str], listen: str = DEFAULT_LISTEN, *, config: Config | None = None,
                 vocabulary: Any = None, embedder: Any = None, threshold: float | None = None, poll_s: float = 0.5,
                 grace_s: float = 30.0, state_path: str | None = None) -> None:
        self.registry = Registry(roots, vocabulary=vocabulary, embedder=embedder)
        self.cache = CacheAgent(self.registry, poll_s=poll_s, state_path=state_path)
        self.agent = ToolAgent(self.registry, executors=Executors(config), threshold=threshold)
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
        pb_grpc.add_ToolAgentServicer_to_server(Servicer(self.agent), self.server)
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
