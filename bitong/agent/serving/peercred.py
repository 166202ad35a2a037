"""The unix socket, with the kernel's word for who connected (SO_PEERCRED).

gRPC Python does not say who is on the other end of a unix socket: the
peer it reports is ``unix:`` (the client's unbound address), and local
credentials (``grpc.local_server_credentials(UDS)``) add only
``transport_security_type=local`` to the auth context, no uid (measured
with grpcio 1.85). So the sidecar accepts on the public socket itself:

1. the public socket is bound, ``chmod``-ed to ``--socket-mode`` (0600 by
   default) and only then listens, so no client can connect through a
   wider mode, even for an instant;
2. each accepted connection's peer uid is read with ``SO_PEERCRED``;
3. the connection is relayed to gRPC's own socket, in a private 0700
   folder, from a client socket bound to a fresh name in that folder. gRPC
   reports that name as the peer (``unix:/…/c17``), and :meth:`UnixFront.caller`
   maps it back to the uid.

A connection that reaches gRPC's socket any other way (only the server's
own user could: the folder is 0700) has no mapped name and is refused as
unauthenticated. The relay costs a copy of each byte through the event
loop; benchmarks/ measures it against a direct socket.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
from collections.abc import Callable
from typing import cast

from .identity import Caller, unix_peer

__all__ = ["UnixFront", "DEFAULT_SOCKET_MODE", "parse_mode"]

log = logging.getLogger("bitong.server")

DEFAULT_SOCKET_MODE = 0o600
_CREDS = struct.Struct("3i")   # struct ucred: pid, uid, gid


def parse_mode(text: str) -> int:
    """``0600``, ``660``, ``0o660`` as a permission mode; raises ValueError with the reason."""
    raw = text.strip().lower().removeprefix("0o")
    try:
        mode = int(raw, 8)
    except ValueError:
        raise ValueError(f"--socket-mode {text!r}: expected octal permission bits such as 0600 or 0660") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"--socket-mode {text!r}: expected permission bits between 0000 and 0777")
    if not mode & stat.S_IWUSR:
        raise ValueError(f"--socket-mode {text!r}: the owner needs write permission (u+w) to connect")
    return mode


class UnixFront:
    """The public unix socket in front of gRPC's private one; see the module docstring."""

    def __init__(self, path: str, mode: int = DEFAULT_SOCKET_MODE) -> None:
        self.path = os.path.abspath(path)
        self.mode = mode
        self.private = tempfile.mkdtemp(prefix="bitong-")   # 0700: only this user reaches gRPC's socket
        self.inner = os.path.join(self.private, "grpc.sock")
        self._peers: dict[str, Caller] = {}
        self._names = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self._relays: set[_Outer] = set()
        self._ino: tuple[int, int] | None = None

    @property
    def grpc_address(self) -> str:
        """Where gRPC itself listens (``add_insecure_port``)."""
        return f"unix:{self.inner}"

    def caller(self, peer: str) -> Caller | None:
        """The caller behind gRPC's ``context.peer()``, None for a connection that did not come through here."""
        return self._peers.get(peer)

    async def start(self) -> None:
        """Bind, set the mode, then listen; raises OSError with a sentence for a path in use."""
        clear_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            os.chmod(self.path, self.mode)    # before listen(): until then every connect is refused
            st = os.stat(self.path)
            self._ino = (st.st_dev, st.st_ino)
            sock.setblocking(False)
            self._server = await asyncio.get_running_loop().create_unix_server(
                lambda: _Outer(self), sock=sock, backlog=128)
        except BaseException:
            sock.close()
            raise

    async def _link(self, outer: _Outer, uid: int) -> None:
        """Connect an accepted client to gRPC's socket under a fresh bound name, then relay."""
        loop = asyncio.get_running_loop()
        name = os.path.join(self.private, f"c{next(self._names)}")
        peer = f"unix:{name}"
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            out.bind(name)
            out.setblocking(False)
            self._peers[peer] = unix_peer(uid)
            await loop.sock_connect(out, self.inner)
            _, inner = await loop.create_unix_connection(lambda: _Inner(outer), sock=out)
        except (OSError, asyncio.CancelledError) as exc:
            out.close()
            self._peers.pop(peer, None)
            outer.close()
            if isinstance(exc, OSError):
                log.warning("unix socket %s: a connection could not be relayed: %s", self.path, exc)
            return
        finally:
            try:
                os.unlink(name)   # the peer address gRPC reads stays with the connected socket
            except FileNotFoundError:
                pass
        outer.link(inner, lambda: self._peers.pop(peer, None))

    def close(self) -> None:
        """Stop accepting; the connections in flight keep their relays (the server drains them)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def stop(self) -> None:
        """Stop accepting, end the relays, remove the socket (if it is still ours) and the private folder."""
        self.close()
        for outer in list(self._relays):
            outer.close()
        try:
            st = os.stat(self.path)
            if self._ino == (st.st_dev, st.st_ino):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        shutil.rmtree(self.private, ignore_errors=True)


class _Outer(asyncio.Protocol):
    """The client's connection: paused until gRPC's side is connected, then bytes go straight across.

    Flow control both ways: a side whose write buffer fills pauses the
    other side's reading, so a slow reader slows the tool's output instead
    of growing a buffer here.
    """

    def __init__(self, front: UnixFront) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.inner: _Inner | None = None
        self.forget: Callable[[], object] = lambda: None
        self.task: asyncio.Future[None] | None = None
        self.early: list[bytes] = []   # uvloop may deliver bytes read before pause_reading() took effect

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)   # uvloop's are not asyncio.Transport subclasses
        self.transport.pause_reading()   # nothing to relay to yet
        self.front._relays.add(self)
        sock = transport.get_extra_info("socket")
        try:
            _pid, uid, _gid = _CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))
        except OSError as exc:
            log.warning("unix socket %s: cannot read the peer's credentials: %s", self.front.path, exc)
            self.close()
            return
        self.task = asyncio.ensure_future(self.front._link(self, uid))

    def link(self, inner: _Inner, forget: Callable[[], object]) -> None:
        self.inner = inner
        self.forget = forget
        if self.transport is None or self.transport.is_closing() or inner.transport is None:
            self.close()
            return
        for data in self.early:
            inner.transport.write(data)
        self.early.clear()
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.inner is not None and self.inner.transport is not None:
            self.inner.transport.write(data)
        else:
            self.early.append(data)

    def eof_received(self) -> bool:
        self.close()
        return False

    def pause_writing(self) -> None:
        if self.inner is not None and self.inner.transport is not None:
            self.inner.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.inner is not None and self.inner.transport is not None:
            self.inner.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if self.inner is not None:
            self.inner.close()
        if self.task is not None and not self.task.done() and self.inner is None:
            self.task.cancel()
        self.forget()
        self.front._relays.discard(self)


class _Inner(asyncio.Protocol):
    """gRPC's side of one relayed connection."""

    def __init__(self, outer: _Outer) -> None:
        self.outer = outer
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)   # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        if self.outer.transport is not None:
            self.outer.transport.write(data)

    def eof_received(self) -> bool:
        self.outer.close()
        return False

    def pause_writing(self) -> None:
        if self.outer.transport is not None:
            self.outer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.outer.transport is not None:
            self.outer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.outer.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def clear_stale(path: str, what: str = "", in_use: str = "(stop it first, or choose another path)",
                error: type[OSError] = OSError) -> None:
    """Remove a socket nobody listens on; refuse a live one, or a file that is not a socket, with ``error``."""
    what = what or f"cannot listen on unix:{path}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise error(errno.EEXIST, f"{what}: the path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)   # left behind by a server that is gone
        return
    finally:
        probe.close()
    raise error(errno.EADDRINUSE, f"{what}: another server is listening on it {in_use}")
