"""bitong (笔筒): the tool agent. The wire contract lives in ``bitong.v1``,
generated from ``proto/bitong/v1/agent.proto`` at build time; the Python
client is ``bitong.Client`` / ``bitong.AsyncClient`` (``bitong.client``).

The client's names load at first use, so ``import bitong`` (which the CLI
does for its version) costs no grpc import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AsyncClient", "BitongError", "Client", "ConnectionError", "__version__"]

if TYPE_CHECKING:
    from .client import AsyncClient, BitongError, Client, ConnectionError


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "BitongError", "Client", "ConnectionError"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'bitong' has no attribute {name!r}")
