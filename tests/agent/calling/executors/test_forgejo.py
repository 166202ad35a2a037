"""The git-forgejo executor against the Forgejo API v1 stand-in (tests/fakes/forgejo.py).

Each method's request is checked as Forgejo documents it (path, query,
JSON body, base64 content, token header), and its answer is passed through
raw, errors included.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from collections.abc import Callable, Iterator

import pytest

from bitong.agent.calling.executors import Executors
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.forgejo import Forgejo
from tests.fakes.scene import TOKEN, config_for, soon

Define = Callable[..., ToolDef]
REPO = "/api/v1/repos/zhuyuan/native-repo"


@pytest.fixture
def forgejo(token: str) -> Iterator[Forgejo]:
    with Forgejo(token) as fj:
        fj.add_repo("zhuyuan", "native-repo")
        fj.commit("zhuyuan", "native-repo", {"README.md": "# 笔筒\n", "tools/shell-exec/TOOL.hdlp": "name: x\n"},
                  "initial import")
        fj.commit("zhuyuan", "native-repo", {"tools/git-ops/TOOL.hdlp": "name: git-ops\n"}, "add git-ops")
        fj.add_pull("zhuyuan", "native-repo", "feat: file-stats", head="feat/file-stats")
        yield fj


@pytest.fixture
def fj_runners(forgejo: Forgejo) -> Executors:
    return Executors(config_for(forgejo.url))


async def call(runners: Executors, define: Define, method: str, params: dict[str, Any], **options: Any) -> Any:
    tool = define(f"fj-{method.replace('_', '-')}", executor="git-forgejo", method=method, **options)
    return await runners.run(tool, params, deadline=soon())


async def test_get_file_returns_the_files_bytes(fj_runners: Executors, define: Define, forgejo: Forgejo) -> None:
    out = await call(fj_runners, define, "get_file", {"filepath": "README.md"})
    assert out.ok and out.stdout == "# 笔筒\n".encode()
    sent = forgejo.requests[-1]
    assert (sent.method, sent.path) == ("GET", f"{REPO}/raw/README.md")
    assert sent.headers["authorization"] == f"token {TOKEN}"


async def test_get_contents_passes_ref_and_answers_contents_response(fj_runners: Executors, define: Define,
                                                                     forgejo: Forgejo) -> None:
    out = await call(fj_runners, define, "get_contents", {"filepath": "tools/git-ops/TOOL.hdlp", "ref": "main"})
    assert out.ok and out.http_status == 200
    entry = json.loads(out.stdout)
    assert entry["type"] == "file" and entry["encoding"] == "base64"
    assert base64.b64decode(entry["content"]) == b"name: git-ops\n"
    assert forgejo.requests[-1].query == {"ref": ["main"]}


async def test_a_missing_file_answers_forgejos_404_body(fj_runners: Executors, define: Define) -> None:
    out = await call(fj_runners, define, "get_file", {"filepath": "no/such.md"})
    assert not out.ok and out.http_status == 404 and out.error == "HTTP 404 Not Found"
    assert json.loads(out.stdout)["message"] == "The target couldn't be found."


async def test_create_then_update_a_file(fj_runners: Executors, define: Define, forgejo: Forgejo) -> None:
    created = await call(fj_runners, define, "create_file",
                         {"filepath": "notes/今天.md", "content": "第一版", "message": "add notes"})
    assert created.ok and created.http_status == 201
    sent = forgejo.requests[-1]
    assert (sent.method, sent.path) == ("POST", f"{REPO}/contents/notes/今天.md")
    assert sent.json() == {"content": base64.b64encode("第一版".encode()).decode(), "message": "add notes"}
    sha = json.loads(created.stdout)["content"]["sha"]

    again = await call(fj_runners, define, "create_file", {"filepath": "notes/今天.md", "content": "x"})
    assert not again.ok and again.http_status == 422 and b"already exists" in again.stdout

    stale = await call(fj_runners, define, "update_file",
                       {"filepath": "notes/今天.md", "content": "x", "sha": "0" * 40})
    assert not stale.ok and stale.http_status == 422 and b"sha does not match" in stale.stdout

    updated = await call(fj_runners, define, "update_file",
                         {"filepath": "notes/今天.md", "content": "第二版", "sha": sha})
    assert updated.ok and updated.http_status == 200
    assert forgejo.requests[-1].method == "PUT" and forgejo.requests[-1].json()["sha"] == sha
    assert (await call(fj_runners, define, "get_file", {"filepath": "notes/今天.md"})).stdout == "第二版".encode()


async def test_write_file_creates_or_updates_without_a_sha(fj_runners: Executors, define: Define,
                                                           forgejo: Forgejo) -> None:
    first = await call(fj_runners, define, "write_file", {"filepath": "tools/new/TOOL.hdlp", "content": "v1"})
    assert first.ok and first.http_status == 201
    assert [r.method for r in forgejo.requests[-2:]] == ["GET", "POST"]
    second = await call(fj_runners, define, "write_file", {"filepath": "tools/new/TOOL.hdlp", "content": "v2",
                                                           "message": "bump"})
    assert second.ok and second.http_status == 200
    lookup, write = forgejo.requests[-2:]
    assert (lookup.method, lookup.path) == ("GET", f"{REPO}/contents/tools/new")
    assert write.method == "PUT" and write.json()["message"] == "bump" and len(write.json()["sha"]) == 40
    assert (await call(fj_runners, define, "get_file", {"filepath": "tools/new/TOOL.hdlp"})).stdout == b"v2"


async def test_list_commits_pages_and_says_so_in_the_headers(fj_runners: Executors, define: Define,
                                                             forgejo: Forgejo) -> None:
    out = await call(fj_runners, define, "list_commits", {"limit": 1, "path": "tools"})
    assert out.ok
    commits = json.loads(out.stdout)
    assert [c["commit"]["message"] for c in commits] == ["add git-ops"]
    assert b"X-Total-Count: 2" in out.stderr and b"X-HasMore: true" in out.stderr and b'rel="next"' in out.stderr
    assert forgejo.requests[-1].query == {"limit": ["1"], "path": ["tools"]}


async def test_create_and_list_issues(fj_runners: Executors, define: Define, forgejo: Forgejo) -> None:
    made = await call(fj_runners, define, "create_issue", {"title": "file-stats 统计不对", "body": "见附件",
                                                           "labels": [7]})
    assert made.ok and made.http_status == 201
    assert forgejo.requests[-1].json() == {"title": "file-stats 统计不对", "body": "见附件", "labels": [7]}
    issue = json.loads(made.stdout)
    assert issue["number"] == 2 and issue["state"] == "open" and issue["labels"][0]["id"] == 7

    listed = await call(fj_runners, define, "list_issues", {"type": "issues", "labels": ["label-7"], "q": "统计"})
    assert [i["title"] for i in json.loads(listed.stdout)] == ["file-stats 统计不对"]
    assert forgejo.requests[-1].query["labels"] == ["label-7"]

    untitled = await call(fj_runners, define, "create_issue", {"body": "no title"})
    assert not untitled.ok and "needs title" in untitled.error   # refused before sending: the API requires it


async def test_list_pulls(fj_runners: Executors, define: Define) -> None:
    out = await call(fj_runners, define, "list_pulls", {"state": "open"})
    pulls = json.loads(out.stdout)
    assert out.ok and [p["title"] for p in pulls] == ["feat: file-stats"]
    assert pulls[0]["head"]["ref"] == "feat/file-stats" and pulls[0]["base"]["ref"] == "main"


async def test_owner_and_repo_come_from_params_before_the_config(fj_runners: Executors, define: Define,
                                                                  forgejo: Forgejo) -> None:
    forgejo.add_repo("ops", "infra")
    out = await call(fj_runners, define, "list_pulls", {"owner": "ops", "repo": "infra"})
    assert out.ok and forgejo.requests[-1].path == "/api/v1/repos/ops/infra/pulls"


async def test_a_wrong_token_answers_401(forgejo: Forgejo, define: Define, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITONG_TEST_TOKEN", "not-the-token")
    out = await call(Executors(config_for(forgejo.url)), define, "list_pulls", {})
    assert not out.ok and out.http_status == 401 and json.loads(out.stdout)["message"] == "token is required"


async def test_an_unknown_method_is_a_definition_error(fj_runners: Executors, define: Define) -> None:
    out = await call(fj_runners, define, "delete_everything", {})
    assert not out.ok and "git-forgejo has no method 'delete_everything'" in out.error and "list_commits" in out.error
