"""Path allow-lists: ``permissions.fs_read_paths`` and ``fs_write_paths`` (seed 002 §2.3).

"对fs_write这类高危权限我加了“路径白名单”... 只能写到/tmp/skills_runtime/下其他路径一律拒绝":
a tool that declares a list may only touch paths inside it, even if the
calling AI was talked into asking for ``/etc/shadow``.

Patterns are absolute paths (``~`` expanded) with glob wildcards:
``*`` and ``?`` match within one path segment, ``[abc]`` one character of a
set, and ``**`` any number of segments, none included, so ``/srv/app/**``
is ``/srv/app`` and everything below it. A path is inside when its real
location matches: symlinks are resolved and ``..`` removed on both sides
(the patterns' fixed leading folders are resolved too), so ``/tmp/x ->
/etc`` does not open ``/etc``.

Which list holds a tool's path parameters (every parameter with
``normalize: [path]``): ``fs_write_paths`` when the tool declares one
(everything a writing tool is handed may be written), else
``fs_read_paths``. A tool without either list is not limited by this
module; an empty list is the same as none.

Checked twice: by the executors' dispatch before anything runs (the call
answers ``ok=false`` with a ``param_errors`` entry naming the parameter and
the list), and again by the bundled handlers themselves (:func:`require`),
which read the lists from ``BITONG_FS_READ_PATHS`` / ``BITONG_FS_WRITE_PATHS``
(JSON arrays the ``python`` executor sets) and refuse everything when run
without them. This module imports only the standard library, so a handler
loads it in a millisecond.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any
from collections.abc import Mapping, Sequence

__all__ = ["ENV", "allowed", "applicable", "check", "require", "lists_from_env"]

ENV = {"fs_read_paths": "BITONG_FS_READ_PATHS", "fs_write_paths": "BITONG_FS_WRITE_PATHS"}
"""Where the python executor hands each list to a handler."""

_MAGIC = re.compile(r"[*?[]")


def allowed(path: str, patterns: Sequence[str]) -> bool:
    """Whether the real location of ``path`` matches one of ``patterns``."""
    real = os.path.realpath(os.path.expanduser(path))
    return any(_compiled(_resolve(p)).fullmatch(real) for p in patterns)


def applicable(permissions: Any) -> tuple[str, tuple[str, ...]] | None:
    """``(list name, patterns)`` that a tool's path params must stay in, or None."""
    if permissions.fs_write_paths:
        return "fs_write_paths", tuple(permissions.fs_write_paths)
    if permissions.fs_read_paths:
        return "fs_read_paths", tuple(permissions.fs_read_paths)
    return None


def check(tool: Any, params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(param, message)`` for each ``normalize: [path]`` param of ``tool`` outside its list."""
    rule = applicable(tool.permissions)
    if rule is None:
        return ()
    name, patterns = rule
    problems = []
    for param, value in params.items():
        if not isinstance(value, str) or param not in tool.params_schema:
            continue
        if "path" not in tool.params_schema[param].normalize:
            continue
        try:
            inside = allowed(value, patterns)
            why = "" if inside else _outside(value, name, patterns)
        except (OSError, ValueError) as exc:
            # realpath raced a symlink being swapped, or met a path it cannot read: outside, in words
            why = f"{value!r} cannot be resolved to check it against this tool's {name} ({_reason(exc)})"
        if why:
            problems.append((param, why))
    return tuple(problems)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def lists_from_env(env: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...] | None]:
    """The lists a handler was given (None: not given at all, which :func:`require` refuses)."""
    env = os.environ if env is None else env
    out: dict[str, tuple[str, ...] | None] = {}
    for name, var in ENV.items():
        raw = env.get(var)
        if raw is None:
            out[name] = None
            continue
        value = json.loads(raw)
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ValueError(f"{var} must be a JSON array of path patterns")
        out[name] = tuple(value)
    return out


def require(path: str, kind: str, param: str = "path") -> str:
    """For handlers: the real path if ``path`` is inside list ``kind``, else PermissionError saying why.

    ``kind`` is ``"read"`` or ``"write"``. A write handler is held to
    ``fs_write_paths``; a read handler to ``fs_write_paths`` if the tool has
    one (the executor's rule), else ``fs_read_paths``.
    """
    lists = lists_from_env()
    if kind == "write":
        name = "fs_write_paths"
    elif kind == "read":
        name = "fs_write_paths" if lists["fs_write_paths"] else "fs_read_paths"
    else:
        raise ValueError(f"kind must be 'read' or 'write', not {kind!r}")
    patterns = lists[name]
    if patterns is None:
        raise PermissionError(f"{param}: no allow-list was given ({ENV[name]} is not set): refusing to touch "
                              f"{path!r}; run this handler through bitong, or set {ENV[name]}")
    try:
        inside = not patterns or allowed(path, patterns)
        why = "" if inside else _outside(path, name, patterns)
        real = os.path.realpath(os.path.expanduser(path))
    except (OSError, ValueError) as exc:
        why = f"{path!r} cannot be resolved to check it against {name} ({_reason(exc)})"
    if why:
        raise PermissionError(f"{param}: {why}")
    return real


def _outside(path: str, name: str, patterns: Sequence[str]) -> str:
    real = os.path.realpath(os.path.expanduser(path))
    where = f" (it resolves to {real})" if real != os.path.abspath(os.path.expanduser(path)) else ""
    return f"{path!r}{where} is outside this tool's {name}: {', '.join(patterns)}"


def _resolve(pattern: str) -> str:
    """The pattern with its fixed leading folders resolved like the paths it is matched against."""
    pattern = os.path.expanduser(pattern)
    magic = _MAGIC.search(pattern)
    if magic is None:
        return os.path.realpath(pattern)
    cut = pattern.rfind("/", 0, magic.start())
    if cut <= 0:
        return pattern
    return os.path.realpath(pattern[:cut]).rstrip("/") + pattern[cut:]


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression over a whole path (see the module docstring)."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("/**", i) and (i + 3 == n or pattern[i + 3] == "/"):
            out.append("(?:/.*)?")           # /** : zero or more segments (the folder itself included)
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                out.append(re.escape("["))
                i += 1
                continue
            body = pattern[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
