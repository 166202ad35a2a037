"""What ``bitong lint`` finds beyond the grammar: the mistakes that would otherwise fail at the first call.

The parser checks a definition against the format; a tool can still be
unable to run: a python tool whose ``handler.py`` is missing, does not
compile, has no function named by ``method:`` or cannot take the declared
params; a Forgejo or hlpd-api ``method:`` its executor does not know. (A
shell command naming an undeclared param is the parser's error already.) Each is found here by
reading files, never by running the tool's code (lint runs on untrusted
tool folders).
"""

from __future__ import annotations

import ast
import os

from bitong.v1.agent_pb2 import ToolDef

__all__ = ["problems"]

HANDLER_FILE = "handler.py"   # = executors.handler.HANDLER_FILE, without importing the executors


def problems(tool: ToolDef) -> list[str]:
    """Each problem as ``where: what`` (``where`` a file, with ``:line:col`` when there is one)."""
    where = tool.source_path or tool.name
    if tool.executor == "python":
        return _python(tool)
    if tool.executor == "git-forgejo":
        from ..calling.executors.forgejo import METHODS

        if tool.method not in METHODS:
            return [f"{where}: executor git-forgejo has no method {tool.method!r} (known: {', '.join(METHODS)})"]
    if tool.executor == "hlpd-api":
        from ..calling.executors.hlpd_api import route

        try:
            route(tool.method)
        except ValueError as exc:
            return [f"{where}: {exc}"]
    return []


def _python(tool: ToolDef) -> list[str]:
    """handler.py beside TOOL.hdlp: it compiles, defines ``method`` at top level, and takes the params."""
    if not tool.source_path:
        return []
    handler = os.path.join(os.path.dirname(os.path.abspath(tool.source_path)), HANDLER_FILE)
    try:
        with open(handler, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        return [f"{tool.source_path}: executor python needs {HANDLER_FILE} beside it: {exc.strerror}"]
    try:
        module = ast.parse(source, handler)
    except SyntaxError as exc:
        return [f"{handler}:{exc.lineno or 1}:{exc.offset or 1}: does not compile: {exc.msg}"]
    found = [node for node in module.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == tool.method]
    if not found:
        return [f"{handler}: no top-level function {tool.method!r} (the tool's method:); define "
                f"def {tool.method}({', '.join(tool.param_order or tool.params_schema)}): ..."]
    fn = found[-1]   # the last definition is the one a call gets
    return [f"{handler}:{fn.lineno}:{fn.col_offset + 1}: {p}" for p in _signature(fn, tool)]


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, tool: ToolDef) -> list[str]:
    """The params are passed by keyword, absent optional ones left out: check both directions."""
    args = fn.args
    out = []
    if args.posonlyargs:
        out.append(f"{fn.name}() has positional-only parameters ({', '.join(a.arg for a in args.posonlyargs)}); "
                   "params are passed by keyword")
    named = args.args + args.kwonlyargs
    names = {a.arg for a in named}
    if args.kwarg is None:
        for param in tool.params_schema:
            if param not in names and param not in {a.arg for a in args.posonlyargs}:
                out.append(f"{fn.name}() does not take the declared param {param!r}")
    # which named arguments have defaults: the last len(defaults) positional ones, kw-only ones with a default
    positional_defaults = len(args.defaults)
    without_default = [a.arg for a in args.args[:len(args.args) - positional_defaults]]
    without_default += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    for name in without_default:
        spec = tool.params_schema.get(name)
        if spec is None:
            out.append(f"{fn.name}() requires {name!r}, which is not a declared param: every call would fail")
        elif not spec.required and not spec.HasField("default"):
            out.append(f"{fn.name}() requires {name!r}, an optional param without a default: give it a default "
                       "in the function or in params_schema")
    return out
