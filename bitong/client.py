"""The Python client of a running ``bitong serve``: no protoc, no stubs to generate.

    from bitong import Client

    with Client("unix:/run/bitong.sock") as bt:        # or "127.0.0.1:50151", the CLI's --server forms
        hit = bt.match("disk usage of /var")           # bitong.v1.MatchResponse
        result = bt.call("shell-exec", {"cmd": "df -h /var"}, timeout=30)   # bitong.v1.CallResult
        print(result.output.decode(), result.exit_code)

Results are the contract's own messages (``bitong.v1.agent_pb2``: typed,
with ``.pyi`` stubs), exactly as the server sent them: nothing is renamed,
reworded or dropped, and a tool's failure is a result (``ok``, ``exit_code``,
``stderr``, ``error``), never an exception.

Exceptions, all :class:`BitongError`:

* :class:`ConnectionError` (also the built-in ``ConnectionError``): the server
  could not be reached: nothing listens at the address, the socket file is
  missing, TLS failed. Its message says what, where and what to try.
* :class:`BitongError` itself for a request the server refused: ``code`` is
  the gRPC status name (``UNAUTHENTICATED``, ``PERMISSION_DENIED``,
  ``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``, ``DEADLINE_EXCEEDED``) and
  ``details`` the server's reason.

Addresses, credentials and their environment variables are the CLI's:
``host:port`` or ``unix:PATH``; ``token=`` (else ``BITONG_TOKEN``) is sent as
``authorization: Bearer``; ``tls_ca=``/``tls_cert=``/``tls_key=`` (else
``BITONG_TLS_CA``/``_CERT``/``_KEY``) switch to TLS and mTLS.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf import struct_pb2

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

__all__ = ["DEFAULT_ADDRESS", "AsyncClient", "BitongError", "Client", "ConnectionError"]

DEFAULT_ADDRESS = "127.0.0.1:50151"   # bitong serve's default --listen

# The server sends up to 64 MiB (a Call's collected output); gRPC's client default stops at 4 MiB.
_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


class BitongError(Exception):
    """A request that did not happen as asked. ``code``: the gRPC status name; ``details``: the server's
    words; ``address``: where the client was talking to."""

    def __init__(self, message: str, *, code: str = "", details: str = "", address: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details
        self.address = address


class ConnectionError(BitongError, builtins.ConnectionError):
    """The server could not be reached at ``address`` (``code`` UNAVAILABLE)."""


def _target(address: str) -> str:
    """``host:port`` or ``unix:PATH`` as gRPC takes it (a relative unix path made absolute, as the CLI does)."""
    if address.startswith("unix:") and not address.startswith("unix:/"):
        return "unix:" + os.path.abspath(address[5:])
    return address


def _hint(address: str) -> str:
    """What to try when ``address`` does not answer."""
    if address.startswith("unix:"):
        path = address[5:]
        if not os.path.exists(path):
            return (f"no socket file at {path}: is `bitong serve --listen {address}` running, and is this the "
                    "path it printed?")
        return (f"the socket {path} exists but nothing answers on it (a server that stopped leaves it behind, or "
                "this user may not open it: see --socket-mode): start `bitong serve --listen " + address + "`")
    return (f"is `bitong serve --listen {address}` running and reachable from here? (a TLS server needs tls_ca=; "
            "a plain one must not get it)")


def _error(exc: grpc.RpcError, address: str) -> BitongError:
    code = exc.code() if isinstance(exc, grpc.Call | grpc.aio.AioRpcError) else None
    details = (exc.details() if isinstance(exc, grpc.Call | grpc.aio.AioRpcError) else None) or str(exc)
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.UNAVAILABLE:
        return ConnectionError(f"cannot reach bitong at {address}: {details}; {_hint(address)}", code=name,
                               details=details, address=address)
    return BitongError(f"bitong at {address} answered {name}: {details}", code=name, details=details,
                       address=address)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise BitongError(f"{what} {path}: {exc.strerror}") from None


class _Setup:
    """What both clients share: the target, the credentials, the metadata, the requests."""

    def __init__(self, address: str, token: str | None, tls_ca: str | None, tls_cert: str | None,
                 tls_key: str | None) -> None:
        self.address = address
        self.target = _target(address)
        ca = tls_ca if tls_ca is not None else os.environ.get("BITONG_TLS_CA", "")
        cert = tls_cert if tls_cert is not None else os.environ.get("BITONG_TLS_CERT", "")
        key = tls_key if tls_key is not None else os.environ.get("BITONG_TLS_KEY", "")
        if bool(cert) != bool(key):
            raise BitongError("tls_cert and tls_key go together (the client certificate and its private key)")
        self.credentials: grpc.ChannelCredentials | None = None
        if ca or cert:
            self.credentials = grpc.ssl_channel_credentials(_read(ca, "tls_ca") if ca else None,
                                                            _read(key, "tls_key") if key else None,
                                                            _read(cert, "tls_cert") if cert else None)
        bearer = token if token is not None else os.environ.get("BITONG_TOKEN", "").strip()
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {bearer}"),) if bearer else ()

    def call_request(self, tool: str, params: Mapping[str, Any] | None, confirm: str) -> pb.CallRequest:
        struct = struct_pb2.Struct()
        if params:
            try:
                struct.update(dict(params))
            except (TypeError, ValueError) as exc:
                raise BitongError(f"call {tool}: params must be JSON-like (str, number, bool, None, list, "
                                  f"dict): {exc}") from None
        return pb.CallRequest(tool=tool, params=struct, confirm_token=confirm)

    def metadata_with(self, extra: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
        return self.metadata + tuple(extra.items()) if extra else self.metadata


class Client:
    """A blocking client; one channel, reused by every call (thread-safe, as gRPC channels are).

    ``timeout`` (seconds) bounds each call; a Call's tool is then stopped just
    before it, and the result says ``timed_out`` with the output so far.
    ``metadata``: extra gRPC metadata for every call (``x-request-id``,
    ``traceparent``).
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, *, token: str | None = None, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 metadata: Mapping[str, str] | None = None) -> None:
        self._setup = _Setup(address, token, tls_ca, tls_cert, tls_key)
        self._extra = metadata
        if self._setup.credentials is not None:
            self._channel = grpc.secure_channel(self._setup.target, self._setup.credentials, options=_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(self._setup.target, options=_OPTIONS)
        self._stub = pb_grpc.ToolAgentStub(self._channel)

    @property
    def address(self) -> str:
        return self._setup.address

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _md(self, metadata: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
        return self._setup.metadata_with({**(self._extra or {}), **(metadata or {})})

    def match(self, intent: str, *, top_k: int = 0, explain: bool = False, timeout: float | None = None,
              metadata: Mapping[str, str] | None = None) -> pb.MatchResponse:
        """The best 1-3 tools for ``intent`` (``found``, ``candidates``), or found=false with a ``suggestion``."""
        try:
            reply: pb.MatchResponse = self._stub.Match(pb.MatchRequest(intent=intent, top_k=top_k, explain=explain),
                                                       timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        return reply

    def call(self, tool: str, params: Mapping[str, Any] | None = None, *, confirm: str | bool = "",
             timeout: float | None = None, metadata: Mapping[str, str] | None = None) -> pb.CallResult:
        """Run ``tool`` and collect its result (output capped at its ``max_output_bytes``).

        ``confirm``: a ``confirm_token`` from an earlier result with
        ``needs_confirmation``; or True to confirm a ``require_confirm`` tool
        at once (the two-step flow done here, as ``bitong call --yes``).
        """
        token = confirm if isinstance(confirm, str) else ""
        request = self._setup.call_request(tool, params, token)
        try:
            result: pb.CallResult = self._stub.Call(request, timeout=timeout, metadata=self._md(metadata))
            if confirm is True and result.needs_confirmation and result.confirm_token:
                request.confirm_token = result.confirm_token
                result = self._stub.Call(request, timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        return result

    def stream(self, tool: str, params: Mapping[str, Any] | None = None, *, confirm: str = "",
               timeout: float | None = None, metadata: Mapping[str, str] | None = None) -> Iterator[pb.CallEvent]:
        """Run ``tool`` and yield its output as produced: ``CallEvent``s whose ``chunk`` is
        (``stream``, ``data``), then always one whose ``result`` is the ``CallResult``. Closing the
        iterator early cancels the call (the tool's process group is killed)."""
        request = self._setup.call_request(tool, params, confirm)
        call = self._stub.StreamCall(request, timeout=timeout, metadata=self._md(metadata))
        try:
            yield from call
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        finally:
            call.cancel()

    def tools(self, *, timeout: float | None = None,
              metadata: Mapping[str, str] | None = None) -> pb.ListToolsResponse:
        """Every tool this caller may use (in name order, every page), and every file that failed to load."""
        reply = pb.ListToolsResponse()
        token = ""
        try:
            while True:
                page: pb.ListToolsResponse = self._stub.ListTools(pb.ListToolsRequest(page_token=token),
                                                                  timeout=timeout, metadata=self._md(metadata))
                reply.tools.extend(page.tools)
                reply.errors.extend(page.errors)
                token = page.next_page_token
                if not token:
                    return reply
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None

    def watch(self, *, metadata: Mapping[str, str] | None = None) -> Iterator[pb.ToolsChanged]:
        """The registry as it changes: first the current tools (``initial``, all in ``added``), then
        ``added``/``changed``/``removed`` at every swap. Runs until closed or the server stops."""
        call = self._stub.WatchTools(pb.WatchToolsRequest(), metadata=self._md(metadata))
        try:
            yield from call
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise _error(exc, self.address) from None
        finally:
            call.cancel()


class AsyncClient:
    """The asyncio twin of :class:`Client` (grpc.aio): the same methods, awaited; ``stream`` and
    ``watch`` are async iterators. Use it inside one event loop."""

    def __init__(self, address: str = DEFAULT_ADDRESS, *, token: str | None = None, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 metadata: Mapping[str, str] | None = None) -> None:
        self._setup = _Setup(address, token, tls_ca, tls_cert, tls_key)
        self._extra = metadata
        if self._setup.credentials is not None:
            self._channel = grpc.aio.secure_channel(self._setup.target, self._setup.credentials, options=_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(self._setup.target, options=_OPTIONS)
        self._stub = pb_grpc.ToolAgentStub(self._channel)

    @property
    def address(self) -> str:
        return self._setup.address

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _md(self, metadata: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
        return self._setup.metadata_with({**(self._extra or {}), **(metadata or {})})

    async def match(self, intent: str, *, top_k: int = 0, explain: bool = False, timeout: float | None = None,
                    metadata: Mapping[str, str] | None = None) -> pb.MatchResponse:
        """See :meth:`Client.match`."""
        try:
            reply: pb.MatchResponse = await self._stub.Match(
                pb.MatchRequest(intent=intent, top_k=top_k, explain=explain), timeout=timeout,
                metadata=self._md(metadata))
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        return reply

    async def call(self, tool: str, params: Mapping[str, Any] | None = None, *, confirm: str | bool = "",
                   timeout: float | None = None, metadata: Mapping[str, str] | None = None) -> pb.CallResult:
        """See :meth:`Client.call`."""
        token = confirm if isinstance(confirm, str) else ""
        request = self._setup.call_request(tool, params, token)
        try:
            result: pb.CallResult = await self._stub.Call(request, timeout=timeout, metadata=self._md(metadata))
            if confirm is True and result.needs_confirmation and result.confirm_token:
                request.confirm_token = result.confirm_token
                result = await self._stub.Call(request, timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        return result

    async def stream(self, tool: str, params: Mapping[str, Any] | None = None, *, confirm: str = "",
                     timeout: float | None = None,
                     metadata: Mapping[str, str] | None = None) -> AsyncIterator[pb.CallEvent]:
        """See :meth:`Client.stream`."""
        request = self._setup.call_request(tool, params, confirm)
        call = self._stub.StreamCall(request, timeout=timeout, metadata=self._md(metadata))
        try:
            async for event in call:
                yield event
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None
        finally:
            call.cancel()

    async def tools(self, *, timeout: float | None = None,
                    metadata: Mapping[str, str] | None = None) -> pb.ListToolsResponse:
        """See :meth:`Client.tools`."""
        reply = pb.ListToolsResponse()
        token = ""
        try:
            while True:
                page: pb.ListToolsResponse = await self._stub.ListTools(
                    pb.ListToolsRequest(page_token=token), timeout=timeout, metadata=self._md(metadata))
                reply.tools.extend(page.tools)
                reply.errors.extend(page.errors)
                token = page.next_page_token
                if not token:
                    return reply
        except grpc.RpcError as exc:
            raise _error(exc, self.address) from None

    async def watch(self, *, metadata: Mapping[str, str] | None = None) -> AsyncIterator[pb.ToolsChanged]:
        """See :meth:`Client.watch`."""
        call = self._stub.WatchTools(pb.WatchToolsRequest(), metadata=self._md(metadata))
        try:
            async for change in call:
                yield change
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise _error(exc, self.address) from None
        finally:
            call.cancel()
