"""What an operator sees: a real Prometheus scrape over HTTP, spans in the OpenTelemetry SDK's
in-memory exporter, JSON log lines with request ids from a real `bitong serve`."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from prometheus_client.parser import text_string_to_metric_families

from bitong.agent.serving.metrics import outcome, parse_address
from bitong import AsyncClient
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import WriteTool

WAIT_S = 30


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a real scrape, parsed by prometheus_client's own parser: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=WAIT_S) as reply:
        assert reply.status == 200
        text = reply.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def test_a_real_scrape_counts_calls_by_outcome_matches_bytes_and_the_registry(
        start_sidecar: Any, write_tool: WriteTool, tmp_path: Path) -> None:
    write_tool("careful", command="echo sure", confirm=True)
    car = await start_sidecar(f"unix:{tmp_path}/m.sock", metrics="127.0.0.1:0")
    assert car.metrics_url.startswith("http://127.0.0.1:") and car.metrics_url.endswith("/metrics")
    async with AsyncClient(car.address) as bt:
        assert (await bt.call("shell-exec", {"cmd": "printf 12345"})).ok
        assert (await bt.call("shell-exec", {"cmd": "echo err >&2; exit 3"})).exit_code == 3
        assert (await bt.call("shell-exec", {"cmd": "sleep 20"}, timeout=0.5)).timed_out
        assert not (await bt.call("no-such-tool")).found
        assert (await bt.call("shell-exec", {})).param_errors
        assert (await bt.call("careful")).needs_confirmation
        assert (await bt.match("执行一条shell命令 uname -a")).found
        assert not (await bt.match("给我讲个关于程序员的笑话")).found
        events = [e async for e in bt.stream("shell-exec", {"cmd": "printf abc"})]
        assert events[-1].result.ok
        write_tool("late")   # a reload the registry gauges and the reload counter follow
        watch = bt.watch()
        while "late" not in (await asyncio.wait_for(anext(watch), WAIT_S)).added:
            pass
        watching = await asyncio.to_thread(_scrape, car.metrics_url)
        await watch.aclose()
    assert watching[("bitong_watchers", ())] == 1

    got = await asyncio.to_thread(_scrape, car.metrics_url)

    def calls(tool: str, result: str) -> float:
        return got.get(("bitong_calls_total", (("outcome", result), ("tool", tool))), 0.0)

    assert calls("shell-exec", "ok") == 2   # Call and StreamCall
    assert calls("shell-exec", "failed") == 1
    assert calls("shell-exec", "timed_out") == 1
    assert calls("shell-exec", "refused") == 1   # bad parameters: nothing ran
    assert calls("(unknown)", "refused") == 1    # a made-up name never becomes a label
    assert calls("careful", "needs_confirmation") == 1
    assert not any(name == "bitong_calls_total" and ("tool", "no-such-tool") in labels for name, labels in got)
    assert got[("bitong_matches_total", (("found", "true"),))] == 1
    assert got[("bitong_matches_total", (("found", "false"),))] == 1
    assert got[("bitong_match_duration_seconds_count", ())] == 2
    assert got[("bitong_call_duration_seconds_count", (("rpc", "Call"),))] == 6
    assert got[("bitong_call_duration_seconds_count", (("rpc", "StreamCall"),))] == 1
    assert got[("bitong_output_bytes_total", (("stream", "stdout"),))] == len("12345") + len("abc")
    assert got[("bitong_output_bytes_total", (("stream", "stderr"),))] == len("err\n")
    assert got[("bitong_calls_in_flight", ())] == 0
    assert got[("bitong_registry_tools", ())] == len(car.registry.snapshot.tools)
    assert got[("bitong_registry_load_errors", ())] == 0
    assert got[("bitong_registry_reloads_total", ())] >= 1
    assert got[("bitong_registry_generation", ())] == car.registry.snapshot.generation


async def test_in_flight_calls_are_counted_while_they_run(start_sidecar: Any, tmp_path: Path) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/m.sock", metrics="127.0.0.1:0")
    async with AsyncClient(car.address) as bt:
        events = bt.stream("shell-exec", {"cmd": "echo running; sleep 60"})   # runs until cancelled
        first = await asyncio.wait_for(anext(events), WAIT_S)
        assert first.chunk.data == b"running\n"
        during = await asyncio.to_thread(_scrape, car.metrics_url)
        await events.aclose()   # cancels the call: the tool's process group is killed
    assert during[("bitong_calls_in_flight", ())] == 1


def test_outcomes_and_addresses() -> None:
    assert outcome(pb.CallResult(ok=True, attempts=1)) == "ok"
    assert outcome(pb.CallResult(found=True, attempts=1, exit_code=2)) == "failed"
    assert outcome(pb.CallResult(found=True, attempts=0, error="confirm_token was already used")) == "refused"
    assert outcome(pb.CallResult(found=True, timed_out=True)) == "timed_out"
    assert outcome(pb.CallResult(found=True, cancelled=True, attempts=1)) == "cancelled"
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad, why in (("9464", "HOST:PORT"), ("localhost:http", "not a number"), ("127.0.0.1:70000", "out of range")):
        with pytest.raises(ValueError, match=why):
            parse_address(bad)


async def test_a_metrics_port_in_use_stops_the_start_with_the_reason(start_sidecar: Any, tmp_path: Path) -> None:
    first = await start_sidecar(f"unix:{tmp_path}/a.sock", metrics="127.0.0.1:0")
    taken = first.metrics_url.split("//", 1)[1].split("/", 1)[0]
    with pytest.raises(OSError, match=f"--metrics {taken}: cannot listen"):
        await start_sidecar(f"unix:{tmp_path}/b.sock", metrics=taken)


# ---------------------------------------------------------------- OpenTelemetry

@pytest.fixture
def spans() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_span_per_call_and_match_with_the_callers_trace_context(start_sidecar: Any, spans: Any,
                                                                        tmp_path: Path) -> None:
    provider, exporter = spans
    car = await start_sidecar(f"unix:{tmp_path}/t.sock", tracer_provider=provider)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = "00f067aa0ba902b7"
    traceparent = {"traceparent": f"00-{trace_id}-{parent}-01"}
    async with AsyncClient(car.address) as bt:
        assert (await bt.call("shell-exec", {"cmd": "echo traced"}, metadata=traceparent)).ok
        assert (await bt.call("shell-exec", {"cmd": "exit 4"})).exit_code == 4
        assert (await bt.match("执行一条shell命令 uname -a", metadata=traceparent)).found
    finished = {(s.name, s.attributes.get("bitong.outcome")): s for s in exporter.get_finished_spans()}
    ok = finished[("bitong.v1.ToolAgent/Call", "ok")]
    assert ok.attributes["bitong.tool"] == "shell-exec" and ok.attributes["bitong.executor"] == "shell"
    assert ok.attributes["bitong.attempts"] == 1 and ok.attributes["rpc.system"] == "grpc"
    assert f"{ok.context.trace_id:032x}" == trace_id and ok.parent is not None
    assert f"{ok.parent.span_id:016x}" == parent and ok.parent.is_remote
    failed = finished[("bitong.v1.ToolAgent/Call", "failed")]
    assert failed.parent is None and failed.status.status_code.name == "ERROR"   # no traceparent: a new trace
    assert failed.attributes["bitong.exit_code"] == 4
    match = finished[("bitong.v1.ToolAgent/Match", None)]
    assert match.attributes["bitong.found"] is True and match.attributes["bitong.tool"] == "shell-exec"
    assert f"{match.context.trace_id:032x}" == trace_id


async def test_a_refused_call_is_a_span_too(start_sidecar: Any, spans: Any, tmp_path: Path) -> None:
    from bitong.agent.serving.service import Limits

    provider, exporter = spans
    car = await start_sidecar(f"unix:{tmp_path}/t.sock", tracer_provider=provider, limits=Limits(max_params=1))
    async with grpc.aio.insecure_channel(car.address) as channel:
        params = struct_pb2.Struct()
        params.update({"cmd": "true", "cwd": "/tmp"})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.ToolAgentStub(channel).Call(pb.CallRequest(tool="shell-exec", params=params))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    (span,) = exporter.get_finished_spans()
    assert span.attributes["bitong.outcome"] == "refused" and span.status.status_code.name == "ERROR"


def test_without_opentelemetry_installed_serving_and_calling_still_work(tmp_path: Path) -> None:
    """The extra is optional: with its modules unimportable (and OTEL_* asking for traces), a call answers."""
    code = f"""
import asyncio, sys
sys.modules['opentelemetry'] = None   # import opentelemetry... raises ImportError, as when not installed
from bitong.agent.registry.approval import development
from bitong.agent.serving.server import Sidecar
from bitong.agent.serving import tracing
from bitong import AsyncClient
assert not tracing.available()
async def main():
    car = Sidecar([{str(Path(__file__).resolve().parents[3] / 'tools')!r}], 'unix:{tmp_path}/o.sock',
                  approvals=development())
    await car.start()
    try:
        async with AsyncClient(car.address) as bt:
            result = await bt.call('shell-exec', {{'cmd': 'echo fine'}})
            print(result.output.decode(), end='')
    finally:
        await car.stop(0)
asyncio.run(main())
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**_env(), "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert run.returncode == 0 and run.stdout == "fine\n", run.stderr


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


# ---------------------------------------------------------------- JSON logs

def _first_line(proc: subprocess.Popen[str]) -> str:
    return _stdout_lines(proc, 1)[0]


def _stdout_lines(proc: subprocess.Popen[str], count: int) -> list[str]:
    """The server's first ``count`` stdout lines, read from the descriptor itself (a buffered readline may
    swallow the next line, which select() then never reports), without hanging if they never come."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while data.count(b"\n") < count:
            if not sel.select(WAIT_S):
                raise AssertionError(f"bitong serve printed {data!r} and nothing more")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"bitong serve ended after printing {data!r}")
            data += chunk
    return data.decode().splitlines()


def test_json_logs_carry_a_request_id_per_call(tools_root: Path, tmp_path: Path) -> None:
    sock = tmp_path / "j.sock"
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--listen",
                               f"unix:{sock}", "--log-format", "json", "--no-semantic", "--admin-socket", "off",
                               "--metrics", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line, metrics_line = _stdout_lines(server, 2)
        assert line.startswith("bitong: serving on "), (line, server.poll())
        assert metrics_line.startswith("bitong: metrics on http://127.0.0.1:"), metrics_line

        async def calls() -> None:
            async with AsyncClient(f"unix:{sock}") as bt:
                assert (await bt.call("shell-exec", {"cmd": "echo a"}, metadata={"x-request-id": "mine-42"})).ok
                assert (await bt.call("shell-exec", {"cmd": "echo b"})).ok
                assert not (await bt.call("shell-exec", {})).ok

        asyncio.run(calls())
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _out, err = server.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            _out, err = server.communicate()
    assert server.returncode == 0, err
    entries = [json.loads(line) for line in err.splitlines()]   # every line is JSON, start-up ones too
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    calls_logged = [e for e in entries if e["logger"] == "bitong.call"]
    assert len(calls_logged) == 3, calls_logged
    ids = [e.get("request_id") for e in calls_logged]
    assert ids[0] == "mine-42"   # the caller's own id is kept
    assert ids[1] and ids[2] and len({ids[1], ids[2], "mine-42"}) == 3   # the others get one each
    assert "ok=True" in calls_logged[0]["message"] and "invalid parameters" in calls_logged[2]["message"]
    assert not any(e.get("request_id") for e in entries if e["logger"] != "bitong.call")


def test_otel_variables_configure_the_exporter_of_bitong_serve(tools_root: Path, tmp_path: Path) -> None:
    """OTEL_TRACES_EXPORTER=console (the SDK's own exporter, the same path as otlp): the span of a call
    carrying a traceparent is printed, in the caller's trace, under OTEL_SERVICE_NAME."""
    sock = tmp_path / "c.sock"
    env = {**_env(), "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "bitong-under-test"}
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--listen",
                               f"unix:{sock}", "--no-semantic", "--admin-socket", "off"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        assert _first_line(server).startswith("bitong: serving on ")

        async def call() -> None:
            async with AsyncClient(f"unix:{sock}") as bt:
                result = await bt.call("shell-exec", {"cmd": "echo spanned"},
                                       metadata={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"})
                assert result.ok

        asyncio.run(call())
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            out, err = server.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            out, err = server.communicate()
    assert server.returncode == 0, err
    assert '"name": "bitong.v1.ToolAgent/Call"' in out, out[-2000:]
    assert f'"trace_id": "0x{trace_id}"' in out and '"service.name": "bitong-under-test"' in out
    assert '"bitong.outcome": "ok"' in out


@pytest.mark.parametrize(("value", "why"), [("9464", "give HOST:PORT"), ("127.0.0.1:99999", "out of range")])
def test_a_bad_metrics_address_is_one_line_and_exit_2(tools_root: Path, tmp_path: Path, value: str, why: str) -> None:
    run = subprocess.run([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--listen",
                          f"unix:{tmp_path}/x.sock", "--no-semantic", "--admin-socket", "off", "--metrics", value],
                         capture_output=True, text=True, timeout=60, check=False, env=_env())
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"bitong: --metrics {value}: ") and why in last and "Traceback" not in run.stderr
