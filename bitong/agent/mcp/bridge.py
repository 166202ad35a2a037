"""``bitong mcp``: the registry as a Model Context Protocol server (the official ``mcp`` SDK, low-level API).

The bridge is a transport like the gRPC servicer: it converts MCP requests to
:class:`~bitong.agent.serving.service.ToolAgent` calls and results back, so an MCP call
passes the same validation, allow-lists, approvals, confirmation, caps and
limits as a gRPC Call. Nothing here decides what runs.

Both protocol eras the SDK serves are answered: the 2025 handshake
(``initialize``; what Claude Desktop, Claude Code and most hosts speak
today) and 2026-07-28 (per-request envelope, ``subscriptions/listen``,
multi-round-trip input). Where they differ:

* tools/list_changed: handshake clients that listed the tools get
  ``notifications/tools/list_changed`` on their connection; 2026 clients get
  it on the ``subscriptions/listen`` stream they opened.
* ``require_confirm``: a client that declares elicitation is asked (2025:
  an ``elicitation/create`` request; 2026: an ``input_required`` result the
  SDK client answers and retries); a client without it gets the two-step
  token: ``isError`` with the reason and the token, and runs the call by
  sending the same arguments again with ``"_confirm": TOKEN``.

Results are never reworded: stdout is the first content block (text when it
is UTF-8, else an embedded resource holding the bytes), and a failure adds
the real stderr and a status line with the exit code and bitong's reason.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

import bitong
from bitong.v1 import agent_pb2 as pb

from ..serving.callers import CallerPolicy, PermissionDenied
from ..calling.executors.base import STDERR, STDOUT
from ..serving.identity import Caller
from ..registry.snapshot import Snapshot
from ..serving.service import LimitExceeded, ToolAgent
from . import schema

__all__ = ["Bridge", "CALLER_ID", "FIND_TOOLS", "CALL_TOOL", "parse_http", "bind_http", "serve", "serve_stdio", "serve_http"]

log = logging.getLogger("bitong.mcp")

CALLER_ID = "mcp"
"""Every MCP client is this caller: ``[callers.mcp]`` says what MCP hosts may use, the audit names it.
(MCP's stdio has no peer identity, and the HTTP transport here no authentication.)"""

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"

# A handshake-era HTTP session the SDK reaps after this long idle (its default) is forgotten here too.
_SESSION_IDLE_S = 30 * 60
# Progress notifications at most this often (the first chunk is always reported at once).
_PROGRESS_EVERY_S = 0.25
_CONFIRM_KEY = "confirm"

_Ctx = ServerRequestContext[Any, Any]


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(text)], is_error=True)


def _block(data: bytes, uri: str) -> types.TextContent | types.EmbeddedResource:
    """Bytes as text when they are UTF-8, else as an embedded resource holding them unchanged."""
    try:
        return _text(data.decode("utf-8"))
    except UnicodeDecodeError:
        blob = types.BlobResourceContents(uri=uri, mime_type="application/octet-stream",
                                          blob=base64.b64encode(data).decode("ascii"))
        return types.EmbeddedResource(type="resource", resource=blob)


class _Output:
    """The executor sink of a call with a progressToken: keeps what Call would keep, reports what came.

    With a sink the executor caps nothing (that is StreamCall's contract), so
    the cap of Call (``max_output_bytes`` of stdout and of stderr each) is
    applied here and the rest is counted and dropped.
    """

    def __init__(self, ctx: _Ctx, cap: int) -> None:
        self.ctx = ctx
        self.cap = cap
        self.kept = {STDOUT: bytearray(), STDERR: bytearray()}
        self.bytes = 0
        self.lines = 0
        self.truncated = False
        self._last = 0.0

    async def sink(self, stream: int, data: bytes) -> None:
        kept = self.kept[STDOUT if stream == STDOUT else STDERR]
        room = self.cap - len(kept)
        if room > 0:
            kept += data[:room]
        if len(data) > max(room, 0):
            self.truncated = True
        self.bytes += len(data)
        self.lines += data.count(b"\n")
        now = time.monotonic()
        if self._last == 0.0 or now - self._last >= _PROGRESS_EVERY_S:
            self._last = now
            await self.ctx.session.report_progress(self.bytes, None,
                                                   f"{self.bytes} bytes, {self.lines} lines so far")

    def fill(self, result: pb.CallResult) -> None:
        result.output = bytes(self.kept[STDOUT])
        result.stderr = bytes(self.kept[STDERR])
        result.truncated = result.truncated or self.truncated


class Bridge:
    """One MCP server over one :class:`ToolAgent`; ``on_swap`` is the cache agent's hook."""

    def __init__(self, agent: ToolAgent, *, search: bool = False, caller: Caller | None = None) -> None:
        self.agent = agent
        self.search = search
        self.caller = caller or Caller(CALLER_ID, "mcp-stdio")   # what [callers.mcp] and the audit name
        self.bus = InMemorySubscriptionBus()
        self._listed = self._signature(agent.registry.snapshot)
        self._sessions: dict[str, tuple[ServerSession, float]] = {}   # handshake-era clients that listed tools
        self._tasks: set[asyncio.Task[None]] = set()
        self.server: Server[Any] = Server(
            "bitong", version=bitong.__version__, title="bitong (笔筒) tool registry",
            instructions=self._instructions(),
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
            on_subscriptions_listen=None if search else ListenHandler(self.bus),
        )

    def _instructions(self) -> str:
        if self.search:
            return (f"This server holds many tools and lists two: call {FIND_TOOLS} with what you want done "
                    f"to get the best 1-3 tools and their input schemas, then {CALL_TOOL} with the tool's name "
                    "and its params.")
        return "Tools from a bitong registry; each runs exactly as its TOOL.hdlp defines."

    def init_options(self) -> Any:
        """The handshake's initialization options: tools, with list_changed unless in search mode."""
        return self.server.create_initialization_options(NotificationOptions(tools_changed=not self.search))

    # ------------------------------------------------------------ tools/list and list_changed

    @staticmethod
    def _signature(snap: Snapshot) -> frozenset[tuple[str, str]]:
        return frozenset((name, tool.content_sha256) for name, tool in snap.tools.items())

    def listed(self, snap: Snapshot) -> None:
        """Take ``snap`` as the tools clients have seen, announcing nothing (the first scan)."""
        self._listed = self._signature(snap)

    def on_swap(self, snap: Snapshot) -> None:
        """Called by the cache agent on the event loop at every swap: announce a changed tool list."""
        signature = self._signature(snap)
        if signature == self._listed:
            return   # new vectors or calibration: the same tools
        self._listed = signature
        if self.search:
            return   # the two meta-tools did not change; find_tools reads the new snapshot
        task = asyncio.get_running_loop().create_task(self._announce(), name="bitong-mcp-list-changed")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce(self) -> None:
        await self.bus.publish(ToolsListChanged())
        for key, (session, _seen) in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:   # the connection is gone: forget it
                log.debug("list_changed to %s not sent (%s); forgetting it", key, exc)
                self._sessions.pop(key, None)
        log.info("tools changed: list_changed sent (%d handshake client(s), and listen streams)",
                 len(self._sessions))

    def _remember(self, ctx: _Ctx, *, listed: bool) -> None:
        """A handshake-era client that listed the tools is told when they change (on its connection's channel).

        Keyed by the HTTP session (one key on stdio); any request of a known
        session keeps it, and one idle as long as the SDK's reaping of idle
        sessions is forgotten, so the map never outgrows the live sessions.
        """
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return   # told through subscriptions/listen
        headers = getattr(ctx.request, "headers", None)
        key = (headers.get("mcp-session-id") if headers is not None else None) or "stdio"
        now = time.monotonic()
        if listed:
            for old in [k for k, (_, seen) in self._sessions.items() if now - seen > _SESSION_IDLE_S]:
                del self._sessions[old]
            self._sessions[key] = (ctx.session, now)
        elif key in self._sessions:
            self._sessions[key] = (self._sessions[key][0], now)

    async def list_tools(self, ctx: _Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._remember(ctx, listed=True)
        if self.search:
            return types.ListToolsResult(tools=_meta_tools(), ttl_ms=0)
        cursor = params.cursor if params is not None else None
        try:
            page = self.agent.list_tools(caller=self.caller, page_size=0, page_token=cursor or "")
        except LimitExceeded as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message) from None
        tools = [types.Tool.model_validate(schema.mcp_tool(t)) for t in page.tools]
        return types.ListToolsResult(tools=tools, next_cursor=page.next_page_token or None, ttl_ms=0)

    # ------------------------------------------------------------ tools/call

    async def call_tool(self, ctx: _Ctx,
                        params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
        self._remember(ctx, listed=False)
        args = dict(params.arguments or {})
        if not self.search:
            return await self._call(ctx, params.name, args, params)
        if params.name == FIND_TOOLS:
            return await self._find(args)
        if params.name == CALL_TOOL:
            name = args.get("name")
            inner = args.get("params", {})
            if not isinstance(name, str) or not name:
                return _error(f"{CALL_TOOL}: parameter name: the tool's name (text) is required; "
                              f"{FIND_TOOLS} gives it")
            if not isinstance(inner, dict):
                return _error(f"{CALL_TOOL}: parameter params: an object of the tool's parameters, got "
                              f"{type(inner).__name__}")
            extra = sorted(set(args) - {"name", "params", "confirm"})
            if extra:
                return _error(f"{CALL_TOOL}: unknown parameter(s) {', '.join(extra)}: it takes name, params, confirm")
            confirm = args.get("confirm")
            if confirm:
                inner = {**inner, schema.CONFIRM_ARG: confirm}
            return await self._call(ctx, name, dict(inner), params)
        return _error(f"no tool named '{params.name}' here: this server lists {FIND_TOOLS} and {CALL_TOOL}; "
                      f"call {FIND_TOOLS} with what you want done")

    async def _find(self, args: Mapping[str, Any]) -> types.CallToolResult:
        intent = args.get("intent")
        if not isinstance(intent, str) or not intent.strip():
            return _error(f"{FIND_TOOLS}: parameter intent: say what you want done, as text")
        top_k = args.get("top_k", 3)
        if isinstance(top_k, bool) or not isinstance(top_k, int | float) or not 1 <= top_k <= 3:
            return _error(f"{FIND_TOOLS}: parameter top_k: an integer from 1 to 3, got {top_k!r}")
        extra = sorted(set(args) - {"intent", "top_k"})
        if extra:
            return _error(f"{FIND_TOOLS}: unknown parameter(s) {', '.join(extra)}: it takes intent, top_k")
        try:
            reply = await anyio.to_thread.run_sync(
                functools.partial(self.agent.match, intent, int(top_k), caller=self.caller))
        except LimitExceeded as exc:
            return _error(f"{FIND_TOOLS}: parameter intent: {exc.message}")
        if not reply.found:
            body: dict[str, Any] = {"found": False, "suggestion": reply.suggestion}
        else:
            body = {"found": True, "tools": [{"score": round(c.score, 4), **schema.mcp_tool(c.tool)}
                                             for c in reply.candidates]}
        return types.CallToolResult(content=[_text(json.dumps(body, ensure_ascii=False))], structured_content=body)

    async def _call(self, ctx: _Ctx, name: str, args: dict[str, Any],
                    params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
        tool = self.agent.registry.snapshot.lookup(name)
        token = ""
        if tool is None or schema.CONFIRM_ARG not in tool.params_schema:
            raw = args.pop(schema.CONFIRM_ARG, "")
            token = raw if isinstance(raw, str) else ""
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern and params.request_state:
            # the retry of an input_required round: the person's answer and the token we gave
            if not _accepted((params.input_responses or {}).get(_CONFIRM_KEY)):
                return _error(f"tool '{name}': the user declined the confirmation; nothing ran")
            token = params.request_state
        result = await self._run(ctx, name, args, token)
        if isinstance(result, types.CallToolResult):
            return result
        if not (result.needs_confirmation and result.confirm_token):
            return _result(result)
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None:
            return _two_step(result)
        question = _confirm_question(result, args)
        if modern:
            request = types.ElicitRequest(params=types.ElicitRequestFormParams(
                message=question, requested_schema=_CONFIRM_SCHEMA))
            return types.InputRequiredResult(input_requests={_CONFIRM_KEY: request}, request_state=result.confirm_token)
        try:
            answer = await ctx.session.elicit_form(question, _CONFIRM_SCHEMA, related_request_id=ctx.request_id)
        except Exception as exc:   # declared but not served (an error reply, no back-channel): the token
            log.info("call %s: elicitation failed (%s); the two-step token instead", name, exc)
            return _two_step(result)
        if not _accepted(answer):
            return _error(f"tool '{name}': the user declined the confirmation ({answer.action}); nothing ran")
        done = await self._run(ctx, name, args, result.confirm_token)
        return done if isinstance(done, types.CallToolResult) else _result(done)

    async def _run(self, ctx: _Ctx, name: str, args: dict[str, Any],
                   token: str) -> pb.CallResult | types.CallToolResult:
        """One ToolAgent.call; with a progressToken through the executor sink, reporting as output comes."""
        tool = self.agent.registry.snapshot.lookup(name)
        wants_progress = isinstance(((ctx.params or {}).get("_meta") or {}).get("progressToken"), str | int)
        out = _Output(ctx, tool.constraints.max_output_bytes) if tool is not None and wants_progress else None
        try:
            result = await self.agent.call(name, args, confirm_token=token, sink=out.sink if out else None,
                                           caller=self.caller)
        except LimitExceeded as exc:
            return _error(f"tool '{name}': {exc.message}; nothing ran")
        except PermissionDenied as exc:
            return _error(f"tool '{name}': {exc}")
        if out is not None:
            out.fill(result)
        return result


# ---------------------------------------------------------------- results


_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {_CONFIRM_KEY: {"type": "boolean", "title": "Run it", "description": "true runs the call once"}},
    "required": [_CONFIRM_KEY],
}


def _accepted(answer: Any) -> bool:
    return (isinstance(answer, types.ElicitResult) and answer.action == "accept"
            and (answer.content or {}).get(_CONFIRM_KEY) is True)


def _confirm_question(result: pb.CallResult, args: Mapping[str, Any]) -> str:
    shown = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return f"Run tool '{result.tool}' with {shown}? It asks for confirmation before it runs (require_confirm)."


def _two_step(result: pb.CallResult) -> types.CallToolResult:
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(result.confirm_expires_unix_ms / 1000))
    text = (f"{result.error}. Nothing ran. To run it, call '{result.tool}' again with the same arguments plus "
            f"\"{schema.CONFIRM_ARG}\": \"{result.confirm_token}\" (valid once, until {expires}).")
    return types.CallToolResult(content=[_text(text)], is_error=True,
                                structured_content={"needs_confirmation": True, "confirm_token": result.confirm_token,
                                                    "confirm_expires_unix_ms": result.confirm_expires_unix_ms})


def _status(result: pb.CallResult) -> str:
    """bitong's one line about a failed call: why, the exit code, the parameters at fault."""
    parts = [f"bitong: tool '{result.tool}' failed" if result.found else "bitong: unknown tool"]
    if result.error:
        parts.append(result.error)
    if result.found and (result.exit_code or result.argv or result.signal):
        parts.append(f"exit code {result.exit_code}" + (f" (signal {result.signal})" if result.signal else ""))
    if result.http_status:
        parts.append(f"HTTP status {result.http_status}")
    if result.timed_out:
        parts.append("timed out")
    line = "; ".join(parts)
    for problem in result.param_errors:
        line += f"\nparameter {problem.param}: {problem.message}"
    return line


def _result(result: pb.CallResult) -> types.CallToolResult:
    content: list[types.TextContent | types.EmbeddedResource] = []
    if result.output:
        content.append(_block(result.output, f"bitong://{result.tool}/stdout"))
    if not result.ok:
        if result.stderr:
            content.append(_block(result.stderr, f"bitong://{result.tool}/stderr"))
        content.append(_text(_status(result)))
    if result.truncated:
        content.append(_text(f"bitong: output truncated at max_output_bytes "
                             f"({len(result.output)} bytes kept; the rest was read and dropped)"))
    return types.CallToolResult(content=list(content), is_error=not result.ok)


def _meta_tools() -> list[types.Tool]:
    find = types.Tool(
        name=FIND_TOOLS, title="Find tools",
        description="Find the best 1-3 tools for what you want done, with their input schemas; or found=false "
                    "with a suggestion when no registered tool fits. Then run one with call_tool.",
        input_schema={"type": "object", "properties": {
            "intent": {"type": "string", "description": "what you want done, in a sentence (any language)"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 3, "default": 3,
                      "description": "how many tools at most"}},
            "required": ["intent"], "additionalProperties": False},
        annotations=types.ToolAnnotations(title="Find tools", read_only_hint=True, open_world_hint=False))
    call = types.Tool(
        name=CALL_TOOL, title="Call a tool",
        description="Run one tool that find_tools gave, with its parameters as its input schema says. A tool "
                    "that asks for confirmation answers with a confirm token: call again with it as confirm.",
        input_schema={"type": "object", "properties": {
            "name": {"type": "string", "description": "the tool's name, as find_tools gave it"},
            "params": {"type": "object", "description": "the tool's parameters", "default": {}},
            "confirm": {"type": "string", "description": "the confirm token of a previous call that asked for "
                                                         "confirmation (same name and params)"}},
            "required": ["name"], "additionalProperties": False},
        annotations=types.ToolAnnotations(title="Call a tool", read_only_hint=False, destructive_hint=True,
                                          open_world_hint=True))
    return [find, call]


# ---------------------------------------------------------------- transports


def parse_http(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) to a bind address; ValueError says what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--http {address!r}: give HOST:PORT, e.g. 127.0.0.1:8765 (port 0: any free port)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http {address!r}: the port must be a number from 0 to 65535")
    return host, int(port)


class _Stop:
    """SIGTERM/SIGINT, taken from the start: an orderly end (calls in flight cancelled, their processes
    killed) whether the signal comes before the transport is up or while it serves."""

    def __init__(self) -> None:
        self.requested = False
        self._action: Callable[[], None] | None = None

    def __call__(self) -> None:
        self.requested = True
        if self._action is not None:
            self._action()

    def on(self, action: Callable[[], None]) -> None:
        self._action = action
        if self.requested:
            action()


@contextlib.contextmanager
def _signals(stop: _Stop) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):   # not the main thread, or no signals here
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class _PipeLines:
    """stdin's lines read on the event loop, so a stop cancels the read.

    The SDK reads stdin in a worker thread, which a cancellation cannot
    interrupt: SIGTERM would wait for the client's next message. One message
    may hold parameters up to ``max_params_bytes`` (4 MiB by default): the
    line limit is far above it.
    """

    LIMIT = 64 * 1024 * 1024

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> None:
        self.reader = reader
        self.transport = transport

    @classmethod
    async def open(cls) -> _PipeLines | None:
        """None where stdin is not a pipe or socket (a file, a terminal): then the SDK's reader serves."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=cls.LIMIT)
        pipe = os.fdopen(os.dup(0), "rb", buffering=0)
        try:
            transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        except (OSError, ValueError):
            pipe.close()
            return None
        return cls(reader, transport)

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


async def serve_stdio(bridge: Bridge, stop: _Stop) -> None:
    """Serve one client on stdin/stdout until it closes stdin (or ``stop``)."""
    lines = await _PipeLines.open()
    try:
        async with anyio.create_task_group() as tg:
            stop.on(tg.cancel_scope.cancel)
            async with stdio_server(stdin=cast(Any, lines)) as (read, write):
                await bridge.server.run(read, write, bridge.init_options())
            tg.cancel_scope.cancel()
    finally:
        if lines is not None:
            lines.transport.close()


def bind_http(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a port in use is an error at once
    (OSError saying so), and port 0 gives a port the endpoint line can name."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} for MCP over HTTP: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


async def serve_http(bridge: Bridge, sock: socket.socket, stop: _Stop, *, ready: Callable[[str], None]) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` on ``sock`` until ``stop``; ``ready`` gets the URL."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    if host not in ("127.0.0.1", "::1"):
        log.warning("SECURITY: MCP over HTTP on %s has no authentication: anyone who reaches it runs the tools; "
                    "keep it on 127.0.0.1", host)
    app = bridge.server.streamable_http_app(host=host)

    class _Uvicorn(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:   # ours, in _signals (uvicorn's re-raise the signal after)
            yield

    server = _Uvicorn(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, lifespan="on"))

    def end() -> None:
        server.should_exit = True

    stop.on(end)
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    ready(f"http://{shown}:{port}/mcp")
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


def main_line(text: str) -> None:
    """One line for the person who started it (stderr: on stdio, stdout is the protocol)."""
    print(f"bitong: {text}", file=sys.stderr, flush=True)


def roots_banner(roots: Sequence[str], snap: Snapshot) -> str:
    return f"{len(snap.tools)} tools from {', '.join(roots)}" + (f" ({len(snap.errors)} load errors)"
                                                                   if snap.errors else "")


async def serve(roots: Sequence[str], *, http: tuple[str, int] | None = None, config: Any = None,
                vocabulary: Any = None, embedder_loader: Any = None, threshold: float | None = None,
                state_path: str | None = None, poll_s: float = 0.5, limits: Any = None, search: bool = False,
                audit_path: str | None = None) -> None:
    """The registry, its cache agent and the service in this process, served over MCP until the end.

    The same pieces as ``bitong serve`` builds (approvals from the config's
    ``[approve]``, else the development default; the config's executors,
    endpoints and confirmation settings), so a tool behaves here as it does
    through gRPC. Raises OSError when the HTTP port cannot be bound.
    """
    sock = bind_http(*http) if http is not None else None
    stop = _Stop()
    try:
        with _signals(stop):
            await _serve(roots, stop, http=sock, config=config, vocabulary=vocabulary,
                         embedder_loader=embedder_loader, threshold=threshold, state_path=state_path, poll_s=poll_s,
                         limits=limits, search=search, audit_path=audit_path)
    finally:
        if sock is not None:
            sock.close()


async def _serve(roots: Sequence[str], stop: _Stop, *, http: socket.socket | None, config: Any, vocabulary: Any,
                 embedder_loader: Any, threshold: float | None, state_path: str | None, poll_s: float, limits: Any,
                 search: bool, audit_path: str | None) -> None:
    from ..registry import approval
    from ..serving.audit import AuditLog, Redactor
    from ..registry.cache import CacheAgent
    from ..config import Config
    from ..calling.executors import Executors
    from ..registry.snapshot import Registry

    # a config file approves only what its [approve] lists; without one, the development default
    approvals = config.approve if config is not None else approval.development()
    config = config or Config()
    registry = Registry(roots, vocabulary=vocabulary, approval=approvals, embedder_loader=embedder_loader)
    agent = ToolAgent(registry, executors=Executors(config), threshold=threshold, limits=limits,
                      policy=CallerPolicy(config.callers), confirm_by=config.confirm.by)
    if audit_path:
        agent.audit = AuditLog(audit_path, redactor=Redactor(config.secrets()))
    bridge = Bridge(agent, search=search, caller=Caller(CALLER_ID, "mcp-http" if http is not None else "mcp-stdio"))
    cache = CacheAgent(registry, poll_s=poll_s, state_path=state_path, on_swap=bridge.on_swap)
    snap = await cache.start(defer=True)
    bridge.listed(snap)   # the list a client sees first is this one: no list_changed for it
    for err in snap.errors:
        log.error("%s", err)
    cache.serving()
    main_line(f"MCP over {'HTTP' if http else 'stdio'}: "
              f"{roots_banner(roots, snap)}{'; search mode (find_tools, call_tool)' if search else ''}")
    try:
        if http is None:
            await serve_stdio(bridge, stop)
        else:
            await serve_http(bridge, http, stop, ready=lambda url: main_line(f"MCP endpoint {url}"))
    finally:
        await cache.stop()
        if agent.audit is not None:
            agent.audit.close()
