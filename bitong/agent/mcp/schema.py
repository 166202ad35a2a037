"""A ToolDef's ``params_schema`` as JSON Schema, and the tool in the shapes other ecosystems take.

One source for three consumers: ``bitong mcp`` (``tools/list``), and
``bitong tools --format json-schema|openai|mcp``, so what an MCP host is shown
and what an exported file says cannot drift.

The mapping keeps bitong's meaning, not just its words: ``min``/``max`` bound
the value of an integer or number (``minimum``/``maximum``), the length of a
string (``minLength``/``maxLength``) and the item count of an array
(``minItems``/``maxItems``), as ``bitong.agent.calling.params`` checks them. A parameter
with a duration normalizer (``duration_minutes``, ``duration_days``) also
takes text such as "20 min" or "二十分钟", so its type admits a string.
Parameters the schema does not declare are refused by bitong, hence
``additionalProperties: false``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from bitong.v1.agent_pb2 import ParamSpec, ToolDef

from ..calling.params import whole_numbers

__all__ = ["CONFIRM_ARG", "FORMATS", "JSON_SCHEMA_DIALECT", "input_schema", "description", "tool_annotations",
           "json_schema", "openai_function", "mcp_tool", "export"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

CONFIRM_ARG = "_confirm"
"""The argument that carries a confirm token back (MCP's two-step confirmation; see ``bitong.agent.mcp.bridge``)."""

FORMATS = ("json-schema", "openai", "mcp")

# normalizers that read text into the declared number (bitong.agent.calling.params.NORMALIZERS)
_TEXT_READERS = ("duration_minutes", "duration_days")

_BOUNDS = {
    "integer": ("minimum", "maximum"),
    "number": ("minimum", "maximum"),
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
}


def _plain(value: Any) -> Any:
    """A google.protobuf.Value as JSON; whole floats as ints (a Struct holds every number as a float)."""
    out = json_format.MessageToDict(value)
    return whole_numbers(out)




def _bound(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def param_schema(spec: ParamSpec) -> dict[str, Any]:
    """One parameter as a JSON Schema property."""
    out: dict[str, Any] = {}
    kind = spec.type or "string"
    if any(rule in _TEXT_READERS for rule in spec.normalize) and kind != "string":
        out["type"] = [kind, "string"]
    else:
        out["type"] = kind
    if spec.description:
        out["description"] = spec.description
    if spec.enum:
        out["enum"] = [_plain(v) for v in spec.enum]
    if spec.HasField("default"):
        out["default"] = _plain(spec.default)
    low, high = _BOUNDS.get(kind, ("minimum", "maximum"))
    if spec.HasField("min"):
        out[low] = _bound(spec.min)
    if spec.HasField("max"):
        out[high] = _bound(spec.max)
    if spec.pattern:
        out["pattern"] = spec.pattern
    return out


def _order(tool: ToolDef) -> list[str]:
    """Parameter names in the order the file declares them (then any others, sorted)."""
    order = [name for name in tool.param_order if name in tool.params_schema]
    return order + sorted(name for name in tool.params_schema if name not in order)


def input_schema(tool: ToolDef, *, confirm_arg: bool = False) -> dict[str, Any]:
    """The tool's parameters as one JSON Schema object.

    ``confirm_arg``: a ``require_confirm`` tool also takes :data:`CONFIRM_ARG`
    (how an MCP host without elicitation sends the token back).
    """
    properties = {name: param_schema(tool.params_schema[name]) for name in _order(tool)}
    required = [name for name in _order(tool) if tool.params_schema[name].required]
    if confirm_arg and tool.constraints.require_confirm:
        properties[CONFIRM_ARG] = {
            "type": "string",
            "description": "only when a previous call of this tool answered that it needs confirmation: the "
                           "confirm token it gave (with the same arguments)",
        }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def description(tool: ToolDef) -> str:
    """What the tool does and why it exists, plus what a host must know before calling it."""
    parts = [tool.intent.strip()]
    if tool.why.strip():
        parts.append(f"Why: {tool.why.strip()}")
    if tool.non_goals:
        parts.append("Not for: " + "; ".join(g.strip() for g in tool.non_goals if g.strip()))
    if tool.constraints.require_confirm:
        parts.append("Asks for confirmation before it runs.")
    return "\n\n".join(p for p in parts if p)


def tool_annotations(tool: ToolDef) -> dict[str, Any]:
    """MCP tool annotations from the definition.

    Read-only: it may neither write files, run programs nor reach the network
    (a request may change something at the other end), and its author did not
    ask for confirmation (a host may run a read-only tool without asking).
    Destructive: it may overwrite or remove (fs_write, exec) or its author
    asked for confirmation. Open world: it talks to the network.
    """
    perms = tool.permissions
    read_only = not (perms.fs_write or perms.exec or perms.network or tool.constraints.require_confirm)
    out: dict[str, Any] = {"title": tool.display or tool.name, "readOnlyHint": read_only}
    if not read_only:
        out["destructiveHint"] = bool(perms.fs_write or perms.exec or tool.constraints.require_confirm)
    out["openWorldHint"] = bool(perms.network)
    return out


def json_schema(tool: ToolDef) -> dict[str, Any]:
    """A standalone JSON Schema document (draft 2020-12) for one tool's arguments."""
    return {"$schema": JSON_SCHEMA_DIALECT, "title": tool.name, "description": description(tool),
            **input_schema(tool)}


def openai_function(tool: ToolDef) -> dict[str, Any]:
    """An OpenAI function-calling tool (Chat Completions ``tools`` entry)."""
    return {"type": "function",
            "function": {"name": tool.name, "description": description(tool), "parameters": input_schema(tool)}}


def mcp_tool(tool: ToolDef, *, confirm_arg: bool = True) -> dict[str, Any]:
    """The tool as ``bitong mcp`` lists it in ``tools/list`` (MCP wire names)."""
    return {"name": tool.name, "title": tool.display or tool.name, "description": description(tool),
            "inputSchema": input_schema(tool, confirm_arg=confirm_arg), "annotations": tool_annotations(tool)}


def export(tools: list[ToolDef], fmt: str) -> Any:
    """Every tool in one of :data:`FORMATS`: a JSON array, or for ``mcp`` a ``tools/list`` result."""
    if fmt == "json-schema":
        return [json_schema(t) for t in tools]
    if fmt == "openai":
        return [openai_function(t) for t in tools]
    if fmt == "mcp":
        return {"tools": [mcp_tool(t) for t in tools]}
    raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
