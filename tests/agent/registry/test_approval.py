"""The approval policy: which sensitive permissions a definition may hold, by name or pinned to its hash."""

from __future__ import annotations

import hashlib

import pytest

from bitong.agent.registry import approval
from bitong.parser import parse
from tests.support import tool_text


def tool(name: str = "runner", permissions: str = "permissions: { exec: true, fs_read: true }", body: str = ""):
    text = tool_text(name, why=f"a tool the tests write {body}") + permissions + "\n"
    return parse(text, f"/tools/{name}/TOOL.hdlp")


def test_only_exec_fs_write_network_and_secret_are_sensitive() -> None:
    assert approval.SENSITIVE == ("exec", "fs_write", "network", "secret")
    plain = tool(permissions="permissions: { fs_read: true, fs_read_paths: [/srv/**] }")
    assert approval.sensitive(plain) == ()
    assert approval.Policy().unapproved(plain) == ()   # no approval needed, even with none granted
    every = tool(permissions="permissions: { exec: true, fs_write: true, network: true, secret: true }")
    assert approval.sensitive(every) == approval.SENSITIVE


def test_a_config_without_approvals_approves_no_sensitive_tool() -> None:
    runner = tool()
    policy = approval.Policy()
    assert policy.unapproved(runner) == ("exec",)
    why = policy.refusal(runner)
    assert "declares exec" in why and f'"runner@{runner.content_sha256[:12]}"' in why and '"runner"' in why


def test_a_name_approves_any_definition_of_that_name_only() -> None:
    policy = approval.Policy(approval.parse(["runner"]))
    assert policy.unapproved(tool()) == ()
    assert policy.unapproved(tool(body="edited")) == ()
    assert policy.unapproved(tool("other")) == ("exec",)


def test_a_pinned_approval_stops_covering_an_edited_definition() -> None:
    reviewed = tool()
    policy = approval.Policy(approval.parse([f"runner@{reviewed.content_sha256[:16]}"]), "prod.toml")
    assert policy.unapproved(reviewed) == ()
    edited = tool(body="and one more word")
    assert edited.content_sha256 != reviewed.content_sha256
    assert policy.unapproved(edited) == ("exec",)
    why = policy.refusal(edited)
    assert f"only for runner@{reviewed.content_sha256[:16]}" in why
    assert f"hashes to {edited.content_sha256[:12]}" in why and "review the change" in why


def test_the_pin_is_the_sha256_of_the_files_bytes() -> None:
    text = tool_text("runner") + "permissions: { network: true }\n"
    pinned = approval.Policy(approval.parse([f"runner@{hashlib.sha256(text.encode()).hexdigest()}"]))
    assert pinned.unapproved(parse(text, "/t/runner/TOOL.hdlp")) == ()


@pytest.mark.parametrize("entries, expected", [
    ("shell-exec", "expected a list"),
    ([1], "expected text"),
    (["Shell Exec"], "not a tool name"),
    (["*"], "'*' and patterns are not approvals"),
    (["file-*"], "'*' and patterns are not approvals"),
    (["runner@abc"], "12 to 64 lowercase hex digits"),
    (["runner@" + "g" * 12], "12 to 64 lowercase hex digits"),
    (["runner@" + "A" * 12], "12 to 64 lowercase hex digits"),
    (["runner@"], "12 to 64 lowercase hex digits"),
])
def test_bad_entries_are_refused_with_what_to_write(entries: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected.replace("*", r"\*").replace("(", r"\(")):
        approval.parse(entries)


def test_the_development_default_approves_exactly_the_bundled_sensitive_tools() -> None:
    from bitong.agent.registry.snapshot import Registry
    from tests.support import BUNDLED

    snap = Registry([str(BUNDLED)]).rescan()
    sensitive = sorted(name for name, t in snap.tools.items() if approval.sensitive(t))
    assert sensitive == sorted(approval.DEVELOPMENT_TOOLS)
    dev = approval.development()
    assert all(dev.unapproved(t) == () for t in snap.tools.values())
    assert "development default" in dev.origin
