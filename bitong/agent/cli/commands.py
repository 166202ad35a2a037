"""``bitong``: serve, match, call, lint, tools, eval.

Without ``--server`` the commands work in-process on the given tools roots
(the bundled tools when none is given); with ``--server ADDR`` they go
through a running sidecar, exactly as any other client would.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .lazy import lazy_module

if TYPE_CHECKING:
    import hashlib
    import json

    from bitong import parser as hdlp
    from bitong.v1 import agent_pb2 as pb

    from ..registry.snapshot import Registry
    from ..serving.service import ToolAgent
else:
    # Loaded at first use: `bitong --version` and `--help` need neither protobuf nor the parser, and
    # `--server` commands never load the parser (lark), the matcher or the model.
    hdlp = lazy_module("bitong.parser")
    pb = lazy_module("bitong.v1.agent_pb2")
    hashlib = lazy_module("hashlib")   # the in-process match cache's key
    json = lazy_module("json")         # --json output

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def _version() -> str:
    from .lazy import twin

    import bitong

    # parser= stays last: scripts read the parser backend off the end of the line
    return f"bitong {bitong.__version__} matcher={twin('bitong.agent.matching', '_lexical')} parser={twin('bitong.parser', '_speedups')}"


class _VersionAction(argparse.Action):
    """--version, worked out only when asked: the matcher's backend is named there, and importing
    it for every command would load the matcher into `bitong lint`."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help=kwargs.get("help", "show the version and the live backends, and exit"))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        print(_version())
        parser.exit()


def _roots(args: argparse.Namespace) -> list[str]:
    from ..registry.snapshot import bundled_tools_root

    return list(args.tools) if args.tools else [bundled_tools_root()]


def _vocabulary(args: argparse.Namespace) -> Any:
    """The packaged ops vocabulary (unless --no-vocabulary) plus the user's --vocabulary files."""
    from ..matching.vocabulary import VocabularyError, default_vocabulary, load_vocabulary

    extra = getattr(args, "vocabulary", None) or []
    packaged = not getattr(args, "no_vocabulary", False)
    if not extra:
        return default_vocabulary() if packaged else None
    try:
        return load_vocabulary(extra, packaged=packaged)
    except VocabularyError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _embedder(args: argparse.Namespace) -> Any:
    """The multilingual model, unless --no-semantic (or it cannot load here: then matching is lexical)."""
    if getattr(args, "no_semantic", False):
        return None
    from ..matching.semantic import default_embedder

    return default_embedder()


def _embedder_loader(args: argparse.Namespace) -> Any:
    """What loads the model once the server answers (serve: it takes seconds, and lexical matching
    serves meanwhile); None with --no-semantic."""
    if getattr(args, "no_semantic", False):
        return None
    from ..matching.semantic import default_embedder

    return default_embedder


def _config(args: argparse.Namespace) -> Any:
    """The --config file, checked; a broken one stops the command with the reason (never a secret)."""
    path = getattr(args, "config", None)
    if not path:
        return None
    from .. import config

    try:
        return config.load(path)
    except config.ConfigError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _sandbox(args: argparse.Namespace) -> None:
    """Decide the OS sandbox once (--sandbox); ``required`` without one stops the command with the reason.
    The server's own files (its config, its state file, its unix socket) are hidden from every tool."""
    from ..calling.executors import sandbox, shell

    shell.set_state_dir(getattr(args, "state_dir", None))
    try:
        listen = str(getattr(args, "listen", "") or "")
        own = [getattr(args, "config", None), getattr(args, "state", None), getattr(args, "audit", None),
               listen[len("unix:"):] if listen.startswith("unix:") else None, *_admin_paths(args)]
        config = _config(args)
        if config is not None:
            own += config.secret_files()   # the token files: no tool reads them
        sandbox.configure(getattr(args, "sandbox", "auto"), hidden=[p for p in own if p])
    except sandbox.SandboxUnavailable as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _admin_paths(args: argparse.Namespace) -> list[str]:
    """The admin socket (and its own folder): a tool reaching it could approve its own call."""
    from ..serving import admin

    given = getattr(args, "admin_socket", None)
    if given == "off":
        return []
    path = str(given) if given else admin.default_path()
    folder = os.path.dirname(path)
    return [path, folder] if os.path.basename(folder).startswith("bitong") else [path]


def _local_registry(args: argparse.Namespace, matching: bool = False, every_tool: bool = False) -> Registry:
    """The registry as a one-shot command sees it; ``matching``: with its vectors and calibration, kept
    between runs in the cache (:func:`_match_cache`); ``every_tool``: the approvals left out, so every
    definition that parses is matched. Nothing that runs a tool is loaded here."""
    from ..registry.snapshot import Registry

    registry = Registry(_roots(args), vocabulary=_vocabulary(args),
                        embedder=_embedder(args) if matching else None,
                        approval=None if every_tool else _approvals(args))
    cache = _match_cache(args, registry.roots, every_tool) if matching else None
    snap = registry.snapshot if cache is not None and registry.load_state(cache) else registry.rescan()
    for err in snap.errors:
        print(f"bitong: {err}", file=sys.stderr)
    if matching:  # one-shot: vectors and calibration now, not in the background
        # a tool changed since the cache was kept: fitted again, so the answers are a fresh start's
        registry.refresh_semantics(refit=registry.state_dirty)
        if cache is not None:
            _keep_cache(registry, cache)
    return registry


_CACHE_FILES = 16   # registries kept in the cache; the least recently used go first


def _keep_cache(registry: Registry, path: str) -> None:
    """Write the cache if it changed, mark it used, and drop the least recently used past
    :data:`_CACHE_FILES` (roots that are gone, or long unused). Never fails the command: a
    read-only home only means the next run analyses again."""
    try:
        if registry.state_dirty:
            registry.save_state(path)
        else:
            os.utime(path)
        folder = os.path.dirname(path)
        kept = sorted((e for e in os.scandir(folder) if e.name.startswith("match-") and e.name.endswith(".state")),
                      key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for old in kept[_CACHE_FILES:]:
            os.unlink(old.path)
    except OSError:
        pass


def _local_agent(args: argparse.Namespace) -> ToolAgent:
    """A ToolAgent in this process, to run a tool: the sandbox decided, the executors ready."""
    import dataclasses

    from ..calling.executors import Executors
    from ..config import Config
    from ..serving.service import ToolAgent

    _sandbox(args)
    config = _config(args)
    # One call and the process ends: a zygote (~70 ms to start) would cost more than the one fresh
    # interpreter (~45 ms) it saves.
    base = config if config is not None else Config()
    executors = Executors(dataclasses.replace(base, python=dataclasses.replace(base.python, zygote=False)))
    return ToolAgent(_local_registry(args), executors=executors, threshold=getattr(args, "threshold", None))


def _match_cache(args: argparse.Namespace, roots: Sequence[str], every_tool: bool = False) -> str | None:
    """Where in-process match and eval keep the analysed registry between runs (a registry state, as
    ``serve --state`` writes it): a tool author's next run re-reads only the files that changed, and
    fits the calibration again only when a tool did. One file per roots and matching options."""
    if getattr(args, "no_cache", False):
        return None
    from ..matching.model_cache import cache_root

    key = json.dumps([list(roots), getattr(args, "vocabulary", None) or [], bool(getattr(args, "no_vocabulary", False)),
                      bool(getattr(args, "no_semantic", False))] + (["every tool"] if every_tool else []))
    return str(cache_root() / f"match-{hashlib.sha256(key.encode()).hexdigest()[:16]}.state")


# The server sends up to 64 MiB (a Call's collected output); gRPC's client default would refuse past 4 MiB.
_CLIENT_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


class _Remote:
    """A stub for ``--server ADDR`` and the call options that say who we are (token, client certificate)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import grpc

        from bitong.v1 import agent_pb2_grpc as pb_grpc

        from ..serving.listen import ListenError, grpc_address, parse

        try:
            parse(args.server)
        except ListenError as exc:
            raise SystemExit(f"bitong: {str(exc).replace('--listen', '--server', 1)}") from None
        ca = _option(args, "tls_ca", "BITONG_TLS_CA")
        cert = _option(args, "tls_cert", "BITONG_TLS_CERT")
        key = _option(args, "tls_key", "BITONG_TLS_KEY")
        if bool(cert) != bool(key):
            raise SystemExit("bitong: --tls-cert and --tls-key go together (the client certificate and its key)")
        target = grpc_address(args.server)
        if ca or cert:
            try:
                creds = grpc.ssl_channel_credentials(_read(ca) if ca else None, _read(key) if key else None,
                                                     _read(cert) if cert else None)
            except OSError as exc:
                raise SystemExit(f"bitong: cannot read {exc.filename}: {exc.strerror}") from None
            channel = grpc.secure_channel(target, creds, options=_CLIENT_OPTIONS)
        else:
            channel = grpc.insecure_channel(target, options=_CLIENT_OPTIONS)
        self.stub = pb_grpc.ToolAgentStub(channel)
        token = _token(args)
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()


def _option(args: argparse.Namespace, name: str, env: str) -> str:
    value = getattr(args, name, None)
    return str(value) if value else os.environ.get(env, "")


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _token(args: argparse.Namespace) -> str:
    """The bearer token: from --token-file, the variable --token-env names, or BITONG_TOKEN (never argv)."""
    path = getattr(args, "token_file", None)
    if path:
        try:
            return _read(path).decode("utf-8").strip()
        except OSError as exc:
            raise SystemExit(f"bitong: --token-file {path}: {exc.strerror}") from None
    var = getattr(args, "token_env", None)
    if var:
        value = os.environ.get(var, "").strip()
        if not value:
            raise SystemExit(f"bitong: --token-env {var}: the variable is unset or empty")
        return value
    return os.environ.get("BITONG_TOKEN", "").strip()


def _rpc_error(exc: Exception, server: str = "") -> int:
    """A refused RPC (unauthenticated, permission denied, ...) as one line and exit status 1 or 2;
    a sidecar that cannot be reached as one line that says where it was looked for and what to try."""
    import grpc

    if isinstance(exc, grpc.RpcError):
        code = exc.code()
        if code == grpc.StatusCode.UNAVAILABLE and server:
            detail = (exc.details() or "").rsplit(": ", 1)[-1].strip(" ]") or "unavailable"
            print(f"bitong: cannot reach a bitong sidecar at {server} ({detail}): is `bitong serve` running and "
                  f"listening there? --server takes host:port or unix:/path", file=sys.stderr)
            return EXIT_FAILED
        print(f"bitong: {code.name if code else 'error'}: {exc.details()}", file=sys.stderr)
        return EXIT_USAGE if code == grpc.StatusCode.INVALID_ARGUMENT else EXIT_FAILED
    raise exc


def _to_json(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


# ---------------------------------------------------------------- match

def _match_line(query: str, reply: pb.MatchResponse, explain: bool,
                unapproved: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {"query": query, "found": reply.found, "candidates": []}
    for c in reply.candidates:
        cand: dict[str, Any] = {"name": c.name, "score": round(c.score, 4)}
        if explain:
            cand["matched_terms"] = list(c.matched_terms)
        if c.name in unapproved:
            cand["unapproved"] = list(unapproved[c.name])
        out["candidates"].append(cand)
    out["suggestion"] = reply.suggestion
    if explain:
        out["explanation"] = reply.explanation
        out["near_misses"] = [{"name": c.name, "score": round(c.score, 4), "matched_terms": list(c.matched_terms),
                               **({"unapproved": list(unapproved[c.name])} if c.name in unapproved else {})}
                              for c in reply.near_misses]
    return out


def cmd_match(args: argparse.Namespace) -> int:
    if args.server:
        import grpc

        try:
            return _match(args)
        except grpc.RpcError as exc:
            return _rpc_error(exc, args.server)
    from ..serving.limits import LimitExceeded   # in process only: --server never loads the matcher

    try:
        return _match(args)
    except LimitExceeded as exc:  # the intent itself is refused, as the server answers INVALID_ARGUMENT
        print(f"bitong: {exc.message}", file=sys.stderr)
        return EXIT_USAGE


def _match(args: argparse.Namespace) -> int:
    ask: Callable[[str], pb.MatchResponse]
    # A person reading found=false is told why (the near misses and what was missing), --explain or not.
    explain = args.explain or (not args.json and args.query != "-")
    unapproved: dict[str, tuple[str, ...]] = {}
    if args.server:
        remote = _Remote(args)
        ask = lambda q: remote.stub.Match(pb.MatchRequest(intent=q, top_k=args.top_k,  # noqa: E731
                                                          explain=explain), metadata=remote.metadata)
    else:   # as the server answers, without what runs tools (the sandbox, the executors)
        from ..serving.limits import Limits, check_intent
        from ..serving.match import match_reply

        # Every definition that parses is matched, as eval does: this previews descriptions (it runs nothing),
        # and a tool the approvals leave out is marked, where --server answers for what it serves.
        registry = _local_registry(args, matching=True, every_tool=True)
        unapproved = _unapproved(registry, args, "bitong match")

        def ask(q: str) -> pb.MatchResponse:
            check_intent(q, Limits().max_intent_bytes)
            return match_reply(registry, q, args.top_k, threshold=args.threshold, explain=explain)
    if args.query == "-":
        for raw in sys.stdin:
            query = raw.rstrip("\r\n")
            if not query.strip():
                continue
            print(json.dumps(_match_line(query, ask(query), args.explain, unapproved), ensure_ascii=False),
                  flush=True)
        return 0
    reply = ask(args.query)
    if args.json:
        print(json.dumps(_match_line(args.query, reply, args.explain, unapproved), ensure_ascii=False, indent=2))
        return 0 if reply.found else EXIT_FAILED
    if not reply.found:
        print(f"found: false  suggestion: {reply.suggestion}")
    shown = list(reply.candidates) or list(reply.near_misses)
    for rank, c in enumerate(shown, 1):
        mark = "" if reply.found else "  (under the threshold)"
        line = f"{rank}. {c.name}  score={c.score:.3f}  {c.tool.display}{mark}"
        if c.name in unapproved:
            line += f"  [unapproved: declares {', '.join(unapproved[c.name])}; a server does not offer it]"
        if args.explain:
            line += f"\n   matched: {', '.join(c.matched_terms) or '-'}"
        print(line)
    if reply.explanation and (args.explain or not reply.found):
        print(f"why: {reply.explanation}")
    return 0 if reply.found else EXIT_FAILED


# ---------------------------------------------------------------- call

def _call_params(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` sends the text as is (coerced by the tool's schema); ``key:=json`` sends JSON."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if ":=" in pair and (pair.index(":=") < pair.index("=") if "=" in pair else True):
            key, raw = pair.split(":=", 1)
            try:
                out[key] = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"bitong: {key}:= needs JSON ({exc.msg})") from None
        elif "=" in pair:
            key, value = pair.split("=", 1)
            out[key] = value
        else:
            raise SystemExit(f"bitong: parameters are key=value or key:=json, got {pair!r}")
    return out


def _print_result(result: pb.CallResult, as_json: bool) -> int:
    if as_json:
        print(json.dumps(_to_json(result), ensure_ascii=False, indent=2))
    else:
        sys.stdout.buffer.write(result.output)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr)
        if not result.ok:
            for problem in result.param_errors:
                print(f"bitong: parameter {problem.param}: {problem.message}", file=sys.stderr)
            if result.needs_confirmation and result.approval_id:
                print(f"bitong: {result.error}", file=sys.stderr)
            elif result.needs_confirmation:
                print(f"bitong: {result.tool} needs confirmation; re-run with --yes, or with --server and "
                      f"--confirm {result.confirm_token}", file=sys.stderr)
            elif result.error:
                print(f"bitong: {result.error}", file=sys.stderr)
            if result.timed_out:
                print("bitong: timed out", file=sys.stderr)
        if result.truncated:
            print("bitong: output truncated at max_output_bytes (use StreamCall for all of it)", file=sys.stderr)
        sys.stderr.flush()
    if result.ok:
        return 0
    return result.exit_code if 0 < result.exit_code < 256 else EXIT_FAILED


def _write(stream: int, data: bytes) -> None:
    """One chunk of a streamed call, to our stdout or stderr as the tool wrote it."""
    out = sys.stderr.buffer if stream == 2 else sys.stdout.buffer   # OutputChunk.STDERR
    out.write(data)
    out.flush()


def cmd_call(args: argparse.Namespace) -> int:
    params = _call_params(args.params)
    if args.server:
        from google.protobuf import struct_pb2

        import grpc

        remote = _Remote(args)

        def send(token: str) -> pb.CallResult:
            struct = struct_pb2.Struct()
            struct.update(params)
            request = pb.CallRequest(tool=args.tool, params=struct, confirm_token=token)
            if not args.stream:
                reply: pb.CallResult = remote.stub.Call(request, timeout=args.timeout, metadata=remote.metadata)
                return reply
            final = pb.CallResult()
            for event in remote.stub.StreamCall(request, timeout=args.timeout, metadata=remote.metadata):
                if event.HasField("chunk"):
                    _write(event.chunk.stream, event.chunk.data)
                else:
                    final = event.result
            return final

        try:
            result = send(args.confirm or "")
            if result.needs_confirmation and args.yes and result.confirm_token:
                result = send(result.confirm_token)
        except grpc.RpcError as exc:
            return _rpc_error(exc, args.server)
        return _print_result(result, args.json)

    from ..serving.service import LimitExceeded

    async def sink(stream: int, data: bytes) -> None:
        _write(stream, data)

    async def local() -> pb.CallResult:
        agent = _local_agent(args)
        chunks = sink if args.stream else None
        result = await agent.call(args.tool, params, confirm_token=args.confirm or "", sink=chunks)
        if result.needs_confirmation and args.yes and result.confirm_token:
            result = await agent.call(args.tool, params, confirm_token=result.confirm_token, sink=chunks)
        return result

    try:
        local_result: pb.CallResult = _run(local())
    except LimitExceeded as exc:  # the request itself is refused, as the server answers INVALID_ARGUMENT
        print(f"bitong: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    return _print_result(local_result, args.json)


def _run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency; this keeps odd platforms working
        import asyncio

        return asyncio.run(coro)


# ---------------------------------------------------------------- tools, lint, eval

def _pages(remote: _Remote) -> Iterator[pb.ListToolsResponse]:
    """ListTools page by page: one reply for 10,000 tools would pass any message limit."""
    token = ""
    while True:
        page: pb.ListToolsResponse = remote.stub.ListTools(pb.ListToolsRequest(page_token=token),
                                                           metadata=remote.metadata)
        yield page
        token = page.next_page_token
        if not token:
            return


def cmd_tools(args: argparse.Namespace) -> int:
    if args.server:
        import grpc

        reply = pb.ListToolsResponse()
        try:
            for page in _pages(_Remote(args)):
                reply.tools.extend(page.tools)
                reply.errors.extend(page.errors)
        except grpc.RpcError as exc:
            return _rpc_error(exc, args.server)
    else:
        reply = _local_agent(args).list_tools()
    fmt = getattr(args, "format", None)
    if fmt:
        from ..mcp import schema

        print(json.dumps(schema.export(list(reply.tools), fmt), ensure_ascii=False, indent=2))
        for err in reply.errors:   # the export on stdout stays clean JSON
            where = f"{err.path}:{err.line}:{err.column}" if err.line else err.path
            print(f"error: {where}: {err.message}", file=sys.stderr)
    elif args.json:
        print(json.dumps([_to_json(t) for t in reply.tools], ensure_ascii=False, indent=2))
    else:
        for tool in reply.tools:
            confirm = "  [confirm]" if tool.constraints.require_confirm else ""
            print(f"{tool.name:<24} {tool.executor:<12} {tool.display}{confirm}")
        for err in reply.errors:
            where = f"{err.path}:{err.line}:{err.column}" if err.line else err.path  # a tools root has no line
            print(f"error: {where}: {err.message}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """One tool as a page: from the sidecar (--server) or the tools roots."""
    from .toolpage import render

    if args.server:
        import grpc

        try:
            tool = next((t for page in _pages(_Remote(args)) for t in page.tools if t.name == args.tool), None)
        except grpc.RpcError as exc:
            return _rpc_error(exc, args.server)
    else:
        tool = next((t for t in _local_agent(args).list_tools().tools if t.name == args.tool), None)
    if tool is None:
        print(f"bitong: no tool named {args.tool!r} (bitong tools lists them)", file=sys.stderr)
        return EXIT_FAILED
    print(render(tool))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from .scaffold import ScaffoldError, create

    try:
        written = create(args.name, args.executor, args.dir)
    except (ScaffoldError, OSError) as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"wrote {path}")
    folder = os.path.dirname(written[0])
    print(f"next: replace each TODO, then `bitong lint {folder}`; serve it with "
          f"`bitong serve --tools {os.path.dirname(folder) or '.'}`")
    if args.executor == "http":
        print(f"it declares network: a server serves it once its --config approves it ([approve] tools = "
              f"[\"{args.name}\"]; see `bitong audit {folder}`)")
    return 0


def _lint_files(target: str) -> tuple[list[str], list[str]]:
    """The TOOL.hdlp files a lint target names, as the registry finds them; and the target's own errors.

    A target is a TOOL.hdlp file, one tool's folder, or a tools root
    (``<root>/<folder>/TOOL.hdlp``, folders sorted, dot folders skipped).
    """
    if os.path.isfile(target) or os.path.isfile(os.path.join(target, hdlp.TOOL_FILE)):
        return [target if os.path.isfile(target) else os.path.join(target, hdlp.TOOL_FILE)], []
    if not os.path.isdir(target):
        return [], [f"{target}: no such file or folder"]  # a path, not a line in a file: no :line:col
    try:
        names = sorted(os.listdir(target))
    except OSError as exc:
        return [], [f"{target}: tools root cannot be listed: {exc.strerror or exc}"]
    files = []
    for name in names:
        path = os.path.join(target, name, hdlp.TOOL_FILE)
        if name.startswith("."):
            continue
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # a plain file, or a folder without TOOL.hdlp: not a tool
        except OSError:
            pass  # parse_file says what is wrong with it
        files.append(path)
    return files, []


def cmd_lint(args: argparse.Namespace) -> int:
    """Parse each TOOL.hdlp and report path:line:col: message; nothing is indexed (no matcher, no model).

    With --audit, a tool declaring a sensitive permission the approvals in
    force (--config, or the development default) do not grant is an error too.
    """
    from .lint import problems as runnable

    policy = _approvals(args) if args.audit else None
    failed = 0
    checked = 0
    for target in args.paths:
        files, problems = _lint_files(target)
        for problem in problems:
            print(problem)
            failed += 1
        for path in files:
            checked += 1
            try:
                tool = hdlp.parse_file(path)
            except hdlp.ParseError as exc:
                print(exc)
                failed += 1
                continue
            found = runnable(tool)   # what would fail at the first call: handler.py, methods, commands
            for problem in found:
                print(problem)
            failed += bool(found)
            if policy is not None and policy.unapproved(tool):
                print(f"{path}: unapproved {', '.join(policy.unapproved(tool))}: {policy.refusal(tool)}")
                failed += not found
    print(f"bitong lint: {checked} checked, {failed} with errors", file=sys.stderr)
    return EXIT_FAILED if failed else 0


def _approvals(args: argparse.Namespace) -> Any:
    """The approval policy in force: the --config file's [approve], or the development default without one."""
    from ..registry import approval

    config = _config(args)
    return config.approve if config is not None else approval.development()


def cmd_audit(args: argparse.Namespace) -> int:
    """Every tool of the roots: permissions, what the sandbox allows it, what is unapproved (exit 1 if any)."""
    from . import tool_audit

    policy = _approvals(args)
    entries = []
    broken = 0
    for target in args.paths:
        files, problems = _lint_files(target)
        for problem in problems:
            print(f"bitong audit: {problem}", file=sys.stderr)
            broken += 1
        for path in files:
            try:
                tool = hdlp.parse_file(path)
            except hdlp.ParseError as exc:
                print(f"bitong audit: {exc}", file=sys.stderr)
                broken += 1
                continue
            entries.append(tool_audit.entry(tool, policy))
    unapproved = [e for e in entries if e.unapproved]
    if args.json:
        print(json.dumps({"approvals": policy.origin, "tools": [e.as_json() for e in entries]},
                         ensure_ascii=False, indent=2))
    else:
        print(f"approvals from {policy.origin}\n")
        for item in entries:
            print(tool_audit.render(item, policy) + "\n")
    sensitive = sum(1 for e in entries if e.sensitive)
    print(f"bitong audit: {len(entries)} tools, {sensitive} with sensitive permissions, {len(unapproved)} unapproved"
          + (f" ({', '.join(e.name for e in unapproved)})" if unapproved else "")
          + (f", {broken} files that do not load" if broken else ""), file=sys.stderr)
    return EXIT_FAILED if unapproved or broken else 0


def _unapproved(registry: Registry, args: argparse.Namespace, command: str) -> dict[str, tuple[str, ...]]:
    """The tools (of a registry read with every tool) that the approvals in force keep a server from offering,
    with what they declare; said once on stderr."""
    policy = _approvals(args)
    held = {t.name: tuple(policy.unapproved(t)) for t in registry.snapshot.tools.values() if policy.unapproved(t)}
    if held:
        print(f"{command}: every tool that parses is matched; {len(held)} declare permissions that {policy.origin} "
              f"does not approve, so a server with those approvals does not offer them: {', '.join(sorted(held))}",
              file=sys.stderr)
    return held


def cmd_eval(args: argparse.Namespace) -> int:
    """Scores the descriptions, not the deployment: a tool the approvals in force leave out is matched
    too (left out, its phrasings would count as misses that no description change could fix), and
    named on stderr, since a server with those approvals does not offer it."""
    from ..matching import evaluate

    registry = _local_registry(args, matching=True, every_tool=True)
    _unapproved(registry, args, "bitong eval")
    try:
        report = evaluate.evaluate(registry.snapshot.index, args.queries, threshold=args.threshold)
    except evaluate.EvalError as exc:
        print(f"bitong eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet:
        for line in report.misses:
            print(line)
    print(report.summary)
    return 0


def _limits(args: argparse.Namespace) -> Any:
    """The serve command's --max-* options as Limits (each unset one keeps its default)."""
    import dataclasses

    from ..serving.service import Limits

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)
             if getattr(args, f.name, None) is not None}
    try:
        return Limits(**given)
    except ValueError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serving.listen import ListenError, Security, parse

    try:
        parse(args.listen)   # before anything loads: a wrong address is a usage error, said at once
    except ListenError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ..serving.peercred import parse_mode
    from ..serving.server import serve

    try:
        mode = parse_mode(args.socket_mode)
    except ValueError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    security = Security(tls_cert=args.tls_cert or "", tls_key=args.tls_key or "",
                        tls_client_ca=args.tls_client_ca or "", socket_mode=mode)
    if args.audit_max_bytes < 1024 or args.audit_keep < 0:
        print("bitong: --audit-max-bytes must be at least 1024 and --audit-keep 0 or more", file=sys.stderr)
        return EXIT_USAGE
    _sandbox(args)
    config = _config(args)
    from ..serving.heap import keep_large_blocks

    keep_large_blocks()   # a stream's 64-256 KiB blocks are reused, not mapped and unmapped each time
    if config is None:
        import logging

        logging.getLogger("bitong.approvals").warning(
            "no --config: the development approvals apply (%s may serve); a config file approves only the tools "
            "its [approve] lists", ", ".join(_development_tools()))
    try:
        repo = _tools_repo(args)
    except (ValueError, OSError) as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        _run(serve(_roots(args) if repo is None or args.tools else [], args.listen, config=config,
                   vocabulary=_vocabulary(args),
                   embedder_loader=_embedder_loader(args), threshold=args.threshold, poll_s=args.poll, grace_s=args.grace,
                   state_path=args.state, limits=_limits(args), security=security, audit_path=args.audit,
                   audit_max_bytes=args.audit_max_bytes, audit_keep=args.audit_keep,
                   admin_socket=_admin_socket(args), approvals_http=_approvals_http(args), metrics=args.metrics,
                   reload_cooldown_s=args.reload_cooldown, **repo or {}))
    except (ListenError, ValueError) as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:   # the listener (or the audit file) cannot start as asked: the OS's reason, no errno
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"bitong: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """bitong mcp: the registry as an MCP server (needs the mcp extra)."""
    try:
        from ..mcp import bridge
    except ImportError as exc:
        print(f"bitong: bitong mcp needs the MCP SDK ({exc.name} is missing): pip install 'bitong[mcp]'",
              file=sys.stderr)
        return EXIT_USAGE
    http = None
    if args.http:
        try:
            http = bridge.parse_http(args.http)
        except ValueError as exc:
            print(f"bitong: {exc}", file=sys.stderr)
            return EXIT_USAGE
    _sandbox(args)
    config = _config(args)
    import anyio

    async def main() -> None:
        await bridge.serve(_roots(args), http=http, config=config, vocabulary=_vocabulary(args),
                           embedder_loader=_embedder_loader(args), threshold=args.threshold,
                           state_path=args.state, poll_s=args.poll, limits=_limits(args), search=args.search,
                           audit_path=args.audit)

    try:
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    except OSError as exc:   # the HTTP port (or the audit file) cannot be opened as asked
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 0
    return 0


def _tools_repo(args: argparse.Namespace) -> dict[str, Any] | None:
    """--tools-repo and its options as Sidecar arguments; None without it."""
    from ..registry.tools_repo import ToolsRepo

    if not args.tools_repo:
        if args.webhook:
            raise ValueError("--webhook makes the tools repository fetch: it needs --tools-repo")
        return None
    folder = args.repo_dir
    if not folder:
        if args.state:
            folder = os.path.join(os.path.dirname(os.path.abspath(args.state)), "tools-repo")
        else:   # the one state dir (--state-dir, $STATE_DIRECTORY, XDG, /var/lib/bitong for root)
            from ..calling.executors.shell import state_dir

            folder = os.path.join(state_dir(), "tools-repo")
    repo = ToolsRepo(args.tools_repo, folder, branch=args.branch or "", subdir=args.subdir)
    secret = b""
    if args.webhook:
        value = os.environ.get(args.webhook_secret_env, "")
        if not value:
            raise ValueError(f"--webhook needs the shared secret the forge signs with, in ${args.webhook_secret_env}")
        secret = value.encode()
    if not args.interval > 0:
        raise ValueError(f"--interval must be more than 0 seconds, got {args.interval}")
    return {"tools_repo": repo, "repo_interval_s": args.interval, "webhook": args.webhook, "webhook_secret": secret}


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def _development_tools() -> tuple[str, ...]:
    from ..registry.approval import DEVELOPMENT_TOOLS

    return DEVELOPMENT_TOOLS


def _admin_socket(args: argparse.Namespace) -> str | None:
    """--admin-socket PATH, 'off', or the default path (skipped with a warning when another server holds it)."""
    from ..serving import admin

    if args.admin_socket == "off":
        return None
    if args.admin_socket:
        return str(args.admin_socket)
    path = admin.default_path()
    try:
        admin.prepare(path)
    except admin.AdminSocketError as exc:
        import logging

        logging.getLogger("bitong.admin").warning("%s; this server takes no approvals", exc)
        return None
    return path


def _approvals_http(args: argparse.Namespace) -> str | None:
    from ..serving.approvals_page import parse_address

    if not args.approvals_http:
        return None
    try:
        parse_address(args.approvals_http)
    except ValueError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    return str(args.approvals_http)


# ---------------------------------------------------------------- approve, deny, pending

def _admin_stub(args: argparse.Namespace) -> Any:
    from ..serving import admin

    path = args.admin_socket or admin.default_path()
    if not os.path.exists(path):
        print(f"bitong: no admin socket at {path}: is bitong serve running (see its --admin-socket)?",
              file=sys.stderr)
        raise SystemExit(EXIT_FAILED)
    return admin.stub(path)


def _describe(request: pb.PendingApproval) -> str:
    params = json.dumps(_to_json(request.params), ensure_ascii=False, sort_keys=True)
    line = f"{request.id}  {request.state:<8} {request.tool}  {params}"
    if request.command:
        line += f"\n    command: {request.command}"
    if request.decided_by:
        line += f"\n    {request.state} by {request.decided_by}" + (f": {request.reason}" if request.reason else "")
    return line


def cmd_decide(args: argparse.Namespace) -> int:
    """bitong approve ID / bitong deny ID: through the admin socket, the only channel that decides."""
    import grpc

    stub = _admin_stub(args)
    decide = stub.Approve if args.command == "approve" else stub.Deny
    try:
        decided = decide(pb.DecideRequest(id=args.id, reason=args.reason or ""), timeout=10)
    except grpc.RpcError as exc:
        print(f"bitong: {exc.details()}", file=sys.stderr)
        return EXIT_FAILED
    print(_describe(decided))
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    import grpc

    try:
        reply = _admin_stub(args).ListPending(pb.ListPendingRequest(), timeout=10)
    except grpc.RpcError as exc:
        print(f"bitong: {exc.details()}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps([_to_json(r) for r in reply.requests], ensure_ascii=False, indent=2))
    for request in ([] if args.json else reply.requests):
        print(_describe(request))
    return 0


# ---------------------------------------------------------------- versions, rollback, unpin

def _version_lines(reply: pb.VersionsResponse) -> list[str]:
    import datetime

    lines = []
    for v in reply.versions:
        when = datetime.datetime.fromtimestamp(v.loaded_unix_ms / 1000, datetime.UTC)
        where = f"commit {v.commit[:12]}" if v.commit else v.source_path
        mark = "*" if v.serving else " "
        lines.append(f"{mark} {v.version:<10} {v.content_sha256[:12]}  {when:%Y-%m-%dT%H:%M:%SZ}  {where}  "
                     f"{v.calls} calls, {v.failures} failed")
        lines.extend(f"      warning: {w}" for w in v.tool.warnings)
    if reply.pinned:
        lines.append(f"pinned: {reply.pinned}")
    if reply.canary:
        lines.append(reply.canary)
    return lines


def cmd_versions(args: argparse.Namespace) -> int:
    """bitong versions|rollback|unpin TOOL: through the admin socket (the operator's channel)."""
    import grpc

    from ..serving import admin

    path = args.admin_socket or admin.default_path()
    _admin_stub(args)   # says so and exits when no server holds the socket
    stub = admin.lifecycle_stub(path)
    try:
        if args.command == "rollback":
            reply = stub.Rollback(pb.RollbackRequest(tool=args.tool, version=args.version or ""), timeout=30)
        elif args.command in ("unpin", "promote", "abort"):
            rpc = {"unpin": stub.Unpin, "promote": stub.Promote, "abort": stub.Abort}[args.command]
            reply = rpc(pb.VersionsRequest(tool=args.tool), timeout=30)
        else:
            reply = stub.Versions(pb.VersionsRequest(tool=args.tool), timeout=10)
    except grpc.RpcError as exc:
        print(f"bitong: {exc.details()}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(_to_json(reply), ensure_ascii=False, indent=2))
    else:
        print("\n".join(_version_lines(reply)))
    return 0


def cmd_subscribe(args: argparse.Namespace) -> int:
    """bitong subscribe TOOL...: one JSON line per scheduled result, as it comes (until interrupted)."""
    import grpc

    if not args.server:
        print("bitong: subscribe listens to a running sidecar: give --server ADDR", file=sys.stderr)
        return EXIT_USAGE
    remote = _Remote(args)
    seen = 0
    try:
        for entry in remote.stub.Subscribe(pb.SubscribeRequest(tools=args.tools), metadata=remote.metadata):
            line = _to_json(entry)
            result = entry.result
            for name in ("output", "stderr"):   # bytes: shown as text when they are (JSON mapping gives base64)
                data = getattr(result, name)
                try:
                    line["result"][name] = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            print(json.dumps(line, ensure_ascii=False), flush=True)
            seen += 1
            if args.count and seen >= args.count:
                return 0
    except grpc.RpcError as exc:
        return _rpc_error(exc)
    except KeyboardInterrupt:
        return 0
    return 0


def cmd_audit_log(args: argparse.Namespace) -> int:
    """Print the audit trail (rotated files first), filtered; --json prints the lines as stored."""
    from ..serving import audit

    try:
        since = audit.parse_since(args.since) if args.since else None
    except ValueError as exc:
        print(f"bitong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.exists(args.file):
        print(f"bitong: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    broken = 0
    try:
        for path, number, entry in audit.read(args.file, tool=args.tool, caller=args.caller, since=since,
                                              rotated=not args.no_rotated):
            if isinstance(entry, str):
                print(f"bitong: {path}:{number}: not an audit line: {entry[:120]!r}", file=sys.stderr)
                broken += 1
            elif args.json:
                print(json.dumps(entry, ensure_ascii=False))
            else:
                print(audit.format_line(entry))
    except OSError as exc:
        print(f"bitong: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_FAILED if broken else 0


# (option, Limits field, help); kept here so `bitong serve --help` needs no grpc import
_LIMIT_OPTIONS = (
    ("--max-intent-bytes", "max_intent_bytes", "longest Match intent in UTF-8 bytes (default 4096)"),
    ("--max-params", "max_params", "most parameters in one call (default 64)"),
    ("--max-params-bytes", "max_params_bytes", "largest parameters of one call in bytes (default 4194304)"),
    ("--max-params-depth", "max_params_depth", "deepest nesting of lists/objects in parameters (default 32)"),
    ("--max-in-flight", "max_in_flight", "calls running at once, all tools (default 16)"),
    ("--max-in-flight-per-tool", "max_in_flight_per_tool", "calls running at once, one tool (default 8)"),
    ("--max-queued", "max_queued", "calls waiting for a slot before RESOURCE_EXHAUSTED (default 64)"),
    ("--max-pending-confirmations", "max_pending_confirmations",
     "confirm tokens pending at once; the oldest is dropped past it (default 1024)"),
    ("--match-workers", "match_workers", "threads that run Match off the event loop (default 2)"),
    ("--max-match-queued", "max_match_queued", "Matches running or waiting before RESOURCE_EXHAUSTED (default 32)"),
)


# ---------------------------------------------------------------- arguments

def _parser() -> argparse.ArgumentParser:
    from ..serving.listen import DEFAULT_LISTEN

    top = argparse.ArgumentParser(prog="bitong", description="笔筒: the tool agent sidecar")
    top.add_argument("--version", action=_VersionAction)
    top.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default: INFO for serve)")
    # also accepted after the command; SUPPRESS keeps a subcommand from resetting the top-level value
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--sandbox", choices=("auto", "required", "off"), default="auto",
                        help="run process tools in the OS sandbox built from their permissions: auto (default: "
                             "where the kernel allows, warning loudly where not), required (refuse to start "
                             "without it), off")
    sub = top.add_subparsers(dest="command", required=True)

    def roots(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tools", action="append", metavar="DIR",
                       help="a tools root (<DIR>/<name>/TOOL.hdlp); repeat for more; default: the bundled tools")
        p.add_argument("--vocabulary", action="append", metavar="FILE",
                       help="an extra synonym vocabulary for matching; repeat for more")
        p.add_argument("--no-vocabulary", action="store_true",
                       help="match without the packaged ops vocabulary (--vocabulary files still apply)")
        p.add_argument("--no-semantic", action="store_true",
                       help="match by words alone, without the multilingual model")
        p.add_argument("--threshold", type=float, default=None,
                       help="the calibrated score below which Match says found=false (default 0.5)")
        p.add_argument("--config", metavar="FILE",
                       help="the TOML config: endpoints, where tokens come from, defaults (see README)")
        p.add_argument("--state-dir", metavar="DIR", default=None,
                       help="where tools installed in site-packages keep their runtime/ files (default: "
                            "$STATE_DIRECTORY, $XDG_STATE_HOME/bitong, ~/.local/state/bitong; root: /var/lib/bitong)")

    p = sub.add_parser("serve", parents=[common], help="run the gRPC sidecar")
    roots(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR", help=f"host:port or unix:/path (default {DEFAULT_LISTEN})")
    p.add_argument("--poll", type=float, default=0.5, help="poll interval where inotify is unavailable (s)")
    p.add_argument("--grace", type=float, default=30.0, help="how long SIGTERM waits for calls in flight (s)")
    p.add_argument("--state", metavar="FILE", default=None,
                   help="keep the registry snapshot here, so a restart re-reads only what changed")
    for option, dest, text in _LIMIT_OPTIONS:
        p.add_argument(option, dest=dest, type=int, default=None, metavar="N", help=text)
    p.add_argument("--socket-mode", default="0600", metavar="MODE",
                   help="permission bits of a unix socket (default 0600: its owner only)")
    p.add_argument("--tls-cert", metavar="PEM", help="the server's certificate chain (TCP listeners)")
    p.add_argument("--tls-key", metavar="PEM", help="the server's private key")
    p.add_argument("--tls-client-ca", metavar="PEM",
                   help="require client certificates signed by this CA (mTLS; the caller is the subject)")
    p.add_argument("--audit", metavar="FILE", help="append one JSON line per Call to FILE (the audit trail)")
    p.add_argument("--audit-max-bytes", type=int, default=64 * 1024 * 1024, metavar="N",
                   help="rotate the audit file past this size (default 67108864)")
    p.add_argument("--audit-keep", type=int, default=5, metavar="N",
                   help="rotated audit files kept: FILE.1 ... FILE.N (default 5)")
    p.add_argument("--admin-socket", metavar="PATH", default=None,
                   help="the owner-only unix socket where bitong approve/deny decide human confirmations "
                        "(default $XDG_RUNTIME_DIR/bitong/admin.sock or /tmp/bitong-UID/admin.sock; 'off': none)")
    p.add_argument("--approvals-http", metavar="127.0.0.1:PORT", default=None,
                   help="also serve the approvals page on this loopback address (token printed at start)")
    p.add_argument("--metrics", metavar="HOST:PORT", default=None,
                   help="serve Prometheus metrics on http://HOST:PORT/metrics (default: none; port 0 picks one)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text (default) or json: one JSON object a line, with the request id of each call")
    p.add_argument("--reload-cooldown", type=_non_negative, default=60.0, metavar="S",
                   help="one tool reloads at most twice in S seconds; a later change applies, whole and latest, "
                        "when the window allows (default 60; 0: every change at once)")
    p.add_argument("--tools-repo", metavar="URL", default=None,
                   help="serve the tools of this git repository (any URL the system git takes), kept in --repo-dir "
                        "and fetched every --interval; each new commit swaps in whole")
    p.add_argument("--branch", default="", help="the branch to follow (default: the repository's HEAD)")
    p.add_argument("--subdir", default="tools", help="the tools root inside the repository (default tools)")
    p.add_argument("--interval", type=float, default=60.0, metavar="S", help="fetch every S seconds (default 60)")
    p.add_argument("--repo-dir", metavar="DIR", default=None,
                   help="where the clone and the serving commit live (default: tools-repo beside --state, else in "
                        "the state dir: see --state-dir)")
    p.add_argument("--webhook", metavar="HOST:PORT", default=None,
                   help="take Forgejo/Gitea/GitHub push webhooks here: a signed push fetches at once")
    p.add_argument("--webhook-secret-env", metavar="VAR", default="BITONG_WEBHOOK_SECRET",
                   help="the environment variable holding the webhook's shared secret (default BITONG_WEBHOOK_SECRET)")
    p.set_defaults(func=cmd_serve)

    for verb, text in (("approve", "let a call waiting for a person run (once)"),
                       ("deny", "refuse a call waiting for a person")):
        p = sub.add_parser(verb, parents=[common], help=text)
        p.add_argument("id", metavar="ID", help="the request's approval_id (bitong pending lists them)")
        p.add_argument("--reason", default="", help="shown to the caller")
        p.add_argument("--admin-socket", metavar="PATH", default=None, help="the server's admin socket")
        p.set_defaults(func=cmd_decide)
    p = sub.add_parser("pending", parents=[common], help="calls waiting for a person's approval")
    p.add_argument("--admin-socket", metavar="PATH", default=None, help="the server's admin socket")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pending)

    for verb, text in (("versions", "the last three definitions of a tool (* serves)"),
                       ("rollback", "serve an earlier definition of a tool until unpin or a higher version"),
                       ("unpin", "end a rollback: the file's definition serves again"),
                       ("promote", "end a canary (rollout: N): the new version serves every caller"),
                       ("abort", "end a canary: the version before it serves every caller")):
        p = sub.add_parser(verb, parents=[common], help=text)
        p.add_argument("tool", metavar="TOOL")
        if verb == "rollback":
            p.add_argument("version", metavar="VERSION", nargs="?", default="",
                           help="the version to serve (default: the one before the serving one)")
        p.add_argument("--admin-socket", metavar="PATH", default=None, help="the server's admin socket")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_versions)

    def client(p: argparse.ArgumentParser) -> None:
        p.add_argument("--server", metavar="ADDR", help="a running sidecar: host:port or unix:/path")
        p.add_argument("--token-env", metavar="VAR",
                       help="send the bearer token held in environment variable VAR (default: BITONG_TOKEN, if set)")
        p.add_argument("--token-file", metavar="FILE", help="send the bearer token held in FILE")
        p.add_argument("--tls-ca", metavar="PEM", help="connect with TLS, trusting this CA (env BITONG_TLS_CA)")
        p.add_argument("--tls-cert", metavar="PEM", help="the client certificate for mTLS (env BITONG_TLS_CERT)")
        p.add_argument("--tls-key", metavar="PEM", help="its private key (env BITONG_TLS_KEY)")

    def cached(p: argparse.ArgumentParser) -> None:
        p.add_argument("--no-cache", action="store_true",
                       help="analyse every tool afresh and keep nothing (by default the analysed registry is kept "
                            "in $BITONG_CACHE_DIR, else $XDG_CACHE_HOME/bitong, else ~/.cache/bitong, and a "
                            "later run reads again only the files that changed)")

    p = sub.add_parser("match", parents=[common], help="intent to the best 1-3 tools")
    roots(p)
    cached(p)
    p.add_argument("query", metavar="QUERY", help="the intent, or - to read one query a line from stdin (JSON lines out)")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--explain", action="store_true",
                   help="show the matched terms of each candidate, and why the answer is found or not")
    client(p)
    p.set_defaults(func=cmd_match)

    p = sub.add_parser("call", parents=[common], help="run one registered tool")
    roots(p)
    p.add_argument("tool")
    p.add_argument("params", nargs="*", metavar="key=value", help="key=value (text) or key:=json")
    p.add_argument("--json", action="store_true", help="print the CallResult in protobuf's JSON mapping")
    client(p)
    p.add_argument("--confirm", metavar="TOKEN", help="the confirm_token of an earlier call (with --server)")
    p.add_argument("--yes", action="store_true", help="confirm a require_confirm tool: run it after its token is issued")
    p.add_argument("--timeout", type=float, default=None, help="the gRPC deadline in seconds (with --server)")
    p.add_argument("--stream", action="store_true",
                   help="print the output as the tool writes it (StreamCall), not when it ends; no output cap")
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("subscribe", parents=[common], help="print scheduled tools' results as they come")
    p.add_argument("tools", nargs="*", metavar="TOOL", help="the tools to hear from (default: every one)")
    p.add_argument("--count", type=int, default=0, metavar="N", help="exit after N results (default: never)")
    client(p)
    p.set_defaults(func=cmd_subscribe)

    p = sub.add_parser("tools", parents=[common], help="list the loaded tools")
    roots(p)
    p.add_argument("--json", action="store_true", help="one JSON array (protobuf JSON mapping), sorted by name")
    p.add_argument("--format", choices=("json-schema", "openai", "mcp"), default=None,
                   help="print each tool's schema for another ecosystem: json-schema (a JSON Schema 2020-12 "
                        "document per tool), openai (function-calling tools), mcp (a tools/list result, as "
                        "bitong mcp lists them); default: the table")
    client(p)
    p.set_defaults(func=cmd_tools)

    p = sub.add_parser("show", parents=[common], help="one tool as a readable page: what, params, permissions, "
                                                       "examples")
    roots(p)
    p.add_argument("tool", metavar="TOOL")
    client(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("init", parents=[common], help="scaffold a new tool folder that passes lint")
    p.add_argument("name", metavar="NAME", help="the tool's name (and its folder's)")
    p.add_argument("--executor", choices=("shell", "python", "http"), default="shell",
                   help="how it runs (default shell); python also writes handler.py")
    p.add_argument("--dir", default=".", metavar="DIR", help="the tools root to make it in (default .)")
    p.set_defaults(func=cmd_init)
    p = sub.add_parser("mcp", parents=[common],
                       help="serve the tools to MCP hosts (Claude Desktop, Claude Code, ...): stdio, or --http")
    roots(p)
    p.add_argument("--http", metavar="HOST:PORT", default=None,
                   help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free port; "
                        "no authentication: keep it on 127.0.0.1)")
    p.add_argument("--search", action="store_true",
                   help="list only find_tools and call_tool (for big registries: a few hundred tokens of "
                        "context instead of every schema)")
    p.add_argument("--state", metavar="FILE", default=None,
                   help="keep the registry snapshot here, so a restart re-reads only what changed")
    p.add_argument("--poll", type=float, default=0.5, help="poll interval where inotify is unavailable (s)")
    p.add_argument("--audit", metavar="FILE", help="append one JSON line per call to FILE (the audit trail)")
    for option, dest, text in _LIMIT_OPTIONS:
        p.add_argument(option, dest=dest, type=int, default=None, metavar="N", help=text)
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("lint", parents=[common], help="check TOOL.hdlp files: path:line:col: message")
    p.add_argument("paths", nargs="+", metavar="DIR")
    p.add_argument("--audit", action="store_true",
                   help="also report each sensitive permission (exec, fs_write, network, secret) not approved")
    p.add_argument("--config", metavar="FILE",
                   help="the approvals to check against ([approve]); default: the development default")
    p.set_defaults(func=cmd_lint)

    p = sub.add_parser("audit", parents=[common],
                       help="per tool: permissions, what the sandbox allows it, and what is not approved")
    p.add_argument("paths", nargs="+", metavar="DIR", help="a tools root, a tool folder or a TOOL.hdlp")
    p.add_argument("--config", metavar="FILE",
                   help="the approvals to check against ([approve]); default: the development default")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("eval", parents=[common], help="score Match on a query<TAB>expected file (hit@1, hit@3, none_acc, mrr)")
    roots(p)
    cached(p)
    p.add_argument("queries", metavar="QUERIES.tsv")
    p.add_argument("-q", "--quiet", action="store_true", help="the summary line only")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("audit-log", parents=[common], help="read the audit trail of bitong serve --audit FILE")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--tool", metavar="NAME", help="only this tool (a glob such as 'file-*')")
    p.add_argument("--caller", metavar="ID", help="only this caller (a glob, such as 'uid:*')")
    p.add_argument("--since", metavar="WHEN", help="only calls since: 2026-12-02T16:00:00Z, or 30m, 2h, 1d ago")
    p.add_argument("--json", action="store_true", help="the lines as stored (JSON lines)")
    p.add_argument("--no-rotated", action="store_true", help="read FILE only, not FILE.1 ... FILE.N")
    p.set_defaults(func=cmd_audit_log)
    for action in sub._choices_actions:   # each subcommand's own --help: its one line, defaults, an example
        command = sub.choices[action.dest]
        command.description = action.help
        command.formatter_class = _HelpFormatter
        command.epilog = "example:\n" + "\n".join(f"  {line}" for line in _EXAMPLES.get(action.dest, ()))
    top.formatter_class = _HelpFormatter
    top.epilog = "run `bitong COMMAND --help` for a command's options and an example"
    return top


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option with its default (unless its help already says it), the example kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings
                or isinstance(default, list)):
            return text
        return f"{text} (default: %(default)s)"


_EXAMPLES: dict[str, tuple[str, ...]] = {
    "serve": ("bitong serve --tools ./tools --listen unix:/run/bitong.sock --state /var/lib/bitong/state.pb",),
    "approve": ("bitong approve 7f3a9c --reason 'checked the diff'",),
    "deny": ("bitong deny 7f3a9c --reason 'not on a Friday'",),
    "pending": ("bitong pending --json",),
    "match": ("bitong match '看看 /var/log 占了多少空间' --explain",
              "bitong match 'show disk usage' --server unix:/run/bitong.sock --json"),
    "call": ("bitong call shell-exec cmd='df -h /' --server 127.0.0.1:50151",
             "bitong call file-stats path=/var/log recursive:=true --stream"),
    "tools": ("bitong tools --server unix:/run/bitong.sock --json", "bitong tools --format openai > tools.json"),
    "mcp": ("bitong mcp --tools ./tools --search", "bitong mcp --tools ./tools --http 127.0.0.1:8765"),
    "show": ("bitong show file-stats",),
    "init": ("bitong init disk-report --executor python --dir ./tools",),
    "lint": ("bitong lint ./tools",),
    "audit": ("bitong audit ./tools --config prod.toml",),
    "eval": ("bitong eval --tools ./tools my-phrasings.tsv -q",),
    "audit-log": ("bitong audit-log /var/log/bitong/audit.jsonl --tool 'file-*' --since 2h",),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)   # --help and --version exit here, before logging is imported
    import logging

    level = args.log_level or ("INFO" if args.command in ("serve", "mcp") else "WARNING")
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if args.command in ("serve", "mcp"):
        # Before gRPC loads. These processes fork only to exec a tool or to share a big scan over the
        # cores (registry/forked.py), and neither child uses gRPC: its fork handlers would only pause the
        # server around each fork and restart pollers in a child that closes their descriptors.
        os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    if args.command == "serve":
        from ..serving.requestlog import install

        install(args.log_format)
    try:
        rc: int = args.func(args)
        return rc
    except BrokenPipeError:  # `bitong tools | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
