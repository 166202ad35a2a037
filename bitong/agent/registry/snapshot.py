"""Tools roots to immutable snapshots, swapped atomically.

A :class:`Snapshot` is everything a request needs (tools by name, load
errors, the match index) and never changes once built; :class:`Registry`
builds the next one from what changed on disk and swaps it in with a single
attribute assignment, so a request sees either the old scan or the new one,
never half of each.

Rescans are incremental: a file whose (mtime, size, inode) did not change is
not even read; one that was touched but whose bytes hash the same is not
parsed; only what really changed is parsed and re-indexed. A file in error is
not trusted by its stat key (``chmod 644`` changes no mtime): it is tried again
at every rescan.

Nothing one file holds can stop a scan: only regular files of at most
``max_file_bytes`` are read (a FIFO, a device or a 50 MB file is refused from
its stat, unread), and any failure to read or build a file is that file's
:class:`LoadError`. A root that cannot be listed (renamed, deleted, no
permission) is a LoadError of its own, and the tools last seen in it keep
serving until it is back or is removed from the roots.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import logging
import marshal
import os
import pkgutil
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import state_pb2
from bitong.v1.agent_pb2 import ToolDef

from bitong.parser import MAX_FILE_BYTES, ParseError, parse_bytes, read_tool_file

from .approval import MIN_PIN, Policy as ApprovalPolicy
from ..matching import index as matcher
from ..matching.index import Calibration
from ..matching.semantic import Embedder
from ..matching.vocabulary import Vocabulary
from . import forked
from .cooldown import Cooldown
from .versions import Canary, VersionBook

__all__ = ["TOOL_FILE", "LoadError", "Snapshot", "Registry", "bundled_tools_root", "parser_fingerprint"]

log = logging.getLogger("bitong.registry")

TOOL_FILE = "TOOL.hdlp"
# A first scan of this many tools serves on a rough index (words and bigrams) while the full one is built:
# their full analysis takes about a millisecond each; below this, the wait is not worth a rough answer.
_ROUGH_FROM = 1000
_RACY_NS = 2_000_000_000
_FILES_TAG = bytes([3 << 3 | 2])   # RegistryState.files: field 3, length-delimited


_CALIBRATION_FORMAT = "bitong-calibration-1"


def _calibrate_code() -> str:
    """The calibration depends on the code that fits it (besides the analyses, which have their fingerprint)."""
    data = pkgutil.get_data("bitong.agent.matching", "calibrate.py")
    return hashlib.sha256(data or b"").hexdigest()[:16]


def _calibration_bytes(names: frozenset[str], ready: bool, model: str, calibration: Calibration,
                       lexical: Calibration) -> bytes:
    def plain(c: Calibration) -> tuple[dict[str, float], float, float, int, dict[str, float]]:
        return dict(c.weights), c.scale, c.shift, c.samples, dict(c.hub)
    return marshal.dumps((_CALIBRATION_FORMAT, _calibrate_code(), tuple(sorted(names)), ready, model,
                          plain(calibration), plain(lexical)), 4)


def _calibration_from(data: bytes) -> tuple[frozenset[str], bool, str, Calibration, Calibration] | None:
    """What :func:`_calibration_bytes` wrote, or None if it is absent, of another format or other code."""
    if not data:
        return None
    try:
        fields = marshal.loads(data)
        tag, code, names, ready, model, cal, lex = fields
        if tag != _CALIBRATION_FORMAT or code != _calibrate_code():
            return None

        def typed(c: tuple[object, ...]) -> Calibration:
            weights, scale, shift, samples, hub = c
            if not (isinstance(weights, dict) and isinstance(hub, dict) and isinstance(scale, float)
                    and isinstance(shift, float) and isinstance(samples, int)):
                raise ValueError("not a calibration")
            return Calibration(weights, scale, shift, samples, hub)
        return frozenset(names), bool(ready), str(model), typed(cal), typed(lex)
    except Exception:  # marshal raises EOFError, ValueError, TypeError ... on bad bytes: fit it again
        return None


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def parser_fingerprint() -> str:
    """Which parser wrote a state: its version and its grammar's bytes."""
    import bitong
    from bitong import parser as package

    digest = hashlib.sha256()
    folder = os.path.dirname(package.__file__)
    for name in sorted(os.listdir(folder)):
        if name.endswith((".py", ".pyx", ".pxd", ".lark")):
            with open(os.path.join(folder, name), "rb") as fh:
                digest.update(name.encode() + b"\0" + fh.read())
    return f"{bitong.__version__}+{digest.hexdigest()[:16]}"


def bundled_tools_root() -> str:
    """The tools shipped inside the package (``bitong serve`` without ``--tools``)."""
    import importlib.util

    import bitong

    spec = importlib.util.find_spec("bitong.tools")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    # editable installs of a folder without __init__.py: fall back to the checkout's tools/, beside bitong/
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(bitong.__file__))), "tools")


@dataclasses.dataclass(frozen=True)
class LoadError:
    """A file that did not load, where, and whether an older version still serves."""

    path: str
    line: int
    column: int
    message: str
    serving_previous: str = ""
    unapproved: tuple[str, ...] = ()   # sensitive permissions the approval policy does not grant

    def __str__(self) -> str:
        tail = f" (still serving the last good version of '{self.serving_previous}')" if self.serving_previous else ""
        where = f"{self.path}:{self.line}:{self.column}" if self.line else self.path  # a root has no line
        return f"{where}: {self.message}{tail}"


@dataclasses.dataclass(frozen=True)
class _FileState:
    """What we know of one TOOL.hdlp: its stat key, its hash, its last good tool."""

    stat_key: tuple[int, int, int]
    sha256: str
    tool: ToolDef | None  # the last version that parsed, if any
    error: LoadError | None  # set while the current bytes do not parse


def _read(path: str, key: tuple[int, int, int], max_bytes: int, prev: _FileState | None = None,
          origin: Callable[[str], str] | None = None) -> _FileState:
    """One file read and parsed, logging nothing (a forked scan runs it too); whatever goes wrong is
    its LoadError, and ``prev``'s last good version, if any, keeps serving."""
    last_good = prev.tool if prev else None
    sha = ""
    try:
        data, _ = read_tool_file(path, max_bytes)
        sha = hashlib.sha256(data).hexdigest()
        if prev is not None and prev.sha256 == sha:
            return _FileState(key, sha, prev.tool, prev.error)
        tool = parse_bytes(data, path)
        if origin is not None:
            tool.commit = origin(path)
    except ParseError as exc:
        err = LoadError(exc.path, exc.line, exc.column, exc.message, last_good.name if last_good else "")
    except Exception as exc:  # one file must never stop the scan of the others
        err = LoadError(path, 1, 1, f"cannot load ({type(exc).__name__}: {exc})", last_good.name if last_good else "")
    else:
        return _FileState(key, sha, tool, None)
    return _FileState(key, sha, last_good, err)


def _first_look(path: str, max_bytes: int) -> _FileState | None:
    """What is at ``path`` when nothing was known of it; None: no file."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return _FileState((0, 0, 0), "", None, LoadError(path, 1, 1, f"cannot stat: {exc.strerror}"))
    return _read(path, _stat_key(st), max_bytes)


_Look = tuple["_FileState | None", "matcher.ToolAnalysis | None"]


def _encode_look(looked: _Look) -> object:
    """A forked scan's result as marshal writes it: plain data."""
    state, analysis = looked
    if state is None:
        return None
    return (state.stat_key, state.sha256, state.tool.SerializeToString() if state.tool is not None else None,
            dataclasses.astuple(state.error) if state.error is not None else None,
            _encode_analysis(analysis) if analysis is not None else None)


def _encode_analysis(a: matcher.ToolAnalysis) -> object:
    return a.to_bytes()


def _decode_analysis(data: object) -> matcher.ToolAnalysis:
    return matcher.ToolAnalysis.from_bytes(data)  # type: ignore[arg-type]   # what _encode_analysis wrote


def _rough(tool: ToolDef) -> matcher.ToolAnalysis:
    return matcher.rough_analysis(tool)


def _decode_look(data: object) -> _Look:
    if data is None:
        return None, None
    fields: tuple[Any, ...] = data  # type: ignore[assignment]   # what _encode_look wrote
    key, sha, tool, error, analysis = fields
    return (_FileState(key, sha, ToolDef.FromString(tool) if tool is not None else None,
                       LoadError(*error) if error is not None else None),
            _decode_analysis(analysis) if analysis is not None else None)


class Snapshot:
    """One consistent view of the registry. Never mutated after construction."""

    __slots__ = ("tools", "errors", "index", "generation", "_files", "roots", "lost_roots", "_names", "canaries")

    def __init__(self, tools: Mapping[str, ToolDef], errors: Sequence[LoadError], index: matcher.Index,
                 generation: int, files: Mapping[str, _FileState], roots: Sequence[str],
                 lost_roots: Mapping[str, LoadError] | None = None,
                 canaries: Mapping[str, Canary] | None = None) -> None:
        # rollouts under way, by tool name: which definition a caller runs (bitong.agent.registry.versions)
        self.canaries: Mapping[str, Canary] = types.MappingProxyType(dict(canaries or {}))
        self.tools: Mapping[str, ToolDef] = types.MappingProxyType(dict(tools))
        # the roots that could not be listed come first: they explain the rest
        self.lost_roots: Mapping[str, LoadError] = types.MappingProxyType(dict(lost_roots or {}))
        self.errors: tuple[LoadError, ...] = tuple(self.lost_roots.values()) + tuple(errors)
        self.index = index
        self.generation = generation
        self._files = types.MappingProxyType(dict(files))
        self.roots = tuple(roots)
        self._names: list[str] | None = None

    def lookup(self, name: str) -> ToolDef | None:
        return self.tools.get(name)

    def sorted_tools(self) -> list[ToolDef]:
        return [self.tools[name] for name in self.sorted_names()]

    def sorted_names(self) -> list[str]:
        """The tools' names in order, sorted once per snapshot (ListTools pages walk it)."""
        if self._names is None:
            self._names = sorted(self.tools)
        return self._names


def _stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _candidates(roots: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Every ``<root>/<folder>/TOOL.hdlp`` path, roots in order, folders sorted;
    and why each root that cannot be listed cannot be."""
    out: list[str] = []
    lost: dict[str, str] = {}
    for root in roots:
        try:
            names = sorted(os.listdir(root))
        except OSError as exc:
            lost[root] = exc.strerror or str(exc)
            continue
        for name in names:
            if name.startswith("."):
                continue
            out.append(os.path.join(root, name, TOOL_FILE))
    return out, lost


def _root_of(path: str) -> str:
    """The root a candidate path was found in: ``<root>/<folder>/TOOL.hdlp``."""
    return os.path.dirname(os.path.dirname(path))


def _resolve(files: Mapping[str, _FileState], policy: ApprovalPolicy | None = None,
             previous: Mapping[str, ToolDef] | None = None, roots: Sequence[str] = (),
             verdicts: dict[int, tuple[ToolDef, tuple[str, ...]]] | None = None,
             ) -> tuple[dict[str, ToolDef], list[LoadError]]:
    """Tools by name (the first root wins a name, then the first folder by name) and every load error,
    in that order too: whatever order ``files`` is in.

    With a ``policy``, a tool declaring a sensitive permission it does not
    approve is not served; if the ``previous`` snapshot served an approved
    version of the same file, that version keeps serving (as for a file that
    stops parsing): it is exactly what was approved, and an edit must not
    turn an approved tool into a different one nor take it away unseen.
    ``verdicts`` keeps the policy's answer per tool object from one call to
    the next, so a rescan that changed one file asks about one tool.
    """
    order = {root: i for i, root in enumerate(roots)}

    def rank(path: str) -> tuple[int, str]:
        folder = os.path.dirname(path)
        return order.get(os.path.dirname(folder), len(order)), os.path.basename(folder)

    def unapproved(tool: ToolDef) -> tuple[str, ...]:
        assert policy is not None
        if verdicts is None:
            return tuple(policy.unapproved(tool))
        seen = verdicts.get(id(tool))
        if seen is not None and seen[0] is tool:
            return seen[1]
        answer = tuple(policy.unapproved(tool))
        verdicts[id(tool)] = (tool, answer)
        return answer

    tools: dict[str, ToolDef] = {}
    owner: dict[str, str] = {}
    errors: list[LoadError] = []
    served_from: dict[str, ToolDef] | None = None
    for path, state in files.items():
        if state.error is not None:
            errors.append(state.error)
        tool = state.tool
        if tool is None:
            continue
        if policy is not None and unapproved(tool):
            if served_from is None:
                served_from = {t.source_path: t for t in (previous or {}).values()}
            kept = served_from.get(path)
            if kept is not None and (kept is tool or unapproved(kept)):
                kept = None
            why = policy.refusal(tool)
            why += (f"; the version approved before (sha256 {kept.content_sha256[:MIN_PIN]}) keeps serving"
                    if kept is not None else "; the tool does not serve")
            errors.append(LoadError(path, 0, 0, why, kept.name if kept is not None else "", unapproved(tool)))
            if kept is None:
                continue
            tool = kept
        first = owner.get(tool.name)
        if first is not None:
            if rank(path) < rank(first):   # this file comes first: it wins, the other is the duplicate
                tools[tool.name], owner[tool.name] = tool, path
                path, first = first, path
            errors.append(LoadError(path, 1, 1, f"tool '{tool.name}' is already defined by {first}; this one is ignored"))
            continue
        tools[tool.name] = tool
        owner[tool.name] = path
    errors.sort(key=lambda e: rank(e.path))   # stable: one file's errors keep their order
    if verdicts is not None and len(verdicts) > 2 * len(files) + 64:   # forget the tools no file holds any more
        held = {id(s.tool) for s in files.values() if s.tool is not None}
        for key in [k for k in verdicts if k not in held]:
            del verdicts[key]
    return tools, errors


class Registry:
    """Owns the current snapshot and knows how to make the next one.

    ``rescan()`` is safe to call from any thread; scans are serialized, and
    readers never lock: they read ``registry.snapshot`` once per request.
    """

    def __init__(self, roots: Sequence[str], *, vocabulary: Vocabulary | None = None,
                 embedder: Embedder | None = None, max_file_bytes: int = MAX_FILE_BYTES,
                 approval: ApprovalPolicy | None = None,
                 embedder_loader: Callable[[], Embedder | None] | None = None,
                 cooldown: Cooldown | None = None) -> None:
        """``embedder_loader`` (instead of ``embedder``): the model is loaded by the first
        :meth:`refresh_semantics`, off the start-up path; until then the index is lexical.
        ``cooldown``: at most so many reloads of one tool a window (default: none, every change applies)."""
        if not roots:
            raise ValueError("at least one tools root is needed")
        if max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be at least 1, got {max_file_bytes}")
        self.roots = tuple(os.path.abspath(r) for r in roots)
        self.max_file_bytes = max_file_bytes
        self.approval = approval   # None: no approval check (a library user's choice; the server always sets one)
        self._vocabulary = vocabulary
        self._embedder = embedder
        self._embedder_loader = embedder_loader if embedder is None else None
        self._lock = threading.Lock()
        # One state write at a time: the writer task and shutdown's last write can overlap, and a second
        # writer would truncate the first one's file under it (a state that no longer parses).
        self._save_lock = threading.Lock()
        # What the state file holds changes with the files and the analyses (vectors
        # included), not with the calibration: a version of that, and the one saved.
        self._state_version = 0
        self._saved_version = -1
        self._verified = threading.Event()   # cleared by a load_state that leaves the files to verify()
        self._verified.set()
        self._semantic_lock = threading.Lock()
        self._calibrated: tuple[frozenset[str], bool] | None = None
        self._calibrated_model = ""
        self._verdicts: dict[int, tuple[ToolDef, tuple[str, ...]]] = {}
        self._verdicts_policy: ApprovalPolicy | None = None
        self.versions = VersionBook()   # the last definitions served per tool, and rollbacks (under _lock)
        self.cooldown = cooldown or Cooldown(0)
        # changes the cooldown holds back, by path: (the definition serving, it marked pending_change)
        self._held: dict[str, tuple[ToolDef, ToolDef]] = {}
        self._whole = False
        # where a file came from beyond its path: the tools repository's commit (ToolDef.commit)
        self.origin: Callable[[str], str] | None = None
        self.snapshot = Snapshot({}, [], matcher.Index.build([], vocabulary=vocabulary, embedder=embedder), 0, {},
                                 self.roots)
        self.rough_from = _ROUGH_FROM
        self._rough_scan = False
        self._cold_analyses: dict[str, matcher.ToolAnalysis] = {}   # what a shared first scan analysed, by name
        self._rough = False   # the index holds rough analyses until refine() replaces them

    def rescan(self, folders: Iterable[str] | None = None, *, whole: bool = False, rough: bool = False) -> Snapshot:
        """Bring the snapshot up to date with the disk; return the (possibly new) snapshot.

        With ``folders`` (tool folders an inotify event named), only their
        TOOL.hdlp files are looked at: the cost is theirs, not the registry's.
        A folder outside the roots is ignored; the roots themselves are not
        listed again (a root that goes or comes back needs a full rescan).
        ``whole``: every change applies, the reload cooldown holds none back
        (a repository commit is swapped in as one, never in parts).
        ``rough``: a first scan of at least :attr:`rough_from` tools indexes them
        by words and bigrams only (a tenth of the time), and :meth:`refine` (called
        by :meth:`refresh_semantics`) swaps in the full index once it is built.
        """
        with self._lock:
            self._whole = whole
            self._rough_scan = rough
            try:
                snap = self._rescan(folders)
                if folders is None:
                    self._verified.set()   # every file checked
                return snap
            finally:
                self._whole = self._rough_scan = False

    def _rescan(self, folders: Iterable[str] | None) -> Snapshot:
        old = self.snapshot
        if folders is not None:
            return self._rescan_folders(old, folders)
        files: dict[str, _FileState] = {}
        now_ns = time.time_ns()
        candidates, lost = _candidates(self.roots)
        lost_roots = {root: self._lost_root(old, root, why) for root, why in lost.items()}
        if not old._files and self.origin is None and len(candidates) >= forked.FROM and forked.cores() > 1:
            files.update(self._first_scan(candidates))
        else:
            for path in candidates:
                state = self._look(old, path, now_ns)
                if state is not None:
                    files[path] = state
        if lost:
            for path, state in old._files.items():
                if _root_of(path) in lost:  # keep serving what the lost root last held
                    files[path] = state
        unchanged = files.keys() == old._files.keys() and dict(lost_roots) == dict(old.lost_roots) and all(
            files[p] is old._files[p] or files[p] == old._files[p] for p in files)
        if not unchanged:
            self.snapshot = self._assemble(old, files, lost_roots)
        return self.snapshot

    def _rescan_folders(self, old: Snapshot, folders: Iterable[str]) -> Snapshot:
        now_ns = time.time_ns()
        changed: dict[str, _FileState | None] = {}
        for folder in folders:
            folder = os.path.abspath(folder)
            root, name = os.path.split(folder)
            if root not in self.roots or name.startswith(".") or root in old.lost_roots:
                continue
            path = os.path.join(folder, TOOL_FILE)
            state = self._look(old, path, now_ns)
            prev = old._files.get(path)
            if state is not prev and (state is None or prev is None or state != prev):
                changed[path] = state
        if not changed:
            return old
        files = dict(old._files)
        for path, state in changed.items():
            if state is None:
                files.pop(path, None)
            else:
                files[path] = state
        fast = self._patched(old, changed)
        if fast is not None:
            tools, upsert, remove = fast
            self.snapshot = self._assemble(old, files, old.lost_roots, (tools, list(old.errors[len(old.lost_roots):]),
                                                                        upsert, remove))
        else:
            self.snapshot = self._assemble(old, files, old.lost_roots)
        return self.snapshot

    def _patched(self, old: Snapshot, changed: Mapping[str, _FileState | None]
                 ) -> tuple[dict[str, ToolDef], list[ToolDef], list[str]] | None:
        """The old tools with these files' changes applied, when nothing else can be affected: no
        error before or after, no name another file holds, nothing the approvals refuse. Otherwise None
        (then everything is resolved again, which costs a pass over every file)."""
        in_error = {e.path for e in old.errors}
        tools = dict(old.tools)
        upsert: list[ToolDef] = []
        remove: list[str] = []
        for path, state in changed.items():
            prev = old._files.get(path)
            if path in in_error or (prev is not None and prev.error is not None):
                return None
            if prev is not None and prev.tool is not None:
                if old.tools.get(prev.tool.name) is not prev.tool:   # a duplicate, or an approved version kept
                    return None
                del tools[prev.tool.name]
                remove.append(prev.tool.name)
            if state is None:
                continue
            tool = state.tool
            if state.error is not None or tool is None:
                return None
            if tool.name in tools or (self.approval is not None and self.approval.unapproved(tool)):
                return None
            tools[tool.name] = tool
            upsert.append(tool)
        remove = [name for name in remove if name not in tools]
        return tools, upsert, remove

    def _first_scan(self, paths: Sequence[str]) -> Iterator[tuple[str, _FileState]]:
        """A first scan of many files (nothing known yet), shared out over the cores (:mod:`.forked`);
        the tools' analyses (rough for a rough scan) are made there too, for :meth:`_assemble`."""
        rough = self._rough_scan and len(paths) >= self.rough_from
        max_bytes = self.max_file_bytes
        vocabulary = self._vocabulary
        memo: dict[str, dict[str, float]] = {}

        def look(path: str) -> tuple[_FileState | None, matcher.ToolAnalysis | None]:
            state = _first_look(path, max_bytes)
            tool = state.tool if state is not None else None
            if tool is None:
                return state, None
            return state, (matcher.rough_analysis(tool, shared=memo) if rough
                           else matcher.analyze(tool, vocabulary, shared=memo))

        looked = forked.forked_map(look, paths, _encode_look, _decode_look)
        analyses = self._cold_analyses = {}
        for path, (state, analysis) in zip(paths, looked):
            if state is None:
                continue
            if state.error is not None:
                log.error("%s", state.error)
            if analysis is not None:
                analyses[analysis.name] = analysis
            yield path, state

    def _look(self, old: Snapshot, path: str, now_ns: int) -> _FileState | None:
        """What is at ``path`` now: its last state if its stat key vouches for it, else read again; None: no file."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._held.pop(path, None)
            return None  # a plain file, or a folder without TOOL.hdlp: not a tool
        except OSError as exc:
            prev = old._files.get(path)
            return _FileState((0, 0, 0), "", prev.tool if prev else None,
                              LoadError(path, 1, 1, f"cannot stat: {exc.strerror}",
                                        prev.tool.name if prev and prev.tool else ""))
        key = _stat_key(st)
        prev = old._files.get(path)
        # A file written twice within one mtime tick keeps its stat key, so a
        # recent mtime is not trusted: such files are re-hashed (as git does).
        # Nor is a file in error: what failed (a permission, a size) may have
        # been fixed without touching its mtime.
        trusted = (prev is not None and prev.stat_key == key and prev.error is None
                   and now_ns - key[0] > _RACY_NS)
        if trusted and prev is not None:
            return prev
        return self._cool(path, prev, self._load(path, key, prev))

    def _cool(self, path: str, prev: _FileState | None, state: _FileState) -> _FileState:
        """``state``, or ``prev`` still serving (marked pending_change) while the cooldown holds the change back.

        Only a new definition replacing a serving one counts as a reload: a new
        tool, a deletion or a file that stops parsing (whose last good version
        keeps serving anyway) apply at once.
        """
        held = self._held.get(path)
        if self._whole or (self.origin is not None and self.origin(path)):
            # a repository's files change by commit, each applied whole: never held back in parts
            self._held.pop(path, None)
            return state
        if prev is None or prev.tool is None or state.error is not None or state.tool is None:
            return state
        serving = held[0] if held is not None and held[1] is prev.tool else prev.tool
        if state.sha256 == serving.content_sha256 or state.tool is serving:
            # back to what serves (or unchanged): nothing pending any more
            self._held.pop(path, None)
            return state if state.tool is serving else _FileState(state.stat_key, state.sha256, serving, None)
        if self.cooldown.allow(path):
            self._held.pop(path, None)
            return state
        if held is None or held[1] is not prev.tool:
            due = time.time() + max(0.0, self.cooldown.due(path) - time.monotonic())
            shown = ToolDef()
            shown.CopyFrom(serving)
            shown.pending_change = (
                f"the file changed again within its reload cooldown ({self.cooldown.reloads} reloads in "
                f"{self.cooldown.window_s:g}s); its latest content applies at "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(due + 0.999))}")
            log.info("%s: %s", path, shown.pending_change)
            held = (serving, shown)
            self._held[path] = held
        # the stat key of what serves: the file is read again at the next look, and applied once it may
        return _FileState(prev.stat_key, prev.sha256, held[1], None)

    def held_due(self) -> tuple[float, list[str]] | None:
        """When (time.monotonic) the first held change may apply, and the tool folders holding one; None: none."""
        with self._lock:
            if not self._held:
                return None
            return (min(self.cooldown.due(p) for p in self._held),
                    [os.path.dirname(p) for p in self._held])

    def _verdicts_for(self, policy: ApprovalPolicy | None) -> dict[int, tuple[ToolDef, tuple[str, ...]]]:
        """The policy's answers kept from the last resolve; forgotten when the policy is another one."""
        if policy is not self._verdicts_policy:
            self._verdicts_policy = policy
            self._verdicts = {}
        return self._verdicts

    def _lost_root(self, old: Snapshot, root: str, why: str) -> LoadError:
        kept = sorted(s.tool.name for p, s in old._files.items() if _root_of(p) == root and s.tool is not None)
        if root not in old.lost_roots:
            log.error("tools root %s cannot be listed: %s; serving its last %d tools", root, why, len(kept))
        return LoadError(root, 0, 0, f"tools root cannot be listed: {why}; serving the {len(kept)} tools last seen "
                                     f"in it until it is back or removed from the roots"
                                     + (f" ({', '.join(kept)})" if kept else ""))

    def _load(self, path: str, key: tuple[int, int, int], prev: _FileState | None) -> _FileState:
        """Read and parse one file; whatever goes wrong is this file's LoadError (and
        the last good version of it, if any, keeps serving)."""
        state = _read(path, key, self.max_file_bytes, prev, self.origin)
        if state.error is not None and (prev is None or prev.error != state.error):
            log.error("%s", state.error)
        return state

    def _assemble(self, old: Snapshot, files: dict[str, _FileState],
                  lost_roots: Mapping[str, LoadError] | None = None,
                  patched: tuple[dict[str, ToolDef], list[LoadError], list[ToolDef], list[str]] | None = None,
                  ) -> Snapshot:
        if patched is not None:
            tools, errors, upsert, remove = patched
            tools = self.versions.serve(tools)   # only unpinned tools take this path: nothing is replaced
            upsert = [tools[t.name] for t in upsert]
        else:
            tools, errors = _resolve(files, self.approval, old.tools, self.roots, self._verdicts_for(self.approval))
            tools = self.versions.serve(tools)
            upsert = [t for name, t in tools.items() if old.tools.get(name) is not t]
            remove = [name for name in old.tools if name not in tools]
        if self._rough_scan and not len(old.index) and len(upsert) >= self.rough_from:
            index = matcher.Index.rough(upsert, embedder=self._embedder, made=self._cold_analyses)
            self._rough = True
            log.info("%d tools indexed by their words first; their full analysis follows in the background",
                     len(upsert))
        else:
            made, fingerprint = self._cold_analyses, old.index.fingerprint
            items = [a if (a := made.get(t.name)) is not None and a.sha256 == t.content_sha256
                     and a.fingerprint == fingerprint else t for t in upsert] if made else upsert
            if upsert and not len(old.index):   # a first scan: every posting list made at once, not tool by tool
                index = matcher.Index.build(items, vocabulary=self._vocabulary, embedder=self._embedder) \
                    .with_calibration(old.index.calibration, old.index.lexical_calibration)
            else:
                index = old.index.updated(upsert=items, remove=remove) if (upsert or remove) else old.index
        self._cold_analyses = {}
        snap = Snapshot(tools, errors, index, old.generation + 1, files, self.roots, lost_roots,
                        self.versions.canaries)
        self._state_version += 1
        if upsert or remove:
            log.info("registry generation %d: %d tools (%d changed, %d removed), %d load errors",
                     snap.generation, len(tools), len(upsert), len(remove), len(errors))
        return snap

    def _first_snapshot(self, files: dict[str, _FileState], analysis: Callable[[str], Callable[[], bytes]],
                        saved_index: bytes = b"", stale: bool = False) -> Snapshot:
        """A snapshot from stored files, its index restored from stored analyses where still fresh
        (``analysis(path)``: what reads that file's), and from the stored posting lists when they fit.

        ``stale``: every stored analysis was made by other code or another vocabulary (an upgrade):
        as many tools as a rough first scan takes are indexed roughly, and refined in the background."""
        tools, errors = _resolve(files, self.approval, self.snapshot.tools, self.roots,
                                 self._verdicts_for(self.approval))
        tools = self.versions.serve(tools)
        if stale and len(tools) >= self.rough_from:
            made = None
            if len(tools) >= forked.FROM:   # an upgrade's first start: shared over the cores, as a cold scan is
                made = {a.name: a for a in forked.forked_map(_rough, list(tools.values()), _encode_analysis,
                                                             _decode_analysis)}
            index = matcher.Index.rough(tools.values(), embedder=self._embedder, made=made)
            self._rough = True
            log.info("the stored analyses are another version's: %d tools indexed by their words first, "
                     "their full analysis follows in the background", len(tools))
        else:
            stored = ((tool, analysis(tool.source_path)) for tool in tools.values())
            index = matcher.Index.restore(stored, vocabulary=self._vocabulary, embedder=self._embedder,
                                          saved=saved_index)
        self._state_version += 1
        return Snapshot(tools, errors, index, self.snapshot.generation + 1, files, self.roots,
                        canaries=self.versions.canaries)

    # ------------------------------------------------------------ vectors and calibration

    def refresh_semantics(self, batch: int = 32, *, refit: bool = False) -> bool:
        """Compute the tool vectors the index lacks and recalibrate; swap each step in as it is done.

        Runs off the request path (the cache agent's background thread):
        meanwhile the index serves lexically. Vectors are keyed by content
        hash, so a tool that changed in between is simply left for the next
        round. The calibration is fitted again when enough tools came or went;
        ``refit``: in any case (a one-shot command answers as a fresh start would).
        Returns True if the snapshot changed.
        """
        with self._semantic_lock:
            changed = self.refine()
            changed = self._attach_embedder() or changed
            emb = self._embedder
            if emb is not None:
                pending = self.snapshot.index.pending_vectors()
                for i in range(0, len(pending), batch):
                    part = pending[i:i + batch]
                    texts = [t for a in part for t in a.vector_texts()]
                    vecs = emb.passages(texts)
                    computed = {}
                    at = 0
                    for a in part:
                        k = 1 + len(a.non_goals)
                        computed[a.name] = (a.sha256, vecs[at:at + k])
                        at += k
                    with self._lock:
                        self._swap_index(self.snapshot.index.with_vectors(computed))
                        self._state_version += 1
                    changed = True
            snap = self.snapshot
            key = (frozenset(snap.tools), snap.index.semantic_ready)
            if self._calibrated is None or refit or self._needs_calibration(key):
                from ..matching.calibrate import calibrate   # here: it imports numpy, which serving needs not

                fitted = calibrate(snap.index, snap.tools)
                with self._lock:
                    self._swap_index(self.snapshot.index.with_calibration(fitted.calibration,
                                                                          fitted.lexical_calibration))
                self._calibrated = key
                self._calibrated_model = emb.model_id if key[1] and emb is not None else ""
                self._state_version += 1   # the state keeps the calibration: a restart need not fit it again
                changed = True
            return changed

    @property
    def rough(self) -> bool:
        """True while the index holds a rough first scan (words and bigrams, see :meth:`rescan`)."""
        return self._rough

    def refine(self) -> bool:
        """Analyse in full the tools a rough first scan indexed, then swap the whole index in at once.

        The analyses are made outside the lock (seconds for thousands of tools,
        while rough matching serves); the index is then built under it from
        what serves by then, so it is the index a full first scan would have
        made. Returns True if the snapshot changed.
        """
        if not self._rough:
            return False
        started = time.perf_counter()
        snap = self.snapshot
        shared: dict[str, dict[str, float]] = {}
        tools = list(snap.tools.values())
        vocabulary = self._vocabulary

        def analyse(tool: ToolDef) -> matcher.ToolAnalysis:
            return matcher.analyze(tool, vocabulary, shared=shared)

        done = {a.name: a for a in (forked.forked_map(analyse, tools, _encode_analysis, _decode_analysis)
                                    if len(tools) >= forked.FROM else map(analyse, tools))}
        fingerprint = matcher.analysis_fingerprint(self._vocabulary)
        with self._lock:
            snap = self.snapshot
            items: list[ToolDef | matcher.ToolAnalysis] = []
            for name, tool in snap.tools.items():
                a = snap.index.analysis(name)
                if a is None or a.fingerprint != fingerprint:   # rough (a tool changed since is analysed in full)
                    a = done.get(name)
                items.append(a if a is not None and a.sha256 == tool.content_sha256 and a.name == name else tool)
            index = matcher.Index.build(items, vocabulary=self._vocabulary, embedder=self._embedder)
            self._swap_index(index.with_calibration(snap.index.calibration, snap.index.lexical_calibration))
            self._rough = False
            self._state_version += 1
        log.info("%d tools analysed in full in %.1f s", len(items), time.perf_counter() - started)
        return True

    def _attach_embedder(self) -> bool:
        """Load the model the loader gives (once) and index the tools with it; True if it loaded.

        Stored analyses keep their vectors while the index has no model, so a
        restart's vectors serve as soon as the model is in."""
        loader, self._embedder_loader = self._embedder_loader, None
        if loader is None:
            return False
        emb = loader()
        if emb is None:
            log.info("the multilingual model cannot load here: matching stays lexical")
            return False
        if self._calibrated_model and self._calibrated_model != emb.model_id:
            self._calibrated = None   # fitted with another model's vectors
        with self._lock:
            index = self.snapshot.index
            rebuilt = index.with_embedder(emb)   # the stored vectors serve at once; nothing is analysed again
            self._embedder = emb
            self._swap_index(rebuilt)
        log.info("multilingual model ready: %d of %d tools have their vectors", len(index) -
                 len(rebuilt.pending_vectors()), len(index))
        return True

    def _needs_calibration(self, key: tuple[frozenset[str], bool]) -> bool:
        assert self._calibrated is not None
        names, ready = self._calibrated
        if key[1] != ready:
            return True
        moved = len(names.symmetric_difference(key[0]))
        return moved > max(2, len(names) // 10)

    def _swap_index(self, index: matcher.Index) -> None:
        old = self.snapshot
        self.snapshot = Snapshot(old.tools, old.errors[len(old.lost_roots):], index, old.generation + 1,
                                 old._files, self.roots, old.lost_roots, old.canaries)

    # ------------------------------------------------------------ rollback

    def rollback(self, name: str, version: str = "") -> Snapshot:
        """Serve an earlier definition of ``name`` (``version``, else the one before); raises RollbackError."""
        with self._lock:
            old = self.snapshot
            self.versions.rollback(name, old.tools.get(name), version)
            self.snapshot = self._assemble(old, dict(old._files), old.lost_roots)
            return self.snapshot

    def promote(self, name: str) -> Snapshot:
        """End ``name``'s canary: its new version serves every caller (RollbackError: no canary)."""
        with self._lock:
            old = self.snapshot
            self.versions.promote(name)
            self.snapshot = self._assemble(old, dict(old._files), old.lost_roots)
            return self.snapshot

    def abort(self, name: str) -> Snapshot:
        """End ``name``'s canary: the version before it serves every caller (RollbackError: no canary)."""
        with self._lock:
            old = self.snapshot
            self.versions.abort(name)
            self.snapshot = self._assemble(old, dict(old._files), old.lost_roots)
            return self.snapshot

    def unpin(self, name: str) -> Snapshot:
        """End a rollback: the file's definition serves again; raises RollbackError if none is in force."""
        with self._lock:
            old = self.snapshot
            self.versions.unpin(name)
            self.snapshot = self._assemble(old, dict(old._files), old.lost_roots)
            return self.snapshot

    def paths(self) -> Iterable[str]:
        return self.snapshot._files.keys()

    # ------------------------------------------------------------ persisted state

    @property
    def state_dirty(self) -> bool:
        """True when the files or the analyses changed since the state was last saved or loaded."""
        return self._state_version != self._saved_version

    def save_state(self, path: str) -> None:
        """Write what we know of every file, atomically (a crash never leaves half a state).

        Written one file's entry at a time (the wire format of a repeated field
        is its entries one after the other), so saving 10,000 tools never holds
        a second copy of the registry in memory.
        """
        with self._save_lock:
            self._save_state(path)

    def _save_state(self, path: str) -> None:
        with self._lock:
            snap, version, calibrated, model = self.snapshot, self._state_version, self._calibrated, \
                self._calibrated_model
            in_files = {fs.tool.content_sha256 for fs in snap._files.values() if fs.tool is not None}
            history = self.versions.to_state(snap.tools, lambda tool: tool.content_sha256 in in_files)
        head = state_pb2.RegistryState(parser_fingerprint=parser_fingerprint(), roots=self.roots,
                                       analysis_fingerprint=snap.index.fingerprint, history=history,
                                       index=snap.index.saved_postings())
        if calibrated is not None:
            head.calibration = _calibration_bytes(calibrated[0], calibrated[1], model, snap.index.calibration,
                                                  snap.index.lexical_calibration)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(head.SerializeToString())
                for entry in self._stored(snap):
                    fh.write(_FILES_TAG + _varint(len(entry)) + entry)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._saved_version = version

    @staticmethod
    def _stored(snap: Snapshot) -> Iterator[bytes]:
        """Each file's StoredFile, serialized."""
        for fpath, fs in snap._files.items():
            entry = state_pb2.StoredFile(path=fpath, mtime_ns=fs.stat_key[0], size=fs.stat_key[1],
                                         inode=fs.stat_key[2], sha256=fs.sha256)
            if fs.tool is not None:
                entry.tool.CopyFrom(fs.tool)
                if snap.tools.get(fs.tool.name) is fs.tool and fs.tool.name in snap.index:
                    entry.analysis = snap.index.stored_analysis(fs.tool.name)[1]   # the copy the index holds
            if fs.error is not None:
                e = fs.error
                entry.error.CopyFrom(pb.LoadError(path=e.path, line=e.line, column=e.column, message=e.message,
                                                  serving_previous=e.serving_previous))
            yield entry.SerializeToString()

    def load_state(self, path: str, *, verify: bool = True) -> bool:
        """Start from a saved state, validated against the files: a file whose stat
        key changed is read again (and parsed if its bytes changed), a new one is
        parsed, a deleted one dropped; the rest is served as saved.

        ``verify=False`` leaves that check to :meth:`verify` (a server answers
        Match and ListTools from the saved snapshot at once, a tenth of a second
        per thousand tools sooner, and holds each Call until the check is done:
        only what the files define now ever runs).

        Returns False (and changes nothing) when there is no usable state: missing,
        unreadable, written by another parser, or for other roots. When the
        files and analyses are as saved, :attr:`state_dirty` is False after it.
        """
        try:
            with open(path, "rb") as fh:
                state = state_pb2.RegistryState.FromString(fh.read())  # the bytes go as soon as they are decoded
        except (OSError, DecodeError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("ignoring registry state %s: %s", path, exc)
            return False
        if tuple(state.roots) == self.roots:   # versions outlive a parser upgrade: they are definitions, not parses
            with self._lock:
                self.versions.restore(state.history, _definitions(state))
        if state.parser_fingerprint != parser_fingerprint() or tuple(state.roots) != self.roots:
            log.info("ignoring registry state %s: written for another parser or other roots", path)
            return False
        # ~10 objects a tool and none of them cyclic: a collection halfway would
        # only walk them all for nothing (it costs a restart tens of ms)
        was_on = gc.isenabled()
        gc.disable()
        try:
            stored_fingerprint = state.analysis_fingerprint
            fitted = _calibration_from(state.calibration)
            self._seed(state)
            seeded = self.snapshot
            del state   # what the tools do not hold of it goes now, before the files are checked
            fresh = stored_fingerprint == seeded.index.fingerprint
            if fresh and not seeded.index.postings_restored:
                log.info("registry state %s: its stored index did not fit its files; built again (and the state "
                         "is written again)", path)
            if fresh and seeded.index.postings_restored:
                self._saved_version = self._state_version   # the file holds exactly this (a change the check
                                                            # finds counts as any other: the state is written)
            self._verified.clear()
            if verify:
                self.verify()
            if fitted is not None and fresh:   # not fitted again unless the tools moved (as while running)
                names, ready, model, calibration, lexical = fitted
                with self._lock:
                    self._swap_index(self.snapshot.index.with_calibration(calibration, lexical))
                    self._calibrated, self._calibrated_model = (names, ready), model
            return True
        finally:
            if was_on:
                gc.enable()

    @property
    def verified(self) -> bool:
        """False from a :meth:`load_state` that left the files unchecked until :meth:`verify` has run."""
        return self._verified.is_set()

    def verify(self) -> Snapshot:
        """Check the files against a snapshot loaded from a state (once; later calls return at once)."""
        if not self._verified.is_set():
            with self._lock:
                if not self._verified.is_set():   # not done meanwhile by another caller
                    self._rescan(None)
                    self._verified.set()
        return self.snapshot

    def _seed(self, state: state_pb2.RegistryState) -> None:
        files: dict[str, _FileState] = {}
        where: dict[str, int] = {}
        for i, entry in enumerate(state.files):
            error = None
            if entry.HasField("error"):
                e = entry.error
                error = LoadError(e.path, e.line, e.column, e.message, e.serving_previous)
            tool = entry.tool if entry.HasField("tool") else None
            if tool is not None:
                where[tool.source_path] = i
            files[entry.path] = _FileState((entry.mtime_ns, entry.size, entry.inode), entry.sha256, tool, error)

        def analysis(source: str) -> Callable[[], bytes]:
            """What reads one file's stored analysis when the index needs it: the state holds the bytes
            (its tools keep it in memory anyway), the index does not keep a copy of 10,000 of them."""
            i = where.get(source)
            if i is None:
                return lambda: b""
            entry = state.files[i]
            return lambda: entry.analysis

        stale = state.analysis_fingerprint != matcher.analysis_fingerprint(self._vocabulary)
        with self._lock:
            self.snapshot = self._first_snapshot(files, analysis, state.index, stale)


def _definitions(state: state_pb2.RegistryState) -> Callable[[str], ToolDef | None]:
    """The state's file definitions by content_sha256 (what a stored version names), indexed at the
    first lookup: a restart that reads no history never walks them."""
    by_sha: dict[str, ToolDef] | None = None

    def find(sha: str) -> ToolDef | None:
        nonlocal by_sha
        if by_sha is None:
            by_sha = {e.tool.content_sha256: e.tool for e in state.files if e.HasField("tool")}
        return by_sha.get(sha)

    return find
