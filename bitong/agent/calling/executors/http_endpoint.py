"""The ``http`` executor: one generic HTTP request, described by the call's params.

Only for tools that declare ``permissions: { network: true }`` (seed 002
§2.3: a network request is a permission the file must state); any other
tool is refused before anything is sent. ``network_hosts`` narrows where it
may connect, and loopback and link-local addresses need to be listed
explicitly (see :mod:`.destinations`).

The params it reads (declare the ones the tool offers in ``params_schema``):

* ``url`` (required): ``http://`` or ``https://``; spaces and non-ASCII in
  the path and query are percent-encoded, the rest is sent as given;
* ``method``: GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS; default: the
  tool's ``method:`` when that is a verb (a ``health-check`` tool can say
  ``method: GET``), else GET;
* ``headers``: an object of name to text (a user-supplied header is sent,
  never shown back: it may be a token);
* ``body``: text is sent as UTF-8; a list or an object is sent as JSON
  with ``Content-Type: application/json`` unless ``headers`` says otherwise;
* ``timeout_s``: a shorter bound for this request (the tool's
  ``timeout_ms`` and the caller's gRPC deadline still bound it).

Any other param is a definition error (the executor would not know where to
put it). The body of the answer is the output and the status line and
headers are stderr; see :mod:`.http_client` for everything else. There is
no configured endpoint and no token here: a tool that needs a secret goes
through ``hlpd-api``, ``gatekeeper`` or ``git-forgejo``, whose tokens stay
in the server.
"""

from __future__ import annotations

import json
import time
from typing import Any
from collections.abc import Mapping

from bitong.v1.agent_pb2 import ToolDef

from ...config import Defaults
from .base import Outcome, Sink
from .http_client import Request, fetch, header
from .http_pool import Pool
from .shell import DEFAULT_MAX_OUTPUT

__all__ = ["HttpExecutor", "PARAMS", "VERBS"]

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
PARAMS = ("url", "method", "headers", "body", "timeout_s")


class HttpExecutor:
    """``executor: http``. Stateless apart from the shared defaults."""

    name = "http"

    def __init__(self, defaults: Defaults = Defaults(),
                 network_hosts: Mapping[str, tuple[str, ...]] | None = None, pool: Pool | None = None) -> None:
        self.defaults = defaults
        self.pool = pool or Pool()   # kept-alive connections (http_pool.py)
        # [network_hosts] of the config: per tool, replacing the definition's list
        self.network_hosts = network_hosts or {}

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """One request; see the module docstring and base.py."""
        if not tool.permissions.network:
            return Outcome(ok=False, error=f"tool '{tool.name}' uses executor http but does not declare "
                                           "permissions: { network: true }; nothing was sent")
        unknown = sorted(set(params) - set(PARAMS))
        if unknown:
            return Outcome(ok=False, error=f"tool definition: executor http takes the params {', '.join(PARAMS)}; "
                                           f"it does not know {', '.join(unknown)}")
        url = params.get("url")
        if not isinstance(url, str) or not url:
            return Outcome(ok=False, error="executor http needs a url param (http:// or https://)")
        verb = str(params.get("method") or (tool.method if tool.method.upper() in VERBS else "GET")).upper()
        if verb not in VERBS:
            return Outcome(ok=False, error=f"method {verb!r} is not one of {', '.join(VERBS)}")
        given = params.get("headers") or {}
        if not isinstance(given, dict):
            return Outcome(ok=False, error="headers must be an object of name to text")
        headers = [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in given.items()]
        body = params.get("body")
        data = b""
        if isinstance(body, (dict, list)):
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            if header(headers, "content-type") is None:
                headers.append(("Content-Type", "application/json; charset=utf-8"))
        elif body is not None:
            data = str(body).encode("utf-8")
        limit = params.get("timeout_s")
        if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
            deadline = min(deadline, time.monotonic() + float(limit))
        return await fetch(Request(verb, url, headers, data), deadline=deadline,
                           cap=tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT, sink=sink,
                           user_agent=self.defaults.user_agent,
                           hosts=self.network_hosts.get(tool.name, tuple(tool.permissions.network_hosts)),
                           pool=self.pool)
