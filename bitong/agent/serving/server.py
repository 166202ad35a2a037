"""The gRPC sidecar: proto in, proto out, nothing else.

The servicer converts requests to calls on :class:`~bitong.agent.serving.service.ToolAgent`
and maps the gRPC deadline to the call's deadline; all logic lives there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import errno
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

from . import admin
from ..registry import approval
from .admin import ApprovalsServicer
from ..registry.approval import Policy as ApprovalPolicy
from ..registry.cooldown import DEFAULT_WINDOW_S, Cooldown
from .lifecycle import LifecycleServicer
from ..registry.snapshot import Snapshot
from .scheduler import Outbox, Scheduler
from ..registry.tools_repo import RepoSync, ToolsRepo
from .audit import DEFAULT_KEEP, DEFAULT_MAX_BYTES, AuditLog, Redactor, Trail
from ..registry.cache import CacheAgent
from .callers import CallerPolicy, PermissionDenied
from ..config import Config, SecretUnavailable
from ..calling.humanconfirm import HumanConfirmations
from ..calling.executors import Executors
from ..calling.executors.base import STDOUT
from ..calling.executors.sandbox import Sandbox
from .identity import Authenticator, Caller, Unauthenticated
from .listen import DEFAULT_LISTEN, ListenError, Security, check, grpc_address, host_of, is_loopback
from .observe import Observer
from .peercred import UnixFront
from ..registry.snapshot import Registry
from .limits import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, LimitExceeded, Limits
from .service import ToolAgent
from ..registry.watch import ToolWatch

__all__ = ["DEFAULT_LISTEN", "SERVICE_NAME", "ListenError", "Security", "Servicer", "Sidecar", "serve",
           "grpc_address"]


if TYPE_CHECKING:   # http.server: imported only where the page or the webhook is asked for
    from ..registry.webhook import Webhook
    from .approvals_page import ApprovalsPage

log = logging.getLogger("bitong.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolAgent"].full_name
# Call collects output in one message; leave room above the largest max_output_bytes.
_MESSAGE_LIMIT = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", _MESSAGE_LIMIT),
                    ("grpc.max_receive_message_length", _MESSAGE_LIMIT)]
# SO_REUSEPORT (gRPC's default on Linux) lets a second server bind the same port and take part of
# the calls meant for the first; off, the second one fails to start.
_SERVER_OPTIONS = [*_CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)]


# Stop the tool this much before the caller's deadline (at most), so the result
# with the output so far reaches the caller instead of a bare DEADLINE_EXCEEDED.
_REPLY_MARGIN_S = 0.05


_Context = grpc.aio.ServicerContext[Any, Any]
Metadata = tuple[tuple[str, str | bytes], ...]

# How long a shutdown waits for cancelled calls to unwind (kill their process groups, write their audit line).
_UNWIND_S = 5.0


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
    params = request.params
    fields = params.fields
    if len(fields) > limits.max_params:
        raise LimitExceeded(INVALID_ARGUMENT, f"{len(fields)} parameters; the limit is max_params "
                                              f"{limits.max_params}")
    size = params.ByteSize()
    if size > limits.max_params_bytes:
        raise LimitExceeded(INVALID_ARGUMENT, f"parameters are {size} bytes; the limit is max_params_bytes "
                                              f"{limits.max_params_bytes}")
    return {key: _value(fields[key]) for key in fields}   # (upb: indexing is faster than items())


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

    def __init__(self, agent: ToolAgent, match_pool: concurrent.futures.ThreadPoolExecutor | None = None,
                 authenticator: Authenticator | None = None, watch: ToolWatch | None = None,
                 observer: Observer | None = None) -> None:
        self.agent = agent
        self.watch = watch if watch is not None else ToolWatch(agent.registry)   # (an empty one is falsy)
        self.observer = observer if observer is not None else Observer()
        # None: every caller is anonymous-loopback (a Servicer built without a Sidecar, in tests)
        self.authenticator = authenticator or Authenticator(anonymous=True)
        self.limits = agent.limits
        self.match_pool = match_pool or concurrent.futures.ThreadPoolExecutor(
            self.limits.match_workers, thread_name_prefix="bitong-match")
        self.matches = 0   # running or waiting for a thread
        self.outbox: Outbox | None = None   # scheduled results (Subscribe); None: nothing is scheduled here

    async def _caller(self, context: _Context, call: pb.CallRequest | None = None, rpc: str = "Call",
                      metadata: Metadata | None = None) -> Caller:
        """The authenticated caller, or the RPC ends UNAUTHENTICATED (a refused Call is audited first).

        ``metadata``: the request's, when the caller already has it (gRPC builds a new tuple each time it is asked).
        """
        try:
            return self.authenticator.authenticate(context.peer(), context.auth_context(),
                                                   _metadata(context) if metadata is None else metadata)
        except (Unauthenticated, SecretUnavailable) as exc:
            message = str(exc)
        if call is not None:
            trail = Trail(rpc=rpc, caller=Caller("unauthenticated", f"none (peer {context.peer()})"),
                          refused=("UNAUTHENTICATED", message))
            self.agent.audit_line(trail, call.tool, {}, None)
        log.warning("refused a caller from %s: %s", context.peer(), message)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        raise AssertionError("abort returned")   # pragma: no cover - abort raises

    async def Match(self, request: pb.MatchRequest, context: _Context) -> pb.MatchResponse:
        metadata = _metadata(context)
        with self.observer.match(metadata) as seen:
            seen.match = await self._match(request, context, metadata)
            return seen.match

    async def _match(self, request: pb.MatchRequest, context: _Context, metadata: Metadata) -> pb.MatchResponse:
        caller = await self._caller(context, metadata=metadata)
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
            # in the request's context: its log lines carry its request id (and its span is the parent)
            return await loop.run_in_executor(self.match_pool, functools.partial(
                contextvars.copy_context().run, self.agent.match, request.intent, request.top_k,
                explain=request.explain, caller=caller, canary_key=_canary_key(context, metadata)))
        finally:
            self.matches -= 1

    async def ListTools(self, request: pb.ListToolsRequest,
                        context: _Context) -> pb.ListToolsResponse:
        caller = await self._caller(context)
        try:
            return self.agent.list_tools(caller=caller, page_size=request.page_size, page_token=request.page_token)
        except LimitExceeded as exc:
            await _abort(context, exc)

    def _checked_params(self, request: pb.CallRequest, caller: Caller, rpc: str) -> dict[str, Any]:
        """The request's params; a request past the limits is audited, then raised (LimitExceeded)."""
        try:
            return _params(request, self.limits)
        except LimitExceeded as exc:
            self.agent.audit_line(Trail(rpc=rpc, caller=caller, refused=(exc.code, exc.message)), request.tool, {},
                                  None)
            raise

    async def Call(self, request: pb.CallRequest, context: _Context) -> pb.CallResult:
        known = self.agent.registry.snapshot.lookup(request.tool) is not None
        metadata = _metadata(context)
        with self.observer.call("Call", request.tool, known, metadata) as seen:
            seen.result = await self._call(request, context, metadata)
            return seen.result

    async def _call(self, request: pb.CallRequest, context: _Context, metadata: Metadata) -> pb.CallResult:
        caller = await self._caller(context, request, metadata=metadata)
        try:
            return await self.agent.call(request.tool, self._checked_params(request, caller, "Call"),
                                         confirm_token=request.confirm_token, deadline=_deadline(context),
                                         caller=caller, canary_key=_canary_key(context, metadata))
        except LimitExceeded as exc:
            await _abort(context, exc)
        except PermissionDenied as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))

    async def StreamCall(self, request: pb.CallRequest, context: _Context) -> None:
        """Server streaming by context.write (not a generator): the chunks, then the result."""
        # context.write() returns when gRPC flow control takes the message: a slow
        # reader slows the executor's reading instead of growing a buffer here.
        async def sink(stream: int, data: bytes) -> None:
            event = pb.CallEvent()  # fields set in place: a nested constructor copies the bytes again
            event.chunk.stream = pb.OutputChunk.STDOUT if stream == STDOUT else pb.OutputChunk.STDERR
            event.chunk.data = data
            await context.write(event)

        known = self.agent.registry.snapshot.lookup(request.tool) is not None
        metadata = _metadata(context)
        with self.observer.call("StreamCall", request.tool, known, metadata) as seen:
            caller = await self._caller(context, request, "StreamCall", metadata)
            try:
                result = await self.agent.call(request.tool, self._checked_params(request, caller, "StreamCall"),
                                               confirm_token=request.confirm_token, deadline=_deadline(context),
                                               sink=sink, caller=caller, canary_key=_canary_key(context, metadata))
            except LimitExceeded as exc:
                await _abort(context, exc)
            except PermissionDenied as exc:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            seen.result = result
            await context.write(pb.CallEvent(result=result))

    async def WatchTools(self, request: pb.WatchToolsRequest, context: _Context) -> None:
        """The current tools, then their changes at every swap, until the caller or the server ends it."""
        caller = await self._caller(context)
        async for change in self.watch.watch(self.agent.allowed(caller)):
            await context.write(change)   # returns when flow control takes it: a slow reader is coalesced


    async def Subscribe(self, request: pb.SubscribeRequest, context: _Context) -> None:
        """Scheduled results as they come (the undelivered ones first); each is marked delivered once written."""
        caller = await self._caller(context, rpc="Subscribe")
        policy = self.agent.policy
        for name in request.tools:
            if not policy.allows(caller, name):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"caller {caller.id} may not use tool '{name}': no results of it")
        if self.outbox is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this server runs no schedules")
        outbox = self.outbox
        names = frozenset(request.tools)
        sub = outbox.subscribe(lambda tool: (not names or tool in names) and policy.allows(caller, tool))
        try:
            while True:
                entry = await sub.queue.get()
                if not outbox.claim(entry.seq):
                    continue   # another subscriber has it
                try:
                    await context.write(entry)
                except BaseException:
                    outbox.release(entry.seq)
                    raise
                outbox.delivered(entry.seq)
        finally:
            outbox.unsubscribe(sub)


def _metadata(context: _Context) -> Metadata:
    return tuple(context.invocation_metadata() or ())


def _canary_key(context: _Context, metadata: Metadata | None = None) -> str:
    """The ``caller`` metadata (any stable id an agent sends): its side of a canary; "" (per request) without."""
    for key, value in _metadata(context) if metadata is None else metadata:
        if key == "caller":
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


async def _abort(context: _Context, exc: LimitExceeded) -> NoReturn:
    """Answer with the limit's status code and message (raises, ending the RPC)."""
    await context.abort(grpc.StatusCode[exc.code], exc.message)


class Sidecar:
    """A running server: the registry, its cache agent, and the gRPC endpoint."""

    def __init__(self, roots: Sequence[str], listen: str = DEFAULT_LISTEN, *, config: Config | None = None,
                 vocabulary: Any = None, embedder: Any = None, threshold: float | None = None, poll_s: float = 0.5,
                 grace_s: float = 30.0, state_path: str | None = None, limits: Limits | None = None,
                 security: Security | None = None, audit_path: str | None = None,
                 audit_max_bytes: int = DEFAULT_MAX_BYTES, audit_keep: int = DEFAULT_KEEP,
                 approvals: ApprovalPolicy | None = None, admin_socket: str | None = None,
                 approvals_http: str | None = None, sandbox: Sandbox | None = None,
                 embedder_loader: Any = None, metrics: str | None = None, tracer_provider: Any = None,
                 reload_cooldown_s: float = DEFAULT_WINDOW_S, tools_repo: ToolsRepo | None = None,
                 repo_interval_s: float = 60.0, webhook: str | None = None, webhook_secret: bytes = b"") -> None:
        """``embedder_loader``: a function that loads the model, called in the background
        after the server answers (matching is lexical until then); or ``embedder``, loaded.
        ``metrics``: serve Prometheus metrics on this HOST:PORT. ``tracer_provider``: an
        OpenTelemetry provider for the spans (else the OTEL_* variables decide; see bitong.agent.serving.tracing).
        ``reload_cooldown_s``: the window in which one tool reloads at most twice (0: every change at once).
        ``tools_repo``: serve its commit's tools (first among the roots), fetched every ``repo_interval_s``
        and on each push to ``webhook`` (HOST:PORT) signed with ``webhook_secret``."""
        if tools_repo is not None:
            roots = [tools_repo.root, *roots]
        self.config = config or Config()
        self.security = security or Security()
        # approvals: given, else the config file's [approve] (none listed: none approved), else the development default
        self.approvals = approvals or (config.approve if config is not None else approval.development())
        self.registry = Registry(roots, vocabulary=vocabulary, embedder=embedder, approval=self.approvals,
                                 embedder_loader=embedder_loader, cooldown=Cooldown(reload_cooldown_s))
        self.cache = CacheAgent(self.registry, poll_s=poll_s, state_path=state_path, on_swap=self._swapped)
        self.watch = ToolWatch(self.registry)
        self.metrics_listen = metrics
        self.metrics_url = ""
        self.tracer_provider = tracer_provider
        self.observer = Observer()
        # scheduled runs' results wait beside the state for a subscriber (without --state: in memory)
        self.outbox = Outbox(f"{state_path}.outbox" if state_path else None)
        self.scheduler: Scheduler | None = None
        self.repo_sync = (RepoSync(tools_repo, self.registry, interval_s=repo_interval_s, on_swap=self.cache.swapped)
                          if tools_repo is not None else None)
        self.webhook: Webhook | None = None
        if webhook:
            if self.repo_sync is None:
                raise ValueError("--webhook makes the tools repository fetch: it needs --tools-repo")
            from ..registry.webhook import Webhook
            self.webhook = Webhook(webhook, webhook_secret, lambda: tools_repo.branch if tools_repo else "",
                                   self.repo_sync.trigger)
        self.audit_path = audit_path
        self.audit_options = (audit_max_bytes, audit_keep)
        confirm = self.config.confirm
        # human confirmations only where a person can decide them: the admin socket or the approvals page
        human = HumanConfirmations(confirm.ttl_s) if admin_socket or approvals_http else None
        self.agent = ToolAgent(self.registry, executors=Executors(config, sandbox=sandbox), threshold=threshold,
                               limits=limits,
                               policy=CallerPolicy(self.config.callers), human=human, confirm_by=confirm.by)
        self.front: UnixFront | None = None
        self.admin_socket = admin_socket
        self.approvals_http = approvals_http
        self.approvals_token = confirm.http_token.reveal() if confirm.http_token is not None else None
        self.admin_server: grpc.aio.Server | None = None
        self.page: ApprovalsPage | None = None
        self.match_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.servicer: Servicer | None = None
        self.listen = listen
        self.grace_s = grace_s
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0

    def _swapped(self, snap: Snapshot) -> None:
        """The cache agent swapped the snapshot: tell the watchers and the metrics (never blocks); the
        schedules follow its tools."""
        self.watch.swapped()
        self.observer.swapped(snap)
        if self.scheduler is not None:
            self.scheduler.reconcile(snap.tools.values())

    def _observer(self) -> Observer:
        """Metrics when --metrics asks (OSError when its port cannot be bound), spans when a provider is
        given or the OTEL_* variables ask for one."""
        from . import tracing

        metrics = None
        if self.metrics_listen is not None:
            from .metrics import Metrics

            metrics = Metrics()
            metrics.watchers.set_function(lambda: len(self.watch))
            try:
                self.metrics_url = metrics.serve(self.metrics_listen)
            except ValueError as exc:
                raise ListenError(str(exc)) from None
            except OSError as exc:
                raise OSError(exc.errno, f"--metrics {self.metrics_listen}: cannot listen: {exc.strerror}") from None
            if not is_loopback(self.metrics_listen):
                log.warning("metrics on %s, not a loopback address: anyone who can reach it reads the tool names "
                            "and call counts (no authentication on /metrics)", self.metrics_url)
        spans = None
        provider = self.tracer_provider
        if provider is None and tracing.configure_from_env():
            from opentelemetry import trace

            provider = trace.get_tracer_provider()
        if provider is not None:
            spans = tracing.Tracing(provider)
        return Observer(metrics, spans)

    def _tokens(self) -> dict[str, str]:
        """The configured caller tokens' current values (read now: a rotated token file is picked up)."""
        return {name: secret.reveal() for name, secret in self.config.tokens.items()}

    async def start(self) -> None:
        """Check the listener's rules (ListenError), load the tools, open the audit file, listen."""
        anonymous = check(self.listen, self.security, tokens=bool(self.config.tokens))
        if self.audit_path:   # before anything starts: a trail that cannot be written stops the server
            max_bytes, keep = self.audit_options
            self.agent.audit = AuditLog(self.audit_path, max_bytes=max_bytes, keep=keep,
                                        redactor=Redactor(self.config.secrets()))
        self.observer = self._observer()
        if self.repo_sync is not None:
            await self.repo_sync.first()   # a previous run's commit serves as it is; else the clone
        snap = await self.cache.start(defer=True)   # watches, state file and vectors once we serve
        self.observer.swapped(snap, swapped=False)
        for err in snap.errors:
            log.error("%s", err)
        await self._start_approvals()
        self.server = grpc.aio.server(options=_SERVER_OPTIONS)
        self.match_pool = concurrent.futures.ThreadPoolExecutor(self.agent.limits.match_workers,
                                                                thread_name_prefix="bitong-match")
        unix = self.listen.startswith("unix:")
        if unix:
            self.front = UnixFront(grpc_address(self.listen)[5:], self.security.socket_mode)
        authenticator = Authenticator(tokens=self._tokens, unix_peers=self.front.caller if self.front else None,
                                      mtls=bool(self.security.tls_client_ca), anonymous=anonymous)
        self.servicer = Servicer(self.agent, self.match_pool, authenticator, self.watch, self.observer)
        self.servicer.outbox = self.outbox
        pb_grpc.add_ToolAgentServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # reflection: grpcurl and other generic clients discover the contract without the .proto
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        try:
            self.port = self._add_port(self.server)
            await self.server.start()
            if self.front is not None:
                await self.front.start()
        except BaseException:
            await self.server.stop(0)
            await self._close()
            raise
        if anonymous:
            log.warning("SECURITY: %s accepts calls from anyone on this host without authentication (loopback "
                        "TCP, development only): use a unix socket, [auth.tokens] or --tls-client-ca", self.address)
        if self.config.callers:
            log.info("caller policy: %d [callers] table(s)", len(self.config.callers))
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.cache.serving()
        # one caller id for the scheduler: during a canary its runs stay on one side
        self.scheduler = Scheduler(lambda name, params: self.agent.call(name, params, canary_key="bitong-scheduler"),
                                   self.outbox)
        self.scheduler.reconcile(self.registry.snapshot.tools.values())
        if self.repo_sync is not None:
            self.agent.repo_status = self._repo_status
            self.repo_sync.start()
        if self.webhook is not None:
            self.webhook.start()
            log.info("tools repository webhook on %s", self.webhook.url)
        log.info("bitong serving %d tools on %s (watch: %s)", len(snap.tools), self.address, self.cache.mode)

    def _add_port(self, server: grpc.aio.Server) -> int:
        """Bind gRPC's listener (TLS when configured); raises OSError that says why a TCP port is refused."""
        if self.front is not None:
            return server.add_insecure_port(self.front.grpc_address)
        sec = self.security
        try:
            if sec.tls:
                with open(sec.tls_key, "rb") as key, open(sec.tls_cert, "rb") as cert:
                    pair = [(key.read(), cert.read())]
                client_ca = None
                if sec.tls_client_ca:
                    with open(sec.tls_client_ca, "rb") as ca:
                        client_ca = ca.read()
                creds = grpc.ssl_server_credentials(pair, root_certificates=client_ca,
                                                    require_client_auth=client_ca is not None)
                port = server.add_secure_port(self.listen, creds)
            else:
                port = server.add_insecure_port(self.listen)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(errno.EADDRINUSE, f"cannot listen on {self.listen}: {_bind_problem(self.listen)}")
        return port
    async def _start_approvals(self) -> None:
        """The admin socket and the approvals page: the only ways to decide a human confirmation."""
        book = self.agent.human
        if book is None:
            log.warning("no admin socket and no approvals page: confirm_by: human tools answer refused")
            return
        if self.admin_socket:
            self.admin_server = grpc.aio.server()
            who = f"the admin socket (uid {os.geteuid()} or root)"
            pb_grpc.add_ApprovalsServicer_to_server(ApprovalsServicer(book, who), self.admin_server)
            pb_grpc.add_LifecycleServicer_to_server(LifecycleServicer(self.registry, self.cache), self.admin_server)
            admin.bind(self.admin_server, self.admin_socket)
            await self.admin_server.start()
            log.info("approvals: bitong approve|deny|pending --admin-socket %s; versions: bitong "
                     "versions|rollback|unpin", self.admin_socket)
        if self.approvals_http:
            from .approvals_page import ApprovalsPage
            self.page = ApprovalsPage(book, self.approvals_http, self.approvals_token)
            self.page.start()
            log.info("approvals page on %s", self.page.url)

    def _repo_status(self) -> pb.ToolsRepo | None:
        if self.repo_sync is None:
            return None
        st = self.repo_sync.repo.status
        return pb.ToolsRepo(url=st.url, branch=st.branch, subdir=st.subdir, commit=st.commit,
                            fetched_unix_ms=st.fetched_unix_ms, applied_unix_ms=st.applied_unix_ms, error=st.error)

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
        self.watch.close()   # watch streams end now: they would hold the grace period to its end
        if self.front is not None:
            self.front.close()   # no new connections; the ones in flight keep their relay while draining
        if self.server is not None:
            await self.server.stop(self.grace_s if grace_s is None else grace_s)
        await self._close()

    async def _close(self) -> None:
        if self.observer.metrics is not None:
            await asyncio.to_thread(self.observer.metrics.close)
        if self.front is not None:
            await self.front.stop()
        if self.match_pool is not None:
            self.match_pool.shutdown(wait=False, cancel_futures=True)
        await self._stop_approvals()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.webhook is not None:
            await asyncio.to_thread(self.webhook.stop)
        if self.repo_sync is not None:
            await self.repo_sync.stop()
        await self.cache.stop()
        if self.agent.audit is not None:
            # Calls the grace period cut off are being cancelled: their lines come as they unwind.
            cut_off = [task for task in self.agent.running if not task.done()]
            if cut_off:
                await asyncio.wait(cut_off, timeout=_UNWIND_S)
            self.agent.audit.close()   # after the drain: every Call's line is in, and synced

    async def _stop_approvals(self) -> None:
        if self.page is not None:
            await asyncio.to_thread(self.page.stop)
            self.page = None
        if self.admin_server is not None:
            await self.admin_server.stop(0)
            self.admin_server = None
            if self.admin_socket:
                try:
                    os.unlink(self.admin_socket)
                except OSError:
                    pass


def _bind_problem(listen: str) -> str:
    """Why gRPC could not bind (it only says that it could not): the OS's answer to a plain bind."""
    host, _, port = listen.rpartition(":")
    try:
        number = int(port)
        infos = socket.getaddrinfo(host_of(listen) or None, number, type=socket.SOCK_STREAM)
    except (ValueError, OSError) as exc:
        return f"not a host:port this machine can listen on ({exc})"
    for family, kind, proto, _, address in infos:
        probe = socket.socket(family, kind, proto)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (f"port {number} is already in use (another bitong serve, or another program); "
                        "stop it or choose another port")
            return exc.strerror or str(exc)
        finally:
            probe.close()
    return "gRPC could not bind it (run with GRPC_VERBOSITY=debug for its reason)"



async def serve(roots: Sequence[str], listen: str = DEFAULT_LISTEN, **options: Any) -> None:
    """Run until SIGTERM or SIGINT, then drain the calls in flight and exit."""
    sidecar = Sidecar(roots, listen, **options)
    await sidecar.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"bitong: serving on {sidecar.address}", flush=True)
    if sidecar.metrics_url:
        print(f"bitong: metrics on {sidecar.metrics_url}", flush=True)
    if sidecar.page is not None:
        shown = "" if sidecar.approvals_token else f"?token={sidecar.page.token}"
        print(f"bitong: approvals page on {sidecar.page.url}{shown}", flush=True)
    await stop.wait()
    log.info("signal received: draining calls in flight")
    await sidecar.stop()
