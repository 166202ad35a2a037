"""``bitong audit``: what each tool of a tools root may do, and what is not approved.

For a reviewer deciding what to approve: every tool's declared permissions,
what the sandbox (README, Security) lets it do because of them, the hash a
pinned approval names, and whether the approval policy in force lets it serve.
The allowances are derived from the definition alone, the same way the
sandbox derives its rules, so the audit needs no running server.
"""

from __future__ import annotations

import dataclasses
import shlex

from bitong.v1.agent_pb2 import ToolDef

from ..registry.approval import MIN_PIN, SENSITIVE, Policy

__all__ = ["PROCESS_EXECUTORS", "Entry", "allowances", "entry", "render"]

PROCESS_EXECUTORS = ("shell", "python")
"""Executors that start a process for the tool (the others are HTTP requests the server sends)."""

_FLAGS = ("fs_read", "fs_write", "exec", "network", "secret")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tool's audit: what it declares, what it is allowed, and what is not approved."""

    name: str
    path: str
    executor: str
    sha256: str
    permissions: tuple[str, ...]
    allowed: tuple[tuple[str, str], ...]   # (what, allowance), in a fixed order
    unapproved: tuple[str, ...]
    refusal: str                           # why it does not serve, with the line that approves it

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "path": self.path, "executor": self.executor, "sha256": self.sha256,
                "permissions": list(self.permissions), "sandbox": dict(self.allowed),
                "sensitive": list(self.sensitive), "unapproved": list(self.unapproved),
                "serves": not self.unapproved, "refusal": self.refusal}

    @property
    def sensitive(self) -> tuple[str, ...]:
        return tuple(p for p in self.permissions if p in SENSITIVE)


def _program(tool: ToolDef) -> str:
    if tool.executor == "python":
        return "the configured Python interpreter running the tool's handler.py"
    try:
        words = shlex.split(tool.command)
    except ValueError:
        words = tool.command.split()
    if not words:
        return "nothing (the tool has no command)"
    first = words[0]
    if "{" in first:
        return f"only the program its command names ({first}: chosen by a parameter, refused by the sandbox)"
    return f"only {first} (the command's own program); no other program it would start"


def allowances(tool: ToolDef) -> tuple[tuple[str, str], ...]:
    """What the sandbox lets ``tool`` do, in words, from its permissions (README, Security)."""
    perms = tool.permissions
    if tool.executor not in PROCESS_EXECUTORS:
        if tool.executor != "http":
            net = "yes: the server sends the HTTP request to the configured endpoint"
        elif not perms.network:
            net = "no: an http tool without network: true is refused"
        elif perms.network_hosts:
            net = f"only to {', '.join(perms.network_hosts)} (or the config's [network_hosts] for it)"
        else:
            net = "any host but loopback and link-local addresses (network_hosts would narrow it)"
        return (("process", f"none: executor {tool.executor} is an HTTP request the server sends"),
                ("network", net),
                ("secrets", "the configured endpoint's token" if tool.executor != "http" else
                 ("the tokens the config names for it" if perms.secret else "none")))
    net = "yes" if perms.network else "none: a network namespace of its own (loopback of the host unreachable)"
    if not perms.fs_write:
        writes = "its runtime/ folder and a private /tmp only; everything else read-only"
    elif perms.fs_write_paths:
        writes = f"{', '.join(perms.fs_write_paths)}, and its runtime/ folder"
    else:
        writes = "its runtime/ folder only (fs_write: true lists no fs_write_paths)"
    if perms.fs_read_paths:
        reads = f"the system directories a program needs (/usr, /lib*, /bin, /etc without secrets), and " \
                f"{', '.join(perms.fs_read_paths)}"
    else:
        reads = "the system directories and whatever else the server's user can read (no fs_read_paths narrow it)"
    programs = "any program (exec: true), inside the file and network rules" if perms.exec else _program(tool)
    secrets = "the tokens the config names for this tool" if perms.secret else "none (the environment is minimal)"
    return (("process", f"executor {tool.executor}, in the sandbox: own PID namespace, no_new_privs"),
            ("network", net), ("writes", writes), ("reads", reads), ("programs", programs), ("secrets", secrets))


def entry(tool: ToolDef, policy: Policy) -> Entry:
    perms = tuple(flag for flag in _FLAGS if getattr(tool.permissions, flag))
    return Entry(tool.name, tool.source_path, tool.executor, tool.content_sha256, perms, allowances(tool),
                 policy.unapproved(tool), policy.refusal(tool))


def render(item: Entry, policy: Policy) -> str:
    """The text block ``bitong audit`` prints for one tool."""
    if not item.sensitive:
        status = "serves (no sensitive permission: no approval needed)"
    elif item.unapproved:
        status = f"UNAPPROVED: {', '.join(item.unapproved)}: does not serve"
    else:
        grant = next(g for g in policy.grants if g.name == item.name and item.sha256.startswith(g.sha256_prefix))
        status = f"approved ({grant}): serves"
    lines = [f"{item.name}  sha256 {item.sha256[:MIN_PIN]}  {item.path}",
             f"  permissions: {', '.join(item.permissions) or 'none'}",
             f"  approval:    {status}"]
    lines += [f"  {what + ':':<12} {text}" for what, text in item.allowed]
    if item.unapproved:
        lines.append(f"  to approve:  \"{item.name}@{item.sha256[:MIN_PIN]}\" in [approve] tools")
    return "\n".join(lines)
