"""The floor for bench_sidecar.py: a bare grpc.aio server speaking bitong's proto, doing nothing else.

    python benchmarks/peer_grpc_floor.py unix:/path/floor.sock

``Match`` answers a constant; ``Call`` runs ``subprocess.run(["echo", "hello"])``
right on the loop (blocking it: fine with one call in flight, which is all it
is measured with) and returns its stdout; ``StreamCall`` writes
``params["bytes"]`` zeros from memory in 64 KiB chunks (no process, no pipe),
then a final result: gRPC streaming alone. Same grpcio, same uvloop, same
socket kind as the sidecar, so bitong minus this is what bitong itself adds:
registry, params, executor, logging, proto building. Not a product peer.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import grpc

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc


class Floor(pb_grpc.ToolAgentServicer):
    """The least a ToolAgent server can do."""

    async def Match(self, request: pb.MatchRequest, context: grpc.aio.ServicerContext) -> pb.MatchResponse:
        return pb.MatchResponse(found=True)

    async def Call(self, request: pb.CallRequest, context: grpc.aio.ServicerContext) -> pb.CallResult:
        # Blocking the loop on purpose: the floor is measured one call at a time.
        out = subprocess.run(["echo", "hello"], capture_output=True, check=False)
        return pb.CallResult(ok=out.returncode == 0, found=True, tool=request.tool, output=out.stdout,
                             stderr=out.stderr, exit_code=out.returncode)

    async def StreamCall(self, request: pb.CallRequest, context: grpc.aio.ServicerContext) -> None:
        total = int(request.params.fields["bytes"].number_value) if "bytes" in request.params.fields else 0
        chunk = bytes(_CHUNK)
        sent = 0
        while sent < total:
            data = chunk if total - sent >= _CHUNK else chunk[: total - sent]
            # Fields set in place: CallEvent(chunk=OutputChunk(data=...)) costs 80 us a 64 KiB chunk
            # under upb (a nested message passed as a keyword is copied the slow way), this 2 us.
            event = pb.CallEvent()
            event.chunk.stream = pb.OutputChunk.STDOUT
            event.chunk.data = data
            await context.write(event)
            sent += len(data)
        await context.write(pb.CallEvent(result=pb.CallResult(ok=True, found=True, tool=request.tool,
                                                              streamed_stdout_bytes=sent)))


_CHUNK = 64 * 1024


async def serve(address: str) -> None:
    """Serve until SIGTERM/SIGINT; print one line once listening (the parent waits for it)."""
    server = grpc.aio.server()
    pb_grpc.add_ToolAgentServicer_to_server(Floor(), server)
    server.add_insecure_port(address)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("floor: serving", flush=True)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(sys.argv[1]))
