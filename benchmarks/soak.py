"""Soak: many calls against one ``bitong serve``, watching its RSS, fds, threads and processes.

Not CI: a long run on demand. It starts a real sidecar (``python -m bitong
serve`` on a unix socket, the bundled tools), drives ``--calls`` requests
through ``--concurrency`` clients in a fixed mix, and samples the server
process from /proc as it goes:

* Call shell-exec (echo), Match (varied intents), StreamCall (stdout and stderr chunks),
* Calls cut by the caller's deadline (a ``sleep`` killed at 300 ms; a DEADLINE_EXCEEDED status is
  counted apart, as ``deadline-status``, when a loaded machine misses the reply margin),
* refusals: an unknown tool, bad params, an intent past the limit (INVALID_ARGUMENT).

Growth is judged after a warm-up (the first sample past ``--warmup`` of the
calls): RSS may grow by at most ``--rss-slack-mb``, fds and threads by at
most 2, and once the calls end no child process and no leaked ``sleep`` may
remain. Exit status 1 when any of these grew.

    python benchmarks/soak.py                      # 100,000 calls
    python benchmarks/soak.py --calls 20000 -c 8   # shorter
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bitong.v1 import agent_pb2 as pb  # noqa: E402
from bitong.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402

SLEEP = "4.321"   # a sleep the deadline kills; its odd length finds leaked ones by command line
INTENTS = ["看看 /opt/agent 仓库最近的提交记录", "帮我执行一条命令 uptime", "读取 /etc/hosts 文件的内容",
           "二十分钟后提醒我开会", "查看某个文件的大小和修改时间", "发一个 HTTP GET 请求到内网服务",
           "show me the last commits of the repo", "帮我订一张去上海的机票", "写入一段文本到文件"]


@dataclasses.dataclass
class Sample:
    calls: int
    rss_kb: int
    fds: int
    threads: int
    children: int
    leaked_sleeps: int


def sample(pid: int, calls: int) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    children = 0
    leaked = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children += 1
        if cmdline == f"sleep\0{SLEEP}\0".encode():
            leaked += 1
    return Sample(calls, int(fields["VmRSS"].split()[0]), len(os.listdir(f"/proc/{pid}/fd")),
                  int(fields["Threads"]), children, leaked)


def struct(**params: object) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(params)
    return s


class Tally:
    def __init__(self) -> None:
        self.kinds: dict[str, int] = {}
        self.failures: list[str] = []

    def add(self, kind: str, ok: bool, why: str = "") -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if not ok and len(self.failures) < 20:
            self.failures.append(f"{kind}: {why}")


async def one(stub: pb_grpc.ToolAgentStub, i: int, rng: random.Random, tally: Tally) -> None:
    roll = rng.random()
    if roll < 0.35:
        r = await stub.Call(pb.CallRequest(tool="shell-exec", params=struct(cmd=f"echo {i}")), timeout=30)
        tally.add("call", r.ok and r.output == f"{i}\n".encode(), r.error)
    elif roll < 0.65:
        r = await stub.Match(pb.MatchRequest(intent=rng.choice(INTENTS)), timeout=30)
        tally.add("match", bool(r.found or r.suggestion))
    elif roll < 0.80:
        cmd = f"echo out{i}; echo err{i} >&2; echo more"
        events = [e async for e in stub.StreamCall(pb.CallRequest(tool="shell-exec", params=struct(cmd=cmd)),
                                                   timeout=30)]
        last = events[-1]
        tally.add("stream", last.WhichOneof("event") == "result" and last.result.ok, str(last)[:80])
    elif roll < 0.90:
        try:
            r = await stub.Call(pb.CallRequest(tool="shell-exec", params=struct(cmd=f"exec sleep {SLEEP}")),
                                timeout=0.3)
            tally.add("deadline", r.timed_out and not r.ok, r.error)
        except grpc.aio.AioRpcError as exc:   # on a loaded machine the answer may miss the 30 ms margin
            tally.add("deadline-status", exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED, str(exc.code()))
    else:
        which = rng.randrange(3)
        try:
            if which == 0:
                r = await stub.Call(pb.CallRequest(tool=f"no-such-{i}"), timeout=30)
                tally.add("refused", not r.found)
            elif which == 1:
                r = await stub.Call(pb.CallRequest(tool="git-ops", params=struct(action="rebase", n="x")), timeout=30)
                tally.add("refused", bool(r.param_errors))
            else:
                await stub.Match(pb.MatchRequest(intent="x" * 5000), timeout=30)
                tally.add("refused", False, "a 5,000-byte intent was matched")
        except grpc.aio.AioRpcError as exc:
            tally.add("refused", exc.code() == grpc.StatusCode.INVALID_ARGUMENT, str(exc.code()))


async def drive(address: str, pid: int, calls: int, concurrency: int, every: int) -> tuple[list[Sample], Tally]:
    samples = [sample(pid, 0)]
    tally = Tally()
    done = 0
    next_sample = every
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)

        async def worker(seed: int) -> None:
            nonlocal done, next_sample
            rng = random.Random(seed)
            while done < calls:
                i = done
                done += 1
                try:
                    await one(stub, i, rng, tally)
                except grpc.aio.AioRpcError as exc:
                    tally.add("rpc-error", False, f"{exc.code()}: {exc.details()}")
                if done >= next_sample:
                    next_sample += every
                    samples.append(sample(pid, done))
                    s = samples[-1]
                    print(f"{s.calls:>8} calls  rss {s.rss_kb / 1024:7.1f} MB  fds {s.fds:4}  threads {s.threads:3}  "
                          f"children {s.children:3}  leaked sleeps {s.leaked_sleeps}", flush=True)

        await asyncio.gather(*(worker(seed) for seed in range(concurrency)))
    # Calls are over: children must go (reaping takes a moment), then the last sample.
    end = time.monotonic() + 10
    while time.monotonic() < end and (sample(pid, done).children or sample(pid, done).leaked_sleeps):
        await asyncio.sleep(0.05)
    samples.append(sample(pid, done))
    return samples, tally


def verdict(samples: list[Sample], warmup: int, rss_slack_mb: float) -> list[str]:
    base = next((s for s in samples if s.calls >= warmup), samples[0])
    peak_late = max(samples[-4:-1] or samples[-1:], key=lambda s: s.rss_kb)
    last = samples[-1]
    problems = []
    if (peak_late.rss_kb - base.rss_kb) / 1024 > rss_slack_mb:
        problems.append(f"RSS grew {base.rss_kb / 1024:.1f} -> {peak_late.rss_kb / 1024:.1f} MB after warm-up")
    if last.fds > base.fds + 2:
        problems.append(f"fds grew {base.fds} -> {last.fds}")
    if last.threads > base.threads + 2:
        problems.append(f"threads grew {base.threads} -> {last.threads}")
    if last.children:
        problems.append(f"{last.children} child processes remain after the calls")
    if last.leaked_sleeps:
        problems.append(f"{last.leaked_sleeps} deadline-killed sleeps are still alive")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--samples", type=int, default=20, help="how many samples over the run")
    ap.add_argument("--warmup", type=float, default=0.1, help="share of the calls before the baseline sample")
    ap.add_argument("--rss-slack-mb", type=float, default=8.0)
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bitong-soak-"))
    tools = work / "tools"
    shutil.copytree(REPO / "tools", tools, ignore=shutil.ignore_patterns("runtime", "__pycache__"))
    sock = work / "soak.sock"
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools),
                               "--listen", f"unix:{sock}", "--log-level", "WARNING"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("bitong: serving on"):
            raise SystemExit(f"soak: the server did not start: {line!r}")
        t0 = time.monotonic()
        every = max(1, args.calls // args.samples)
        samples, tally = asyncio.run(drive(f"unix:{sock}", server.pid, args.calls, args.concurrency, every))
        elapsed = time.monotonic() - t0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)

    first, last = samples[0], samples[-1]
    print(f"\n{args.calls} calls in {elapsed:.0f} s ({args.calls / elapsed:.0f}/s), concurrency {args.concurrency}; "
          f"mix: {', '.join(f'{k} {v}' for k, v in sorted(tally.kinds.items()))}")
    print(f"start: rss {first.rss_kb / 1024:.1f} MB, fds {first.fds}, threads {first.threads}, children "
          f"{first.children}; end: rss {last.rss_kb / 1024:.1f} MB, fds {last.fds}, threads {last.threads}, "
          f"children {last.children}, leaked sleeps {last.leaked_sleeps}")
    for failure in tally.failures:
        print(f"unexpected answer: {failure}")
    problems = verdict(samples, int(args.calls * args.warmup), args.rss_slack_mb)
    for problem in problems:
        print(f"GROWTH: {problem}")
    print("soak: no growth" if not problems and not tally.failures else "soak: FAILED")
    return 1 if problems or tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
