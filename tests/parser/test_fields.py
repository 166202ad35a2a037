"""Each field of the spec lands in its ToolDef field (proto/bitong/v1/agent.proto), with the spec's defaults."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from google.protobuf import json_format

from tests.parser.hdlp_cases import make, variant
from bitong.parser import ParseError, ToolDef, parse, parse_bytes, parse_file
from bitong.parser._backend import Backend

EVERYTHING = """\
HLDP://zhuyuan/tool/git-log
name: git-log
display: 提交历史
intent: 列出一个仓库最近的提交
method: log
executor: shell
command: git -C {repo} log --oneline -n {n}
version: 1.2.0-beta.1+build.5
endpoint: BS-SG-001
retry: 2
trigger_keywords: [git log, 提交记录]
non_goals: [不改仓库, 不推送]
permissions:
  fs_read: true
  fs_write: false
  exec: true
  network: false
  secret: false
  fs_read_paths: ["/srv/**", /home/**]
  fs_write_paths: []
params_schema:
  repo:
    type: string
    required: true
    description: 仓库路径
    pattern: "^/"
    normalize: [trim, path]
  n: { type: integer, default: 20, min: 1, max: 500, description: 条数 }
  mode: { type: string, enum: [short, full], default: short }
  since: { type: number, min: 0.5 }
  all: { type: boolean, default: false }
  paths: { type: array, default: [a, b], max: 10 }
  extra: { type: object, default: { k: v } }
constraints:
  timeout_ms: 15000
  max_output_bytes: 1048576
  require_confirm: true
  confirm_by: human
author: ICE-GL-ZY001
created: 2026-06-01
why: 看最近改了什么是排查的第一步。
"""


def p(text: str, backend: Backend, path: str = "demo.hdlp") -> ToolDef:
    return parse(text, path, backend=backend)


def test_defaults(backend: Backend) -> None:
    """Spec: timeout_ms 30000, max_output_bytes 65536, require_confirm false, version 0.1.0,
    permissions all false, retry 0; optional lists empty."""
    tool = p(make(), backend)
    c = tool.constraints
    assert (c.timeout_ms, c.max_output_bytes, c.require_confirm, c.confirm_by) == (30000, 65536, False, "agent")
    assert tool.version == "0.1.0"
    perms = tool.permissions
    assert (perms.fs_read, perms.fs_write, perms.exec, perms.network, perms.secret) == (False,) * 5
    assert list(perms.fs_read_paths) == [] and list(perms.fs_write_paths) == []
    assert tool.retry == 0
    assert list(tool.trigger_keywords) == [] and list(tool.non_goals) == []
    assert (tool.command, tool.endpoint, tool.address) == ("", "", "")
    assert len(tool.params_schema) == 0 and list(tool.param_order) == []


@pytest.mark.parametrize("constraints", [
    "constraints: {}",
    "constraints: { timeout_ms: 5 }",
    "constraints:\n  max_output_bytes: 7",
    "constraints: { require_confirm: true }",
    "constraints:   # nothing inside: every default",
])
def test_constraint_defaults_apply_one_by_one(constraints: str, backend: Backend) -> None:
    c = p(make(constraints=constraints), backend).constraints
    assert c.timeout_ms == (5 if "timeout_ms" in constraints else 30000)
    assert c.max_output_bytes == (7 if "max_output_bytes" in constraints else 65536)
    assert c.require_confirm is ("require_confirm" in constraints)
    assert c.confirm_by == "agent"


@pytest.mark.parametrize("by", ["agent", "human"])
def test_confirm_by_names_who_confirms(by: str, backend: Backend) -> None:
    """confirm_by sits in constraints beside require_confirm, in any order."""
    c = p(make(constraints=f"constraints: {{ confirm_by: {by}, require_confirm: true }}"), backend).constraints
    assert (c.require_confirm, c.confirm_by) == (True, by)


def test_permission_defaults_apply_one_by_one(backend: Backend) -> None:
    perms = p(make("permissions: { network: true }"), backend).permissions
    assert (perms.fs_read, perms.fs_write, perms.exec, perms.network, perms.secret) == (False, False, False, True, False)


def test_param_defaults(backend: Backend) -> None:
    spec = p(make(params_schema="params_schema:\n  a: { type: string }"), backend).params_schema["a"]
    assert (spec.type, spec.required, spec.description, spec.pattern) == ("string", False, "", "")
    assert not spec.HasField("default") and not spec.HasField("min") and not spec.HasField("max")
    assert list(spec.enum) == [] and list(spec.normalize) == []


def test_every_field_lands_in_its_place(backend: Backend) -> None:
    tool = p(EVERYTHING, backend, "/srv/tools/git-log/TOOL.hdlp")
    assert tool.address == "HLDP://zhuyuan/tool/git-log"
    assert (tool.name, tool.display, tool.intent, tool.method, tool.executor) == (
        "git-log", "提交历史", "列出一个仓库最近的提交", "log", "shell")
    assert tool.command == "git -C {repo} log --oneline -n {n}"
    assert (tool.version, tool.endpoint, tool.retry) == ("1.2.0-beta.1+build.5", "BS-SG-001", 2)
    assert list(tool.trigger_keywords) == ["git log", "提交记录"]
    assert list(tool.non_goals) == ["不改仓库", "不推送"]
    perms = tool.permissions
    assert (perms.fs_read, perms.fs_write, perms.exec, perms.network, perms.secret) == (True, False, True, False, False)
    assert list(perms.fs_read_paths) == ["/srv/**", "/home/**"] and list(perms.fs_write_paths) == []
    c = tool.constraints
    assert (c.timeout_ms, c.max_output_bytes, c.require_confirm, c.confirm_by) == (15000, 1048576, True, "human")
    assert (tool.author, tool.created, tool.why) == ("ICE-GL-ZY001", "2026-06-01", "看最近改了什么是排查的第一步。")
    assert tool.source_path == "/srv/tools/git-log/TOOL.hdlp"

    repo = tool.params_schema["repo"]
    assert (repo.type, repo.required, repo.description, repo.pattern) == ("string", True, "仓库路径", "^/")
    assert list(repo.normalize) == ["trim", "path"]
    n = tool.params_schema["n"]
    assert (n.type, n.min, n.max, n.description, n.default.number_value) == ("integer", 1, 500, "条数", 20)
    mode = tool.params_schema["mode"]
    assert [v.string_value for v in mode.enum] == ["short", "full"] and mode.default.string_value == "short"
    assert tool.params_schema["since"].min == 0.5 and not tool.params_schema["since"].HasField("max")
    assert tool.params_schema["all"].default.WhichOneof("kind") == "bool_value"
    assert json_format.MessageToDict(tool.params_schema["paths"].default) == ["a", "b"]
    assert json_format.MessageToDict(tool.params_schema["extra"].default) == {"k": "v"}


def test_param_order_keeps_file_order(backend: Backend) -> None:
    tool = p(EVERYTHING, backend, "/srv/tools/git-log/TOOL.hdlp")
    assert list(tool.param_order) == ["repo", "n", "mode", "since", "all", "paths", "extra"]
    names = ["zeta", "alpha", "mid", "b2", "a1"]
    schema = "params_schema:\n" + "\n".join(f"  {n}: {{ type: string }}" for n in names)
    assert list(p(make(params_schema=schema), backend).param_order) == names
    flow = "params_schema: { " + ", ".join(f"{n}: {{ type: string }}" for n in names) + " }"
    assert list(p(make(params_schema=flow), backend).param_order) == names


def test_content_sha256_is_of_the_file_bytes(tmp_path: Path, backend: Backend) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    path = folder / "TOOL.hdlp"
    data = b"\xef\xbb\xbf" + make().replace("\n", "\r\n").encode("utf-8")
    path.write_bytes(data)
    tool = parse_file(path, backend=backend)
    assert tool.content_sha256 == hashlib.sha256(data).hexdigest()
    assert tool.source_path == str(path)
    assert parse_bytes(data, "x.hdlp", backend=backend).content_sha256 == hashlib.sha256(data).hexdigest()
    text = make()
    assert p(text, backend).content_sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_source_path_is_the_path_given(backend: Backend) -> None:
    assert p(make(), backend, "tools/demo/TOOL.hdlp").source_path == "tools/demo/TOOL.hdlp"
    assert p(make(), backend, "anything.hdlp").source_path == "anything.hdlp"


def test_folder_rule_only_for_tool_hdlp(backend: Backend) -> None:
    """The folder must be named after the tool when the file is TOOL.hdlp; other names are not checked."""
    assert p(make(), backend, "/x/demo/TOOL.hdlp").name == "demo"
    assert p(make(), backend, "/x/other/demo.hdlp").name == "demo"
    with pytest.raises(ParseError, match="folder 'other'"):
        p(make(), backend, "/x/other/TOOL.hdlp")


@pytest.mark.parametrize("version", ["0.1.0", "1.0.0", "10.20.30", "1.0.0-alpha", "1.0.0-rc.1+sha.5114f85", '"2.0.0"'])
def test_semantic_versions(version: str, backend: Backend) -> None:
    assert p(make(f"version: {version}"), backend).version == version.strip('"')


@pytest.mark.parametrize("executor", ["shell", "gatekeeper", "hlpd-api", "git-forgejo", "python", "http"])
def test_executors(executor: str, backend: Backend) -> None:
    extra = ("command: run-it",) if executor == "shell" else ()
    assert p(make(*extra, executor=f"executor: {executor}"), backend).executor == executor


@pytest.mark.parametrize("ptype", ["string", "integer", "number", "boolean", "array", "object"])
def test_param_types(ptype: str, backend: Backend) -> None:
    tool = p(make(params_schema=f"params_schema:\n  a: {{ type: {ptype}, required: true }}"), backend)
    assert tool.params_schema["a"].type == ptype


@pytest.mark.parametrize("rule", ["trim", "path", "duration_minutes", "duration_days"])
def test_spec_normalizers(rule: str, backend: Backend) -> None:
    tool = p(make(params_schema=f"params_schema:\n  a: {{ type: string, normalize: [{rule}] }}"), backend)
    assert list(tool.params_schema["a"].normalize) == [rule]


def test_lists_accept_a_single_item_and_block_lines(backend: Backend) -> None:
    tool = p(make(
        "trigger_keywords: 跑命令",
        "non_goals: 不做删除",
        "permissions:\n  fs_write_paths: /tmp/**\n  fs_read_paths: |\n    /etc/**\n    /srv/**",
    ), backend)
    assert list(tool.trigger_keywords) == ["跑命令"]
    assert list(tool.non_goals) == ["不做删除"]
    assert list(tool.permissions.fs_write_paths) == ["/tmp/**"]
    assert list(tool.permissions.fs_read_paths) == ["/etc/**", "/srv/**"]


def test_empty_optional_fields(backend: Backend) -> None:
    """``key:`` with nothing after it: an empty list for the list fields, defaults for maps."""
    tool = p(make("trigger_keywords:", "non_goals:", "permissions:"), backend)
    assert list(tool.trigger_keywords) == [] and list(tool.non_goals) == []
    assert tool.permissions.fs_read is False


def test_command_placeholders(backend: Backend) -> None:
    """Each ``{param}`` must be declared; ``{{ }}`` and braces around anything else are literal."""
    schema = "params_schema:\n  path: { type: string }\n  n: { type: integer }"
    ok = [
        "command: ls {path}",
        "command: head -n { n } {path}",
        "command: find {path} -name x -exec ls {} +",
        "command: awk {{print}} {path}",
        'command: "awk \'{print $1}\' {path}"',
    ]
    for line in ok:
        assert p(make(line, executor="executor: shell", params_schema=schema), backend).command
    with pytest.raises(ParseError, match="does not declare"):
        p(make("command: ls {nope}", executor="executor: shell", params_schema=schema), backend)


def test_extension_keys_are_ignored(backend: Backend) -> None:
    tool = p(make("x-owner: ops", "x_notes:\n  any: thing\n  deeper: { a: [1] }",
                  params_schema="params_schema:\n  a: { type: string, x-ui: wide }",
                  constraints="constraints: { x-soft: true }"), backend)
    assert tool.params_schema["a"].type == "string"


def test_full_fixture(backend: Backend) -> None:
    tool = p(variant(), backend)
    assert tool.params_schema["count"].default.number_value == 10
    assert list(tool.param_order) == ["path", "count"]


def test_an_empty_params_schema_means_no_parameters(backend: Backend) -> None:
    text = make().replace("params_schema: {}", "params_schema:")
    assert "params_schema:\n" in text
    assert dict(p(text, backend).params_schema) == {}


def test_a_shell_tool_without_command_still_parses(backend: Backend) -> None:
    text = make(executor="executor: shell")
    assert "command" not in text
    tool = p(text, backend)
    assert tool.executor == "shell" and tool.command == ""


def test_sandbox_fields_land_in_their_places(backend: Backend) -> None:
    """The sandbox's limits, the HTTP host list and allow_option (issue 9)."""
    tool = p(make("permissions: { network: true, network_hosts: [api.example.com, 127.0.0.1] }",
                  constraints="constraints: { max_memory_mb: 256, max_procs: 16, cpu_s: 5 }",
                  params_schema="params_schema:\n  rev: { type: string, allow_option: true }\n  b: { type: string }"),
             backend)
    c = tool.constraints
    assert (c.max_memory_mb, c.max_procs, c.cpu_s) == (256, 16, 5)
    assert list(tool.permissions.network_hosts) == ["api.example.com", "127.0.0.1"]
    assert tool.params_schema["rev"].allow_option is True
    assert tool.params_schema["b"].allow_option is False
    plain = p(make(), backend)
    assert (plain.constraints.max_memory_mb, plain.constraints.max_procs, plain.constraints.cpu_s) == (0, 0, 0)


@pytest.mark.parametrize(("extra", "replace", "message"), [
    ((), {"constraints": "constraints: { max_procs: 0 }"}, "max_procs must be at least 1, found 0"),
    ((), {"constraints": "constraints: { cpu_s: fast }"}, "cpu_s must be an integer, found text"),
    ((), {"params_schema": "params_schema:\n  a: { type: string, allow_option: yes }"}, "allow_option of parameter 'a'"),
    (("permissions: { network_hosts: [a.example] }",), {}, "network_hosts narrows network: true"),
])
def test_sandbox_fields_refuse_bad_values(extra: tuple[str, ...], replace: dict[str, str], message: str,
                                          backend: Backend) -> None:
    with pytest.raises(ParseError, match=message):
        p(make(*extra, **replace), backend)
