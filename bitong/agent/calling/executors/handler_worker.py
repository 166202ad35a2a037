"""The python executor's worker: one handler call, in its own interpreter.

Run by :mod:`bitong.agent.calling.executors.handler` as ``python -I -S -B handler_worker.py``
with the call on stdin as JSON::

    {"handler": "/tools/x/handler.py", "function": "run", "params": {...}, "path": [...]}

It imports only the standard library (it starts in a few milliseconds and
never loads the server's code), puts ``path`` in front of ``sys.path`` (the
tool's folder first, so a handler can import modules beside it), runs the
handler's file as the module ``handler``, and calls ``function(**params)``
(awaiting it if it is a coroutine function).

* stdout: the JSON of the return value and nothing else. The real fd 1 is
  set aside for it before the handler runs, and fd 1 becomes stderr, so a
  handler's ``print`` (or a child process it starts) cannot corrupt it;
* stderr: whatever the handler prints, then on a failure the traceback or
  the reason, whose last line says what happened;
* exit status: 0 done; 1 the handler raised (traceback); 2 the handler
  cannot be called (no such file, an import error, no such function, or
  params its signature does not take); 3 the return value is not JSON.
"""

import json
import os
import sys
import types

EXIT_OK = 0
EXIT_RAISED = 1
EXIT_UNUSABLE = 2
EXIT_NOT_JSON = 3


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _say(text: str) -> None:
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


def _traceback() -> None:
    import traceback  # only on failure: it costs milliseconds to import

    traceback.print_exc()
    sys.stderr.flush()


def _load(path: str) -> types.ModuleType:
    with open(path, "rb") as fh:
        source = fh.read()
    module = types.ModuleType("handler")
    module.__file__ = path
    sys.modules["handler"] = module  # dataclasses and pickle look a class's module up here
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def _signature_problem(fn: object, params: dict[str, object], name: str) -> str:
    """Why ``fn(**params)`` cannot bind, or "" (a plain function's code object says; no inspect import)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    count, posonly = code.co_argcount, code.co_posonlyargcount
    names = code.co_varnames[:count]
    keyword_only = code.co_varnames[count:count + code.co_kwonlyargcount]
    first_default = count - len(getattr(fn, "__defaults__", None) or ())
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    if first_default > 0 and posonly > 0:
        return (f"handler.py: {name}() has positional-only parameters without defaults; params arrive by name "
                f"(as {name}(**params)), so they cannot be given")
    by_name = list(names[posonly:]) + list(keyword_only)
    if not code.co_flags & 0x08:  # CO_VARKEYWORDS: the function has no **kwargs
        extra = sorted(set(params) - set(by_name))
        if extra:
            return (f"handler.py: {name}() does not take {', '.join(extra)} (it takes: "
                    f"{', '.join(by_name) or 'no parameters'}); the tool's params_schema and the function must "
                    "declare the same names")
    required = [n for i, n in enumerate(names) if posonly <= i < first_default]
    required += [k for k in keyword_only if k not in kwdefaults]
    missing = [k for k in required if k not in params]
    if missing:
        return (f"handler.py: {name}() needs {', '.join(missing)}, which the call did not give "
                "(give the function a default, or make the parameter required in params_schema)")
    return ""


def main() -> int:
    payload = json.loads(sys.stdin.buffer.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr  # one stream, in order: prints and tracebacks interleave as they happened
    sys.dont_write_bytecode = True
    sys.path[:0] = payload.get("path", [])
    name = payload["function"]
    params = payload.get("params", {})
    try:
        module = _load(payload["handler"])
    except Exception as exc:
        _traceback()
        _say(f"handler.py could not be loaded: {type(exc).__name__}")
        return EXIT_UNUSABLE
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == "handler")
        _say(f"handler.py has no function named {name!r} (the tool's method); it defines: "
             f"{', '.join(defined) or 'no public functions'}")
        return EXIT_UNUSABLE
    problem = _signature_problem(fn, params, name)
    if problem:
        _say(problem)
        return EXIT_UNUSABLE
    try:
        value = fn(**params)
        if isinstance(value, types.CoroutineType):
            import asyncio

            value = asyncio.run(value)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            _say(f"handler called sys.exit({exc.code!r}): a handler returns its result or raises")
            return EXIT_RAISED
        _traceback()
        return EXIT_RAISED
    try:
        data = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        _say(f"handler returned a value that is not JSON: {exc}")
        return EXIT_NOT_JSON
    sys.stderr.flush()
    _write_all(result_fd, data)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
