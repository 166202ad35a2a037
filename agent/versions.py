"""Tool versions: the last definitions served, lint on version moves, rollback pins.

Seed 002 §2.4: a skill system that stays alive in production keeps the last
three versions of each skill for a one-step rollback, and a version says what
kind of change it is (patch for fixes, minor for params, major for rewrites).
The registry hands every set of tools it resolves to :meth:`VersionBook.serve`,
which records each new definition, warns (on the definition, and in the log)
when its version went down or its content changed under the same version,
and puts an operator's rollback pin over the file's definition. Everything
here runs under the registry's scan lock.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Iterable, Mapping

from bitong.v1 import state_pb2
from bitong.v1.agent_pb2 import ToolDef

__all__ = ["KEEP", "Version", "VersionBook", "RollbackError", "semver_key"]

log = logging.getLogger("bitong.versions")

KEEP = 3   # seed 002 §2.4: the last three versions, for a one-step rollback

_SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def semver_key(version: str) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
    """Order semantic versions as semver.org §11 does (a pre-release sorts before its release).

    The parser only lets semantic versions through; anything else sorts first.
    """
    m = _SEMVER.fullmatch(version.strip())
    if m is None:
        return (-1, -1, -1, 0, ())
    pre = m.group(4)
    parts: tuple[tuple[int, int | str], ...] = ()
    if pre:
        parts = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split("."))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, parts)


class RollbackError(ValueError):
    """A rollback or unpin that cannot be done as asked; the message says why and what can be."""


@dataclasses.dataclass(frozen=True)
class Version:
    """One distinct definition a tool was served with."""

    tool: ToolDef
    loaded_unix_ms: int


@dataclasses.dataclass(frozen=True)
class _Pin:
    sha256: str
    ceiling: str          # the file's version when pinned: a file above it ends the pin
    served: ToolDef       # the pinned definition as served (marked pinned), kept so it is one object


def lint(previous: ToolDef, new: ToolDef) -> list[str]:
    """Why a new definition's version does not say what changed (empty when it does)."""
    old_v, new_v = previous.version, new.version
    if semver_key(new_v) < semver_key(old_v):
        return [f"version went down from {old_v} to {new_v}: a new definition needs a higher version "
                "(patch for fixes, minor for params, major for rewrites)"]
    if new_v == old_v:
        return [f"content changed but version stayed {new_v}: bump it (patch for fixes, minor for params, "
                "major for rewrites)"]
    params_moved = (dict(previous.params_schema) != dict(new.params_schema)
                    or list(previous.param_order) != list(new.param_order))
    if params_moved and semver_key(new_v)[:2] == semver_key(old_v)[:2]:
        return [f"parameters changed with a patch bump ({old_v} to {new_v}): parameters are a minor change"]
    return []


class VersionBook:
    """Per tool, the last :data:`KEEP` distinct definitions (newest first) and the rollback in force."""

    def __init__(self) -> None:
        self._history: dict[str, list[Version]] = {}
        self._pins: dict[str, _Pin] = {}
        self._seen: dict[str, ToolDef] = {}   # the file definition last served per name (identity: unchanged)
        self.changed = False                  # something a saved state should hold changed

    # ------------------------------------------------------------ the registry's side

    def serve(self, tools: Mapping[str, ToolDef]) -> dict[str, ToolDef]:
        """Record what the files define; return what serves (a pinned tool's earlier definition in its place)."""
        out = dict(tools)
        for name, tool in tools.items():
            if self._seen.get(name) is not tool:
                self._seen[name] = tool
                self._record(name, tool)
            pin = self._pins.get(name)
            if pin is None:
                continue
            if tool.content_sha256 != pin.sha256 and semver_key(tool.version) > semver_key(pin.ceiling):
                log.info("tool %s: version %s arrived, above %s rolled back from: the rollback ends",
                         name, tool.version, pin.ceiling)
                del self._pins[name]
                self.changed = True
                continue
            out[name] = pin.served
        for name in [n for n in self._seen if n not in tools]:
            del self._seen[name]
        return out

    def _record(self, name: str, tool: ToolDef) -> None:
        history = self._history.setdefault(name, [])
        if history and history[0].tool.content_sha256 == tool.content_sha256:
            return
        for i, known in enumerate(history):
            if known.tool.content_sha256 == tool.content_sha256:   # an earlier definition back (a revert)
                history.insert(0, history.pop(i))
                self.changed = True
                return
        if history:
            warnings = lint(history[0].tool, tool)
            if warnings and not tool.warnings:
                tool.warnings.extend(warnings)   # before any snapshot holds it: served with its warning
            for text in warnings:
                log.warning("%s: %s", tool.source_path or name, text)
        if not tool.loaded_unix_ms:
            tool.loaded_unix_ms = time.time_ns() // 1_000_000
        history.insert(0, Version(tool, tool.loaded_unix_ms))
        del history[KEEP:]
        self.changed = True

    # ------------------------------------------------------------ the operator's side

    def versions(self, name: str) -> list[Version]:
        return list(self._history.get(name, ()))

    def pinned(self, name: str) -> str:
        pin = self._pins.get(name)
        return pin.served.pinned if pin is not None else ""

    def rollback(self, name: str, current: ToolDef | None, version: str = "") -> ToolDef:
        """Pin ``name`` to an earlier definition (``version``, else the one before the serving one);
        returns it. Raises RollbackError saying what can be rolled back to."""
        history = self._history.get(name)
        if current is None or not history:
            raise RollbackError(f"no tool named '{name}' is serving")
        file_tool = self._seen.get(name, current)
        serving_sha = current.content_sha256
        known = ", ".join(f"{v.tool.version} ({v.tool.content_sha256[:12]})" for v in history)
        if version:
            target = next((v for v in history if v.tool.version == version and v.tool.content_sha256 != serving_sha),
                          None)
            if target is None:
                why = "is serving now" if current.version == version else "is not among the kept definitions"
                raise RollbackError(f"tool '{name}' version {version} {why}; kept: {known}")
        else:
            at = next((i for i, v in enumerate(history) if v.tool.content_sha256 == serving_sha), -1)
            if at < 0 or at + 1 >= len(history):
                raise RollbackError(f"tool '{name}' has no definition older than the one serving; kept: {known}")
            target = history[at + 1]
        served = ToolDef()
        served.CopyFrom(target.tool)
        served.pinned = (f"rolled back to {target.tool.version} (sha256 {target.tool.content_sha256[:12]}) from "
                         f"{file_tool.version} (sha256 {file_tool.content_sha256[:12]}); until bitong unpin or a "
                         f"file with a version above {file_tool.version}")
        self._pins[name] = _Pin(target.tool.content_sha256, file_tool.version, served)
        self.changed = True
        log.warning("tool %s: %s", name, served.pinned)
        return served

    def unpin(self, name: str) -> None:
        if self._pins.pop(name, None) is None:
            raise RollbackError(f"tool '{name}' is not rolled back")
        self.changed = True
        log.info("tool %s: rollback ended (bitong unpin): the file's definition serves", name)

    # ------------------------------------------------------------ persisted state

    def to_state(self, names: Iterable[str]) -> list[state_pb2.ToolHistory]:
        """The histories of ``names`` (the tools serving: a tool whose file went takes its history along)."""
        out = []
        for name in sorted(names):
            history = self._history.get(name)
            if not history:
                continue
            entry = state_pb2.ToolHistory(name=name)
            for v in history:
                entry.versions.add(tool=v.tool, loaded_unix_ms=v.loaded_unix_ms)
            pin = self._pins.get(name)
            if pin is not None:
                entry.pinned_sha256, entry.pin_ceiling = pin.sha256, pin.ceiling
            out.append(entry)
        return out

    def restore(self, entries: Iterable[state_pb2.ToolHistory]) -> None:
        """Start from a saved state's histories and pins (before the first scan records anything)."""
        for entry in entries:
            history = [Version(v.tool, v.loaded_unix_ms) for v in entry.versions][:KEEP]
            if not history:
                continue
            self._history[entry.name] = history
            target = next((v.tool for v in history if v.tool.content_sha256 == entry.pinned_sha256), None)
            if entry.pinned_sha256 and target is not None:
                served = ToolDef()
                served.CopyFrom(target)
                served.pinned = (f"rolled back to {target.version} (sha256 {target.content_sha256[:12]}); until "
                                 f"bitong unpin or a file with a version above {entry.pin_ceiling}")
                self._pins[entry.name] = _Pin(entry.pinned_sha256, entry.pin_ceiling, served)
