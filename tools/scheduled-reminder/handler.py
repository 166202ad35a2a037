"""scheduled-reminder: reminders kept in runtime/reminder_store.json (seed 002 §3.3).

The working directory is this tool's own ``runtime/`` folder, so the store
lives there and no other tool shares it (seed 002 §4.3). Every change is a
read-modify-write under an exclusive lock (two calls at once never lose a
reminder), and the new store is written to a temporary file, fsynced and
renamed over the old one, so a crash at any point leaves the old store or
the new one, never half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import uuid
from datetime import datetime, timedelta
from collections.abc import Iterator

STORE = "reminder_store.json"
LOCK = ".reminder_store.lock"


def run(action: str = "schedule", content: str | None = None, delay_minutes: int | None = None,
        trigger_time: str | None = None) -> dict:
    """``action=schedule`` registers a reminder; ``action=check_due`` hands out the due ones."""
    if action == "check_due":
        if content is not None or delay_minutes is not None or trigger_time is not None:
            raise ValueError("check_due takes no content, delay_minutes or trigger_time")
        return check_due()
    if action != "schedule":
        raise ValueError(f"action must be schedule or check_due, not {action!r}")
    return schedule(content, delay_minutes, trigger_time)


def schedule(content: str | None, delay_minutes: int | None = None, trigger_time: str | None = None) -> dict:
    """Register ``content`` to be due after ``delay_minutes`` or at ``trigger_time`` (local time if no offset)."""
    if not content:
        raise ValueError("content is required to schedule a reminder (what should it say?)")
    now = datetime.now().astimezone()
    if (delay_minutes is None) == (trigger_time is None):
        raise ValueError("give exactly one of delay_minutes (e.g. 20) or trigger_time (e.g. 2026-06-01T09:30:00)")
    if trigger_time is not None:
        try:
            due = datetime.fromisoformat(trigger_time)
        except ValueError:
            raise ValueError(f"trigger_time must be ISO 8601 like 2026-06-01T09:30:00, not {trigger_time!r}") from None
        due = due.astimezone() if due.tzinfo is None else due
        if due < now - timedelta(minutes=1):
            raise ValueError(f"trigger_time {trigger_time} is in the past (now is {now.isoformat(timespec='seconds')})")
    else:
        due = now + timedelta(minutes=max(0, int(delay_minutes or 0)))
    task = {"id": uuid.uuid4().hex[:12], "content": content, "due_at": due.isoformat(timespec="seconds"),
            "created_at": now.isoformat(timespec="seconds"), "done": False}
    with _locked():
        tasks = _load()
        tasks.append(task)
        _save(tasks)
    return {"status": "scheduled", "task_id": task["id"], "due_at": task["due_at"], "content": content}


def check_due() -> dict:
    """The reminders whose time has come, marked done so the next check does not repeat them."""
    now = datetime.now().astimezone()
    with _locked():
        tasks = _load()
        due = [t for t in tasks if not t["done"] and datetime.fromisoformat(t["due_at"]) <= now]
        for task in due:
            task["done"] = True
        if due:
            _save(tasks)
    pending = sum(1 for t in tasks if not t["done"])
    return {"checked_at": now.isoformat(timespec="seconds"), "due": due, "pending": pending}


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load() -> list[dict]:
    try:
        with open(STORE, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return []


def _save(tasks: list[dict]) -> None:
    """Temp file in the same folder, fsync, rename over the store, fsync the folder."""
    data = json.dumps(tasks, ensure_ascii=False, indent=2).encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=".", prefix=".reminder_store.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, STORE)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    folder = os.open(".", os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
