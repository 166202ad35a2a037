"""Which tools may declare sensitive permissions: the loader's approval policy (seed 002 §2.3).

``exec``, ``fs_write``, ``network`` and ``secret`` are sensitive: a tool that
declares one serves only when the config approves it::

    [approve]
    tools = ["shell-exec",                 # by name: any definition of that name
             "file-write@3f9a1c2b7d04"]    # pinned: only a definition whose sha256 starts so

A pinned approval names the exact bytes of the TOOL.hdlp that was reviewed:
an edited definition hashes differently and needs a new approval. A config
without ``[approve]`` approves nothing (production starts from none); only
when ``bitong serve`` runs without ``--config`` does :func:`development`
approve the bundled sensitive tools by name, for local development.

A tool that declares no sensitive permission needs no approval.
"""

from __future__ import annotations

import dataclasses
import re
from bitong.v1.agent_pb2 import ToolDef

__all__ = ["SENSITIVE", "MIN_PIN", "DEVELOPMENT_TOOLS", "Grant", "Policy", "sensitive", "parse", "development"]

SENSITIVE = ("exec", "fs_write", "network", "secret")
"""The permission flags a tool may hold only when approved."""

MIN_PIN = 12
"""Hex digits a pinned approval gives at least: fewer would let a crafted edit collide."""

DEVELOPMENT_TOOLS = ("file-write", "http-request", "scheduled-reminder", "shell-exec")
"""The bundled tools with a sensitive permission, approved by name when no --config is given."""

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_PIN = re.compile(r"[0-9a-f]+")


def sensitive(tool: ToolDef) -> tuple[str, ...]:
    """The sensitive permissions a definition declares, in :data:`SENSITIVE` order."""
    return tuple(flag for flag in SENSITIVE if getattr(tool.permissions, flag))


@dataclasses.dataclass(frozen=True)
class Grant:
    """One ``[approve] tools`` entry: a name, optionally pinned to a hash prefix."""

    name: str
    sha256_prefix: str = ""

    def __str__(self) -> str:
        return f"{self.name}@{self.sha256_prefix}" if self.sha256_prefix else self.name

    def covers(self, tool: ToolDef) -> bool:
        return tool.name == self.name and tool.content_sha256.startswith(self.sha256_prefix)


@dataclasses.dataclass(frozen=True)
class Policy:
    """The approvals in force and where they come from (said in every refusal)."""

    grants: tuple[Grant, ...] = ()
    origin: str = "the config file"
    _by_name: dict[str, tuple[Grant, ...]] = dataclasses.field(default_factory=dict, init=False, repr=False,
                                                              compare=False)

    def __post_init__(self) -> None:
        # every rescan asks for every tool: look its grants up by name, not through the whole list
        for grant in self.grants:
            self._by_name[grant.name] = (*self._by_name.get(grant.name, ()), grant)

    def unapproved(self, tool: ToolDef) -> tuple[str, ...]:
        """The sensitive permissions ``tool`` declares without an approval ('' tuple: it may serve)."""
        declared = sensitive(tool)
        if not declared or any(grant.covers(tool) for grant in self._by_name.get(tool.name, ())):
            return ()
        return declared

    def refusal(self, tool: ToolDef) -> str:
        """Why ``tool`` does not serve, with the line that would approve it; '' when it may serve."""
        missing = self.unapproved(tool)
        if not missing:
            return ""
        pin = f"{tool.name}@{tool.content_sha256[:MIN_PIN]}"
        pinned = [g for g in self.grants if g.name == tool.name and g.sha256_prefix]
        if pinned:
            return (f"tool '{tool.name}' declares {', '.join(missing)}, approved in {self.origin} only for "
                    f"{' or '.join(str(g) for g in pinned)}; this definition hashes to "
                    f"{tool.content_sha256[:MIN_PIN]}: review the change, then approve \"{pin}\" in [approve] tools")
        return (f"tool '{tool.name}' declares {', '.join(missing)}, which {self.origin} does not approve: "
                f"review it, then add \"{pin}\" (this definition) or \"{tool.name}\" (any) to [approve] tools")


def parse(entries: object, where: str = "[approve] tools") -> tuple[Grant, ...]:
    """The grants of an ``[approve] tools`` list; raises ValueError saying which entry is wrong and why."""
    if not isinstance(entries, list):
        raise ValueError(f"{where}: expected a list of tool names, such as [\"shell-exec\", \"file-write@<sha256>\"]")
    grants: list[Grant] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise ValueError(f"{where}[{i}]: expected text, a tool name or name@sha256-prefix")
        name, at, prefix = entry.partition("@")
        if not _NAME.fullmatch(name):
            raise ValueError(f"{where}[{i}] {entry!r}: not a tool name (^[a-z0-9][a-z0-9_-]{{0,63}}$)"
                             + ("; '*' and patterns are not approvals: name each tool" if "*" in name else ""))
        if at and not (_PIN.fullmatch(prefix) and MIN_PIN <= len(prefix) <= 64):
            raise ValueError(f"{where}[{i}] {entry!r}: after @ expected {MIN_PIN} to 64 lowercase hex digits of the "
                             "definition's sha256 (bitong audit DIR prints them)")
        grants.append(Grant(name, prefix))
    return tuple(grants)


def development() -> Policy:
    """The approvals used without --config: the bundled sensitive tools, by name (local development only)."""
    return Policy(tuple(Grant(name) for name in DEVELOPMENT_TOOLS),
                  "the development default (no --config; a config file approves only what its [approve] lists)")
