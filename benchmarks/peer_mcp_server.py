"""The peer for bench_sidecar.py: the official MCP Python SDK 2.x serving over stdio.

Started by the SDK's own stdio client (``mcp.Client(StdioServerParameters(...))``),
never by hand. Two tools, written the way the SDK's docs write them:

* ``echo``: runs ``echo hello`` with ``subprocess.run`` (a sync tool, which the
  SDK runs in a worker thread), the twin of bitong's ``bench-echo`` tool;
* ``const``: returns a constant (an async tool, no thread hop), the floor of
  one MCP round trip, set against bitong's Match;
* ``ok``: returns ``{"ok": 1}`` from a plain (sync) Python function, the
  twin of bench_handler.py's python handler: the SDK calls it in process.

The server runs under uvloop, the loop bitong itself runs on, so the loop is
not what the comparison measures (the SDK's default asyncio loop measured
within noise of it here). Needs ``mcp>=2`` (benchmarks/requirements.txt).
"""

from __future__ import annotations

import subprocess

import anyio
from mcp.server.mcpserver import MCPServer

server: MCPServer = MCPServer("bitong-bench-peer")


@server.tool()
def echo() -> str:
    """Run ``echo hello`` and return its stdout."""
    return subprocess.run(["echo", "hello"], capture_output=True, check=False).stdout.decode()


@server.tool()
async def const() -> str:
    """Return a constant: one MCP round trip and nothing else."""
    return "hello"


@server.tool()
def ok() -> dict[str, int]:
    """Return {"ok": 1}: a Python function called in the server's own process."""
    return {"ok": 1}


def main() -> None:
    """Serve on stdin/stdout until the client closes them."""
    try:
        import uvloop  # noqa: F401

        anyio.run(server.run_stdio_async, backend_options={"use_uvloop": True})
    except ImportError:  # pragma: no cover - uvloop is a bitong dependency
        server.run()


if __name__ == "__main__":
    main()
