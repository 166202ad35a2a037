"""Per-caller policy: which tools each caller may use (``[callers.ID] tools = [...]``).

Without any ``[callers]`` table every caller the server accepts may use
every tool (the single-user case). With one, the policy is closed: a caller
uses only the tools its own table's patterns name (shell-style globs,
``file-*``), a caller without a table falls back to ``[callers."*"]``, and
without that one it may use nothing. A refused Call answers
PERMISSION_DENIED with the reason; Match and ListTools show a caller only
the tools it may call, so a model is never steered to a tool it cannot use.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

from .identity import Caller

__all__ = ["CallerPolicy", "PermissionDenied"]

DEFAULT_KEY = "*"


class PermissionDenied(Exception):
    """The caller may not use this tool; ``str()`` says who, what, and which table to change."""


class CallerPolicy:
    """The ``[callers]`` tables of the config, as a yes/no per (caller, tool)."""

    def __init__(self, rules: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.rules = dict(rules or {})

    @property
    def open(self) -> bool:
        """No per-caller policy is configured: every accepted caller may use every tool."""
        return not self.rules

    def patterns(self, caller: Caller) -> tuple[str, ...] | None:
        """The patterns that apply to ``caller`` (None: no policy, everything)."""
        if self.open:
            return None
        if caller.id in self.rules:
            return self.rules[caller.id]
        return self.rules.get(DEFAULT_KEY, ())

    def allows(self, caller: Caller | None, tool: str) -> bool:
        if caller is None:   # in process (the CLI without --server): the user's own rights, no policy
            return True
        patterns = self.patterns(caller)
        return patterns is None or any(fnmatch.fnmatchcase(tool, p) for p in patterns)

    def check(self, caller: Caller | None, tool: str) -> None:
        """Raise :class:`PermissionDenied` unless ``caller`` may use ``tool``."""
        if self.allows(caller, tool):
            return
        assert caller is not None
        if caller.id in self.rules:
            table = f"[callers.{caller.id}]" if ":" not in caller.id and "=" not in caller.id \
                else f'[callers."{caller.id}"]'
            allowed = ", ".join(self.rules[caller.id]) or "nothing"
            raise PermissionDenied(f"caller {caller.describe()} may not use tool '{tool}': {table} allows "
                                   f"{allowed}")
        if DEFAULT_KEY in self.rules:
            allowed = ", ".join(self.rules[DEFAULT_KEY]) or "nothing"
            raise PermissionDenied(f"caller {caller.describe()} may not use tool '{tool}': it has no [callers] "
                                   f"table of its own, and [callers.\"*\"] allows {allowed}")
        raise PermissionDenied(f"caller {caller.describe()} may not use tool '{tool}': it has no [callers] table "
                               "(and there is no [callers.\"*\"] default), so it may use no tool")
