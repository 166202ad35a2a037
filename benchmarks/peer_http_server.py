"""The HTTP server bench_http.py talks to: aiohttp's web server on uvloop, in its own process.

    python benchmarks/peer_http_server.py        # prints "port N" once listening

``GET /ping`` answers ``pong`` (4 bytes, Content-Length, keep-alive allowed);
anything else 404. A separate process so that neither client (bitong's
sidecar, or aiohttp's client in the benchmark) shares a GIL with it.
"""

from __future__ import annotations

import asyncio
import signal
import socket

from aiohttp import web


async def ping(request: web.Request) -> web.Response:
    return web.Response(body=b"pong", content_type="text/plain")


async def serve() -> None:
    app = web.Application()
    app.router.add_get("/ping", ping)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"port {port}", flush=True)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve())
