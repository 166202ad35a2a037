"""The ``hlpd-api`` executor: a direct HTTP call to the configured HLDP API.

Seed 000 §2 step 4 says only "直接HTTP调用HLDP API". How a tool's
``method:`` becomes a request:

* ``method: VERB /path`` (``GET``, ``POST``, ``PUT``, ``PATCH``, ``DELETE``,
  ``HEAD``), the path under the endpoint's base URL, with ``{param}``
  holes: ``method: GET /modules/{module_id}/layers``. Each hole takes that
  parameter's value as exactly one path segment (URL-encoded, so a ``/`` in
  a value cannot reach another path);
* ``method: name`` (no verb, no slash) is an RPC-style call:
  ``POST {base}/name`` with every parameter in a JSON body.

The parameters the path does not use go to the query string for GET, HEAD
and DELETE (``?a=1&b=x``; a list repeats its key, an object is JSON text),
and to a JSON object body for POST, PUT and PATCH. Values are rendered like
shell arguments: text as is, ``true``/``false``, ``20`` not ``20.0``.

The endpoint is the tool's ``endpoint:`` or the configured default of
``[hlpd-api]``; its token (``token_env``/``token_file``) goes in
``Authorization: Bearer``. The body of the answer is the output; every HTTP
rule is :mod:`.http_client`'s.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, NamedTuple

from bitong.v1.agent_pb2 import ToolDef

from ...config import Defaults, SecretUnavailable, Service
from .base import Outcome, Sink
from .http_client import Request, fetch, query_string, quote_segment
from .http_pool import Pool
from .shell import DEFAULT_MAX_OUTPUT, render_value

__all__ = ["HlpdApiExecutor", "Route", "route"]

_VERBS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
_HOLE = re.compile(r"\{\s*([A-Za-z0-9_-]+)\s*\}")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class Route(NamedTuple):
    """The request a ``method:`` means: its verb, its path template and the holes in it."""

    verb: str
    path: str
    holes: tuple[str, ...]


@functools.lru_cache(maxsize=256)
def route(method: str) -> Route:
    """The request a ``method:`` means; raises ValueError with what was expected."""
    text = method.strip()
    verb, _, rest = text.partition(" ")
    if verb.upper() in _VERBS and rest.strip().startswith("/"):
        path = rest.strip()
        return Route(verb.upper(), path, tuple(m.group(1) for m in _HOLE.finditer(path)))
    if _NAME.fullmatch(text):
        return Route("POST", "/" + text, ())
    raise ValueError(f"method {method!r} is neither \"VERB /path/{{param}}\" (e.g. \"GET /modules/{{id}}\") "
                     "nor a bare name (POST {base}/name with the params as JSON)")


class HlpdApiExecutor:
    """``executor: hlpd-api``; one instance per sidecar, holding its endpoints."""

    name = "hlpd-api"

    def __init__(self, service: Service, defaults: Defaults = Defaults(), pool: Pool | None = None) -> None:
        self.service = service
        self.defaults = defaults
        self.pool = pool or Pool()   # kept-alive connections (http_pool.py)

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """One request as the module docstring maps it; see base.py for the rules."""
        try:
            verb, template, holes = route(tool.method)
        except ValueError as exc:
            return Outcome(ok=False, error=f"tool definition: {exc}")
        missing = [h for h in holes if params.get(h) is None]
        if missing:
            return Outcome(ok=False, error=f"method {tool.method!r} needs {', '.join(missing)} for its path, "
                                           "and the call has no value for it")
        try:
            endpoint = self.service.pick(tool.endpoint)
            headers = endpoint.auth_headers()
        except (LookupError, SecretUnavailable) as exc:
            return Outcome(ok=False, error=str(exc))
        path = _HOLE.sub(lambda m: quote_segment(render_value(params[m.group(1)])), template)
        rest = {k: v for k, v in params.items() if k not in holes}
        url = endpoint.url + path
        body = b""
        if verb in ("GET", "HEAD", "DELETE"):
            query = query_string(rest)
            if query:
                url += ("&" if "?" in url else "?") + query
        else:
            headers.append(("Content-Type", "application/json; charset=utf-8"))
            body = json.dumps(rest, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return await fetch(Request(verb, url, headers, body), deadline=deadline,
                           cap=tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT, sink=sink,
                           user_agent=self.defaults.user_agent, pool=self.pool)
