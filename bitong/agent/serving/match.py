"""Match as the service answers it: the index's hits as a MatchResponse (seed §2 step 3).

Shared by the server's ToolAgent and the in-process ``bitong match``, which
answers without loading the Call machinery.
"""

from __future__ import annotations

from collections.abc import Callable

from bitong.v1 import agent_pb2 as pb

from ..registry.snapshot import Registry

__all__ = ["DEFAULT_TOP_K", "MAX_TOP_K", "match_reply"]

DEFAULT_TOP_K = 3
MAX_TOP_K = 20


def match_reply(registry: Registry, intent: str, top_k: int = 0, *, threshold: float | None = None,
                explain: bool = False, allowed: Callable[[str], bool] | None = None,
                canary_key: str = "") -> pb.MatchResponse:
    """The best ``top_k`` tools of the current snapshot for ``intent`` (0: the default 3, at most 20).

    ``explain`` adds why (and, when not found, the near misses) for a tool author;
    ``allowed`` keeps the candidates to the tools a caller may call; ``canary_key``
    picks this caller's side of a rollout.
    """
    snap = registry.snapshot
    k = DEFAULT_TOP_K if top_k <= 0 else min(top_k, MAX_TOP_K)
    result = snap.index.match(intent, k, threshold=threshold, allowed=allowed)
    reply = pb.MatchResponse(found=result.found, suggestion=result.suggestion)
    if explain:
        reply.explanation = result.explanation
    # seed §2 step 3: no match is {found: false, suggestion}; near misses only when asked to explain
    into = reply.candidates if result.found else (reply.near_misses if explain else None)
    if into is None:
        return reply
    for hit in result.hits:
        tool = snap.tools.get(hit.name)
        if tool is None:  # index and tools come from one snapshot; this cannot drift
            continue
        if snap.canaries:   # the definition this caller would be given
            tool = registry.versions.pick(snap.canaries, tool, canary_key)
        into.add(name=hit.name, score=hit.score, tool=tool, matched_terms=hit.matched_terms)
    return reply
