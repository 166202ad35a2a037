"""A stand-in for the HLDP API: enough routes to see how a tool's ``method`` maps to a request.

Not the real API (the seeds do not specify it). It answers, under ``/api``:

* ``GET /api/modules/{id}``: ``{"id", "query"}`` (404 for id ``missing``);
* ``POST /api/memory.write`` (the RPC form): ``{"wrote": <the JSON body>}``, 201;
* ``DELETE /api/modules/{id}``: 204, no body.
"""

from __future__ import annotations

import urllib.parse

from .server import Exchange, FakeServer, Reply

__all__ = ["HldpApi"]


class HldpApi(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/api/modules/([^/]+)", self._module)
        self.route("POST", r"/api/memory\.write", lambda ex: Reply(201, {"wrote": ex.request.json()}))
        self.route("DELETE", r"/api/modules/([^/]+)", lambda ex: Reply(204))

    def _module(self, ex: Exchange) -> Reply:
        module = urllib.parse.unquote(ex.match.group(1))
        if module == "missing":
            return Reply(404, {"error": f"no module {module}"})
        return Reply(200, {"id": module, "query": {k: v for k, v in ex.request.query.items()}})
