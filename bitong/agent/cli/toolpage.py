"""``bitong show TOOL``: one tool as a page a person reads before calling it.

What it does and why, who wrote it, its params as a table, what it may
touch (permissions), its limits (constraints), what it does not do, and
example calls built from the schema (required params, with defaults or
enum values where the definition gives them), so a reader can paste one.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from google.protobuf import json_format

from bitong.v1.agent_pb2 import ParamSpec, ToolDef

from ..calling.params import whole_numbers

__all__ = ["render"]


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(whole_numbers(value), ensure_ascii=False)




def _limits(spec: ParamSpec) -> str:
    parts = []
    doc = json_format.MessageToDict(spec, preserving_proto_field_name=True)
    if "enum" in doc:
        parts.append("one of " + ", ".join(_value(v) for v in doc["enum"]))
    for key, word in (("min", ">="), ("max", "<=")):
        if key in doc:
            parts.append(f"{word} {_value(doc[key])}")
    if doc.get("pattern"):
        parts.append(f"matches {doc['pattern']}")
    if doc.get("normalize"):
        parts.append("normalize: " + ", ".join(doc["normalize"]))
    return "; ".join(parts)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return out


def _example(tool: ToolDef, params: dict[str, ParamSpec], everything: bool) -> str:
    words = ["bitong", "call", tool.name]
    for name, spec in params.items():
        doc = json_format.MessageToDict(spec, preserving_proto_field_name=True)
        if not (spec.required or everything):
            continue
        if "default" in doc:
            value = doc["default"]
        elif doc.get("enum"):
            value = doc["enum"][0]
        else:
            value = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(spec.type, f"<{name}>")
        if isinstance(value, str):
            words.append(f"{name}={value}")
        else:
            words.append(f"{name}:={_value(value)}")
    if tool.constraints.require_confirm:
        words.append("--yes")
    return " ".join(shlex.quote(w) if i > 2 else w for i, w in enumerate(words))


def render(tool: ToolDef) -> str:
    """The page, as text for a terminal."""
    c = tool.constraints
    lines = [f"{tool.name}  ({tool.display})  version {tool.version or '0.1.0'}",
             "",
             f"  what   {tool.intent}",
             f"  why    {tool.why}",
             f"  by     {tool.author}, {tool.created}",
             f"  runs   executor {tool.executor}, method {tool.method}"
             + (f": {tool.command}" if tool.command else ""),
             f"  file   {tool.source_path or '-'}",
             ""]
    params = dict(sorted(tool.params_schema.items(), key=lambda kv: (not kv[1].required, kv[0])))
    if params:
        rows = [["param", "type", "required", "default", "limits", "description"]]
        for name, spec in params.items():
            doc = json_format.MessageToDict(spec, preserving_proto_field_name=True)
            rows.append([name, spec.type, "yes" if spec.required else "no",
                         _value(doc["default"]) if "default" in doc else "-", _limits(spec) or "-",
                         spec.description or "-"])
        lines += ["params", *_table(rows), ""]
    else:
        lines += ["params: none", ""]
    perms = json_format.MessageToDict(tool.permissions, preserving_proto_field_name=True)
    lines.append("permissions")
    lines += [f"  {k}: {_value(v)}" for k, v in perms.items()] or ["  none: it reads and writes nothing outside its "
                                                                   "runtime/ folder, no network"]
    confirm = f"yes, by {c.confirm_by or 'agent'}" if c.require_confirm else "no"
    lines += ["", "constraints",
              f"  timeout {(c.timeout_ms or 30000) / 1000:g} s, output up to {c.max_output_bytes or 65536} bytes "
              f"(StreamCall for more), confirmation: {confirm}"]
    if tool.non_goals:
        lines += ["", "does not", *[f"  {line}" for line in tool.non_goals]]
    if tool.trigger_keywords:
        lines += ["", "asked for as: " + ", ".join(tool.trigger_keywords)]
    lines += ["", "call it", f"  {_example(tool, params, False)}"]
    if any(not s.required for s in params.values()):
        lines.append(f"  {_example(tool, params, True)}")
    return "\n".join(lines)
