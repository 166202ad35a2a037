"""The admin socket: where a person approves or denies human-confirmed calls.

A second gRPC server, on a unix socket of its own, serving only the
``Approvals`` service. The socket is created with mode 0600 (the umask is
narrowed while it is bound, so there is no moment it is open to others) in a
folder only the owner may enter when bitong creates it: only the server's
own user (and root) can connect, and the OS enforces it. The ToolAgent
listener never serves ``Approvals``, so the agent calling tools cannot
approve its own requests, whatever it knows.

``bitong approve ID`` / ``bitong deny ID`` / ``bitong pending`` are its
clients (:func:`stub`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import Any, NoReturn

import grpc
from google.protobuf import struct_pb2

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from ..calling.humanconfirm import DecisionError, HumanConfirmations, Request
from .peercred import clear_stale

__all__ = ["ApprovalsServicer", "AdminSocketError", "default_path", "prepare", "bind", "stub", "lifecycle_stub", "to_proto"]

log = logging.getLogger("bitong.admin")

_Context = grpc.aio.ServicerContext[Any, Any]


class AdminSocketError(OSError):
    """The admin socket cannot be made safely; the message says what is in the way."""


def default_path() -> str:
    """``$XDG_RUNTIME_DIR/bitong/admin.sock``, else ``/tmp/bitong-<uid>/admin.sock``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "bitong", "admin.sock")
    return os.path.join("/tmp", f"bitong-{os.geteuid()}", "admin.sock")


def to_proto(request: Request) -> pb.PendingApproval:
    params = struct_pb2.Struct()
    params.update(request.params)
    return pb.PendingApproval(id=request.id, tool=request.tool, params=params, tool_sha256=request.tool_sha256,
                              created_unix_ms=request.created_unix_ms, expires_unix_ms=request.expires_unix_ms,
                              state=request.state, decided_by=request.decided_by, reason=request.reason,
                              method=request.method, command=request.command, requester=request.requester)


class ApprovalsServicer(pb_grpc.ApprovalsServicer):
    """List, approve, deny: the person's side of :class:`HumanConfirmations`."""

    def __init__(self, book: HumanConfirmations, who: str) -> None:
        self.book = book
        self.who = who   # how a decision made here is recorded

    async def ListPending(self, request: pb.ListPendingRequest, context: _Context) -> pb.ListPendingResponse:
        return pb.ListPendingResponse(requests=[to_proto(r) for r in self.book.pending()])

    async def Approve(self, request: pb.DecideRequest, context: _Context) -> pb.PendingApproval:
        return await self._decide(request, True, context)

    async def Deny(self, request: pb.DecideRequest, context: _Context) -> pb.PendingApproval:
        return await self._decide(request, False, context)

    async def _decide(self, request: pb.DecideRequest, approve: bool, context: _Context) -> pb.PendingApproval:
        try:
            decided = self.book.decide(request.id, approve, self.who, request.reason[:500])
        except DecisionError as exc:
            await _abort(context, exc)
        log.warning("request %s (%s) %s by %s", decided.id, decided.tool, decided.state, self.who)
        return to_proto(decided)


async def _abort(context: _Context, exc: DecisionError) -> NoReturn:
    await context.abort(grpc.StatusCode[exc.code], exc.message)


def prepare(path: str) -> None:
    """Make room for the socket at ``path``, refusing anything unsafe (raises AdminSocketError).

    A missing folder is created 0700. A live socket there belongs to another
    server: refused (gRPC would otherwise unlink it and take its place). A
    stale socket is removed; any other file is left alone and refused.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    where = os.stat(folder)
    if where.st_uid not in (0, os.geteuid()) or (where.st_mode & 0o022 and not where.st_mode & stat.S_ISVTX):
        raise AdminSocketError(errno.EPERM, f"admin socket {path}: its folder {folder} belongs to another user or "
                                            "others may write to it; use a folder only you control")
    clear_stale(path, f"admin socket {path}", "(it is in use by another running bitong): give this one its own "
                "with --admin-socket PATH", AdminSocketError)


def bind(server: grpc.aio.Server, path: str) -> None:
    """Add the unix socket to ``server`` with mode 0600 from its creation on (raises AdminSocketError)."""
    prepare(path)
    old = os.umask(0o177)   # the socket file is born rw------- : no window where others may connect
    try:
        port = server.add_insecure_port(f"unix:{os.path.abspath(path)}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.lstat(path).st_mode) if os.path.exists(path) else None
    if port == 0 or mode is None:
        raise AdminSocketError(errno.EADDRNOTAVAIL, f"cannot listen on the admin socket {path}")
    if mode & 0o077:
        os.chmod(path, 0o600)


def stub(path: str) -> Any:
    """A client of the Approvals service on the admin socket at ``path``."""
    channel = grpc.insecure_channel(f"unix:{os.path.abspath(path)}")
    return pb_grpc.ApprovalsStub(channel)


def lifecycle_stub(path: str) -> Any:
    """A client of the Lifecycle service (versions, rollback) on the admin socket at ``path``."""
    channel = grpc.insecure_channel(f"unix:{os.path.abspath(path)}")
    return pb_grpc.LifecycleStub(channel)
