"""Parsed values to a checked ``ToolDef``: the format's rules, with positions.

Everything the spec requires is checked here, defaults are applied here, and
every error points at the line and column of the value at fault.

This file is the one source of the rules for both twins: the pure twin
imports it, the compiled twin is this same file compiled by Cython as
``bitong.parser._build`` (``_build.pxd`` declares the types; the file stays plain
Python). So nothing here may depend on being interpreted, and walks over the
value tree are loops, not recursion: compiled code has no recursion limit to
stop a pathologically nested value from overflowing the C stack.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import math
import re
from typing import Any

from bitong.v1 import agent_pb2 as pb
from google.protobuf import struct_pb2

from . import cron, nodes, patterns   # nodes for annotations; compiled as bitong.parser._build, values are bitong.parser._nodes.Node
from .errors import ParseError

__all__ = [
    "DEFAULT_TIMEOUT_MS", "DEFAULT_MAX_OUTPUT_BYTES", "DEFAULT_VERSION",
    "EXECUTORS", "PARAM_TYPES", "NORMALIZERS", "build", "placeholders",
]

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_OUTPUT_BYTES = 65_536
DEFAULT_VERSION = "0.1.0"
EXECUTORS = ("shell", "gatekeeper", "hlpd-api", "git-forgejo", "python", "http")
PARAM_TYPES = ("string", "integer", "number", "boolean", "array", "object")
NORMALIZERS = ("trim", "lower", "upper", "path", "duration_minutes", "duration_days", "boolean")

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SEMVER_RE = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
)
# ``{name}`` is a parameter; ``{{`` and ``}}`` are literal braces; any other
# brace (``find -exec ... {} +``, ``awk '{print $1}'``) is literal text.
_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{[ \t]*([A-Za-z0-9_-]+)[ \t]*\}")
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
# Maps and lists nest at most this deep (the file itself is level 1): deeper values
# would overflow the recursion of protobuf's Struct conversion and help no tool.
MAX_DEPTH = 32

REQUIRED = ("name", "display", "intent", "method", "executor", "params_schema",
            "constraints", "author", "created", "why")
OPTIONAL = ("version", "trigger_keywords", "non_goals", "permissions", "retry", "command", "endpoint", "schedule",
            "rollout")
_SCHEDULE_KEYS = ("every_s", "cron", "params", "report")
_CONSTRAINT_KEYS = ("timeout_ms", "max_output_bytes", "require_confirm", "confirm_by", "max_memory_mb", "max_procs",
                    "cpu_s")
CONFIRM_BY = ("agent", "human")
_PERMISSION_FLAGS = ("fs_read", "fs_write", "exec", "network", "secret")
_PERMISSION_LISTS = ("fs_read_paths", "fs_write_paths", "network_hosts")
_PARAM_KEYS = ("type", "required", "description", "default", "enum", "min", "max", "pattern", "normalize",
               "allow_option")
# The keys each map allows, as dicts: ordered for messages, hashed for lookups.
_ALLOWED_TOP = dict.fromkeys(REQUIRED + OPTIONAL)
_ALLOWED_CONSTRAINTS = dict.fromkeys(_CONSTRAINT_KEYS)
_ALLOWED_PERMISSIONS = dict.fromkeys(_PERMISSION_FLAGS + _PERMISSION_LISTS)
_ALLOWED_PARAM = dict.fromkeys(_PARAM_KEYS)
_ALLOWED_SCHEDULE = dict.fromkeys(_SCHEDULE_KEYS)
_KIND_WORDS = {
    "str": "a quoted string", "text": "text", "int": "an integer", "float": "a decimal",
    "bool": "true or false", "map": "a map", "list": "a list", "block": "block text", "null": "nothing",
}


class _Ctx:
    """The file being built: its path and source, for errors that point into it."""

    __slots__ = ("path", "source", "_lines")

    def __init__(self, path: str, source: bytes | str = "") -> None:
        self.path = path
        self.source = source
        self._lines: list[str] | None = None

    def fail(self, node: Any, message: str) -> ParseError:
        return ParseError(self.path, node.line, node.column, message)

    def line(self, lineno: int) -> str:
        """Source line ``lineno`` as the lexer saw it (no BOM, no CR), for column maths."""
        if self._lines is None:
            text = self.source.decode("utf-8") if isinstance(self.source, bytes) else self.source
            self._lines = text.removeprefix("\ufeff").split("\n")
        lines = self._lines
        return lines[lineno - 1].removesuffix("\r") if 0 < lineno <= len(lines) else ""


def _value_column(ctx: _Ctx, node: nodes.Node, offset: int) -> int:
    """The column of character ``offset`` of a scalar's value in the file.

    Unquoted text maps one to one; in a quoted string the quote and each
    escape (``\\n``, ``\\u4e2d``, ``''``) take more source characters than they give.
    """
    if node.kind != "str":
        return node.column + offset
    line = ctx.line(node.line)
    i = node.column  # 0-based index just after the opening quote
    quote = line[node.column - 1] if 0 < node.column <= len(line) else '"'
    for _ in range(offset):
        if i >= len(line):
            break
        if quote == "'":
            i += 2 if line.startswith("''", i) else 1
        elif line[i] != "\\":
            i += 1
        elif line.startswith("\\U", i):
            i += 10
        elif line.startswith("\\u", i):
            high = line[i + 2 : i + 6].lower()
            i += 12 if "d800" <= high <= "dbff" else 6
        else:
            i += 2
    return i + 1


def _check_tree(ctx: _Ctx, root: nodes.Node) -> None:
    """Rules for every value in the file, wherever it sits (extension keys and
    ``default: {...}`` included): a key appears once per map, numbers fit.

    Depth first in file order, so the first problem in the file is the one
    reported; a stack of (pending items, keys seen in their map or None in a
    list) stands in for recursion.
    """
    stack: list[Any] = [(iter((root,)), None)]
    while stack:
        items, seen = stack[-1]
        for item in items:
            if seen is not None:
                key, node = item
                name = key.value
                first = seen.get(name)
                if first is not None:
                    raise ParseError(ctx.path, key.line, key.column,
                                     f"duplicate key '{name}' (first at line {first.line}): expected each key once per map")
                seen[name] = key
            else:
                node = item
            kind = node.kind
            if (kind == "map" or kind == "list") and len(stack) > MAX_DEPTH:
                raise ctx.fail(node, f"maps and lists nested deeper than {MAX_DEPTH} levels: expected at most {MAX_DEPTH}")
            if kind == "map":
                stack.append((iter(node.value), {}))
                break
            if kind == "list":
                stack.append((iter(node.value), None))
                break
            if kind == "int" and abs(node.value) > _INT64_MAX:
                raise ctx.fail(node, f"integer out of range: expected -{_INT64_MAX} to {_INT64_MAX}")
            if kind == "float" and not math.isfinite(node.value):
                raise ctx.fail(node, "number out of range: expected a finite decimal")
        else:
            stack.pop()


def _is_extension(key: str) -> bool:
    return key.startswith("x-") or key.startswith("x_")


def _entries(ctx: _Ctx, node: nodes.Node, where: str, allowed: dict[str, None] | None) -> dict[str, tuple[Any, nodes.Node]]:
    """A map node as {key: (key_token, value)}, refusing repeats and unknown keys."""
    if node.kind != "map":
        raise ctx.fail(node, f"{where} must be a map, found {_KIND_WORDS[node.kind]}")
    out: dict[str, tuple[Any, nodes.Node]] = {}
    for key, value in node.value:
        name = key.value
        if name in out:
            first = out[name][0]
            raise ParseError(ctx.path, key.line, key.column,
                             f"duplicate key '{name}' in {where} (first at line {first.line}): expected each key once per map")
        if allowed is not None and name not in allowed and not _is_extension(name):
            hint = difflib.get_close_matches(name, list(allowed), n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else f"; expected one of: {', '.join(allowed)}"
            raise ParseError(ctx.path, key.line, key.column, f"unknown key '{name}' in {where}{extra}")
        out[name] = (key, value)
    return out


def _text(ctx: _Ctx, node: nodes.Node, what: str, *, empty_ok: bool = False) -> str:
    """A field that holds text: any scalar, kept as written (``1.10`` stays "1.10")."""
    if node.kind in ("str", "text", "block", "int", "float", "bool"):
        value = node.raw if node.kind != "block" else node.value
        if not empty_ok and not value.strip():
            raise ctx.fail(node, f"{what} must not be empty")
        return value
    if node.kind == "null":
        if empty_ok:
            return ""
        raise ctx.fail(node, f"{what} must not be empty")
    raise ctx.fail(node, f"{what} must be text, found {_KIND_WORDS[node.kind]}")


def _int(ctx: _Ctx, node: nodes.Node, what: str, *, minimum: int, maximum: int = _INT64_MAX) -> int:
    """An integer field within [minimum, maximum]: ``maximum`` is the range of
    its ToolDef field, so that storing it can never fail (retry is an int32)."""
    if node.kind != "int":
        raise ctx.fail(node, f"{what} must be an integer, found {_KIND_WORDS[node.kind]}")
    if node.value < minimum:
        raise ctx.fail(node, f"{what} must be at least {minimum}, found {node.value}")
    if node.value > maximum:
        raise ctx.fail(node, f"{what} must be at most {maximum}, found {node.value}")
    number: int = node.value
    return number


def _bool(ctx: _Ctx, node: nodes.Node, what: str) -> bool:
    if node.kind != "bool":
        raise ctx.fail(node, f"{what} must be true or false, found {_KIND_WORDS[node.kind]} {node.raw!r}".rstrip())
    flag: bool = node.value
    return flag


def _text_list(ctx: _Ctx, node: nodes.Node, what: str, *, lines: bool = True) -> list[str]:
    """A list of text; a single scalar is a one-item list; block text gives one
    item per non-blank line (trimmed), the way people write lists as text."""
    if node.kind == "list":
        return [_text(ctx, item, f"each item of {what}") for item in node.value]
    if node.kind == "null":
        return []
    if node.kind == "block" and lines:
        return [ln.strip() for ln in node.value.split("\n") if ln.strip()]
    if node.kind == "map":
        raise ctx.fail(node, f"{what} must be a list or text, found a map")
    return [_text(ctx, node, what)]


def _plain(node: nodes.Node) -> Any:
    """A node as plain Python data (for defaults and enums).

    Containers are made empty, put in place, then filled from a stack, so
    that nesting costs no recursion (see the module docstring).
    """
    if node.kind != "map" and node.kind != "list":
        return node.value
    out: Any = {} if node.kind == "map" else []
    stack: list[Any] = [(node, out)]
    while stack:
        src, dst = stack.pop()
        is_map = src.kind == "map"
        for entry in src.value:
            child = entry[1] if is_map else entry
            if child.kind == "map":
                value: Any = {}
                stack.append((child, value))
            elif child.kind == "list":
                value = []
                stack.append((child, value))
            else:
                value = child.value
            if is_map:
                dst[entry[0].value] = value
            else:
                dst.append(value)
    return out


def _to_value(data: Any) -> struct_pb2.Value:
    value = struct_pb2.Value()
    if data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        value.bool_value = data
    elif isinstance(data, (int, float)):
        value.number_value = data
    elif isinstance(data, str):
        value.string_value = data
    elif isinstance(data, dict):
        value.struct_value.SetInParent()  # an empty {} must still be a struct, not unset
        value.struct_value.update(data)
    else:
        value.list_value.SetInParent()
        value.list_value.extend(data)
    return value


def _fits(ptype: str, node: nodes.Node) -> bool:
    """Does a literal in the file fit a parameter type?"""
    kind = node.kind
    if ptype == "string":
        return kind in ("str", "text", "block")
    if ptype == "integer":
        return kind == "int"
    if ptype == "number":
        return kind in ("int", "float")
    if ptype == "boolean":
        return kind == "bool"
    if ptype == "array":
        return kind == "list"
    return kind == "map"


def _param(ctx: _Ctx, key: Any, node: nodes.Node, spec: pb.ParamSpec) -> None:
    """One parameter spec; errors about the spec as a whole point at its name."""
    name = key.value
    where = f"parameter '{name}'"
    if node.kind == "null":
        raise ctx.fail(key, f"{where} needs a spec: expected a map such as {{ type: string }}")
    fields = _entries(ctx, node, where, _ALLOWED_PARAM)
    if "type" not in fields:
        raise ctx.fail(key, f"{where} needs a type: expected type: one of {', '.join(PARAM_TYPES)}")
    type_node = fields["type"][1]
    ptype = _text(ctx, type_node, f"the type of {where}")
    if ptype not in PARAM_TYPES:
        raise ctx.fail(type_node, f"unknown type '{ptype}' for {where}; expected one of: {', '.join(PARAM_TYPES)}")
    spec.type = ptype
    if "required" in fields:
        spec.required = _bool(ctx, fields["required"][1], f"required of {where}")
    if "description" in fields:
        spec.description = _text(ctx, fields["description"][1], f"description of {where}", empty_ok=True)
    if "allow_option" in fields:
        spec.allow_option = _bool(ctx, fields["allow_option"][1], f"allow_option of {where}")
    bounds: dict[str, float] = {}  # kept here: cheaper than asking the message (HasField) again
    for bound in ("min", "max"):
        if bound in fields:
            bnode = fields[bound][1]
            if bnode.kind not in ("int", "float"):
                raise ctx.fail(bnode, f"{bound} of {where} must be a number, found {_KIND_WORDS[bnode.kind]}")
            if ptype in ("boolean", "object"):
                raise ctx.fail(bnode, f"{bound} does not apply to a {ptype} parameter ({where}): expected it only on integer, number, string or array")
            bounds[bound] = float(bnode.value)
            setattr(spec, bound, bounds[bound])
    lo, hi = bounds.get("min"), bounds.get("max")
    if lo is not None and hi is not None and lo > hi:
        raise ctx.fail(fields["max"][1], f"max of {where} is below its min: expected max >= min")
    pattern = ""
    if "pattern" in fields:
        pnode = fields["pattern"][1]
        pattern = _text(ctx, pnode, f"pattern of {where}")
        if ptype != "string":
            raise ctx.fail(pnode, f"pattern applies only to a string parameter ({where} is {ptype}): expected no pattern here")
        try:
            patterns.check(pattern)
        except patterns.PatternError as exc:
            raise ctx.fail(pnode, f"pattern of {where} is refused: {exc}") from None
        spec.pattern = pattern
    rules: list[str] = []
    if "normalize" in fields:
        nnode = fields["normalize"][1]
        rules = _text_list(ctx, nnode, f"normalize of {where}")
        items = nnode.value if nnode.kind == "list" else [nnode] * len(rules)
        for rule, at in zip(rules, items):
            if rule not in NORMALIZERS:
                raise ctx.fail(at, f"unknown normalize rule '{rule}' for {where}; expected any of: {', '.join(NORMALIZERS)}")
        spec.normalize.extend(rules)
    if "enum" in fields:
        enode = fields["enum"][1]
        if enode.kind != "list" or not enode.value:
            raise ctx.fail(enode, f"enum of {where} must be a non-empty list")
        for item in enode.value:
            if not _fits(ptype, item):
                raise ctx.fail(item, f"enum value {item.raw!r} of {where} is {_KIND_WORDS[item.kind]}: expected a value of type {ptype}")
            spec.enum.append(_to_value(_plain(item)))
    if "default" in fields:
        dnode = fields["default"][1]
        if dnode.kind != "null":
            if not _fits(ptype, dnode):
                raise ctx.fail(dnode, f"default of {where} is {_KIND_WORDS[dnode.kind]}: expected a value of type {ptype}")
            default = _plain(dnode)
            if "enum" in fields and default not in [_plain(e) for e in fields["enum"][1].value]:
                raise ctx.fail(dnode, f"default of {where} is not one of its enum values: expected one of: {', '.join(e.raw for e in fields['enum'][1].value)}")
            if not rules:
                _default_in_bounds(ctx, dnode, default, ptype, where, lo, hi, pattern)
            spec.default.CopyFrom(_to_value(default))


def _default_in_bounds(ctx: _Ctx, node: nodes.Node, default: Any, ptype: str, where: str,
                       lo: float | None, hi: float | None, pattern: str) -> None:
    """A default must pass the parameter's own min/max (value, or length for
    string/array) and pattern: a default that its own call would refuse is a bug.
    With ``normalize`` rules the call normalizes the default first
    (agent/params.py), so the caller leaves the check to the call."""
    if ptype in ("integer", "number"):
        size, unit = default, ""
    elif ptype in ("string", "array"):
        size, unit = len(default), "length "
    else:
        return
    if lo is not None and size < lo:
        raise ctx.fail(node, f"default of {where} has {unit}{size}: expected at least {lo:g}")
    if hi is not None and size > hi:
        raise ctx.fail(node, f"default of {where} has {unit}{size}: expected at most {hi:g}")
    if pattern and not patterns.search(pattern, default):
        raise ctx.fail(node, f"default of {where} does not match its pattern: expected a value matching {pattern!r}")


def placeholders(command: str) -> list[tuple[str, int]]:
    """The ``{param}`` names of an argv template with their offsets in it.

    ``{name}`` (letters, digits, ``_``, ``-``; spaces inside the braces are
    ignored) is a parameter; ``{{`` and ``}}`` are literal braces; any other
    brace is literal text. Executors substitute with the same rule.
    """
    return [(m.group(1), m.start()) for m in _PLACEHOLDER_RE.finditer(command) if m.group(1)]


def _command(ctx: _Ctx, node: nodes.Node, params: pb.ToolDef) -> str:
    command = _text(ctx, node, "command")
    for name, offset in placeholders(command):
        if name not in params.params_schema:
            raise ParseError(ctx.path, node.line, _value_column(ctx, node, offset),
                             f"command uses {{{name}}}, which params_schema does not declare: expected one of: "
                             f"{', '.join(params.param_order) or 'none (params_schema is empty)'}")
    return command


def _non_goals(ctx: _Ctx, node: nodes.Node) -> list[str]:
    """Text, a list, or block text (one item per non-blank line)."""
    return _text_list(ctx, node, "non_goals")


def _schedule(ctx: _Ctx, field: tuple[Any, nodes.Node], tool: pb.ToolDef) -> None:
    """``schedule: { every_s: N | cron: "m h dom mon dow", params: {...}, report: field }``."""
    key, node = field
    sfields = _entries(ctx, node, "schedule", _ALLOWED_SCHEDULE)
    sched = tool.schedule
    if ("every_s" in sfields) == ("cron" in sfields):
        raise ctx.fail(key, "schedule needs exactly one of every_s (seconds between runs) or cron (five fields)")
    if "every_s" in sfields:
        sched.every_s = _int(ctx, sfields["every_s"][1], "schedule.every_s", minimum=1, maximum=_INT32_MAX)
    else:
        cnode = sfields["cron"][1]
        expression = _text(ctx, cnode, "schedule.cron")
        try:
            cron.parse(expression)
        except ValueError as exc:
            raise ctx.fail(cnode, f"schedule.cron: {exc}: expected five fields such as \"*/5 * * * *\" "
                                  "(minute hour day-of-month month day-of-week)") from None
        sched.cron = expression
    if "params" in sfields and sfields["params"][1].kind != "null":
        pnode = sfields["params"][1]
        if pnode.kind != "map":
            raise ctx.fail(pnode, f"schedule.params must be a map of parameters, found {_KIND_WORDS[pnode.kind]}")
        for pkey, _ in pnode.value:
            if pkey.value not in tool.params_schema:
                raise ParseError(ctx.path, pkey.line, pkey.column,
                                 f"schedule.params names '{pkey.value}', which params_schema does not declare: "
                                 f"expected one of: {', '.join(tool.param_order) or '(no parameters)'}")
        sched.params.update(_plain(pnode))
    if "report" in sfields:
        sched.report = _text(ctx, sfields["report"][1], "schedule.report")


def build(header: Any, root: nodes.Node, path: str, source: bytes | str, folder: str | None = None) -> pb.ToolDef:
    """Check the parsed file against the format and return its ToolDef.

    ``folder``, when given, is the name of the folder holding the file, which
    must equal the tool's name.
    """
    ctx = _Ctx(path, source)
    _check_tree(ctx, root)
    fields = _entries(ctx, root, "the tool definition", _ALLOWED_TOP)
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        # no token to point at: the file as a whole is at fault
        raise ParseError(path, 1, 1, f"missing required field{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
                                     f" (expected all of: {', '.join(REQUIRED)})")
    tool = pb.ToolDef()

    name_node = fields["name"][1]
    name = _text(ctx, name_node, "name")
    if not _NAME_RE.fullmatch(name):
        raise ctx.fail(name_node, f"name '{name}' must match ^[a-z0-9][a-z0-9_-]{{0,63}}$ (lowercase, no spaces)")
    if folder is not None and folder != name:
        raise ctx.fail(name_node, f"name '{name}' does not match its folder '{folder}' (the folder must be named after the tool)")
    tool.name = name
    tool.display = _text(ctx, fields["display"][1], "display")
    tool.intent = _text(ctx, fields["intent"][1], "intent")
    tool.method = _text(ctx, fields["method"][1], "method")
    ex_node = fields["executor"][1]
    executor = _text(ctx, ex_node, "executor")
    if executor not in EXECUTORS:
        raise ctx.fail(ex_node, f"unknown executor '{executor}'; expected one of: {', '.join(EXECUTORS)}")
    tool.executor = executor
    tool.author = _text(ctx, fields["author"][1], "author")
    created_node = fields["created"][1]
    created = _text(ctx, created_node, "created")
    if not _DATE_RE.fullmatch(created):
        raise ctx.fail(created_node, f"created must be a date YYYY-MM-DD, found '{created}'")
    try:
        datetime.date.fromisoformat(created)
    except ValueError:
        raise ctx.fail(created_node, f"created '{created}' is not a real date: expected a calendar date YYYY-MM-DD") from None
    tool.created = created
    tool.why = _text(ctx, fields["why"][1], "why")

    schema_node = fields["params_schema"][1]
    schema = {} if schema_node.kind == "null" else _entries(ctx, schema_node, "params_schema", None)
    for pname, (key, pnode) in schema.items():
        _param(ctx, key, pnode, tool.params_schema[pname])
        tool.param_order.append(pname)

    constraints = tool.constraints
    constraints.timeout_ms = DEFAULT_TIMEOUT_MS
    constraints.max_output_bytes = DEFAULT_MAX_OUTPUT_BYTES
    cnode = fields["constraints"][1]
    if cnode.kind != "null":
        cfields = _entries(ctx, cnode, "constraints", _ALLOWED_CONSTRAINTS)
        if "timeout_ms" in cfields:
            constraints.timeout_ms = _int(ctx, cfields["timeout_ms"][1], "timeout_ms", minimum=1)
        if "max_output_bytes" in cfields:
            constraints.max_output_bytes = _int(ctx, cfields["max_output_bytes"][1], "max_output_bytes", minimum=1)
        if "require_confirm" in cfields:
            constraints.require_confirm = _bool(ctx, cfields["require_confirm"][1], "require_confirm")
        for limit in ("max_memory_mb", "max_procs", "cpu_s"):
            if limit in cfields:
                setattr(constraints, limit, _int(ctx, cfields[limit][1], limit, minimum=1))
        if "confirm_by" in cfields:
            by_node = cfields["confirm_by"][1]
            by = _text(ctx, by_node, "confirm_by")
            if by not in CONFIRM_BY:
                raise ctx.fail(by_node, f"confirm_by must be one of: {', '.join(CONFIRM_BY)}, found '{by}'")
            if by == "human" and not constraints.require_confirm:
                raise ctx.fail(by_node, "confirm_by: human needs require_confirm: true (a person confirms only a "
                                        "call that asks for confirmation)")
            constraints.confirm_by = by
    if not constraints.confirm_by:
        constraints.confirm_by = "agent"

    tool.version = DEFAULT_VERSION
    if "version" in fields:
        vnode = fields["version"][1]
        version = _text(ctx, vnode, "version")
        if not _SEMVER_RE.fullmatch(version):
            raise ctx.fail(vnode, f"version must be a semantic version such as 1.2.0, found '{version}'")
        tool.version = version
    if "trigger_keywords" in fields:
        tool.trigger_keywords.extend(_text_list(ctx, fields["trigger_keywords"][1], "trigger_keywords"))
    if "non_goals" in fields:
        tool.non_goals.extend(_non_goals(ctx, fields["non_goals"][1]))
    perms = tool.permissions
    if "permissions" in fields and fields["permissions"][1].kind != "null":
        pfields = _entries(ctx, fields["permissions"][1], "permissions", _ALLOWED_PERMISSIONS)
        for flag in _PERMISSION_FLAGS:
            if flag in pfields:
                setattr(perms, flag, _bool(ctx, pfields[flag][1], f"permissions.{flag}"))
        for lst in _PERMISSION_LISTS:
            if lst in pfields:
                getattr(perms, lst).extend(_text_list(ctx, pfields[lst][1], f"permissions.{lst}"))
        if "network_hosts" in pfields and not perms.network:
            raise ctx.fail(pfields["network_hosts"][0], "permissions.network_hosts narrows network: true, "
                           "and this tool does not declare it: expected network: true beside it")
    if "retry" in fields:
        tool.retry = _int(ctx, fields["retry"][1], "retry", minimum=0, maximum=_INT32_MAX)
    if "endpoint" in fields:
        tool.endpoint = _text(ctx, fields["endpoint"][1], "endpoint")
    if "command" in fields:
        cnode = fields["command"][1]
        if executor != "shell":
            raise ctx.fail(fields["command"][0], f"command is only for executor: shell (this tool uses {executor}): expected no command here")
        tool.command = _command(ctx, cnode, tool)
    if "schedule" in fields and fields["schedule"][1].kind != "null":
        _schedule(ctx, fields["schedule"], tool)
    if "rollout" in fields:
        tool.rollout = _int(ctx, fields["rollout"][1], "rollout (a percentage)", minimum=1, maximum=100)
    if header is not None:
        tool.address = header.value
    tool.source_path = path
    data = source.encode("utf-8") if isinstance(source, str) else source
    tool.content_sha256 = hashlib.sha256(data).hexdigest()
    return tool
