"""The git-synced tools repository: a real bare repository (file://), commits made here, the system git."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.client
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.agent.registry.tools_repo import ToolsRepo
from bitong.agent.registry.webhook import signature_ok
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import tool_text

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the system git is needed")

SECRET = b"webhook shared secret"
GIT_ENV = {"GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "test",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


class Origin:
    """A bare repository and a working clone the test commits in and pushes from."""

    def __init__(self, base: Path) -> None:
        self.bare = base / "origin.git"
        self.work = base / "work"
        self.git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare), cwd=base)
        self.git("init", "--quiet", "--initial-branch=main", str(self.work), cwd=base)
        self.git("remote", "add", "origin", self.url)

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def git(self, *args: str, cwd: Path | None = None) -> str:
        env = dict(os.environ, **GIT_ENV)
        done = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=cwd or self.work, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def commit(self, files: dict[str, str | None], message: str = "change", *, push: str = "") -> str:
        """Write (or, for None, delete) files under the work tree, commit, push; the new commit's id."""
        for rel, text in files.items():
            path = self.work / rel
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.git("add", "-A")
        self.git("commit", "--quiet", "-m", message)
        self.git("push", "--quiet", *([push] if push else []), "origin", "main")
        return self.git("rev-parse", "HEAD")


def tool(name: str, version: str, word: str) -> str:
    return tool_text(name, command=f"echo {word}") + f"version: {version}\n"


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    return Origin(tmp_path)


def test_a_commit_is_extracted_and_swapped_in_with_one_rename(origin: Origin, tmp_path: Path) -> None:
    first = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.0.0", "a1"), "README.md": "not a tool"})
    repo = ToolsRepo(origin.url, str(tmp_path / "state" / "repo"))
    assert repo.sync() and repo.status.commit == first and repo.status.branch == "main" and not repo.status.error
    assert os.readlink(repo.current) == os.path.join("commits", first)
    assert (Path(repo.root) / "alpha" / "TOOL.hdlp").read_text().endswith("version: 1.0.0\n")
    assert not (Path(repo.root) / "README.md").exists()   # only the subdir is served
    assert not repo.sync()   # nothing new
    second = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.1.0", "a2")})
    assert repo.sync() and repo.status.commit == second
    assert (Path(repo.root) / "alpha" / "TOOL.hdlp").read_text().endswith("version: 1.1.0\n")
    # a new process over the same folder serves the commit left there, before any fetch
    assert ToolsRepo(origin.url, repo.folder).status.commit == second


def test_a_force_push_or_a_lost_remote_keeps_the_last_good_commit_and_says_why(origin: Origin, tmp_path: Path) -> None:
    good = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.0.0", "a1")})
    repo = ToolsRepo(origin.url, str(tmp_path / "repo"))
    assert repo.sync()
    origin.git("commit", "--quiet", "--amend", "-m", "rewritten")
    origin.git("push", "--quiet", "--force", "origin", "main")
    assert not repo.sync()
    assert repo.status.commit == good and "history was rewritten" in repo.status.error
    assert os.readlink(repo.current) == os.path.join("commits", good)

    moved = origin.bare.with_name("moved.git")
    origin.bare.rename(moved)
    assert not repo.sync()
    assert repo.status.commit == good and repo.status.error.startswith("fetching branch main:")
    assert "does not appear to be a git repository" in repo.status.error or "not found" in repo.status.error


def test_a_commit_without_the_tools_folder_is_refused(origin: Origin, tmp_path: Path) -> None:
    good = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.0.0", "a1")})
    repo = ToolsRepo(origin.url, str(tmp_path / "repo"))
    assert repo.sync()
    origin.commit({"tools/alpha/TOOL.hdlp": None, "other/file": "x"})
    assert not repo.sync() and repo.status.commit == good and "has no folder tools" in repo.status.error


def test_the_signature_is_each_forges_hmac_of_the_body() -> None:
    body = b'{"ref": "refs/heads/main"}'
    digest = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert signature_ok(SECRET, body, {"X-Hub-Signature-256": f"sha256={digest}"})    # GitHub
    assert signature_ok(SECRET, body, {"X-Gitea-Signature": digest})                  # Gitea
    assert signature_ok(SECRET, body, {"X-Forgejo-Signature": digest})                # Forgejo
    assert not signature_ok(SECRET, body, {"X-Hub-Signature-256": digest})            # no sha256= prefix
    assert not signature_ok(SECRET, body + b" ", {"X-Gitea-Signature": digest})
    assert not signature_ok(b"another secret", body, {"X-Gitea-Signature": digest})
    assert not signature_ok(SECRET, body, {})


# ---------------------------------------------------------------- served

class Served:
    def __init__(self, car: object, agent: pb_grpc.ToolAgentStub) -> None:
        self.car = car
        self.agent = agent

    @property
    def sync(self) -> object:
        return self.car.repo_sync  # type: ignore[attr-defined]

    def post(self, payload: dict[str, object], signature: str | None, header: str = "X-Gitea-Signature",
             event: str = "push") -> tuple[int, dict[str, object]]:
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "X-Gitea-Event": event}
        if signature is not None:
            headers[header] = signature
        conn = http.client.HTTPConnection("127.0.0.1", self.car.webhook.port, timeout=30)  # type: ignore[attr-defined]
        try:
            conn.request("POST", "/hook", body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            conn.close()

    async def listed(self) -> pb.ListToolsResponse:
        return await self.agent.ListTools(pb.ListToolsRequest())


def sign(payload: dict[str, object]) -> str:
    return hmac.new(SECRET, json.dumps(payload).encode(), hashlib.sha256).hexdigest()


@pytest.fixture
async def served(origin: Origin, tmp_path: Path) -> AsyncIterator[Served]:
    from bitong.agent.serving.server import Sidecar

    origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.0.0", "a1"),
                   "tools/beta/TOOL.hdlp": tool("beta", "1.0.0", "b1")})
    repo = ToolsRepo(origin.url, str(tmp_path / "state" / "tools-repo"))
    # a fetch only when a push says so (the period is far beyond the test)
    car = Sidecar([], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5, tools_repo=repo, repo_interval_s=3600,
                  webhook="127.0.0.1:0", webhook_secret=SECRET)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield Served(car, pb_grpc.ToolAgentStub(channel))
    finally:
        await car.stop(0)


async def test_a_signed_push_swaps_the_whole_commit_in_and_a_bad_signature_fetches_nothing(
        served: Served, origin: Origin) -> None:
    first = served.sync.repo.status.commit  # type: ignore[attr-defined]
    listed = await served.listed()
    assert {t.name: (t.version, t.commit) for t in listed.tools} == {"alpha": ("1.0.0", first),
                                                                     "beta": ("1.0.0", first)}
    assert listed.repo.commit == first and listed.repo.branch == "main" and not listed.repo.error
    await served.sync.wait_syncs(1)  # type: ignore[attr-defined]   # the fetch at start

    second = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "2.0.0", "a2"),
                            "tools/beta/TOOL.hdlp": tool("beta", "2.0.0", "b2"),
                            "tools/gamma/TOOL.hdlp": tool("gamma", "1.0.0", "g1")})
    payload = {"ref": "refs/heads/main", "after": second}
    status, body = await asyncio.to_thread(served.post, payload, "0" * 64)
    assert status == 401 and "wrong signature" in str(body["error"])
    status, _ = await asyncio.to_thread(served.post, payload, None)
    assert status == 401
    assert served.sync.syncs == 1  # type: ignore[attr-defined]   # a refused push triggers nothing
    status, body = await asyncio.to_thread(served.post, {"ref": "refs/heads/other"}, sign({"ref": "refs/heads/other"}))
    assert status == 202 and body["fetching"] is False

    status, body = await asyncio.to_thread(served.post, payload, sign(payload))
    assert status == 202 and body == {"fetching": True}
    await served.sync.wait_syncs(2)  # type: ignore[attr-defined]
    listed = await served.listed()
    assert {t.name: (t.version, t.commit) for t in listed.tools} == {
        "alpha": ("2.0.0", second), "beta": ("2.0.0", second), "gamma": ("1.0.0", second)}
    assert listed.repo.commit == second
    result = await served.agent.Call(pb.CallRequest(tool="beta"))
    assert result.output == b"b2\n" and result.tool_version == "2.0.0"

    # a commit that breaks one file: every other tool of it serves, the broken one keeps its last good version
    third = origin.commit({"tools/alpha/TOOL.hdlp": "name: alpha\nthis is not a tool\n",
                           "tools/beta/TOOL.hdlp": tool("beta", "3.0.0", "b3")})
    payload = {"ref": "refs/heads/main", "after": third}
    status, _ = await asyncio.to_thread(served.post, payload, f"sha256={sign(payload)}", "X-Hub-Signature-256")
    assert status == 202
    await served.sync.wait_syncs(3)  # type: ignore[attr-defined]
    listed = await served.listed()
    versions = {t.name: (t.version, t.commit) for t in listed.tools}
    assert versions["beta"] == ("3.0.0", third) and versions["alpha"] == ("2.0.0", second)
    (error,) = [e for e in listed.errors if e.path.endswith("alpha/TOOL.hdlp")]
    assert error.serving_previous == "alpha"


async def test_a_failed_fetch_keeps_serving_and_listtools_says_why(served: Served, origin: Origin) -> None:
    await served.sync.wait_syncs(1)  # type: ignore[attr-defined]
    first = served.sync.repo.status.commit  # type: ignore[attr-defined]
    origin.bare.rename(origin.bare.with_name("gone.git"))
    payload = {"ref": "refs/heads/main"}
    status, _ = await asyncio.to_thread(served.post, payload, sign(payload), "X-Forgejo-Signature")
    assert status == 202
    await served.sync.wait_syncs(2)  # type: ignore[attr-defined]
    listed = await served.listed()
    assert listed.repo.commit == first and listed.repo.error.startswith("fetching branch main:")
    assert sorted(t.name for t in listed.tools) == ["alpha", "beta"]
    result = await served.agent.Call(pb.CallRequest(tool="alpha"))
    assert result.output == b"a1\n"


def test_bitong_serve_tools_repo_serves_the_commit_and_refuses_a_webhook_without_a_secret(
        origin: Origin, tmp_path: Path) -> None:
    import sys

    bitong = [sys.executable, "-m", "bitong"]
    sha = origin.commit({"tools/alpha/TOOL.hdlp": tool("alpha", "1.0.0", "a1")})
    env = {k: v for k, v in os.environ.items() if k != "BITONG_WEBHOOK_SECRET"}
    refused = subprocess.run([*bitong, "serve", "--tools-repo", origin.url, "--webhook", "127.0.0.1:0",
                              "--listen", f"unix:{tmp_path}/never.sock"], capture_output=True, text=True,
                             timeout=60, env=env)
    assert refused.returncode == 2 and "BITONG_WEBHOOK_SECRET" in refused.stderr

    sock = tmp_path / "bitong.sock"
    server = subprocess.Popen([*bitong, "serve", "--tools-repo", origin.url, "--repo-dir", str(tmp_path / "repo"),
                               "--interval", "3600", "--listen", f"unix:{sock}", "--admin-socket", "off",
                               "--no-semantic"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        listed = subprocess.run([*bitong, "tools", "--server", f"unix:{sock}", "--json"], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        tools = json.loads(listed.stdout)
        assert [(t["name"], t["commit"]) for t in tools] == [("alpha", sha)]
    finally:
        server.terminate()
        server.communicate(timeout=30)
