"""The `bitong` command as a user runs it: real processes, real files, a real server."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import EVAL_REGISTRY, WriteTool, tool_text

BITONG = [sys.executable, "-m", "bitong"]


def bitong(*args: str, stdin: str | None = None, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([*BITONG, *args], input=stdin, capture_output=True, text=True, timeout=60, check=check)


def test_version_names_the_live_parser_backend() -> None:
    out = bitong("--version").stdout
    assert re.fullmatch(r"bitong \d+\.\d+\.\d+ matcher=(cython|pure) parser=(cython|pure)\n", out)


def test_without_tools_the_bundled_tools_are_served_from_any_folder(tmp_path: Path) -> None:
    """`bitong serve` / `bitong tools` with no --tools: the tools shipped with the package, wherever it is run."""
    from tests.support import BUNDLED

    done = subprocess.run([*BITONG, "tools", "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = sorted(t["name"] for t in json.loads(done.stdout))
    assert names == sorted(p.parent.name for p in Path(BUNDLED).glob("*/TOOL.hdlp")) and len(names) == 7


def test_version_honours_bitong_pure() -> None:
    import os

    env = dict(os.environ, BITONG_PURE="1")
    out = subprocess.run([*BITONG, "--version"], capture_output=True, text=True, env=env, check=True).stdout
    assert out.endswith("matcher=pure parser=pure\n")


@pytest.mark.skipif(not EVAL_REGISTRY.is_dir(), reason="shared/eval/registry is not beside this checkout")
def test_lint_passes_the_eval_registry_and_points_at_a_broken_line(tmp_path: Path) -> None:
    clean = bitong("lint", str(EVAL_REGISTRY))
    # Every definition parses. The one finding is real: db-query's placeholder handler.py defines run()
    # while its method: is query, so a call would fail (the registry is for matching; it never runs).
    assert clean.stdout == (f"{EVAL_REGISTRY}/db-query/handler.py: no top-level function 'query' (the tool's "
                            "method:); define def query(sql, database, max_rows): ...\n"), clean.stdout
    copy = tmp_path / "registry"
    shutil.copytree(EVAL_REGISTRY, copy)
    target = copy / "log-tail" / "TOOL.hdlp"
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.startswith("created:")) + 1
    lines[number - 1] = "created: someday\n"
    target.write_text("".join(lines), encoding="utf-8")
    broken = bitong("lint", str(copy))
    assert broken.returncode == 1
    assert broken.stdout.splitlines()[1:] == [f"{target}:{number}:10: created must be a date YYYY-MM-DD, "
                                              "found 'someday'"]


def test_lint_accepts_a_single_file_or_tool_folder(tools_root: Path) -> None:
    assert bitong("lint", str(tools_root / "git-ops")).returncode == 0
    assert bitong("lint", str(tools_root / "git-ops" / "TOOL.hdlp")).returncode == 0


def test_tools_json_is_one_sorted_array_in_the_proto_json_mapping(tools_root: Path) -> None:
    out = bitong("tools", "--tools", str(tools_root), "--json", check=True).stdout
    tools = json.loads(out)
    names = [t["name"] for t in tools]
    assert names == sorted(names) == ["file-read", "file-stats", "file-write", "git-ops", "http-request",
                                      "scheduled-reminder", "shell-exec"]
    shell = tools[names.index("shell-exec")]
    assert shell["constraints"] == {"timeout_ms": "30000", "max_output_bytes": "65536", "require_confirm": False,
                                    "confirm_by": "agent", "max_memory_mb": "0", "max_procs": "0", "cpu_s": "0"}
    assert len(shell["content_sha256"]) == 64


def test_match_reads_queries_from_stdin_and_writes_json_lines(tools_root: Path) -> None:
    out = bitong("match", "--tools", str(tools_root), "-", stdin="run `uname -a` on the box\n\n给我讲个关于程序员的笑话\n",
                 check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["query"] for r in rows] == ["run `uname -a` on the box", "给我讲个关于程序员的笑话"]
    assert set(rows[0]) == {"query", "found", "candidates", "suggestion"}
    assert rows[0]["found"] and rows[0]["candidates"][0]["name"] == "shell-exec"
    assert not rows[1]["found"] and rows[1]["suggestion"] == "此工具尚不在仓库中，需铸渊新建"


def test_in_process_match_keeps_the_analysed_registry_and_reads_again_only_what_changed(
        tools_root: Path, tmp_path: Path) -> None:
    """A tool author's loop: edit a TOOL.hdlp, run match again; the cache never serves a stale answer."""
    cache = tmp_path / "cache"
    env = {**os.environ, "BITONG_CACHE_DIR": str(cache)}

    def match(*extra: str) -> dict:
        done = subprocess.run([*BITONG, "match", "--tools", str(tools_root), "--no-semantic", "--json", *extra,
                               "在 /tmp 里统计 a.txt 有多少行"], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    first = match()
    files = list(cache.glob("match-*.state"))
    assert len(files) == 1, "the analysed registry is kept"
    written = files[0].stat().st_ino
    assert match() == first and files[0].stat().st_ino == written, "the same answer, and nothing written again"

    folder = tools_root / "line-count"
    folder.mkdir()
    (folder / "TOOL.hdlp").write_text(tool_text("line-count", display="统计行数", intent="统计一个文本文件有多少行",
                                                command="wc -l {path}", params="{ path: { type: string } }"))
    added = match()
    assert added["found"] and added["candidates"][0]["name"] == "line-count", "a new tool is seen at once"
    assert files[0].stat().st_ino != written, "and kept"
    fresh = match("--no-cache")
    assert fresh == added, "the cache answers as a run without it"

    files[0].write_bytes(b"not a state")   # damaged: analysed again, never an error
    assert match() == added
    assert files[0].read_bytes() != b"not a state"

    (cache / "other").mkdir()
    nothing = subprocess.run([*BITONG, "match", "--tools", str(tools_root), "--no-cache", "--no-semantic", "x"],
                             capture_output=True, text=True, timeout=60, env={**env, "BITONG_CACHE_DIR": str(cache / "other")})
    assert nothing.returncode in (0, 1) and list((cache / "other").iterdir()) == [], "--no-cache keeps nothing"


def test_call_prints_raw_output_and_passes_the_exit_code_through(tools_root: Path) -> None:
    ok = bitong("call", "--tools", str(tools_root), "shell-exec", "cmd=echo hello")
    assert (ok.returncode, ok.stdout) == (0, "hello\n")
    failed = bitong("call", "--tools", str(tools_root), "shell-exec", "cmd=echo boom >&2; exit 7")
    assert failed.returncode == 7
    assert failed.stderr.startswith("boom\n")
    bad = bitong("call", "--tools", str(tools_root), "git-ops", "action=push")
    assert bad.returncode == 1 and "parameter action" in bad.stderr and "parameter repo" in bad.stderr


def test_serve_answers_clients_and_drains_calls_in_flight_on_sigterm(tools_root: Path, tmp_path: Path) -> None:
    sock = tmp_path / "bitong.sock"
    server = subprocess.Popen([*BITONG, "serve", "--tools", str(tools_root), "--listen", f"unix:{sock}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        via_server = bitong("call", "--server", f"unix:{sock}", "shell-exec", "cmd=echo via server")
        assert via_server.stdout == "via server\n"
        marker = tools_root / "shell-exec" / "runtime" / "started"   # its one writable host folder (sandbox)
        in_flight = subprocess.Popen([*BITONG, "call", "--server", f"unix:{sock}", "shell-exec",
                                      f"cmd=touch {marker}; sleep 0.5; echo finished"],
                                     stdout=subprocess.PIPE, text=True)
        end = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < end:
            time.sleep(0.01)
        assert marker.exists()
        server.send_signal(signal.SIGTERM)
        out, _ = in_flight.communicate(timeout=20)
        assert out == "finished\n" and in_flight.returncode == 0
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
        server.communicate()  # waits, and closes the pipes (no ResourceWarning)


def test_eval_prints_the_scorers_summary_for_a_users_own_phrasings(tools_root: Path, tmp_path: Path) -> None:
    queries = tmp_path / "mine.tsv"
    queries.write_text("query\texpected\n"
                       "run the shell command uname -a\tshell-exec\n"
                       "订一张明天去北京的高铁票\tNONE\n", encoding="utf-8")
    out = bitong("eval", "--tools", str(tools_root), str(queries))
    assert out.returncode == 0
    assert re.fullmatch(r"hit@1=1\.000 hit@3=1\.000 none_acc=1\.000 mrr=1\.000 n=2", out.stdout.splitlines()[-1])
    queries.write_text("only one field\n", encoding="utf-8")
    bad = bitong("eval", "--tools", str(tools_root), str(queries))
    assert bad.returncode == 2 and f"{queries}:1" in bad.stderr


def test_eval_and_match_read_a_tool_the_approvals_leave_out_and_name_it(tmp_path: Path) -> None:
    """eval and an in-process match read descriptions: a tool declaring network with no approval is matched,
    and said not to serve; a server does not offer it."""
    root = tmp_path / "tools"
    for name, intent, perms in [("rate-convert", "convert an amount between currencies at today's rate",
                                 "network: true"),
                                ("word-count", "count the words of a text file", "")]:
        (root / name).mkdir(parents=True)
        (root / name / "TOOL.hdlp").write_text(tool_text(name, intent=intent, permissions=perms), encoding="utf-8")
    queries = tmp_path / "mine.tsv"
    queries.write_text("convert 100 USD to EUR\trate-convert\n", encoding="utf-8")
    out = bitong("eval", "--no-cache", "--tools", str(root), str(queries))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("hit@1=1.000 ")
    assert "1 declare permissions" in out.stderr and "rate-convert" in out.stderr
    # an in-process match previews descriptions too, and marks what a server would not offer
    preview = bitong("match", "--no-cache", "--tools", str(root), "--json", "convert 100 USD to EUR")
    first = json.loads(preview.stdout)["candidates"][0]
    assert first == {"name": "rate-convert", "score": first["score"], "unapproved": ["network"]}
    assert "rate-convert" in preview.stderr
    unsure = bitong("match", "--no-cache", "--tools", str(root), "--json", "--explain", "--threshold", "0.99",
                    "convert 100 USD to EUR")   # a near miss is marked as well
    assert json.loads(unsure.stdout)["near_misses"][0]["unapproved"] == ["network"]
    text = bitong("match", "--no-cache", "--tools", str(root), "convert 100 USD to EUR").stdout
    assert "rate-convert" in text and "[unapproved: declares network; a server does not offer it]" in text
    # a server offers only what its approvals allow: Match over it never names the tool
    sock = tmp_path / "s.sock"
    server = subprocess.Popen([*BITONG, "serve", "--tools", str(root), "--listen", f"unix:{sock}",
                               "--admin-socket", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("bitong: serving")
        served = bitong("match", "--server", f"unix:{sock}", "--json", "convert 100 USD to EUR")
        assert all(c["name"] != "rate-convert" for c in json.loads(served.stdout)["candidates"])
    finally:
        server.terminate()
        server.communicate(timeout=20)


def test_serve_with_a_state_file_restarts_from_it(tools_root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.pb"
    sock = tmp_path / "s.sock"
    for attempt in range(2):
        server = subprocess.Popen([*BITONG, "serve", "--tools", str(tools_root), "--listen", f"unix:{sock}",
                                   "--state", str(state), "--log-level", "INFO"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().startswith("bitong: serving")
            ok = bitong("call", "--server", f"unix:{sock}", "shell-exec", "cmd=echo up")
            assert ok.stdout == "up\n"
        finally:
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=20)
        assert state.exists()
        assert ("registry state" in err and "loaded" in err) == (attempt == 1), err


def test_a_users_vocabulary_extends_matching_and_a_broken_one_is_named(tools_root: Path, tmp_path: Path) -> None:
    query = "东东瞅瞅 /tmp/notes.txt"  # an in-house phrase for "read this file"

    def best(out: dict) -> dict:  # the first candidate, found or a near miss under the threshold
        return (out["candidates"] or out["near_misses"])[0]

    before = json.loads(bitong("match", "--tools", str(tools_root), "--json", "--explain", query).stdout)
    assert best(before)["name"] != "file-read"
    vocab = tmp_path / "mine.tsv"
    vocab.write_text("# our own words\nread\t\t东东瞅瞅\n", encoding="utf-8")  # a known concept gains a form
    out = bitong("match", "--tools", str(tools_root), "--vocabulary", str(vocab), "--json", "--explain", query)
    after = json.loads(out.stdout)
    assert best(after)["name"] == "file-read"
    assert "<read>" in best(after)["matched_terms"]  # the concept the new form joined
    vocab.write_text("just one field\n", encoding="utf-8")
    bad = bitong("match", "--tools", str(tools_root), "--vocabulary", str(vocab), "x")
    assert bad.returncode == 2 and bad.stderr.startswith(f"bitong: {vocab}:1:")


def test_lint_parses_only_and_reports_every_problem_of_a_root(tools_root: Path, write_tool: WriteTool) -> None:
    """lint is the parser over each file: it never builds a match index (so never loads the matcher)."""
    write_tool("broken", text="name: broken\n")
    write_tool("again", text=(tools_root / "git-ops" / "TOOL.hdlp").read_text(encoding="utf-8"))
    script = ("import sys\nfrom bitong.agent.cli.commands import main\nrc = main(['lint', sys.argv[1]])\n"
              "print(sorted(m for m in sys.modules if m.startswith('bitong.agent.matching')), rc)")
    done = subprocess.run([sys.executable, "-c", script, str(tools_root)], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[-1] == "[] 1", done.stdout + done.stderr
    assert any(line.startswith(f"{tools_root / 'broken' / 'TOOL.hdlp'}:") for line in lines)
    assert f"{tools_root / 'again' / 'TOOL.hdlp'}:2:7: name 'git-ops' does not match its folder 'again'" in done.stdout
    assert done.stderr.strip().endswith("checked, 2 with errors")


def test_a_tools_root_error_has_no_line_and_column(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    listed = bitong("tools", "--tools", str(missing))
    assert f"error: {missing}: tools root cannot be listed" in listed.stderr
    assert ":0:0:" not in listed.stderr
    linted = bitong("lint", str(missing))
    assert linted.returncode == 1 and linted.stdout == f"{missing}: no such file or folder\n"


def test_in_process_call_past_a_limit_is_one_line_and_exit_2(tools_root: Path) -> None:
    params = [f"p{i}=1" for i in range(65)]  # max_params is 64
    done = bitong("call", "--tools", str(tools_root), "shell-exec", *params)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "bitong: 65 parameters; the limit is max_params 64\n"


LIMIT_LINE = "bitong: intent is 5000 bytes; the limit is max_intent_bytes 4096: say what the tool should do in fewer words\n"


def test_in_process_match_past_the_intent_limit_is_one_line_and_exit_2(tools_root: Path) -> None:
    """It printed a LimitExceeded traceback (and exit 1): the server answers INVALID_ARGUMENT, the CLI a usage error."""
    done = bitong("match", "--tools", str(tools_root), "x" * 5000)
    assert done.returncode == 2, done.stderr
    assert done.stderr == LIMIT_LINE and done.stdout == ""
    # from stdin the lines before it are answered, then the run stops the same way
    piped = bitong("match", "--tools", str(tools_root), "-", stdin="run `uname -a` on the box\n" + "x" * 5000 + "\n")
    assert piped.returncode == 2, piped.stderr
    assert piped.stderr == LIMIT_LINE
    assert [json.loads(line)["query"] for line in piped.stdout.splitlines()] == ["run `uname -a` on the box"]


def test_sandbox_flag_decides_and_each_result_says_whether_it_ran_sandboxed(tools_root: Path) -> None:
    def ran(mode: str) -> dict[str, Any]:
        out = bitong("call", "--tools", str(tools_root), "--sandbox", mode, "shell-exec", "cmd=ls /proc | wc -l",
                     "--json")
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    required, off = ran("required"), ran("off")
    assert required["sandboxed"] is True and required["argv"][:2] == ["/bin/sh", "-c"]
    assert off["sandboxed"] is False and "SANDBOX OFF" in bitong(
        "call", "--tools", str(tools_root), "--sandbox", "off", "shell-exec", "cmd=true").stderr
    bad = bitong("call", "--tools", str(tools_root), "--sandbox", "maybe", "shell-exec", "cmd=true")
    assert bad.returncode == 2 and "invalid choice: 'maybe'" in bad.stderr


def test_sandbox_required_refuses_to_start_where_it_cannot_be_built(tools_root: Path, tmp_path: Path) -> None:
    """No PID namespace (forced with BITONG_CONTAINMENT=group) means no sandbox: required stops, auto warns."""
    env = {**os.environ, "BITONG_CONTAINMENT": "group"}
    serve = subprocess.run([*BITONG, "serve", "--tools", str(tools_root), "--listen", f"unix:{tmp_path}/s.sock",
                            "--sandbox", "required"], capture_output=True, text=True, timeout=60, env=env)
    assert serve.returncode == 2 and "--sandbox required, and the sandbox cannot be built here" in serve.stderr
    auto = subprocess.run([*BITONG, "call", "--tools", str(tools_root), "shell-exec", "cmd=echo ran", "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert "SANDBOX UNAVAILABLE" in auto.stderr and json.loads(auto.stdout)["sandboxed"] is False


def test_a_tool_cannot_reach_the_servers_own_socket_or_config(tools_root: Path, tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(dir="/var/tmp"))   # outside /tmp, which every tool sees as its own anyway
    sock, config = home / "bitong.sock", home / "bitong.toml"
    config.write_text('[approve]\ntools = ["shell-exec"]\n')
    server = subprocess.Popen([*BITONG, "serve", "--tools", str(tools_root), "--listen", f"unix:{sock}",
                               "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        probe = (f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{sock}')\" 2>&1 | "
                 f"tail -1; wc -c < {config}")
        out = bitong("call", "--server", f"unix:{sock}", "shell-exec", f"cmd={probe}")
        refused, size = out.stdout.strip().split("\n")
        assert "ConnectionRefusedError" in refused and size == "0", out
    finally:
        server.terminate()
        server.communicate(timeout=30)
        shutil.rmtree(home)


# ---------------------------------------------------------------- a client that says who it is

async def test_the_client_presents_a_token_from_the_environment(start_sidecar, monkeypatch) -> None:
    import asyncio
    import os

    from bitong.agent.config import from_dict

    monkeypatch.setenv("SERVER_SIDE_T", "cli-token-0123456789")
    car = await start_sidecar("127.0.0.1:0", config=from_dict(
        {"auth": {"tokens": {"cli": {"token_env": "SERVER_SIDE_T"}}}}))

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if k not in ("BITONG_TOKEN", "SERVER_SIDE_T")}
        return subprocess.run([*BITONG, *args], capture_output=True, text=True, timeout=60, env={**clean, **env})

    refused = await asyncio.to_thread(run, "tools", "--server", car.address)
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    named = await asyncio.to_thread(run, "tools", "--server", car.address, "--token-env", "MINE",
                                    MINE="cli-token-0123456789")
    assert named.returncode == 0 and "shell-exec" in named.stdout
    default = await asyncio.to_thread(run, "call", "--server", car.address, "shell-exec", "cmd=echo by default",
                                      BITONG_TOKEN="cli-token-0123456789")
    assert default.stdout == "by default\n"
    wrong = await asyncio.to_thread(run, "match", "--server", car.address, "run a command",
                                    BITONG_TOKEN="not-the-token")
    assert wrong.returncode == 1 and "matches none" in wrong.stderr


async def test_the_client_presents_a_certificate(start_sidecar, tmp_path: Path) -> None:
    import asyncio

    from bitong.agent.serving.listen import Security
    from tests.agent.certs import CA

    ca = CA(tmp_path)
    server = ca.issue("localhost", server=True)
    client = ca.issue("cli-agent")
    car = await start_sidecar("127.0.0.1:0", security=Security(
        tls_cert=str(server.cert), tls_key=str(server.key), tls_client_ca=str(ca.path)))
    target = f"localhost:{car.port}"
    ok = await asyncio.to_thread(bitong, "call", "--server", target, "--tls-ca", str(ca.path), "--tls-cert",
                                 str(client.cert), "--tls-key", str(client.key), "shell-exec", "cmd=echo over mtls")
    assert ok.stdout == "over mtls\n", ok.stderr
    half = await asyncio.to_thread(bitong, "call", "--server", target, "--tls-cert", str(client.cert),
                                   "shell-exec", "cmd=true")
    assert half.returncode != 0 and "go together" in half.stderr
# ---------------------------------------------------------------- approvals: audit, lint --audit, approve/deny


def test_audit_prints_each_tools_allowances_and_what_is_unapproved(tools_root: Path, tmp_path: Path) -> None:
    from tests.support import tool_text

    (tools_root / "git-log").mkdir()
    (tools_root / "git-log" / "TOOL.hdlp").write_text(
        tool_text("git-log", command="git -C {repo} log", params="{ repo: { type: string } }")
        + "permissions: { fs_read: true, fs_read_paths: [/srv/**] }\n")
    prod = tmp_path / "prod.toml"
    prod.write_text('[approve]\ntools = ["shell-exec"]\n')
    out = bitong("audit", str(tools_root), "--config", str(prod))
    assert out.returncode == 1
    blocks = {b.split()[0]: b for b in out.stdout.split("\n\n") if b.strip() and not b.startswith("approvals from")}
    assert "approved (shell-exec): serves" in blocks["shell-exec"]
    assert "programs:    any program (exec: true)" in blocks["shell-exec"]
    assert "UNAPPROVED: fs_write: does not serve" in blocks["file-write"]
    assert "writes:      /tmp/**, /srv/app/**, /opt/hlpd/runtime/**, and its runtime/ folder" in blocks["file-write"]
    assert "programs:    only git (the command's own program)" in blocks["git-log"]
    assert "reads:       the system directories a program needs" in blocks["git-log"]
    assert blocks["git-log"].rstrip().endswith(", and /srv/**\n  programs:    only git (the command's own program); "
                                               "no other program it would start\n  secrets:     none (the environment "
                                               "is minimal)")
    assert "network:     none" in blocks["git-log"] and "no approval needed" in blocks["git-log"]
    assert "UNAPPROVED: network" in blocks["http-request"]
    assert "3 unapproved (file-write, http-request, scheduled-reminder)" in out.stderr
    data = json.loads(bitong("audit", str(tools_root), "--config", str(prod), "--json").stdout)
    pins = {t["name"]: f'{t["name"]}@{t["sha256"][:12]}' for t in data["tools"] if t["sensitive"]}
    prod.write_text(f"[approve]\ntools = {json.dumps(sorted(pins.values()))}\n")
    assert bitong("audit", str(tools_root), "--config", str(prod)).returncode == 0


def test_lint_audit_names_the_unapproved_permission(tools_root: Path, tmp_path: Path) -> None:
    prod = tmp_path / "prod.toml"
    prod.write_text("[defaults]\n")
    out = bitong("lint", "--audit", "--config", str(prod), str(tools_root))
    assert out.returncode == 1
    line = next(x for x in out.stdout.splitlines() if x.startswith(str(tools_root / "shell-exec")))
    assert "unapproved exec:" in line and "does not approve" in line
    assert bitong("lint", "--audit", str(tools_root)).returncode == 0   # the development default
    assert bitong("lint", str(tools_root), "--config", str(prod)).returncode == 0   # without --audit: parsing only


def test_a_production_config_serves_no_unapproved_tool(tools_root: Path, tmp_path: Path) -> None:
    prod = tmp_path / "prod.toml"
    prod.write_text("[defaults]\n")
    listed = bitong("tools", "--tools", str(tools_root), "--config", str(prod))
    assert "shell-exec" not in listed.stdout.split() and "git-ops" in listed.stdout
    assert "tool 'shell-exec' declares exec" in listed.stderr
    refused = bitong("call", "--tools", str(tools_root), "--config", str(prod), "shell-exec", "cmd=id")
    assert refused.returncode == 1 and "no tool named 'shell-exec' is registered" in refused.stderr


def test_approvals_http_refuses_a_non_loopback_address(tools_root: Path) -> None:
    out = bitong("serve", "--tools", str(tools_root), "--approvals-http", "0.0.0.0:8080")
    assert out.returncode == 2 and "loopback address only" in out.stderr


def test_a_person_approves_a_waiting_call_with_bitong_approve(tools_root: Path, tmp_path: Path) -> None:
    (tools_root / "guarded").mkdir()
    from tests.agent.calling.test_humanconfirm import human_tool

    (tools_root / "guarded" / "TOOL.hdlp").write_text(human_tool(), encoding="utf-8")
    sock, admin_sock = tmp_path / "bitong.sock", tmp_path / "admin" / "admin.sock"
    server = subprocess.Popen([*BITONG, "serve", "--tools", str(tools_root), "--listen", f"unix:{sock}",
                               "--admin-socket", str(admin_sock), "--approvals-http", "127.0.0.1:0",
                               "--no-semantic"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        page = server.stdout.readline()
        assert re.fullmatch(r"bitong: approvals page on http://127\.0\.0\.1:\d+/\?token=[\w-]{32}\n", page)
        call = subprocess.Popen([*BITONG, "call", "--server", f"unix:{sock}", "guarded", "word=approved",
                                 "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 30
        pending = ""
        while time.monotonic() < end and "guarded" not in pending:
            pending = bitong("pending", "--admin-socket", str(admin_sock)).stdout
        request_id = pending.split()[0]
        assert bitong("approve", request_id, "--admin-socket", str(admin_sock)).returncode == 0
        out, err = call.communicate(timeout=60)
        assert (out, call.returncode) == ("ran approved\n", 0), err
        denied = bitong("deny", request_id, "--admin-socket", str(admin_sock))
        assert denied.returncode == 1 and "already ran" in denied.stderr
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=20)
        server.communicate()
    assert not admin_sock.exists()   # removed at a clean stop


def test_approve_without_a_running_server_says_so(tmp_path: Path) -> None:
    out = bitong("approve", "abc", "--admin-socket", str(tmp_path / "none.sock"))
    assert out.returncode == 1 and "no admin socket at" in out.stderr


async def test_tools_server_walks_every_page(start_sidecar, write_tool: WriteTool, tmp_path: Path) -> None:
    """More tools than one default page (500): the client follows next_page_token to the end."""
    import asyncio

    from bitong.agent.serving.service import DEFAULT_PAGE_SIZE

    for i in range(DEFAULT_PAGE_SIZE + 20):
        write_tool(f"many-{i:04d}")
    car = await start_sidecar(f"unix:{tmp_path}/many.sock")
    listed = await asyncio.to_thread(bitong, "tools", "--server", car.address, "--json")
    assert listed.returncode == 0, listed.stderr
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert names == sorted(set(names)) and len(names) == len(car.registry.snapshot.tools)
    assert sum(n.startswith("many-") for n in names) == DEFAULT_PAGE_SIZE + 20


@pytest.mark.parametrize("server", ["127.0.0.1:1", "unix:/nonexistent/bitong.sock"])
def test_a_sidecar_that_cannot_be_reached_is_one_line_that_says_where_and_what_to_try(server: str) -> None:
    for args in (("match", "disk usage"), ("call", "shell-exec", "cmd=echo hi"), ("tools",), ("show", "shell-exec")):
        done = bitong(*args, "--server", server)
        assert done.returncode == 1
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"bitong: cannot reach a bitong sidecar at {server} ("), lines
        assert "is `bitong serve` running" in lines[0]


def test_a_server_address_without_a_port_is_refused_before_connecting() -> None:
    done = bitong("tools", "--server", "localhost")
    assert done.returncode == 1 and done.stderr.strip() == (
        "bitong: --server 'localhost': the port is missing: expected host:port (127.0.0.1:50151, [::1]:50151) "
        "or unix:/path/to.sock")


async def test_call_stream_prints_output_as_it_comes_and_show_reads_the_server(start_sidecar, tmp_path: Path) -> None:
    """--stream: the first line arrives while the tool is still running (it then sleeps a minute: a
    collected Call would print nothing before that); the exit code and stderr are the tool's."""
    import asyncio

    car = await start_sidecar(f"unix:{tmp_path}/s.sock")
    proc = await asyncio.create_subprocess_exec(*BITONG, "call", "shell-exec", "cmd=echo first; sleep 60",
                                                "--stream", "--server", car.address,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert first == b"first\n"
    finally:
        proc.kill()   # our own child; the server stops the tool when its caller goes
        await proc.wait()
    done = await asyncio.to_thread(bitong, "call", "shell-exec", "cmd=echo out; echo oops >&2; exit 4",
                                   "--stream", "--server", car.address)
    assert (done.returncode, done.stdout) == (4, "out\n") and done.stderr.startswith("oops\n")
    page = await asyncio.to_thread(bitong, "show", "shell-exec", "--server", car.address)
    assert page.returncode == 0 and page.stdout.startswith("shell-exec  (") and "call it" in page.stdout


def test_init_then_lint_then_call(tmp_path: Path) -> None:
    made = bitong("init", "hello-tool", "--dir", str(tmp_path))
    assert made.returncode == 0 and f"wrote {tmp_path / 'hello-tool' / 'TOOL.hdlp'}" in made.stdout
    assert bitong("lint", str(tmp_path)).returncode == 0
    ran = bitong("call", "--tools", str(tmp_path), "hello-tool", "message=hi there")
    assert (ran.returncode, ran.stdout) == (0, "hi there\n")
    again = bitong("init", "hello-tool", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr
