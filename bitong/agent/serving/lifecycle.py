"""The Lifecycle service: an operator's versions, rollbacks and unpins, on the admin socket.

Served beside Approvals on the owner-only admin socket, never on the
ToolAgent listener: the agent calling tools must not be able to choose which
definition of them it is served. Proto in, registry call, proto out; the
logic is :mod:`bitong.agent.registry.versions`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn

import grpc

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from ..registry.cache import CacheAgent
from ..registry.snapshot import Registry, Snapshot
from ..registry.versions import RollbackError

__all__ = ["LifecycleServicer", "versions_reply"]

_Context = grpc.aio.ServicerContext[Any, Any]


def versions_reply(registry: Registry, name: str, snap: Snapshot | None = None) -> pb.VersionsResponse:
    """What is kept of ``name``, newest first, and which definition serves."""
    snap = snap or registry.snapshot
    serving = snap.tools.get(name)
    book = registry.versions
    reply = pb.VersionsResponse(tool=name, pinned=serving.pinned if serving is not None else "",
                                canary=book.canary_text(name))
    canary = snap.canaries.get(name)
    running = {serving.content_sha256} if serving is not None else set()
    if canary is not None:
        running.add(canary.candidate.content_sha256)
    for v in book.versions(name):
        calls, failures = book.counts.get((name, v.tool.content_sha256), (0, 0))
        reply.versions.add(version=v.tool.version, content_sha256=v.tool.content_sha256,
                           loaded_unix_ms=v.loaded_unix_ms, source_path=v.tool.source_path, commit=v.tool.commit,
                           serving=v.tool.content_sha256 in running, tool=v.tool, calls=calls, failures=failures)
    return reply


class LifecycleServicer(pb_grpc.LifecycleServicer):
    def __init__(self, registry: Registry, cache: CacheAgent | None = None) -> None:
        self.registry = registry
        self.cache = cache   # told of the snapshot a rollback makes: it saves the state and re-indexes

    async def Versions(self, request: pb.VersionsRequest, context: _Context) -> pb.VersionsResponse:
        reply = versions_reply(self.registry, request.tool)
        if not reply.versions:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no versions are kept of a tool named '{request.tool}'")
        return reply

    async def Rollback(self, request: pb.RollbackRequest, context: _Context) -> pb.VersionsResponse:
        try:   # the scan lock may be held by a rescan: off the event loop
            snap = await asyncio.to_thread(self.registry.rollback, request.tool, request.version)
        except RollbackError as exc:
            await _refuse(context, exc)
        return self._swapped(request.tool, snap)

    async def Unpin(self, request: pb.VersionsRequest, context: _Context) -> pb.VersionsResponse:
        return await self._end(self.registry.unpin, request.tool, context)

    async def Promote(self, request: pb.VersionsRequest, context: _Context) -> pb.VersionsResponse:
        return await self._end(self.registry.promote, request.tool, context)

    async def Abort(self, request: pb.VersionsRequest, context: _Context) -> pb.VersionsResponse:
        return await self._end(self.registry.abort, request.tool, context)

    async def _end(self, step: Callable[[str], Snapshot], name: str, context: _Context) -> pb.VersionsResponse:
        try:
            snap = await asyncio.to_thread(step, name)
        except RollbackError as exc:
            await _refuse(context, exc)
        return self._swapped(name, snap)

    def _swapped(self, name: str, snap: Snapshot) -> pb.VersionsResponse:
        if self.cache is not None:
            self.cache.swapped(snap)
        return versions_reply(self.registry, name, snap)


async def _refuse(context: _Context, exc: RollbackError) -> NoReturn:
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
