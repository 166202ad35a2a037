"""Where the sidecar listens, and how a listen address becomes a gRPC target.

Its own small module so the CLI can name the default without importing the
server (and grpc) for commands that never start one.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_LISTEN", "grpc_address"]

DEFAULT_LISTEN = "127.0.0.1:50151"


def grpc_address(listen: str) -> str:
    """``host:port`` or ``unix:/path`` as gRPC wants it (``unix:`` paths must be absolute)."""
    if listen.startswith("unix:") and not listen.startswith("unix:/"):
        return "unix:" + os.path.abspath(listen[5:])
    return listen
