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
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

from bitong.v1 import state_pb2
from bitong.v1.agent_pb2 import ToolDef

__all__ = ["KEEP", "Canary", "Version", "VersionBook", "RollbackError", "semver_key", "canary_side"]

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


@dataclasses.dataclass(frozen=True)
class Canary:
    """A rollout under way: ``candidate`` for ``percent`` of the callers, ``stable`` for the rest."""

    stable: ToolDef       # the definition serving before the canary began
    candidate: ToolDef    # the newest file's, declaring rollout
    percent: int
    served: ToolDef       # the stable as the snapshot serves it (marked canary)


def canary_side(tool: str, caller: str, percent: int) -> bool:
    """True when ``caller`` runs the canary of ``tool`` at ``percent``: a hash of the two, so one caller
    stays on one side (and raising the percentage only adds callers to the new side)."""
    digest = hashlib.sha256(f"{tool}\0{caller}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 < percent * 100


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


class _Histories:
    """Per tool, its kept definitions; those a saved state holds are decoded when first read.

    A restart of 10,000 tools would spend a tenth of a second turning every
    stored definition into a :class:`Version` before it could answer; most are
    never read, and the one check every tool needs (is the file's definition
    the newest kept?) reads a single hash of the stored entry.
    """

    def __init__(self) -> None:
        self._decoded: dict[str, list[Version]] = {}
        self._stored: dict[str, state_pb2.ToolHistory] = {}
        self._files: Callable[[str], ToolDef | None] = lambda sha: None

    def restore(self, entry: state_pb2.ToolHistory, files: Callable[[str], ToolDef | None]) -> None:
        """Keep a stored history; ``files`` finds a definition its file holds (by content_sha256)."""
        self._decoded.pop(entry.name, None)
        self._stored[entry.name] = entry
        self._files = files

    def newest_sha(self, name: str) -> str:
        entry = self._stored.get(name)
        if entry is not None:
            v = entry.versions[0]
            return v.tool_sha256 or v.tool.content_sha256
        history = self._decoded.get(name)
        return history[0].tool.content_sha256 if history else ""

    def get(self, name: str) -> list[Version] | None:
        entry = self._stored.get(name)
        if entry is not None:   # decoded before it leaves the stored side: a reader elsewhere always finds it
            history = []
            for v in entry.versions:
                tool = self._files(v.tool_sha256) if v.tool_sha256 else v.tool
                if tool is not None:   # (a file's definition the state lacks: never written so, skipped)
                    history.append(Version(tool, v.loaded_unix_ms))
            self._decoded[name] = history[:KEEP]
            del self._stored[name]
        return self._decoded.get(name)

    def setdefault(self, name: str) -> list[Version]:
        got = self.get(name)
        if got is None:
            got = self._decoded[name] = []
        return got

    def names(self) -> list[str]:
        return [*self._decoded, *self._stored]

    def __len__(self) -> int:
        return len(self._decoded) + len(self._stored)


class VersionBook:
    """Per tool, the last :data:`KEEP` distinct definitions (newest first) and the rollback in force."""

    def __init__(self) -> None:
        self._history = _Histories()
        self._pins: dict[str, _Pin] = {}
        self._seen: dict[str, ToolDef] = {}   # the file definition last served per name (identity: unchanged)
        self._serving: dict[str, ToolDef] = {}   # the definition (unmarked) that serves most calls per name
        self.canaries: dict[str, Canary] = {}
        self.counts: dict[tuple[str, str], list[int]] = {}   # (name, sha256) -> [calls, failures]
        self.changed = False                  # something a saved state should hold changed

    # ------------------------------------------------------------ the registry's side

    def serve(self, tools: Mapping[str, ToolDef]) -> dict[str, ToolDef]:
        """Record what the files define; return what serves (a pinned tool's earlier definition in its place)."""
        out = dict(tools)
        for name, tool in tools.items():
            if self._seen.get(name) is not tool:
                self._seen[name] = tool
                if self._record(name, tool):
                    self._arrived(name, tool)
            pin = self._pins.get(name)
            if pin is None:
                canary = self.canaries.get(name)
                if canary is not None:
                    out[name] = canary.served
                self._serving[name] = canary.stable if canary is not None else tool
                continue
            if tool.content_sha256 != pin.sha256 and semver_key(tool.version) > semver_key(pin.ceiling):
                log.info("tool %s: version %s arrived, above %s rolled back from: the rollback ends",
                         name, tool.version, pin.ceiling)
                del self._pins[name]
                self.changed = True
                self._serving[name] = tool
                continue
            out[name] = pin.served
            self._serving[name] = self._by_sha(name, pin.sha256) or tool
        for name in [n for n in self._seen if n not in tools]:
            del self._seen[name]
            self._serving.pop(name, None)
            self.canaries.pop(name, None)
        return out

    def _by_sha(self, name: str, sha: str) -> ToolDef | None:
        return next((v.tool for v in self._history.get(name) or () if v.tool.content_sha256 == sha), None)

    def _arrived(self, name: str, tool: ToolDef) -> None:
        """A new definition: start, move or end a canary. Mid-rollout the stable stays and the
        candidate is replaced (its counters from zero); without rollout, or back at the stable, it ends."""
        running = self.canaries.get(name)
        stable = running.stable if running is not None else self._serving.get(name)
        if tool.rollout and stable is not None and stable.content_sha256 != tool.content_sha256 \
                and name not in self._pins:
            served = ToolDef()
            served.CopyFrom(stable)
            served.canary = (f"canary: {tool.version} (sha256 {tool.content_sha256[:12]}) for {tool.rollout}% of "
                             f"the callers, {stable.version} (sha256 {stable.content_sha256[:12]}) for the rest; "
                             "bitong promote or abort ends it")
            self.canaries[name] = Canary(stable, tool, tool.rollout, served)
            self.counts.pop((name, tool.content_sha256), None)
            log.warning("tool %s: %s", name, served.canary)
            self.changed = True
        elif running is not None:
            del self.canaries[name]
            log.info("tool %s: canary ended by a new file (%s, %s)", name, tool.version,
                     "back at the stable" if stable is not None and stable.content_sha256 == tool.content_sha256
                     else "without rollout")
            self.changed = True

    # ------------------------------------------------------------ the caller's side

    def pick(self, canaries: Mapping[str, Canary], tool: ToolDef, caller: str) -> ToolDef:
        """The definition ``caller`` runs of the served ``tool`` (the canary's candidate for its share)."""
        canary = canaries.get(tool.name)
        if canary is None or canary.served is not tool:
            return tool
        return canary.candidate if canary_side(tool.name, caller or uuid.uuid4().hex, canary.percent) else tool

    def count(self, tool: ToolDef, ok: bool) -> None:
        counts = self.counts.setdefault((tool.name, tool.content_sha256), [0, 0])
        counts[0] += 1
        if not ok:
            counts[1] += 1
        if len(self.counts) > 4 * KEEP * max(1, len(self._history)) + 64:   # forget definitions long gone
            # copies first: a rescan (another thread) may change these while the event loop counts
            kept = {(n, v.tool.content_sha256) for n in self._history.names()
                    for v in list(self._history.get(n) or ())}
            for key in [k for k in list(self.counts) if k not in kept]:
                self.counts.pop(key, None)

    def canary_text(self, name: str) -> str:
        """The canary line with its counters now, for ListTools; empty when none runs."""
        canary = self.canaries.get(name)
        if canary is None:
            return ""
        new = self.counts.get((name, canary.candidate.content_sha256), [0, 0])
        old = self.counts.get((name, canary.stable.content_sha256), [0, 0])
        return (f"{canary.served.canary}; {canary.candidate.version}: {new[0]} calls, {new[1]} failed; "
                f"{canary.stable.version}: {old[0]} calls, {old[1]} failed")

    def promote(self, name: str) -> None:
        if self.canaries.pop(name, None) is None:
            raise RollbackError(f"tool '{name}' has no canary running")
        self.changed = True
        log.warning("tool %s: canary promoted: the new version serves every caller", name)

    def abort(self, name: str) -> None:
        """The stable serves everyone, pinned until a file with a version above the candidate's."""
        canary = self.canaries.pop(name, None)
        if canary is None:
            raise RollbackError(f"tool '{name}' has no canary running")
        served = ToolDef()
        served.CopyFrom(canary.stable)
        served.pinned = (f"canary of {canary.candidate.version} aborted: {canary.stable.version} serves every "
                         f"caller until a file with a version above {canary.candidate.version}")
        self._pins[name] = _Pin(canary.stable.content_sha256, canary.candidate.version, served)
        self.changed = True
        log.warning("tool %s: %s", name, served.pinned)

    def _record(self, name: str, tool: ToolDef) -> bool:
        """Keep a definition the file now holds; True when it is another than the newest kept."""
        if self._history.newest_sha(name) == tool.content_sha256:   # (most tools, at each scan: cheap)
            return False
        history = self._history.setdefault(name)
        for i, known in enumerate(history):
            if known.tool.content_sha256 == tool.content_sha256:   # an earlier definition back (a revert)
                history.insert(0, history.pop(i))
                self.changed = True
                return True
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
        return True

    # ------------------------------------------------------------ the operator's side

    def versions(self, name: str) -> list[Version]:
        return list(self._history.get(name) or ())

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
        self.canaries.pop(name, None)   # a rollback ends a canary: the operator chose
        self.changed = True
        log.warning("tool %s: %s", name, served.pinned)
        return served

    def unpin(self, name: str) -> None:
        if self._pins.pop(name, None) is None:
            raise RollbackError(f"tool '{name}' is not rolled back")
        self.changed = True
        log.info("tool %s: rollback ended (bitong unpin): the file's definition serves", name)

    # ------------------------------------------------------------ persisted state

    def to_state(self, names: Iterable[str], in_files: Callable[[ToolDef], bool] = lambda tool: False
                 ) -> list[state_pb2.ToolHistory]:
        """The histories of ``names`` (the tools serving: a tool whose file went takes its history along).
        A definition ``in_files`` says the state's files hold is written as its sha256 alone."""
        out = []
        for name in sorted(names):
            history = self._history.get(name)
            if not history:
                continue
            entry = state_pb2.ToolHistory(name=name)
            for v in history:
                if in_files(v.tool):
                    entry.versions.add(tool_sha256=v.tool.content_sha256, loaded_unix_ms=v.loaded_unix_ms)
                else:
                    entry.versions.add(tool=v.tool, loaded_unix_ms=v.loaded_unix_ms)
            pin = self._pins.get(name)
            if pin is not None:
                entry.pinned_sha256, entry.pin_ceiling = pin.sha256, pin.ceiling
            canary = self.canaries.get(name)
            if canary is not None:
                entry.canary_stable_sha256, entry.canary_percent = canary.stable.content_sha256, canary.percent
            out.append(entry)
        return out

    def restore(self, entries: Iterable[state_pb2.ToolHistory],
                files: Callable[[str], ToolDef | None] = lambda sha: None) -> None:
        """Start from a saved state's histories and pins (before the first scan records anything);
        ``files``: the state's file definition with a content_sha256, for versions stored as one."""
        for entry in entries:
            if not entry.versions:
                continue
            self._history.restore(entry, files)
            if not entry.pinned_sha256 and not entry.canary_stable_sha256:
                continue   # decoded when first read
            history = self._history.setdefault(entry.name)
            target = next((v.tool for v in history if v.tool.content_sha256 == entry.pinned_sha256), None)
            if entry.pinned_sha256 and target is not None:
                served = ToolDef()
                served.CopyFrom(target)
                served.pinned = (f"rolled back to {target.version} (sha256 {target.content_sha256[:12]}); until "
                                 f"bitong unpin or a file with a version above {entry.pin_ceiling}")
                self._pins[entry.name] = _Pin(entry.pinned_sha256, entry.pin_ceiling, served)
            stable = next((v.tool for v in history if v.tool.content_sha256 == entry.canary_stable_sha256), None)
            if entry.canary_stable_sha256 and stable is not None and history[0].tool is not stable:
                candidate = history[0].tool
                served = ToolDef()
                served.CopyFrom(stable)
                served.canary = (f"canary: {candidate.version} (sha256 {candidate.content_sha256[:12]}) for "
                                 f"{entry.canary_percent}% of the callers, {stable.version} (sha256 "
                                 f"{stable.content_sha256[:12]}) for the rest; bitong promote or abort ends it")
                self.canaries[entry.name] = Canary(stable, candidate, entry.canary_percent, served)
