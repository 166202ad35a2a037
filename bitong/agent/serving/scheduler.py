"""Scheduled methods: the sidecar calls a tool on its `schedule:` and pushes what it reports to subscribers.

Seed 002 §3.3: a reminder's ``check_due`` is called every 30 s by a
scheduler and what is due is pushed back to the conversation. Each
scheduled tool gets one loop here: it waits for the next time, makes an
ordinary call (the same validation, admission, sandbox and audit as a
caller's), and waits for it to end before the next one, so two runs of one
schedule never overlap; a run that overruns its period is followed by the
next at once, never by a burst of the missed ones.

A result with something to report goes into the :class:`Outbox` before any
subscriber sees it. The outbox is a file (beside ``--state``) rewritten
atomically at every change: a result not yet delivered survives a restart
and goes to the next subscriber; one delivered (written to a subscriber's
stream) is dropped from it and never sent again. A tool hands a result out
once (``check_due`` marks its reminders done as it returns them), so the
window left is a crash between the tool's answer and the outbox's write.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import json_format

from bitong.v1 import agent_pb2 as pb

from bitong.parser import cron

__all__ = ["Outbox", "Scheduler", "Subscription", "worth_reporting"]

log = logging.getLogger("bitong.schedule")

_OUTBOX_FORMAT = "bitong-outbox-1"
MAX_PENDING = 10_000   # undelivered results kept; past it the oldest go (and the log says so)


def worth_reporting(result: pb.CallResult, report: str) -> bool:
    """False for a run with nothing to say: ``report``'s field empty, else an empty output, [], {} or null.
    A failed run is always worth reporting: errors are never hidden."""
    if not result.ok:
        return True
    text = result.output.strip()
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return bool(text)
    if report:
        value = data.get(report) if isinstance(data, dict) else None
        return value not in (None, "", [], {})
    return data not in (None, "", [], {})


class Subscription:
    """One Subscribe stream: the tools it hears from, and its queue."""

    def __init__(self, wants: Callable[[str], bool]) -> None:
        self.wants = wants
        self.queue: asyncio.Queue[pb.ScheduledResult] = asyncio.Queue()


class Outbox:
    """Scheduled results not yet delivered, persisted; and the live subscriptions."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.next_seq = 1
        self.pending: dict[int, pb.ScheduledResult] = {}
        self.subscriptions: set[Subscription] = set()
        self._claimed: set[int] = set()
        self._load()

    def _load(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("scheduled results %s cannot be read (%s): starting without the undelivered ones", self.path,
                      exc)
            return
        if not isinstance(data, dict) or data.get("format") != _OUTBOX_FORMAT:
            log.error("scheduled results %s: not a file bitong wrote; ignored", self.path)
            return
        self.next_seq = int(data.get("next_seq", 1))
        for item in data.get("pending", []):
            entry = pb.ScheduledResult.FromString(base64.b64decode(item))
            self.pending[entry.seq] = entry

    def _save(self) -> None:
        if not self.path:
            return
        data = {"format": _OUTBOX_FORMAT, "next_seq": self.next_seq,
                "pending": [base64.b64encode(e.SerializeToString()).decode() for e in self.pending.values()]}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def add(self, tool: str, result: pb.CallResult) -> pb.ScheduledResult:
        """Keep (on disk first) and hand to every subscription that wants it."""
        entry = pb.ScheduledResult(tool=tool, seq=self.next_seq, ran_unix_ms=time.time_ns() // 1_000_000,
                                   result=result)
        self.next_seq += 1
        self.pending[entry.seq] = entry
        while len(self.pending) > MAX_PENDING:
            dropped = self.pending.pop(min(self.pending))
            log.warning("scheduled result %d of %s dropped undelivered: more than %d wait for a subscriber",
                        dropped.seq, dropped.tool, MAX_PENDING)
        self._save()
        for sub in self.subscriptions:
            if sub.wants(tool):
                sub.queue.put_nowait(entry)
        return entry

    def subscribe(self, wants: Callable[[str], bool]) -> Subscription:
        """A new subscription, given first every undelivered result it wants (oldest first)."""
        sub = Subscription(wants)
        for seq in sorted(self.pending):
            if wants(self.pending[seq].tool):
                sub.queue.put_nowait(self.pending[seq])
        self.subscriptions.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscriptions.discard(sub)

    def claim(self, seq: int) -> bool:
        """A subscriber is about to write ``seq``: no other may (False: one already has it)."""
        if seq not in self.pending or seq in self._claimed:
            return False
        self._claimed.add(seq)
        return True

    def delivered(self, seq: int) -> None:
        """The claimed ``seq`` was written to its subscriber: never again to anyone, also after a restart."""
        self._claimed.discard(seq)
        if self.pending.pop(seq, None) is not None:
            self._save()

    def release(self, seq: int) -> None:
        """The claimed ``seq`` could not be written (the subscriber went): offer it to the others."""
        self._claimed.discard(seq)
        entry = self.pending.get(seq)
        if entry is None:
            return
        for sub in self.subscriptions:
            if sub.wants(entry.tool):
                sub.queue.put_nowait(entry)


def _key(tool: pb.ToolDef) -> bytes:
    return tool.schedule.SerializeToString(deterministic=True)


class Scheduler:
    """One loop per scheduled tool of the serving snapshot; :meth:`reconcile` after every swap."""

    def __init__(self, call: Callable[[str, dict[str, Any]], Any], outbox: Outbox) -> None:
        """``call(name, params)``: an awaitable CallResult (the ToolAgent's ordinary call)."""
        self._call = call
        self.outbox = outbox
        self._loops: dict[str, tuple[bytes, asyncio.Task[None]]] = {}
        self.runs: dict[str, int] = {}        # runs done per tool (tests await them)
        self._ran = asyncio.Condition()

    def reconcile(self, tools: Iterable[pb.ToolDef]) -> None:
        """Start a loop for each newly scheduled tool, restart a changed schedule, stop removed ones."""
        wanted = {t.name: t for t in tools if t.HasField("schedule")}
        for name in list(self._loops):
            key, task = self._loops[name]
            if name not in wanted or _key(wanted[name]) != key:
                task.cancel()
                del self._loops[name]
        for name, tool in wanted.items():
            if name not in self._loops:
                task = asyncio.create_task(self._loop(name, tool.schedule), name=f"bitong-schedule-{name}")
                self._loops[name] = (_key(tool), task)
                log.info("schedule %s: %s", name, f"every {tool.schedule.every_s}s" if tool.schedule.every_s
                         else f"cron {tool.schedule.cron!r}")

    async def stop(self) -> None:
        tasks = [task for _, task in self._loops.values()]
        self._loops.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_runs(self, tool: str, count: int) -> None:
        async with self._ran:
            await self._ran.wait_for(lambda: self.runs.get(tool, 0) >= count)

    @staticmethod
    def _delay(schedule: pb.Schedule) -> float:
        if schedule.every_s:
            return float(schedule.every_s)
        now = datetime.datetime.now().astimezone()
        return (cron.parse(schedule.cron).next_after(now) - now).total_seconds()

    async def _loop(self, name: str, schedule: pb.Schedule) -> None:
        params = json_format.MessageToDict(schedule.params)
        while True:
            await asyncio.sleep(self._delay(schedule))
            try:
                result = await self._call(name, params)
            except asyncio.CancelledError:
                raise
            except Exception as exc:   # refused (limits): a result of its own, so the subscriber hears of it
                result = pb.CallResult(tool=name, found=True, ok=False, error=f"the scheduled call was refused: {exc}")
            if worth_reporting(result, schedule.report):
                entry = self.outbox.add(name, result)
                log.info("schedule %s: result %d (ok=%s) for subscribers", name, entry.seq, result.ok)
            async with self._ran:
                self.runs[name] = self.runs.get(name, 0) + 1
                self._ran.notify_all()
