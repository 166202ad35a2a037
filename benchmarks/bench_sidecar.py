"""The sidecar end to end, against its peers, in one run on one machine.

    python benchmarks/bench_sidecar.py [--quick] [--json PATH] [--repo DIR]

What it measures, and against what (issue 5):

* bitong served as its own process (``python -m bitong serve --listen unix:...``,
  so client and server do not share a GIL), over a unix socket:
  Call of a shell tool running ``echo hello`` and Match over the eval registry
  (40 tools + the 2 bench tools, the dev queries in turn), p50/p99 with one
  call in flight, and calls/s with 16 in flight. Peer: the official MCP Python
  SDK 2.x (``MCPServer`` over stdio, driven by the SDK's own client; see
  peer_mcp_server.py) serving the same echo tool, and a tool returning a
  constant, the floor Match is set against.
* The floor: a bare grpc.aio server on the same proto (peer_grpc_floor.py)
  answering Match with a constant and Call with a blocking ``subprocess.run``,
  so "bitong minus floor" is what bitong itself adds.
* StreamCall of ``head -c N /dev/zero`` (1 GiB): MB/s (10^6 bytes) of one
  stream and the server's VmRSS sampled every 20 ms while it streams. Peers:
  this process reading the same command's pipe, and the floor streaming
  64 KiB chunks from memory.
* The shell executor alone, in this process under uvloop, against a bare
  ``subprocess.run(["echo", "hello"], capture_output=True)``, interleaved.

Call/Match run in interleaved rounds (each system a short block per round,
order rotated), so load from other work on a shared machine falls on all of
them alike; the run also records how much CPU other work took. Both a sync
gRPC client and grpc.aio are measured; the table takes the better of the two
for bitong per row (each product with its best client; the MCP SDK has only
an async one) and the JSON keeps both. Ratios are bitong / peer: absolute
figures depend on the machine, ratios are what travel between machines.

``run(quick)`` returns ``{"rows": [...], ...}`` for run_all.py.
Needs ``pip install -r benchmarks/requirements.txt`` (mcp 2.x).
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Self

from machine import machine  # benchmarks/ is the script's folder, first on sys.path

# grpc core logs a GOAWAY at INFO when a server it talked to stops: noise in a benchmark's output.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EVAL = REPO.parent / "shared" / "eval"
EVAL_REGISTRY = EVAL / "registry"
EVAL_QUERIES = EVAL / "dev_queries.tsv"
RESULTS = HERE / "results"
PEER_SCRIPT = HERE / "peer_mcp_server.py"
PEER_FLOOR = HERE / "peer_grpc_floor.py"

# Issue 5's targets and the peer figures they were set against (2 cores, Python 3.11).
TARGET_CALL_P50_MS = 1.3
ISSUE_MCP_ECHO_P50_MS = 1.62
TARGET_MATCH_P50_MS = 0.5
ISSUE_MCP_CONST_P50_MS = 0.71
TARGET_ECHO_QPS_16 = 900.0
ISSUE_MCP_ECHO_QPS_16 = 757.0
TARGET_STREAM_MBPS = 450.0
TARGET_EXEC_OVERHEAD_MS = 0.1
FLAT_RSS_GROWTH_MIB = 32.0  # "flat": the server grows by less than this while streaming 1 GiB

CONCURRENCY = 16
MB = 1e6
MiB = 1 << 20

ECHO_TOOL = """\
HLDP://bench/tool/bench-echo
name: bench-echo
display: 基准回声
intent: 打印 hello，用来测量一次调用的开销
method: exec
executor: shell
command: echo hello
params_schema: {}
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
permissions: { exec: true }
author: bench
created: 2026-06-01
why: 基准测试：一次最小的进程调用。
"""

STREAM_TOOL = """\
HLDP://bench/tool/bench-stream
name: bench-stream
display: 基准流
intent: 输出 N 字节的零，用来测量流式调用的吞吐
method: exec
executor: shell
command: head -c {bytes} /dev/zero
params_schema:
  bytes: { type: integer, required: true, description: "how many bytes to write" }
constraints: { timeout_ms: 120000, max_output_bytes: 65536, require_confirm: false }
permissions: { exec: true }
author: bench
created: 2026-06-01
why: 基准测试：流式输出的吞吐与服务器内存。
"""


# ---------------------------------------------------------------- small helpers


def pct(xs: list[float], p: float) -> float:
    """The p-quantile (nearest rank) of samples; p in [0, 1]."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


def ms(xs: list[float]) -> dict[str, float]:
    """p50/p99/mean of second samples, in ms."""
    return {"p50_ms": pct(xs, 0.5) * 1e3, "p99_ms": pct(xs, 0.99) * 1e3,
            "mean_ms": statistics.fmean(xs) * 1e3, "n": len(xs)}


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> tuple[float, float]:
    """(a live process's own CPU s, its reaped children's CPU s) from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


def system_busy() -> float:
    """Busy CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(cpu) - cpu[3] - cpu[4]) / TICK


def live_children_cpu() -> float:
    """CPU seconds of this process's live children and what they reaped (servers, the MCP peer, ...)."""
    me = os.getpid()
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            total += sum(int(x) for x in fields[11:15]) / TICK
    return total


class Contention:
    """How much CPU something other than this benchmark used during a section.

    On a shared machine (other sessions compiling or testing) the figures
    move with it; the run records it so a reader can tell a miss from noise.
    Ours: this process, its live children (the servers, the MCP peer) with
    what they reaped, and every child this process reaped.
    """

    def __init__(self) -> None:
        self.foreign_pct = 0.0

    @staticmethod
    def _ours() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + live_children_cpu()

    def __enter__(self) -> Self:
        self.t0, self.b0, self.o0 = time.perf_counter(), system_busy(), self._ours()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        foreign = (system_busy() - self.b0) - (self._ours() - self.o0)
        self.foreign_pct = 100 * max(0.0, foreign) / max(wall, 1e-9)


def eval_queries() -> list[str]:
    """The dev queries' text (the Match workload); a fixed handful if the eval corpus is absent."""
    try:
        lines = EVAL_QUERIES.read_text(encoding="utf-8").splitlines()[1:]
        out = [ln.split("\t", 1)[0] for ln in lines if ln.strip()]
        if out:
            return out
    except OSError:
        pass
    return ["跑一下 uname -r 看内核版本", "仓库最近提交了哪些改动", "list recent commits of the repo", "读取文件 /etc/hosts"]




def versions() -> dict[str, str]:
    """Versions of what is compared (the peers' included)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("grpcio", "protobuf", "uvloop", "mcp", "anyio", "bitong"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


# ---------------------------------------------------------------- the bitong server process


class ServerProcess:
    """``python -m bitong serve`` on a unix socket, as a separate process (its own GIL).

    With ``argv`` given, that command instead (the gRPC floor), checked by a Match
    rather than by the health service it does not have.
    """

    def __init__(self, roots: list[Path], sock: Path, log: Path, env: dict[str, str], repo: Path = REPO,
                 argv: list[str] | None = None, config: Path | None = None, listen: str | None = None) -> None:
        self.health = argv is None
        if argv is None:
            argv = [sys.executable, "-m", "bitong", "serve", "--listen", listen or f"unix:{sock}"]
            for root in roots:
                argv += ["--tools", str(root)]
            if config is not None:
                argv += ["--config", str(config)]
        self.sock = sock
        self.log = log
        self.address = listen or f"unix:{sock}"
        self._logf = open(log, "wb")  # the server's stdout for its whole life; closed in stop()
        self.proc = subprocess.Popen(argv, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Health says SERVING (or the floor answers a Match) within the time; False if the process died."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from bitong.v1 import agent_pb2 as pb
        from bitong.v1 import agent_pb2_grpc as pb_grpc

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if self.sock.exists() or not self.address.startswith("unix:"):
                with grpc.insecure_channel(self.address) as ch:
                    try:
                        if not self.health:
                            pb_grpc.ToolAgentStub(ch).Match(pb.MatchRequest(intent="x"), timeout=1.0)
                            return True
                        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""),
                                                                     timeout=1.0)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            return True
                    except grpc.RpcError:
                        pass
            time.sleep(0.05)
        return False

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (the server drains), then SIGKILL if it lingers; only this process's group."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
        self._logf.close()


def approving_config(tmp: Path, roots: list[Path], extra: str = "") -> Path:
    """A config whose ``[approve]`` names every tool in ``roots``: the benchmark's tools declare ``exec``
    (or ``network``), which a served sidecar runs only when approved (README, "Approval of sensitive
    tools"); the eval registry's are approved too, so Match sees the same 42 tools as before approvals."""
    names = sorted({m.group(1) for root in roots for hdlp in root.glob("*/TOOL.hdlp")
                    for m in [re.search(r"^name:[ \t]*(\S+)", hdlp.read_text(encoding="utf-8"), re.M)] if m})
    path = tmp / "bench.toml"
    path.write_text(f"[approve]\ntools = {json.dumps(names)}\n{extra}", encoding="utf-8")
    return path


def start_server(tmp: Path, roots: list[Path], repo: Path = REPO,
                 config: Path | None = None) -> tuple[ServerProcess, dict[str, Any]]:
    """Start the sidecar; if the compiled parser cannot load (a tree mid-edit), say so and use the pure one.

    The parser only runs at load time, so its twin does not change any figure measured here.
    ``repo`` other than this checkout (an exported commit, say) goes first on PYTHONPATH.
    ``config``: ``--config`` (default: :func:`approving_config` of the roots).
    """
    notes: dict[str, Any] = {"parser_fallback": False, "repo": str(repo)}
    env = dict(os.environ)
    if repo != REPO:
        env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if config is None:
        config = approving_config(tmp, roots)
    srv = ServerProcess(roots, tmp / "bitong.sock", tmp / "server.log", env, repo, config=config)
    if srv.wait_ready():
        return srv, notes
    tail = srv.log_tail()
    srv.stop()
    env["BITONG_PURE"] = "1"
    (tmp / "bitong.sock").unlink(missing_ok=True)
    srv = ServerProcess(roots, tmp / "bitong.sock", tmp / "server.log", env, repo, config=config)
    if not srv.wait_ready():
        tail2 = srv.log_tail()
        srv.stop()
        raise RuntimeError(f"bitong serve did not start:\n{tail}\n--- with BITONG_PURE=1:\n{tail2}")
    notes.update(parser_fallback=True, parser_failure=tail)
    return srv, notes


def start_tcp(tmp: Path, root: Path, extra: str = "") -> ServerProcess:
    """The same sidecar on 127.0.0.1 (a port free a moment ago): no unix front, no relay."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="tcp-", dir=tmp))
    srv = ServerProcess([root], folder / "unused.sock", folder / "server.log", dict(os.environ),
                        config=approving_config(folder, [root], extra), listen=f"127.0.0.1:{port}")
    if not srv.wait_ready():
        tail = srv.log_tail()
        srv.stop()
        raise RuntimeError(f"bitong serve on 127.0.0.1:{port} did not start:\n{tail}")
    return srv


def start_floor(tmp: Path, repo: Path) -> ServerProcess:
    """The bare grpc.aio server (peer_grpc_floor.py) on its own socket."""
    sock = tmp / "floor.sock"
    env = dict(os.environ)
    if repo != REPO:
        env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    srv = ServerProcess([], sock, tmp / "floor.log", env, repo, argv=[sys.executable, str(PEER_FLOOR), f"unix:{sock}"])
    if not srv.wait_ready():
        tail = srv.log_tail()
        srv.stop()
        raise RuntimeError(f"the gRPC floor server did not start:\n{tail}")
    return srv


# ---------------------------------------------------------------- loops, bounded in count and time


def sync_latency(fn: Callable[[int], Any], n: int, warm: int = 0) -> list[float]:
    """Call ``fn(i)`` n times one after another; seconds per call."""
    for i in range(warm):
        fn(i)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return out


def sync_throughput(submit: Callable[[], Any], seconds: float, inflight: int) -> float:
    """Calls/s with ``inflight`` futures outstanding from one thread (no client threads fighting for the GIL)."""
    sem = threading.BoundedSemaphore(inflight)
    done = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def finished(fut: Any) -> None:
        exc = fut.exception()
        with lock:
            done[0] += 1
            if exc is not None:
                errors.append(exc)
        sem.release()

    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        sem.acquire()
        submit().add_done_callback(finished)
    for _ in range(inflight):  # wait for the stragglers, bounded by the calls' own deadlines
        sem.acquire()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} calls failed under load: {errors[0]}")
    return done[0] / elapsed


async def aio_latency(fn: Callable[[int], Awaitable[Any]], n: int, warm: int = 0) -> list[float]:
    """The async twin of :func:`sync_latency`."""
    for i in range(warm):
        await fn(i)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - t0)
    return out


async def aio_throughput(fn: Callable[[int], Awaitable[Any]], seconds: float, inflight: int) -> float:
    """Calls/s with ``inflight`` tasks each calling back to back until the time is up."""
    count = 0
    t0 = time.perf_counter()
    end = t0 + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < end:
            await fn(count)
            count += 1

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return count / (time.perf_counter() - t0)


def check_echo(result: Any) -> None:
    if not (result.ok and result.output == b"hello\n"):
        raise RuntimeError(f"bench-echo did not answer hello: ok={result.ok} error={result.error!r}")


class LoopThread:
    """An event loop (uvloop when there) in a thread, driven one block at a time from the main thread.

    The async clients (grpc.aio, the MCP SDK) live on it for the whole run, so
    their blocks can be interleaved with the sync client's without a new
    connection (or a new MCP server process) per block.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class McpPeer:
    """The MCP SDK's stdio client held open in one task (anyio scopes must exit where they entered)."""

    def __init__(self, lt: LoopThread) -> None:
        self.lt = lt
        self.inbox: asyncio.Queue[Any] | None = None
        self.task: asyncio.Task[None] | None = None

    async def _session(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        params = StdioServerParameters(command=sys.executable, args=[str(PEER_SCRIPT)], cwd=str(HERE))
        self.inbox = asyncio.Queue()
        try:
            async with Client(params) as client:
                first = await client.call_tool("echo", {})
                if first.is_error or getattr(first.content[0], "text", None) != "hello\n":
                    raise RuntimeError(f"MCP echo: {first}")
                ready.set_result(None)
                while (job := await self.inbox.get()) is not None:
                    fn, fut = job
                    try:
                        fut.set_result(await fn(client))
                    except Exception as exc:  # handed back to the caller, who raises it
                        fut.set_exception(exc)
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    async def _start(self) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self._session(ready))
        await asyncio.wait_for(ready, 60)

    async def _do(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        assert self.inbox is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.inbox.put_nowait((fn, fut))
        return await fut

    async def _stop(self) -> None:
        if self.inbox is not None and self.task is not None and not self.task.done():
            self.inbox.put_nowait(None)
            await asyncio.wait_for(self.task, 30)

    def start(self) -> None:
        self.lt.run(self._start())

    def do(self, fn: Callable[[Any], Awaitable[Any]], timeout_s: float = 120.0) -> Any:
        return self.lt.run(self._do(fn), timeout_s)

    def stop(self) -> None:
        self.lt.run(self._stop())


class Contestant(abc.ABC):
    """One system under test, as blocks: p50 samples of Call/Match, calls/s at 16 in flight."""

    name = ""

    @abc.abstractmethod
    def call_lat(self, n: int) -> list[float]: ...

    @abc.abstractmethod
    def match_lat(self, n: int) -> list[float]: ...

    @abc.abstractmethod
    def call_qps(self, seconds: float) -> float: ...

    @abc.abstractmethod
    def match_qps(self, seconds: float) -> float: ...


class SyncGrpc(Contestant):
    """A sync grpc channel: bitong's server or the floor."""

    def __init__(self, name: str, address: str, queries: list[str]) -> None:
        import grpc

        from bitong.v1 import agent_pb2 as pb
        from bitong.v1 import agent_pb2_grpc as pb_grpc

        self.name = name
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ToolAgentStub(self.channel)
        self.echo = pb.CallRequest(tool="bench-echo")
        self.reqs = [pb.MatchRequest(intent=q) for q in queries]
        check_echo(self.stub.Call(self.echo, timeout=10))
        self.call_lat(20)
        self.match_lat(20)

    def call_lat(self, n: int) -> list[float]:
        return sync_latency(lambda i: self.stub.Call(self.echo, timeout=10), n)

    def match_lat(self, n: int) -> list[float]:
        return sync_latency(lambda i: self.stub.Match(self.reqs[i % len(self.reqs)], timeout=10), n)

    def call_qps(self, seconds: float) -> float:
        return sync_throughput(lambda: self.stub.Call.future(self.echo, timeout=30), seconds, CONCURRENCY)

    def match_qps(self, seconds: float) -> float:
        it = iter(range(1 << 62))
        return sync_throughput(lambda: self.stub.Match.future(self.reqs[next(it) % len(self.reqs)], timeout=30),
                               seconds, CONCURRENCY)

    def close(self) -> None:
        self.channel.close()


class AioGrpc(Contestant):
    """grpc.aio on the loop thread: the like-for-like of the MCP SDK's async client."""

    def __init__(self, lt: LoopThread, address: str, queries: list[str]) -> None:
        from bitong.v1 import agent_pb2 as pb

        self.name = "bitong aio"
        self.lt = lt
        self.echo = pb.CallRequest(tool="bench-echo")
        self.reqs = [pb.MatchRequest(intent=q) for q in queries]
        self.channel, self.stub = lt.run(self._open(address))
        check_echo(lt.run(self._call_once()))
        self.call_lat(20)
        self.match_lat(20)

    async def _call_once(self) -> Any:
        return await self.stub.Call(self.echo, timeout=10)

    async def _open(self, address: str) -> tuple[Any, Any]:
        import grpc

        from bitong.v1 import agent_pb2_grpc as pb_grpc

        channel = grpc.aio.insecure_channel(address)
        return channel, pb_grpc.ToolAgentStub(channel)

    def call_lat(self, n: int) -> list[float]:
        return self.lt.run(aio_latency(lambda i: self.stub.Call(self.echo, timeout=10), n))

    def match_lat(self, n: int) -> list[float]:
        return self.lt.run(aio_latency(lambda i: self.stub.Match(self.reqs[i % len(self.reqs)], timeout=10), n))

    def call_qps(self, seconds: float) -> float:
        return self.lt.run(aio_throughput(lambda i: self.stub.Call(self.echo, timeout=30), seconds, CONCURRENCY))

    def match_qps(self, seconds: float) -> float:
        return self.lt.run(aio_throughput(lambda i: self.stub.Match(self.reqs[i % len(self.reqs)], timeout=30),
                                          seconds, CONCURRENCY))

    def close(self) -> None:
        self.lt.run(self.channel.close())


class Mcp(Contestant):
    """The MCP peer: ``echo`` for Call, ``const`` for Match, through the SDK's own client."""

    def __init__(self, peer: McpPeer) -> None:
        self.name = "MCP"
        self.peer = peer
        self.call_lat(20)
        self.match_lat(20)

    def _lat(self, tool: str, n: int) -> list[float]:
        return self.peer.do(lambda c: aio_latency(lambda i: c.call_tool(tool, {}), n))

    def _qps(self, tool: str, seconds: float) -> float:
        async def go(client: Any) -> float:
            import anyio

            done = 0
            t0 = time.perf_counter()
            end = t0 + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    await client.call_tool(tool, {})
                    done += 1

            async with anyio.create_task_group() as tg:
                for _ in range(CONCURRENCY):
                    tg.start_soon(worker)
            return done / (time.perf_counter() - t0)

        return self.peer.do(go)

    def call_lat(self, n: int) -> list[float]:
        return self._lat("echo", n)

    def match_lat(self, n: int) -> list[float]:
        return self._lat("const", n)

    def call_qps(self, seconds: float) -> float:
        return self._qps("echo", seconds)

    def match_qps(self, seconds: float) -> float:
        return self._qps("const", seconds)


def interleave(cs: list[Contestant], floor: Contestant, n: int, seconds: float,
               rounds: int) -> dict[str, dict[str, Any]]:
    """Every measurement in ``rounds`` short blocks, each round in a rotated order.

    On a machine that other work shares, load comes and goes; a block of each
    system in every round spreads it over all of them alike, so the ratios hold
    even when the absolute figures move.
    """
    lat: dict[str, dict[str, list[float]]] = {c.name: {"call": [], "match": []} for c in [*cs, floor]}
    qps: dict[str, dict[str, list[float]]] = {c.name: {"call": [], "match": []} for c in cs}
    for r in range(rounds):
        order = [*cs, floor]
        order = order[r % len(order):] + order[:r % len(order)]
        for c in order:
            share = 2 if c is floor else 1  # the floor is a reference: half the samples
            lat[c.name]["call"] += c.call_lat(max(10, n // rounds // share))
            lat[c.name]["match"] += c.match_lat(max(20, 2 * n // rounds // share))
        for c in order:
            if c is floor:  # it blocks its loop on each spawn: not a throughput contender
                continue
            qps[c.name]["call"].append(c.call_qps(seconds / rounds))
            qps[c.name]["match"].append(c.match_qps(seconds / rounds / 2))
    out: dict[str, dict[str, Any]] = {}
    for name, d in lat.items():
        out[name] = {"call": ms(d["call"]), "match": ms(d["match"])}
        if name in qps:
            for key in ("call", "match"):
                xs = qps[name][key]
                out[name][f"{key}_qps_16"] = statistics.median(xs)
                out[name][f"{key}_qps_16_blocks"] = [round(x) for x in xs]
    return out


# ---------------------------------------------------------------- streams


def stream_read(address: str, tool: str, nbytes: int, pid: int | None = None) -> dict[str, Any]:
    """One StreamCall of ``nbytes`` zeros; with ``pid``, that server's VmRSS sampled every 20 ms meanwhile."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    def request(size: int) -> Any:
        req = pb.CallRequest(tool=tool)
        req.params.update({"bytes": size})
        return req

    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while pid is not None and not stop.is_set():
            samples.append(rss_kib(pid))
            stop.wait(0.02)

    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.ToolAgentStub(ch)
        for _ in stub.StreamCall(request(8 * MiB), timeout=30):  # warm: the first stream pays for imports
            pass
        baseline = rss_kib(pid) if pid is not None else 0
        got = messages = 0
        final = None
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        try:
            for ev in stub.StreamCall(request(nbytes), timeout=120):
                if ev.HasField("chunk"):
                    got += len(ev.chunk.data)
                    messages += 1
                else:
                    final = ev.result
            elapsed = time.perf_counter() - t0
        finally:
            stop.set()
            sampler.join(timeout=2)
    if final is None or not final.ok or got != nbytes:
        raise RuntimeError(f"StreamCall {tool}: {got} of {nbytes} bytes, result {final}")
    out: dict[str, Any] = {"bytes": nbytes, "seconds": elapsed, "mb_s": nbytes / elapsed / MB, "messages": messages,
                           "mean_chunk_kib": nbytes / max(1, messages) / 1024}
    if pid is not None:
        rss = [kib for kib in samples if kib]
        peak = max(rss, default=baseline)
        out.update(rss_baseline_mib=baseline / 1024, rss_peak_mib=peak / 1024, rss_growth_mib=(peak - baseline) / 1024,
                   rss_samples_mib=[round(kib / 1024, 1) for kib in rss[:: max(1, -(-len(rss) // 12))]])
    return out


def pipe_read(nbytes: int) -> dict[str, Any]:
    """The peer of StreamCall: read the same command's stdout pipe in a loop, here; best of two."""
    best = 0.0
    for _ in range(2):
        proc = subprocess.Popen(["head", "-c", str(nbytes), "/dev/zero"], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        got = 0
        t0 = time.perf_counter()
        while True:
            data = os.read(fd, 256 * 1024)
            if not data:
                break
            got += len(data)
        elapsed = time.perf_counter() - t0
        proc.wait()
        proc.stdout.close()
        if got != nbytes:
            raise RuntimeError(f"pipe read {got} of {nbytes}")
        best = max(best, nbytes / elapsed / MB)
    return {"bytes": nbytes, "mb_s": best}


# ---------------------------------------------------------------- the executor alone


async def executor_vs_bare(n: int) -> dict[str, Any]:
    """ShellExecutor.run against subprocess.run of the same argv, interleaved so drift hits both alike;
    and the executor's default (a PID namespace per call, under _reaper) against its process-group
    fallback, for the spawn cost of the containment; and the OS sandbox (the default where the kernel
    allows it) against the same executor with ``--sandbox off``, for the sandbox's own spawn cost."""
    from bitong.agent.calling.executors.reaper import Containment
    from bitong.agent.calling.executors.sandbox import Sandbox
    from bitong.agent.calling.executors.shell import ShellExecutor
    from bitong.v1.agent_pb2 import ToolDef

    tool = ToolDef(name="bench-echo", executor="shell", method="exec", command="echo hello")
    tool.constraints.timeout_ms = 30000
    tool.constraints.max_output_bytes = 65536
    ex = ShellExecutor()
    off = Sandbox("off", False, "the benchmark's baseline")
    grouped_ex = ShellExecutor(containment=Containment("group", "the benchmark's baseline"), sandbox=off)
    unsandboxed_ex = ShellExecutor(sandbox=off)

    async def executor(which: ShellExecutor = ex) -> None:
        out = await which.run(tool, {}, deadline=time.monotonic() + 30)
        if not (out.ok and out.stdout == b"hello\n"):
            raise RuntimeError(f"executor: {out}")

    def bare() -> None:
        subprocess.run(["echo", "hello"], capture_output=True, check=True)

    for _ in range(max(20, n // 10)):
        await executor()
        await executor(grouped_ex)
        await executor(unsandboxed_ex)
        bare()
    a: list[float] = []
    b: list[float] = []
    g: list[float] = []
    u: list[float] = []
    orders = ((0, 1, 2, 3), (1, 2, 3, 0), (2, 3, 0, 1), (3, 0, 1, 2))
    for i in range(n):
        for which in orders[i % 4]:
            t0 = time.perf_counter()
            if which == 0:
                await executor()
                a.append(time.perf_counter() - t0)
            elif which == 1:
                bare()
                b.append(time.perf_counter() - t0)
            elif which == 2:
                await executor(grouped_ex)
                g.append(time.perf_counter() - t0)
            else:
                await executor(unsandboxed_ex)
                u.append(time.perf_counter() - t0)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    contained = [x - y for x, y in zip(u, g, strict=True)]
    sandboxed = [x - y for x, y in zip(a, u, strict=True)]
    return {"executor": ms(a), "bare": ms(b), "overhead_p50_ms": (pct(a, 0.5) - pct(b, 0.5)) * 1e3,
            "paired_diff_p50_ms": pct(diffs, 0.5) * 1e3, "mode": ex.containment.mode,
            "grouped": ms(g), "containment_p50_ms": (pct(u, 0.5) - pct(g, 0.5)) * 1e3,
            "containment_paired_p50_ms": pct(contained, 0.5) * 1e3,
            "sandbox_active": ex.sandbox.active, "sandbox_reason": ex.sandbox.reason, "unsandboxed": ms(u),
            "sandbox_p50_ms": (pct(a, 0.5) - pct(u, 0.5)) * 1e3, "sandbox_paired_p50_ms": pct(sandboxed, 0.5) * 1e3,
            "sandbox_ratio": pct(a, 0.5) / pct(u, 0.5)}


def run_uvloop(coro_fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run on uvloop (bitong's loop) when it is there."""
    try:
        import uvloop

        return uvloop.run(coro_fn())
    except ImportError:  # pragma: no cover
        return asyncio.run(coro_fn())


# ---------------------------------------------------------------- rows


TARGET_SANDBOX_MS = 1.0
"""Issue 9: the sandbox may add at most this to a call's spawn (p50)."""


def row(what: str, unit: str, bitong: float | None, peer: float | None, peer_name: str, target: str,
        met: bool | None, *, higher_is_better: bool = False, note: str = "") -> dict[str, Any]:
    """One line of the combined table; ``ratio`` is bitong / peer."""
    ratio = bitong / peer if bitong is not None and peer else None
    return {"what": what, "unit": unit, "bitong": bitong, "peer": peer, "peer_name": peer_name,
            "ratio": ratio, "target": target, "met": met, "higher_is_better": higher_is_better, "note": note}


def judge(value: float, abs_target: float, ratio: float | None, ratio_target: float | None,
          higher: bool) -> bool:
    """Met only when both the absolute target and the issue's ratio to the peer hold (the ratio travels)."""
    ok = value >= abs_target if higher else value <= abs_target
    if ratio is not None and ratio_target is not None:
        ok = ok and (ratio >= ratio_target if higher else ratio <= ratio_target)
    return ok


def build_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The table: bitong's best client against the MCP peer, the floors, the targets."""
    b, m, f, s, e = r["bitong"], r["systems"]["MCP"], r["systems"]["floor"], r["stream"], r["executor"]
    rows = []
    call_ratio_t = TARGET_CALL_P50_MS / ISSUE_MCP_ECHO_P50_MS
    v, p = b["call"]["p50_ms"], m["call"]["p50_ms"]
    rows.append(row("Call echo, 1 in flight, p50", "ms", v, p, "MCP stdio echo",
                    f"<= {TARGET_CALL_P50_MS} ms, ratio <= {call_ratio_t:.2f}",
                    judge(v, TARGET_CALL_P50_MS, v / p, call_ratio_t, False), note=f"{b['call_client']} client"))
    rows.append(row("Call echo, 1 in flight, p99", "ms", b["call"]["p99_ms"], m["call"]["p99_ms"], "MCP stdio echo",
                    "", None))
    match_ratio_t = TARGET_MATCH_P50_MS / ISSUE_MCP_CONST_P50_MS
    v, p = b["match"]["p50_ms"], m["match"]["p50_ms"]
    rows.append(row("Match (42 tools), 1 in flight, p50", "ms", v, p, "MCP stdio const",
                    f"<= {TARGET_MATCH_P50_MS} ms, ratio <= {match_ratio_t:.2f}",
                    judge(v, TARGET_MATCH_P50_MS, v / p, match_ratio_t, False), note=f"{b['match_client']} client"))
    rows.append(row("Match (42 tools), 1 in flight, p99", "ms", b["match"]["p99_ms"], m["match"]["p99_ms"],
                    "MCP stdio const", "", None))
    qps_ratio_t = TARGET_ECHO_QPS_16 / ISSUE_MCP_ECHO_QPS_16
    v, p = b["call_qps_16"], m["call_qps_16"]
    rows.append(row("Call echo, 16 in flight", "calls/s", v, p, "MCP stdio echo",
                    f">= {TARGET_ECHO_QPS_16:.0f}/s, ratio >= {qps_ratio_t:.2f}",
                    judge(v, TARGET_ECHO_QPS_16, v / p, qps_ratio_t, True), higher_is_better=True,
                    note=f"{b['call_qps_16_client']} client"))
    rows.append(row("Match, 16 in flight", "calls/s", b["match_qps_16"], m["match_qps_16"], "MCP stdio const",
                    "", None, higher_is_better=True, note=f"{b['match_qps_16_client']} client"))
    cs = r["systems"]["bitong sync"]
    rows.append(row("Call echo p50 over the floor", "ms", cs["call"]["p50_ms"], f["call"]["p50_ms"],
                    "grpc.aio + subprocess.run", "", None,
                    note=f"sync client; bitong adds {cs['call']['p50_ms'] - f['call']['p50_ms']:.3f} ms"))
    rows.append(row("Match p50 over the floor", "ms", cs["match"]["p50_ms"], f["match"]["p50_ms"],
                    "grpc.aio constant", "", None,
                    note=f"sync client; bitong adds {cs['match']['p50_ms'] - f['match']['p50_ms']:.3f} ms"))
    gib = s["bytes"] / (1 << 30)
    rows.append(row(f"StreamCall, one stream of {gib:g} GiB", "MB/s", s["mb_s"], r["pipe"]["mb_s"],
                    "plain pipe read", f">= {TARGET_STREAM_MBPS:.0f} MB/s", s["mb_s"] >= TARGET_STREAM_MBPS,
                    higher_is_better=True, note=f"mean chunk {s['mean_chunk_kib']:.0f} KiB"))
    rows.append(row("StreamCall over gRPC streaming alone", "MB/s", s["mb_s"], r["floor_stream"]["mb_s"],
                    "grpc.aio, 64 KiB chunks from memory", "", None, higher_is_better=True))
    rows.append(row("StreamCall, server RSS growth while streaming", "MiB", s["rss_growth_mib"], None, "",
                    f"<= {FLAT_RSS_GROWTH_MIB:.0f} MiB (flat)", s["rss_growth_mib"] <= FLAT_RSS_GROWTH_MIB,
                    note=f"baseline {s['rss_baseline_mib']:.0f} MiB, peak {s['rss_peak_mib']:.0f} MiB"))
    rows.append(row("executor echo, in process, p50", "ms", e["executor"]["p50_ms"], e["bare"]["p50_ms"],
                    "bare subprocess.run", "", None))
    rows.append(row("executor overhead over subprocess.run, p50", "ms", e["overhead_p50_ms"], None, "",
                    f"<= {TARGET_EXEC_OVERHEAD_MS} ms", e["overhead_p50_ms"] <= TARGET_EXEC_OVERHEAD_MS,
                    note=f"paired differences p50 {e['paired_diff_p50_ms']:.3f} ms"))
    rows.append(row(f"spawn cost of containment ({e['mode']}) over the process group, p50", "ms",
                    e["containment_p50_ms"], None, "", "", None,
                    note=f"executor echo p50 {e['unsandboxed']['p50_ms']:.3f} ms contained (sandbox off), "
                         f"{e['grouped']['p50_ms']:.3f} ms by process group; paired differences p50 "
                         f"{e['containment_paired_p50_ms']:.3f} ms"))
    sandbox_what = "the OS sandbox" if e["sandbox_active"] else f"the OS sandbox (UNAVAILABLE: {e['sandbox_reason']})"
    rows.append(row(f"spawn cost of {sandbox_what} over --sandbox off, p50", "ms", e["sandbox_p50_ms"], None, "",
                    f"< {TARGET_SANDBOX_MS} ms added", e["sandbox_active"] and e["sandbox_p50_ms"] < TARGET_SANDBOX_MS,
                    note=f"executor echo p50 {e['executor']['p50_ms']:.3f} ms sandboxed, "
                         f"{e['unsandboxed']['p50_ms']:.3f} ms with --sandbox off (ratio {e['sandbox_ratio']:.2f}); "
                         f"paired differences p50 {e['sandbox_paired_p50_ms']:.3f} ms"))
    return rows


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit in ("calls/s", "MB/s", "MiB"):
        return f"{v:,.0f} {unit}" if abs(v) >= 10 else f"{v:.1f} {unit}"
    return f"{v:.3f} {unit}"


def table(rows: list[dict[str, Any]]) -> str:
    """Fixed-width text: what, bitong, peer, ratio, target, met."""
    head = ("what", "bitong", "peer", "bitong/peer", "target", "met")
    lines = []
    for r in rows:
        peer = f"{fmt(r['peer'], r['unit'])} ({r['peer_name']})" if r["peer"] is not None else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        what = f"{r['what']} ({r['note']})" if r["note"] else r["what"]
        lines.append((what, fmt(r["bitong"], r["unit"]), peer, ratio, r["target"], met))
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(head, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


# ---------------------------------------------------------------- run


def shut_down(closers: list[Callable[[], Any]], lt: LoopThread, servers: list[ServerProcess]) -> None:
    """The clients first (newest first, each failure said and passed over), then their loop, then the servers."""
    for close in reversed(closers):
        try:
            close()
        except Exception as exc:  # shutting down: say it, go on closing the rest
            progress(f"while closing: {type(exc).__name__}: {exc}")
    lt.close()
    for server in servers:
        server.stop()


def progress(msg: str) -> None:
    """One line on stderr, so a long run shows where it is."""
    print(f"bench_sidecar: {msg}", file=sys.stderr, flush=True)


def run(quick: bool = False, repo: Path | None = None) -> dict[str, Any]:
    """Everything above in one run (about a minute; ``quick`` about half); returns rows and details.

    ``repo``: serve and import bitong from another checkout (default: this one).
    """
    repo = REPO if repo is None else Path(repo).resolve()
    if repo != REPO:
        sys.path.insert(0, str(repo))
    n = 600 if quick else 2000
    seconds = 2.0 if quick else 4.0
    rounds = 4 if quick else 8
    stream_bytes = (256 if quick else 1024) * MiB
    started = time.perf_counter()
    result: dict[str, Any] = {"name": "sidecar", "machine": machine(), "versions": versions(), "quick": quick}
    contention: dict[str, float] = {}
    result["contention_pct"] = contention
    queries = eval_queries()

    tmp = Path(tempfile.mkdtemp(prefix="bitong-bench-"))
    lt = LoopThread()
    servers: list[ServerProcess] = []
    closers: list[Callable[[], None]] = []
    try:
        root = tmp / "tools"
        for name, text in (("bench-echo", ECHO_TOOL), ("bench-stream", STREAM_TOOL)):
            (root / name).mkdir(parents=True)
            (root / name / "TOOL.hdlp").write_text(text, encoding="utf-8")
        roots = [root] + ([EVAL_REGISTRY] if EVAL_REGISTRY.is_dir() else [])
        progress("starting bitong, the gRPC floor and the MCP peer")
        srv, notes = start_server(tmp, roots, repo)
        servers.append(srv)
        result["server"] = {"pid": srv.pid, "roots": [str(p) for p in roots], **notes}
        result["rss_idle_mib"] = rss_kib(srv.pid) / 1024
        floor_srv = start_floor(tmp, repo)
        servers.append(floor_srv)
        mcp = McpPeer(lt)
        mcp.start()
        closers.append(mcp.stop)
        bsync = SyncGrpc("bitong sync", srv.address, queries)
        closers.append(bsync.close)
        baio = AioGrpc(lt, srv.address, queries)
        closers.append(baio.close)
        floor = SyncGrpc("floor", floor_srv.address, queries)
        closers.append(floor.close)

        progress(f"Call/Match, one and {CONCURRENCY} in flight, {rounds} interleaved rounds")
        with Contention() as c:
            systems = interleave([bsync, baio, Mcp(mcp)], floor, n, seconds, rounds)
        contention["Call/Match rounds"] = c.foreign_pct
        result["systems"] = systems
        best: dict[str, Any] = {}
        sy, ai = systems["bitong sync"], systems["bitong aio"]
        for key in ("call", "match"):
            best[key] = min(sy[key], ai[key], key=lambda d: d["p50_ms"])
            best[key + "_client"] = "sync" if best[key] is sy[key] else "aio"
        for key in ("call_qps_16", "match_qps_16"):
            best[key] = max(sy[key], ai[key])
            best[key + "_client"] = "sync" if sy[key] >= ai[key] else "aio"
        result["bitong"] = best

        progress(f"StreamCall of {stream_bytes >> 20} MiB, the floor's stream, a plain pipe")
        with Contention() as c:
            result["stream"] = stream_read(srv.address, "bench-stream", stream_bytes, srv.pid)
        contention["StreamCall"] = c.foreign_pct
        result["rss_after_mib"] = rss_kib(srv.pid) / 1024
        with Contention() as c:
            result["floor_stream"] = stream_read(floor_srv.address, "bench-stream", stream_bytes)
        contention["floor stream"] = c.foreign_pct
        with Contention() as c:
            result["pipe"] = pipe_read(stream_bytes)
        contention["pipe read"] = c.foreign_pct
    finally:
        shut_down(closers, lt, servers)
        if servers:
            result["server_log_lines"] = len(servers[0].log.read_text(errors="replace").splitlines())
        shutil.rmtree(tmp, ignore_errors=True)

    progress("the executor alone against subprocess.run")
    with Contention() as c:
        result["executor"] = run_uvloop(lambda: executor_vs_bare(n // 2))
    contention["executor"] = c.foreign_pct
    result["rows"] = build_rows(result)
    result["seconds"] = time.perf_counter() - started
    return result


def report(result: dict[str, Any]) -> str:
    """The table plus the lines that say how it was measured."""
    m, sy, ai = result["machine"], result["systems"]["bitong sync"], result["systems"]["bitong aio"]
    mcp = result["systems"]["MCP"]
    lines = [f"bitong sidecar vs peers — {m['date']} — {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}",
             f"versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}", "",
             table(result["rows"]), "",
             (f"bitong clients: Call p50 sync {sy['call']['p50_ms']:.3f} / aio {ai['call']['p50_ms']:.3f} ms; "
              f"Match p50 sync {sy['match']['p50_ms']:.3f} / aio {ai['match']['p50_ms']:.3f} ms; "
              f"echo at 16 in flight sync {sy['call_qps_16']:.0f} / aio {ai['call_qps_16']:.0f} calls/s "
              f"(blocks: sync {sy['call_qps_16_blocks']}, aio {ai['call_qps_16_blocks']}, "
              f"MCP {mcp['call_qps_16_blocks']})"),
             (f"server RSS: idle {result['rss_idle_mib']:.0f} MiB, during the stream "
              f"{result['stream']['rss_samples_mib']} MiB, after {result['rss_after_mib']:.0f} MiB"),
             ("other work on the machine during each part (% of one core): "
              + ", ".join(f"{k} {v:.0f}%" for k, v in result["contention_pct"].items())),
             "ratios are bitong/peer; absolute times are this machine's, ratios travel"]
    if max(result["contention_pct"].values(), default=0) > 15:
        lines.append("WARNING: the machine was shared during this run; figures are pessimistic, rerun when it is quiet")
    if result["server"].get("parser_fallback"):
        lines.append("note: the compiled parser failed to load in the server; it ran with BITONG_PURE=1 "
                     "(parsing is load-time only, no figure here depends on it)")
    lines.append(f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples and a 256 MiB stream")
    ap.add_argument("--repo", type=Path, default=None,
                    help="serve bitong from this checkout instead (e.g. `git archive HEAD` unpacked)")
    ap.add_argument("--json", type=Path, default=RESULTS / "sidecar.json", help="where the JSON copy goes")
    args = ap.parse_args(argv)
    result = run(quick=args.quick, repo=args.repo)
    print(report(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
