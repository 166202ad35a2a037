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

from .identity import Caller, unix_peer

__all__ = ["UnixFront", "DEFAULT_SOCKET_MODE", "parse_mode"]

log = logging.getLogger("bitong.server")

DEFAULT_SOCKET_MODE = 0o600
_CREDS = struct.Struct("3i")   # struct ucred: pid, uid, gid
_CHUNK = 256 * 1024


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
        self._relays: set[asyncio.Task[None]] = set()
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
        _clear_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            os.chmod(self.path, self.mode)    # before listen(): until then every connect is refused
            st = os.stat(self.path)
            self._ino = (st.st_dev, st.st_ino)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._accept, sock=sock, backlog=128)
        except BaseException:
            sock.close()
            raise

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        peer = ""
        inner_writer: asyncio.StreamWriter | None = None
        try:
            client = writer.get_extra_info("socket")
            _pid, uid, _gid = _CREDS.unpack(client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))
            name = os.path.join(self.private, f"c{next(self._names)}")
            out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                out.bind(name)
                out.setblocking(False)
                peer = f"unix:{name}"
                self._peers[peer] = unix_peer(uid)
                await asyncio.get_running_loop().sock_connect(out, self.inner)
            except BaseException:
                out.close()
                raise
            finally:
                try:
                    os.unlink(name)   # the peer address gRPC reads stays with the connected socket
                except FileNotFoundError:
                    pass
            inner_reader, inner_writer = await asyncio.open_unix_connection(sock=out)
            pumps = [asyncio.ensure_future(_pump(reader, inner_writer)),
                     asyncio.ensure_future(_pump(inner_reader, writer))]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
        except OSError as exc:
            log.warning("unix socket %s: a connection could not be relayed: %s", self.path, exc)
        finally:
            self._peers.pop(peer, None)
            for w in (writer, inner_writer):
                if w is not None:
                    w.transport.abort()
            self._relays.discard(task)

    def close(self) -> None:
        """Stop accepting; the connections in flight keep their relays (the server drains them)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def stop(self) -> None:
        """Stop accepting, end the relays, remove the socket (if it is still ours) and the private folder."""
        self.close()
        for task in list(self._relays):
            task.cancel()
        if self._relays:
            await asyncio.gather(*self._relays, return_exceptions=True)
        try:
            st = os.stat(self.path)
            if self._ino == (st.st_dev, st.st_ino):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        shutil.rmtree(self.private, ignore_errors=True)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


def _clear_stale(path: str) -> None:
    """Remove a socket nobody listens on; refuse a live one or a file that is not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"cannot listen on unix:{path}: the path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)   # left behind by a server that is gone
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"cannot listen on unix:{path}: another server is listening on it "
                                    "(stop it first, or choose another path)")
