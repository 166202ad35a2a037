"""WatchTools: the registry's swaps, fanned out to every watcher.

The cache agent calls :meth:`ToolWatch.swapped` after each snapshot swap. That
call only sets one flag per watcher, so a watcher that reads slowly (or not at
all) never delays a swap nor grows a queue: when it next reads, it is told the
difference between what it was last told and the snapshot now, so several
swaps it missed come as one message. Each watcher's "queue" is thus bounded by
one pending flag and its last view of the registry (names and definitions).

Free of gRPC, like the service: the server turns the messages into a stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

from bitong.v1 import agent_pb2 as pb

from .snapshot import Registry

__all__ = ["ToolWatch", "changes"]


def changes(before: Mapping[str, pb.ToolDef], after: Mapping[str, pb.ToolDef], generation: int,
            initial: bool = False) -> pb.ToolsChanged:
    """What tells a watcher who saw ``before`` that the registry is now ``after``."""
    added = sorted(name for name in after if name not in before)
    removed = sorted(name for name in before if name not in after)
    changed = sorted(name for name, tool in after.items()
                     if name in before and before[name] is not tool
                     and before[name].content_sha256 != tool.content_sha256)
    return pb.ToolsChanged(generation=generation, initial=initial, added=added, changed=changed, removed=removed,
                           tool_count=len(after))


class ToolWatch:
    """The watchers of one registry; :meth:`swapped` wakes them, :meth:`close` ends their streams."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._wakes: set[asyncio.Event] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._wakes)

    def swapped(self) -> None:
        """A new snapshot serves: wake every watcher (never blocks, whatever they are doing)."""
        for wake in self._wakes:
            wake.set()

    def close(self) -> None:
        """End every watch stream (a server shutting down would otherwise wait its grace period on them)."""
        self.closed = True
        self.swapped()

    async def watch(self, allowed: Callable[[str], bool] | None = None) -> AsyncIterator[pb.ToolsChanged]:
        """The current state, then one message per swap that changed the tools ``allowed`` lets through."""
        wake = asyncio.Event()
        self._wakes.add(wake)
        try:
            seen: dict[str, pb.ToolDef] = {}
            initial = True
            while not self.closed:
                wake.clear()   # before reading the snapshot: a swap after this line wakes us again
                snap = self.registry.snapshot
                now = dict(snap.tools) if allowed is None else {n: t for n, t in snap.tools.items() if allowed(n)}
                message = changes(seen, now, snap.generation, initial)
                seen = now
                if initial or message.added or message.changed or message.removed:
                    initial = False
                    yield message
                await wake.wait()
        finally:
            self._wakes.discard(wake)
