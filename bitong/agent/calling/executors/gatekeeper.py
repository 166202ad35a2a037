"""The ``gatekeeper`` executor: hand the call to a gatekeeper engine's ``/exec``.

Seed 000 §2 step 4: the translator (gatekeeper drive engine v2.1.0)
"receives {method, params}, translates them into system calls, runs them,
returns the raw result". So a call is

    POST {endpoint url}/exec
    Content-Type: application/json; charset=utf-8
    Authorization: Bearer <token>            (when the endpoint names one)

    {"method": "<the tool's method>", "params": {<the validated params>}}

and the raw response body is the output, byte for byte: bitong does not
parse what the gatekeeper answers. Endpoints are configured by name
(``[gatekeeper.endpoints.BS-SG-001]``, the seed's BS-SG-001:3911 and
BS-GZ-006:3910); a tool picks one with ``endpoint:``, otherwise the
configured default serves it. Every HTTP rule (status, timeouts, cap,
streaming, what is safe to retry) is :mod:`.http_client`'s; ``/exec`` is a
POST that runs something, so only a refused connection and a 503 are
retried, never a 502/504.
"""

from __future__ import annotations

import json
from typing import Any

from bitong.v1.agent_pb2 import ToolDef

from ...config import Defaults, SecretUnavailable, Service
from .base import Outcome, Sink
from .http_client import Request, fetch
from .http_pool import Pool
from .shell import DEFAULT_MAX_OUTPUT

__all__ = ["GatekeeperExecutor"]


class GatekeeperExecutor:
    """``executor: gatekeeper``; one instance per sidecar, holding its endpoints."""

    name = "gatekeeper"

    def __init__(self, service: Service, defaults: Defaults = Defaults(), pool: Pool | None = None) -> None:
        self.service = service
        self.defaults = defaults
        self.pool = pool or Pool()   # kept-alive connections (http_pool.py)

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """One POST /exec; see the module docstring and base.py."""
        try:
            endpoint = self.service.pick(tool.endpoint)
            headers = endpoint.auth_headers()
        except (LookupError, SecretUnavailable) as exc:
            return Outcome(ok=False, error=str(exc))
        headers.append(("Content-Type", "application/json; charset=utf-8"))
        body = json.dumps({"method": tool.method, "params": params}, ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")
        request = Request("POST", endpoint.url + "/exec", headers, body)
        return await fetch(request, deadline=deadline, cap=tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT,
                           sink=sink, user_agent=self.defaults.user_agent, pool=self.pool)
