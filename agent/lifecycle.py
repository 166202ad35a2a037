"""The Lifecycle service: an operator's versions, rollbacks and unpins, on the admin socket.

Served beside Approvals on the owner-only admin socket, never on the
ToolAgent listener: the agent calling tools must not be able to choose which
definition of them it is served. Proto in, registry call, proto out; the
logic is :mod:`agent.versions`.
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

import grpc

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from .cache import CacheAgent
from .registry import Registry, Snapshot
from .versions import RollbackError

__all__ = ["LifecycleServicer", "versions_reply"]

_Context = grpc.aio.ServicerContext[Any, Any]


def versions_reply(registry: Registry, name: str, snap: Snapshot | None = None) -> pb.VersionsResponse:
    """What is kept of ``name``, newest first, and which definition serves."""
    snap = snap or registry.snapshot
    serving = snap.tools.get(name)
    reply = pb.VersionsResponse(tool=name, pinned=serving.pinned if serving is not None else "")
    for v in registry.versions.versions(name):
        reply.versions.add(version=v.tool.version, content_sha256=v.tool.content_sha256,
                           loaded_unix_ms=v.loaded_unix_ms, source_path=v.tool.source_path, commit=v.tool.commit,
                           serving=serving is not None and serving.content_sha256 == v.tool.content_sha256,
                           tool=v.tool)
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
        try:
            snap = await asyncio.to_thread(self.registry.unpin, request.tool)
        except RollbackError as exc:
            await _refuse(context, exc)
        return self._swapped(request.tool, snap)

    def _swapped(self, name: str, snap: Snapshot) -> pb.VersionsResponse:
        if self.cache is not None:
            self.cache.swapped(snap)
        return versions_reply(self.registry, name, snap)


async def _refuse(context: _Context, exc: RollbackError) -> NoReturn:
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
