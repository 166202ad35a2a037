"""What `bitong audit` says a tool may do: derived from its permissions alone."""

from __future__ import annotations

from bitong.agent.registry import approval
from bitong.agent.cli import tool_audit
from bitong.parser import parse
from tests.support import tool_text


def shell(permissions: str, command: str = "cat {path}") -> object:
    text = tool_text("reader", command=command, params="{ path: { type: string } }") + permissions + "\n"
    return parse(text, "/tools/reader/TOOL.hdlp")


def test_a_tool_without_sensitive_permissions_is_confined_and_needs_no_approval() -> None:
    tool = shell("permissions: { fs_read: true, fs_read_paths: [/srv/**] }")
    item = tool_audit.entry(tool, approval.Policy())
    allowed = dict(item.allowed)
    assert item.unapproved == () and item.sensitive == ()
    assert allowed["network"].startswith("none")
    assert allowed["writes"].startswith("its runtime/ folder and a private /tmp only")
    assert allowed["reads"].endswith("and /srv/**")
    assert allowed["programs"].startswith("only cat")
    assert allowed["secrets"].startswith("none")
    assert "no approval needed" in tool_audit.render(item, approval.Policy())


def test_each_sensitive_permission_widens_what_it_may_do_and_needs_an_approval() -> None:
    tool = shell("permissions: { exec: true, fs_write: true, fs_write_paths: [/srv/out/**], network: true, "
                 "secret: true }")
    item = tool_audit.entry(tool, approval.Policy())
    allowed = dict(item.allowed)
    assert item.unapproved == ("exec", "fs_write", "network", "secret")
    assert allowed["network"] == "yes" and allowed["programs"].startswith("any program")
    assert allowed["writes"] == "/srv/out/**, and its runtime/ folder"
    assert allowed["secrets"] == "the tokens the config names for this tool"
    assert "no fs_read_paths narrow it" in allowed["reads"]
    text = tool_audit.render(item, approval.Policy())
    assert "UNAPPROVED: exec, fs_write, network, secret: does not serve" in text
    assert f'to approve:  "reader@{tool.content_sha256[:12]}"' in text
    pinned = approval.Policy(approval.parse([f"reader@{tool.content_sha256[:12]}"]))
    assert f"approved (reader@{tool.content_sha256[:12]}): serves" in tool_audit.render(
        tool_audit.entry(tool, pinned), pinned)


def test_a_program_chosen_by_a_parameter_is_said_to_be_refused() -> None:
    assert "chosen by a parameter" in dict(tool_audit.allowances(shell("", command='"{path} --version"')))["programs"]


def test_http_executors_run_no_process() -> None:
    text = tool_text("web", command="x").replace("executor: shell\ncommand: x\n", "executor: http\n")
    tool = parse(text + "permissions: { network: true }\n", "/tools/web/TOOL.hdlp")
    allowed = dict(tool_audit.allowances(tool))
    assert allowed["process"].startswith("none: executor http")
    assert allowed["network"] == "any host but loopback and link-local addresses (network_hosts would narrow it)"
    narrowed = parse(text + "permissions: { network: true, network_hosts: [api.example.com] }\n",
                     "/tools/web/TOOL.hdlp")
    assert dict(tool_audit.allowances(narrowed))["network"].startswith("only to api.example.com")
