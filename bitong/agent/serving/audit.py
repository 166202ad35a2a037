"""The audit trail (seed 002 §4.2): one JSON line per Call, answering who ran what, how, and what came of it.

``bitong serve --audit FILE`` appends one line per Call and StreamCall,
refusals included (unauthenticated, permission denied, unknown tool, bad
parameters, limits), with: the time, the caller's identity and how it was
established, the tool with its version and content hash, the parameters
(configured secrets redacted wherever they appear, as are the values of
parameters whose name says they hold one: ``token``, ``password``, ...),
the confirmation decision, whether it ran sandboxed, the exact argv or HTTP
request line that ran, exit code / HTTP status / signal, duration, bytes
out, timed_out / truncated / cancelled, and the error in words.

Durability: the line is written to the file (``write(2)`` on an
``O_APPEND`` descriptor) before the reply goes out, so a crash of the
server cannot lose it once the caller has its answer; ``fsync`` runs in
batches on a background thread (every ``sync_interval_s`` or
``sync_lines`` lines, whichever comes first), and :meth:`AuditLog.close`,
which the server calls after draining on SIGTERM, syncs the rest. The file
is created 0600 (parameters are sensitive) and rotated by size:
``FILE`` becomes ``FILE.1``, ``FILE.1`` becomes ``FILE.2``, ... up to
``keep`` old files.

:func:`read` walks a trail (the rotated files first, oldest first) for
``bitong audit-log``.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bitong.v1 import agent_pb2 as pb

from ..config import Secret, SecretUnavailable
from .identity import Caller

__all__ = ["AuditLog", "Redactor", "Trail", "record", "read", "parse_since", "format_line",
           "DEFAULT_MAX_BYTES", "DEFAULT_KEEP"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5
MAX_VALUE_CHARS = 1024        # a longer parameter value is cut in the trail (and says how long it was)
MAX_ITEMS = 64                # entries of one object or list kept in the trail
MAX_DEPTH = 8                 # nesting kept in the trail
MIN_SECRET_CHARS = 4          # shorter "secrets" would redact ordinary text
_SECRET_PARAM = re.compile(r"(?:^|[_-])(?:token|password|passwd|secret|api[_-]?key|apikey|credentials?|auth)$",
                           re.IGNORECASE)


# ---------------------------------------------------------------- redaction

class Redactor:
    """Replaces the value of every configured secret, wherever it appears, by its source's name.

    Values are read from their sources at most once a second (a rotated
    token file is picked up, and a file is not read for every line).
    """

    def __init__(self, secrets: Sequence[Secret] = (), refresh_s: float = 1.0) -> None:
        self.secrets = list(secrets)
        self.refresh_s = refresh_s
        self._values: list[tuple[str, str]] = []
        self._read_at = -math.inf

    def _current(self) -> list[tuple[str, str]]:
        now = time.monotonic()
        if now - self._read_at >= self.refresh_s:
            values = []
            for secret in self.secrets:
                try:
                    value = secret.reveal()
                except SecretUnavailable:
                    continue
                if len(value) >= MIN_SECRET_CHARS:
                    values.append((value, f"[redacted: {secret.describe()}]"))
            values.sort(key=lambda pair: -len(pair[0]))   # a secret holding another is replaced whole
            self._values = values
            self._read_at = now
        return self._values

    def text(self, text: str) -> str:
        for value, mark in self._current():
            if value in text:
                text = text.replace(value, mark)
        return text

    def value(self, value: Any, name: str = "", depth: int = 0) -> Any:
        """A parameter value as JSON for the trail: secrets redacted, long text cut, non-finite numbers named.

        At most :data:`MAX_ITEMS` entries of a list or object and :data:`MAX_DEPTH`
        levels are kept: a refused oversized call must not make an oversized line.
        """
        if depth > MAX_DEPTH:
            return "…(nested deeper)"
        if name and _SECRET_PARAM.search(name) and value not in (None, ""):
            return "[redacted: parameter name]"
        if isinstance(value, str):
            shown = self.text(value)   # whole, then cut: a cut through a secret would show its start
            return shown if len(shown) <= MAX_VALUE_CHARS else f"{shown[:MAX_VALUE_CHARS]}…({len(value)} chars)"
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, Mapping):
            items = list(value.items())
            kept = {str(k): self.value(v, str(k), depth + 1) for k, v in items[:MAX_ITEMS]}
            if len(items) > MAX_ITEMS:
                kept["…"] = f"{len(items) - MAX_ITEMS} more"
            return kept
        if isinstance(value, (list, tuple)):
            listed = [self.value(v, "", depth + 1) for v in value[:MAX_ITEMS]]
            if len(value) > MAX_ITEMS:
                listed.append(f"…{len(value) - MAX_ITEMS} more")
            return listed
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self.text(str(value))


# ---------------------------------------------------------------- one line

@dataclasses.dataclass
class Trail:
    """What the service learns while handling one Call, beyond its result (filled as it goes)."""

    rpc: str = "Call"
    caller: Caller | None = None
    started: float = dataclasses.field(default_factory=time.time)
    tool: pb.ToolDef | None = None
    confirmation: str = "not_required"   # not_required | requested | confirmed | refused | human-requested | human-approved | human-refused
    refused: tuple[str, str] | None = None   # (gRPC status name, message) when the RPC itself was refused


def _iso(unix_s: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_s, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record(trail: Trail, name: str, params: Mapping[str, Any], result: pb.CallResult | None,
           redactor: Redactor) -> dict[str, Any]:
    """The audit line of one Call as a dict (see the module docstring for the fields)."""
    caller = trail.caller
    tool = trail.tool
    line: dict[str, Any] = {
        "time": _iso(trail.started),
        "rpc": trail.rpc,
        "caller": caller.id if caller else "local",
        "caller_via": caller.via if caller else "in-process",
        "tool": name,
    }
    if caller is not None and caller.uid is not None:
        line["caller_uid"] = caller.uid
    if tool is not None:
        line["tool"] = tool.name
        line["version"] = tool.version
        line["sha256"] = tool.content_sha256
        line["executor"] = tool.executor
        line["method"] = tool.method   # with a python handler's generic worker argv, the function that ran
    line["params"] = redactor.value(dict(params))
    line["confirmation"] = trail.confirmation
    if trail.refused is not None:
        code, message = trail.refused
        line.update(outcome="refused", status=code, error=redactor.text(message))
        line["duration_ms"] = int((time.time() - trail.started) * 1000)
        return line
    assert result is not None
    ran = bool(result.argv) or bool(result.http_request)
    if not result.found:
        outcome = "not_found"
    elif result.param_errors and not ran:
        outcome = "bad_params"
    elif result.needs_confirmation:
        outcome = "needs_confirmation"
    elif result.ok:
        outcome = "ok"
    elif result.cancelled:
        outcome = "cancelled"
    elif result.timed_out:
        outcome = "timed_out"
    else:
        outcome = "failed"
    line.update(
        outcome=outcome,
        sandboxed=result.sandboxed,
        argv=[redactor.text(a) for a in result.argv],
        http_request=redactor.text(result.http_request),
        exit_code=result.exit_code,
        http_status=result.http_status,
        signal=result.signal,
        duration_ms=result.duration_ms,
        stdout_bytes=len(result.output) + result.streamed_stdout_bytes,
        stderr_bytes=len(result.stderr) + result.streamed_stderr_bytes,
        timed_out=result.timed_out,
        truncated=result.truncated,
        cancelled=result.cancelled,
        attempts=result.attempts,
        error=redactor.text(result.error),
    )
    line["bytes_out"] = line["stdout_bytes"] + line["stderr_bytes"]
    if result.param_errors:
        line["param_errors"] = [{"param": p.param, "message": redactor.text(p.message)}
                                for p in result.param_errors]
    return line


# ---------------------------------------------------------------- the file

class AuditLog:
    """An append-only JSON-lines file, synced in batches and rotated by size; safe to use from any thread."""

    def __init__(self, path: str, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP,
                 redactor: Redactor | None = None, sync_interval_s: float = 0.2, sync_lines: int = 64) -> None:
        if max_bytes < 1024:
            raise ValueError(f"the audit file's max_bytes must be at least 1024, not {max_bytes}")
        if keep < 0:
            raise ValueError(f"the number of rotated audit files to keep must be 0 or more, not {keep}")
        self.path = os.path.abspath(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.redactor = redactor or Redactor()
        self.sync_interval_s = sync_interval_s
        self.sync_lines = sync_lines
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size
        self._unsynced = 0
        self._closed = False
        self.lines = 0
        self._syncer = threading.Thread(target=self._sync_loop, name="bitong-audit-sync", daemon=True)
        self._syncer.start()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, line: Mapping[str, Any]) -> None:
        """Append one line now (to the kernel: it survives a crash of this process); fsync follows in a batch."""
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()
        with self._lock:
            if self._closed:
                raise ValueError("the audit log is closed")
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            self._size += len(data)
            self._unsynced += 1
            self.lines += 1
            if self._unsynced >= self.sync_lines:
                self._wake.notify()

    def _rotate(self) -> None:
        """FILE -> FILE.1 -> ... -> FILE.<keep> (the oldest is dropped); called with the lock held."""
        os.fsync(self._fd)
        os.close(self._fd)
        self._unsynced = 0
        if self.keep == 0:
            os.unlink(self.path)
        else:
            for n in range(self.keep - 1, 0, -1):
                older = f"{self.path}.{n}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{n + 1}")
            os.replace(self.path, f"{self.path}.1")
        self._fd = self._open()
        self._size = 0
        _sync_dir(self.path)

    def sync(self) -> None:
        """fsync what was written so far (the batch's work, done now)."""
        with self._lock:
            if self._closed or not self._unsynced:
                return
            fd = os.dup(self._fd)   # fsync outside the lock: a write need not wait for the disk
            self._unsynced = 0
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_loop(self) -> None:
        while True:
            with self._lock:
                if not self._closed and self._unsynced < self.sync_lines:
                    self._wake.wait(self.sync_interval_s)
                closed = self._closed
            if closed:
                return
            self.sync()

    def close(self) -> None:
        """Sync everything and close; the server calls this after the calls in flight drained."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify()
            os.fsync(self._fd)
            os.close(self._fd)
        self._syncer.join()


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- reading

_RELATIVE = re.compile(r"(\d+)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``30m``, ``2h``, ``1d`` (ago), or an ISO 8601 time (UTC unless it says otherwise), as unix seconds."""
    now = time.time() if now is None else now
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        return now - int(relative.group(1)) * _UNITS[relative.group(2)]
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {text!r}: expected a time such as 2026-12-02T16:00:00Z, or 30m, 2h, 1d "
                         "(that long ago)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _generations(path: str) -> list[str]:
    """The trail's files, oldest first: FILE.N ... FILE.1, FILE."""
    rotated = []
    n = 1
    while os.path.exists(f"{path}.{n}"):
        rotated.append(f"{path}.{n}")
        n += 1
    return [*reversed(rotated), path]


def read(path: str, *, tool: str | None = None, caller: str | None = None, since: float | None = None,
         rotated: bool = True) -> Iterator[tuple[str, int, dict[str, Any] | str]]:
    """``(file, line number, entry)`` for each line that passes the filters; a line that is not JSON
    comes back as its text (reported, never skipped in silence)."""
    files = _generations(path) if rotated else [path]
    for file in files:
        with open(file, encoding="utf-8", errors="replace") as fh:
            for number, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    entry = json.loads(raw)
                except json.JSONDecodeError:
                    yield file, number, raw.rstrip("\n")
                    continue
                if not isinstance(entry, dict):
                    yield file, number, raw.rstrip("\n")
                    continue
                if tool is not None and not fnmatch.fnmatchcase(str(entry.get("tool", "")), tool):
                    continue
                if caller is not None and not fnmatch.fnmatchcase(str(entry.get("caller", "")), caller):
                    continue
                if since is not None:
                    try:
                        when = parse_since(str(entry.get("time", "")))
                    except ValueError:
                        when = -math.inf
                    if when < since:
                        continue
                yield file, number, entry


def format_line(entry: Mapping[str, Any]) -> str:
    """One entry for a person: time, caller, tool, outcome, what ran, and the error if any."""
    ran = " ".join(entry.get("argv") or []) or entry.get("http_request") or ""
    status = entry.get("status") or (f"exit={entry.get('exit_code')}" if entry.get("argv") else
                                     f"http={entry.get('http_status')}" if entry.get("http_request") else "")
    parts = [str(entry.get("time", "?")), str(entry.get("caller", "?")), str(entry.get("tool", "?")),
             str(entry.get("outcome", "?"))]
    if status:
        parts.append(str(status))
    if "duration_ms" in entry:
        parts.append(f"{entry['duration_ms']}ms")
    if entry.get("sandboxed"):
        parts.append("sandboxed")
    if ran:
        parts.append(f"ran: {ran}")
    if entry.get("error"):
        parts.append(f"error: {entry['error']}")
    return "  ".join(parts).replace("\n", "\\n")
