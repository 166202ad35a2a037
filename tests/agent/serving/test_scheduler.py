"""Scheduled methods: cron, what is worth pushing, the outbox, and the bundled reminder across restarts."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from bitong.agent.serving.scheduler import Outbox, worth_reporting
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from bitong.parser import cron

REMINDER = "scheduled-reminder"


def test_cron_finds_the_next_matching_minute() -> None:
    at = datetime.datetime(2026, 12, 3, 9, 58, 30)
    assert cron.parse("*/5 * * * *").next_after(at) == datetime.datetime(2026, 12, 3, 10, 0)
    assert cron.parse("0 9 * * 1-5").next_after(at) == datetime.datetime(2026, 12, 4, 9, 0)   # Thu 3rd -> Fri 4th
    assert cron.parse("30 8 1 1 *").next_after(at) == datetime.datetime(2027, 1, 1, 8, 30)
    assert cron.parse("0 0 * * 0").next_after(at) == datetime.datetime(2026, 12, 6, 0, 0)     # Sunday
    assert cron.parse("0 0 * * 7").next_after(at) == datetime.datetime(2026, 12, 6, 0, 0)
    # both day fields restricted: either one matches (crontab(5))
    assert cron.parse("0 0 25 * 1").next_after(at) == datetime.datetime(2026, 12, 7, 0, 0)
    with pytest.raises(ValueError, match="matches no time"):
        cron.parse("0 0 31 2 *").next_after(at)


def test_a_run_with_nothing_to_report_is_not_pushed() -> None:
    def result(output: str, ok: bool = True) -> pb.CallResult:
        return pb.CallResult(ok=ok, output=output.encode())

    assert not worth_reporting(result('{"due": [], "pending": 2}'), "due")
    assert worth_reporting(result('{"due": [{"content": "x"}], "pending": 1}'), "due")
    assert not worth_reporting(result("[]"), "") and not worth_reporting(result("  "), "")
    assert not worth_reporting(result("null"), "") and not worth_reporting(result("{}"), "")
    assert worth_reporting(result("plain text"), "") and worth_reporting(result('{"a": 1}'), "")
    assert worth_reporting(result("", ok=False), "due")   # a failure is always told


def test_the_outbox_keeps_what_is_undelivered_across_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "state.pb.outbox")
    box = Outbox(path)
    first = box.add("t", pb.CallResult(ok=True, output=b"1"))
    second = box.add("t", pb.CallResult(ok=True, output=b"2"))
    assert box.claim(first.seq) and not box.claim(first.seq)   # one subscriber writes it, not two
    box.delivered(first.seq)
    again = Outbox(path)
    assert list(again.pending) == [second.seq] and again.pending[second.seq].result.output == b"2"
    assert again.add("t", pb.CallResult()).seq == second.seq + 1   # never reused
    sub = again.subscribe(lambda tool: tool == "t")
    assert [sub.queue.get_nowait().seq for _ in range(2)] == [second.seq, second.seq + 1]


# ---------------------------------------------------------------- the bundled reminder, served

async def start(tools_root: Path, tmp_path: Path) -> object:
    from bitong.agent.serving.server import Sidecar

    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5,
                  state_path=str(tmp_path / "state" / "registry.pb"))
    await car.start()
    return car


class Reader:
    """A Subscribe stream read in the background into a list."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.got: list[pb.ScheduledResult] = []
        self.arrived = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        stream = pb_grpc.ToolAgentStub(self.channel).Subscribe(pb.SubscribeRequest(tools=[REMINDER]))
        async for entry in stream:
            self.got.append(entry)
            self.arrived.set()

    async def close(self) -> None:
        self.task.cancel()
        await self.channel.close()


@pytest.fixture
def reminder_root(tools_root: Path) -> Path:
    """The bundled reminder with its schedule at 1 s (30 s in the package) so the test takes seconds."""
    path = tools_root / REMINDER / "TOOL.hdlp"
    text = path.read_text(encoding="utf-8")
    assert "schedule: { every_s: 30," in text
    path.write_text(text.replace("schedule: { every_s: 30,", "schedule: { every_s: 1,"), encoding="utf-8")
    return tools_root


async def test_a_reminder_is_delivered_once_when_due_across_restarts(reminder_root: Path, tmp_path: Path) -> None:
    car = await start(reminder_root, tmp_path)
    try:
        due = (datetime.datetime.now() + datetime.timedelta(seconds=2)).isoformat(timespec="seconds")
        params = {"action": "schedule", "content": "drink water", "trigger_time": due}
        result = await car.agent.call(REMINDER, params)  # type: ignore[attr-defined]
        assert result.ok, result.error
        await car.scheduler.wait_runs(REMINDER, 1)  # type: ignore[attr-defined]
    finally:
        await car.stop(0)  # type: ignore[attr-defined]

    # a restart before it is due; nobody subscribes: the due reminder waits in the outbox
    car = await start(reminder_root, tmp_path)
    try:
        runs = 0
        while not car.outbox.pending:  # type: ignore[attr-defined]
            runs += 1
            await car.scheduler.wait_runs(REMINDER, runs)  # type: ignore[attr-defined]
            assert runs < 60, "the reminder never came due"
        (waiting,) = car.outbox.pending.values()  # type: ignore[attr-defined]
        assert json.loads(waiting.result.output)["due"][0]["content"] == "drink water"
    finally:
        await car.stop(0)  # type: ignore[attr-defined]

    # another restart: the first subscriber gets it, once
    car = await start(reminder_root, tmp_path)
    reader = Reader(car.address)  # type: ignore[attr-defined]
    try:
        await reader.arrived.wait()
        await car.scheduler.wait_runs(REMINDER, 3)  # type: ignore[attr-defined]   # check_due keeps running
        assert [e.seq for e in reader.got] == [waiting.seq]
        assert json.loads(reader.got[0].result.output)["due"][0]["content"] == "drink water"
        assert not car.outbox.pending  # type: ignore[attr-defined]
    finally:
        await reader.close()
        await car.stop(0)  # type: ignore[attr-defined]

    # and never again, after a restart, to a new subscriber
    car = await start(reminder_root, tmp_path)
    reader = Reader(car.address)  # type: ignore[attr-defined]
    try:
        await car.scheduler.wait_runs(REMINDER, 2)  # type: ignore[attr-defined]
        assert reader.got == [] and not car.outbox.pending  # type: ignore[attr-defined]
    finally:
        await reader.close()
        await car.stop(0)  # type: ignore[attr-defined]


async def test_bitong_subscribe_prints_a_pushed_result(reminder_root: Path, tmp_path: Path) -> None:
    car = await start(reminder_root, tmp_path)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bitong", "subscribe", REMINDER, "--count", "1", "--server",
            car.address, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # type: ignore[attr-defined]
        try:
            await car.agent.call(REMINDER, {"action": "schedule", "content": "stand up",  # type: ignore[attr-defined]
                                            "delay_minutes": 0})
            out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode()
        line = json.loads(out.decode().splitlines()[0])
        assert line["tool"] == REMINDER and json.loads(line["result"]["output"])["due"][0]["content"] == "stand up"
    finally:
        await car.stop(0)  # type: ignore[attr-defined]


async def test_a_caller_cannot_subscribe_to_a_tool_its_policy_does_not_allow(
        start_sidecar: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from bitong.agent.config import from_dict

    monkeypatch.setenv("T_A", "token-a-0123456789")
    config = from_dict({"auth": {"tokens": {"agent-a": {"token_env": "T_A"}}},
                        "callers": {"agent-a": {"tools": ["file-*"]}}})
    car = await start_sidecar("127.0.0.1:0", config=config)  # type: ignore[operator]
    async with grpc.aio.insecure_channel(car.address) as channel:
        stream = pb_grpc.ToolAgentStub(channel).Subscribe(
            pb.SubscribeRequest(tools=[REMINDER]), metadata=(("authorization", "Bearer token-a-0123456789"),))
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            async for _ in stream:
                pass
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert f"may not use tool '{REMINDER}'" in (denied.value.details() or "")
