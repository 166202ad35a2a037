"""A stand-in for a gatekeeper drive engine: ``POST /exec`` with ``{method, params}``.

Not the real engine (seed 000 §5: v2.1.0 on BS-SG-001:3911 and BS-GZ-006:3910):
it runs nothing. It answers ``{"node", "method", "params"}`` for any method,
so a test sees exactly what bitong sent, and refuses a body that is not
``{method, params}`` JSON with 400. With ``token`` set it wants
``Authorization: Bearer <token>`` and answers 401 otherwise.
"""

from __future__ import annotations

import json

from .server import Exchange, FakeServer, Reply

__all__ = ["Gatekeeper"]


class Gatekeeper(FakeServer):
    def __init__(self, node: str = "BS-SG-001", token: str | None = None) -> None:
        super().__init__()
        self.node = node
        self.token = token
        self.route("POST", r"/exec", self._exec)

    def _exec(self, ex: Exchange) -> Reply:
        if self.token is not None and ex.request.headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, {"error": "unauthorized"})
        try:
            call = json.loads(ex.request.body)
        except ValueError:
            return Reply(400, {"error": "body is not JSON"})
        if not isinstance(call, dict) or set(call) != {"method", "params"}:
            return Reply(400, {"error": "expected {method, params}"})
        return Reply(200, {"node": self.node, "method": call["method"], "params": call["params"]})
