"""A stand-in for a Forgejo instance: the API v1 endpoints bitong's ``git-forgejo`` executor uses.

Forgejo cannot run here, so this serves, over real HTTP, the subset of the
API that Forgejo's own documentation (its swagger, ``/api/swagger``)
specifies, with the documented paths, parameters, JSON fields and status
codes; anything else answers 404. It is a test double, not Forgejo: one
in-memory repository history per branch, no permissions beyond the token,
no git underneath (shas are git-style SHA-1 of the content, not real trees).

Covered (all under ``/api/v1``):

======  ==========================================  ===============================================
verb    path                                        answers
======  ==========================================  ===============================================
GET     /repos/{owner}/{repo}/raw/{filepath}        200 the file's bytes; 404 (``ref`` query)
GET     /repos/{owner}/{repo}/contents              200 [ContentsResponse] of the root (``ref``)
GET     /repos/{owner}/{repo}/contents/{filepath}   200 ContentsResponse (file, base64 ``content``)
                                                    or [ContentsResponse] (folder); 404
POST    /repos/{owner}/{repo}/contents/{filepath}   201 FileResponse; 422 file exists / no content;
                                                    404 unknown branch (CreateFileOptions)
PUT     /repos/{owner}/{repo}/contents/{filepath}   200 FileResponse; 422 ``sha`` missing or stale;
                                                    404 no such file or branch (UpdateFileOptions)
GET     /repos/{owner}/{repo}/commits               200 [Commit] newest first (``sha``, ``path``,
                                                    ``page``, ``limit``), X-Total-Count, X-PerPage,
                                                    X-Page, X-PageCount, X-HasMore, Link; 409 empty
GET     /repos/{owner}/{repo}/issues                200 [Issue] (``state`` default open, ``type``,
                                                    ``q``, ``labels``, ``page``, ``limit``), X-Total-Count
POST    /repos/{owner}/{repo}/issues                201 Issue; 422 without ``title`` (CreateIssueOption)
GET     /repos/{owner}/{repo}/pulls                 200 [PullRequest] (``state`` default open,
                                                    ``page``, ``limit``), X-Total-Count
======  ==========================================  ===============================================

Every request needs ``Authorization: token <token>`` (401 ``{"message", "url"}``
otherwise); an unknown owner/repo is 404. Error bodies are Forgejo's
``APIError`` (``{"message", "url"}``) and ``APINotFound``
(``{"errors", "message", "url"}``). Page size defaults to 30 and is capped
at 50, as Forgejo's ``[api]`` defaults are.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import threading
import urllib.parse
from datetime import datetime, UTC
from typing import Any

from .server import Exchange, FakeServer, Reply

__all__ = ["Forgejo"]

SWAGGER = "/api/swagger"
_DEFAULT_LIMIT = 30
_MAX_LIMIT = 50
_REPO = r"/api/v1/repos/([^/]+)/([^/]+)"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass
class _Commit:
    sha: str
    message: str
    author: dict[str, str]
    created: str
    parent: str | None
    files: list[str]


@dataclasses.dataclass
class _Repo:
    owner: str
    name: str
    default_branch: str = "main"
    files: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)     # branch -> path -> bytes
    history: dict[str, list[_Commit]] = dataclasses.field(default_factory=dict)       # branch -> commits, oldest first
    issues: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    pulls: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class Forgejo(FakeServer):
    """``Forgejo(token="...")``; ``add_repo``, ``commit``, ``add_pull`` set the scene."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.data_lock = threading.Lock()
        self.user = {"id": 1, "login": "zhuyuan", "full_name": "铸渊", "email": "zhuyuan@example.org"}
        for verb, pattern, fn in (
            ("GET", _REPO + r"/raw/(.+)", self._raw),
            ("GET", _REPO + r"/contents", self._contents_root),
            ("GET", _REPO + r"/contents/(.+)", self._contents),
            ("POST", _REPO + r"/contents/(.+)", self._create_file),
            ("PUT", _REPO + r"/contents/(.+)", self._update_file),
            ("GET", _REPO + r"/commits", self._commits),
            ("GET", _REPO + r"/issues", self._issues),
            ("POST", _REPO + r"/issues", self._create_issue),
            ("GET", _REPO + r"/pulls", self._pulls),
        ):
            self.route(verb, pattern, self._guarded(fn))

    # ------------------------------------------------------------ scene

    def add_repo(self, owner: str, name: str, default_branch: str = "main") -> _Repo:
        repo = _Repo(owner, name, default_branch)
        repo.files[default_branch] = {}
        repo.history[default_branch] = []
        self.repos[(owner, name)] = repo
        return repo

    def commit(self, owner: str, name: str, files: dict[str, str | bytes], message: str,
               branch: str | None = None) -> str:
        """Change files directly (the scene before a test), as one commit; returns its sha."""
        with self.data_lock:
            repo = self.repos[(owner, name)]
            branch = branch or repo.default_branch
            tree = repo.files.setdefault(branch, {})
            for path, content in files.items():
                tree[path] = content.encode("utf-8") if isinstance(content, str) else content
            return self._record(repo, branch, message, list(files), self.user_identity()).sha

    def add_pull(self, owner: str, name: str, title: str, head: str, state: str = "open") -> dict[str, Any]:
        with self.data_lock:
            repo = self.repos[(owner, name)]
            number = len(repo.issues) + len(repo.pulls) + 1
            pull = self._pull_json(repo, number, title, head, state)
            repo.pulls.append(pull)
            return pull

    def user_identity(self) -> dict[str, str]:
        return {"name": self.user["full_name"], "email": self.user["email"], "date": _now()}

    # ------------------------------------------------------------ plumbing

    def _guarded(self, fn: Any) -> Any:
        def handle(ex: Exchange) -> Reply | None:
            if ex.request.headers.get("authorization") != f"token {self.token}":
                return Reply(401, {"message": "token is required", "url": self._swagger()})
            key = (urllib.parse.unquote(ex.match.group(1)), urllib.parse.unquote(ex.match.group(2)))
            repo = self.repos.get(key)
            if repo is None:
                return self._not_found(f"repository {key[0]}/{key[1]} does not exist")
            with self.data_lock:
                return fn(ex, repo)
        return handle

    def _swagger(self) -> str:
        return self.url + SWAGGER

    def _not_found(self, why: str) -> Reply:
        return Reply(404, {"errors": [why], "message": "The target couldn't be found.", "url": self._swagger()})

    def _error(self, status: int, message: str) -> Reply:
        return Reply(status, {"message": message, "url": self._swagger()})

    def _branch(self, repo: _Repo, ex: Exchange, key: str) -> str:
        """The branch a query names (``ref`` or ``sha``), else the default branch."""
        return ex.request.query.get(key, [""])[0] or repo.default_branch

    def _record(self, repo: _Repo, branch: str, message: str, files: list[str], author: dict[str, str]) -> _Commit:
        history = repo.history.setdefault(branch, [])
        parent = history[-1].sha if history else None
        seed = f"{parent}{message}{files}{len(history)}{author.get('date')}".encode()
        commit = _Commit(hashlib.sha1(seed).hexdigest(), message, author, author.get("date") or _now(), parent, files)
        history.append(commit)
        return commit

    def _html(self, repo: _Repo, *rest: str) -> str:
        return "/".join([self.url, repo.owner, repo.name, *rest])

    def _api(self, repo: _Repo, *rest: str) -> str:
        return "/".join([self.url, "api/v1/repos", repo.owner, repo.name, *rest])

    # ------------------------------------------------------------ JSON shapes (swagger definitions)

    def _entry(self, repo: _Repo, branch: str, path: str, with_content: bool) -> dict[str, Any]:
        """ContentsResponse."""
        tree = repo.files[branch]
        is_file = path in tree
        data = tree.get(path, b"")
        sha = _blob_sha(data) if is_file else hashlib.sha1(path.encode()).hexdigest()
        last = next((c for c in reversed(repo.history.get(branch, [])) if any(
            f == path or f.startswith(path + "/") for f in c.files)), None)
        kind = "file" if is_file else "dir"
        quoted = urllib.parse.quote(path)
        return {
            "name": path.rsplit("/", 1)[-1], "path": path, "sha": sha,
            "last_commit_sha": last.sha if last else "", "last_commit_when": last.created if last else None,
            "type": kind, "size": len(data),
            "encoding": "base64" if is_file and with_content else None,
            "content": base64.b64encode(data).decode() if is_file and with_content else None,
            "target": None, "url": self._api(repo, "contents", quoted) + f"?ref={branch}",
            "html_url": self._html(repo, "src/branch", branch, quoted),
            "git_url": self._api(repo, "git/blobs" if is_file else "git/trees", sha),
            "download_url": self._html(repo, "raw/branch", branch, quoted) if is_file else None,
            "submodule_git_url": None,
            "_links": {"self": self._api(repo, "contents", quoted) + f"?ref={branch}",
                       "git": self._api(repo, "git/blobs" if is_file else "git/trees", sha),
                       "html": self._html(repo, "src/branch", branch, quoted)},
        }

    def _folder(self, repo: _Repo, branch: str, folder: str) -> list[dict[str, Any]] | None:
        prefix = folder + "/" if folder else ""
        names: dict[str, str] = {}
        for path in repo.files[branch]:
            if path.startswith(prefix):
                first = path[len(prefix):].split("/", 1)[0]
                names[first] = prefix + first
        if not names and folder:
            return None
        return [self._entry(repo, branch, full, False) for _, full in sorted(names.items())]

    def _commit_json(self, repo: _Repo, commit: _Commit) -> dict[str, Any]:
        """Commit (the list form)."""
        author = {"name": commit.author["name"], "email": commit.author["email"], "date": commit.created}
        return {
            "url": self._api(repo, "git/commits", commit.sha), "sha": commit.sha, "created": commit.created,
            "html_url": self._html(repo, "commit", commit.sha),
            "commit": {"url": self._api(repo, "git/commits", commit.sha), "author": author, "committer": author,
                       "message": commit.message,
                       "tree": {"url": self._api(repo, "git/trees", commit.sha), "sha": commit.sha,
                                "created": commit.created},
                       "verification": {"verified": False, "reason": "gpg.error.not_signed_commit",
                                        "signature": "", "signer": None, "payload": ""}},
            "author": self.user, "committer": self.user,
            "parents": [{"url": self._api(repo, "git/commits", commit.parent), "sha": commit.parent,
                         "created": commit.created}] if commit.parent else [],
            "files": [{"filename": f, "status": "modified"} for f in commit.files],
            "stats": {"total": len(commit.files), "additions": len(commit.files), "deletions": 0},
        }

    def _file_response(self, repo: _Repo, branch: str, path: str, commit: _Commit) -> dict[str, Any]:
        """FileResponse."""
        author = {"name": commit.author["name"], "email": commit.author["email"], "date": commit.created}
        return {
            "content": self._entry(repo, branch, path, False),
            "commit": {"url": self._api(repo, "git/commits", commit.sha), "sha": commit.sha,
                       "created": commit.created, "html_url": self._html(repo, "commit", commit.sha),
                       "author": author, "committer": author, "message": commit.message,
                       "parents": [{"url": self._api(repo, "git/commits", commit.parent), "sha": commit.parent}]
                       if commit.parent else [],
                       "tree": {"url": self._api(repo, "git/trees", commit.sha), "sha": commit.sha}},
            "verification": {"verified": False, "reason": "gpg.error.not_signed_commit", "signature": "",
                             "signer": None, "payload": ""},
        }

    def _repo_meta(self, repo: _Repo) -> dict[str, Any]:
        return {"id": 1, "name": repo.name, "owner": repo.owner, "full_name": f"{repo.owner}/{repo.name}"}

    def _issue_json(self, repo: _Repo, number: int, title: str, body: str, labels: list[dict[str, Any]],
                    state: str = "open") -> dict[str, Any]:
        """Issue."""
        now = _now()
        return {
            "id": 1000 + number, "url": self._api(repo, "issues", str(number)),
            "html_url": self._html(repo, "issues", str(number)), "number": number, "user": self.user,
            "original_author": "", "original_author_id": 0, "title": title, "body": body, "ref": "",
            "assets": [], "labels": labels, "milestone": None, "assignee": None, "assignees": None,
            "state": state, "is_locked": False, "comments": 0, "created_at": now, "updated_at": now,
            "closed_at": None, "due_date": None, "pull_request": None, "repository": self._repo_meta(repo),
            "pin_order": 0,
        }

    def _pull_json(self, repo: _Repo, number: int, title: str, head: str, state: str) -> dict[str, Any]:
        """PullRequest."""
        now = _now()
        branch = {"label": head, "ref": head, "sha": hashlib.sha1(head.encode()).hexdigest(), "repo_id": 1,
                  "repo": self._repo_meta(repo)}
        base = dict(branch, label=repo.default_branch, ref=repo.default_branch)
        return {
            "id": 2000 + number, "url": self._html(repo, "pulls", str(number)), "number": number,
            "user": self.user, "title": title, "body": "", "labels": [], "milestone": None, "assignee": None,
            "assignees": None, "state": state, "is_locked": False, "comments": 0,
            "html_url": self._html(repo, "pulls", str(number)),
            "diff_url": self._html(repo, "pulls", f"{number}.diff"),
            "patch_url": self._html(repo, "pulls", f"{number}.patch"), "mergeable": True, "merged": False,
            "merged_at": None, "merge_commit_sha": None, "merged_by": None, "allow_maintainer_edit": False,
            "base": base, "head": branch, "merge_base": base["sha"], "due_date": None, "created_at": now,
            "updated_at": now, "closed_at": None, "draft": False,
        }

    # ------------------------------------------------------------ endpoints

    def _raw(self, ex: Exchange, repo: _Repo) -> Reply:
        path = urllib.parse.unquote(ex.match.group(3))
        branch = self._branch(repo, ex, "ref")
        tree = repo.files.get(branch)
        if tree is None or path not in tree:
            return self._not_found(f"object does not exist [id: {branch}, rel_path: {path}]")
        return Reply(200, tree[path], {"Content-Type": "text/plain; charset=utf-8"})

    def _contents_root(self, ex: Exchange, repo: _Repo) -> Reply:
        branch = self._branch(repo, ex, "ref")
        if branch not in repo.files:
            return self._not_found(f"no such branch: {branch}")
        return Reply(200, self._folder(repo, branch, "") or [])

    def _contents(self, ex: Exchange, repo: _Repo) -> Reply:
        path = urllib.parse.unquote(ex.match.group(3)).strip("/")
        branch = self._branch(repo, ex, "ref")
        tree = repo.files.get(branch)
        if tree is None:
            return self._not_found(f"no such branch: {branch}")
        if path in tree:
            return Reply(200, self._entry(repo, branch, path, True))
        listing = self._folder(repo, branch, path)
        if listing is None:
            return self._not_found(f"object does not exist [id: {branch}, rel_path: {path}]")
        return Reply(200, listing)

    def _write_options(self, ex: Exchange) -> tuple[dict[str, Any] | None, Reply | None]:
        try:
            options = ex.request.json()
        except ValueError:
            return None, self._error(422, "invalid JSON body")
        if not isinstance(options, dict) or not isinstance(options.get("content"), str):
            return None, self._error(422, "[Content]: Required")
        try:
            base64.b64decode(options["content"], validate=True)
        except ValueError:
            return None, self._error(422, "illegal base64 data")
        return options, None

    def _commit_file(self, repo: _Repo, options: dict[str, Any], path: str, verb: str) -> tuple[str, _Commit] | Reply:
        branch = options.get("branch") or repo.default_branch
        if branch not in repo.files:
            return self._not_found(f"branch does not exist [name: {branch}]")
        target = options.get("new_branch") or branch
        if target != branch:
            if target in repo.files:
                return self._error(422, f"branch already exists [name: {target}]")
            repo.files[target] = dict(repo.files[branch])
            repo.history[target] = list(repo.history[branch])
        tree = repo.files[target]
        tree[path] = base64.b64decode(options["content"])
        identity = options.get("author") or options.get("committer") or {}
        author = {"name": identity.get("name") or self.user["full_name"],
                  "email": identity.get("email") or self.user["email"], "date": _now()}
        message = options.get("message") or f"{'Add' if verb == 'POST' else 'Update'} {path}"
        return target, self._record(repo, target, message, [path], author)

    def _create_file(self, ex: Exchange, repo: _Repo) -> Reply:
        path = urllib.parse.unquote(ex.match.group(3)).strip("/")
        options, problem = self._write_options(ex)
        if problem:
            return problem
        assert options is not None
        branch = options.get("branch") or repo.default_branch
        if path in repo.files.get(branch, {}):
            return self._error(422, f"repository file already exists [path: {path}]")
        done = self._commit_file(repo, options, path, "POST")
        if isinstance(done, Reply):
            return done
        target, commit = done
        return Reply(201, self._file_response(repo, target, path, commit))

    def _update_file(self, ex: Exchange, repo: _Repo) -> Reply:
        path = urllib.parse.unquote(ex.match.group(3)).strip("/")
        options, problem = self._write_options(ex)
        if problem:
            return problem
        assert options is not None
        if not options.get("sha"):
            return self._error(422, "[SHA]: Required")
        branch = options.get("branch") or repo.default_branch
        tree = repo.files.get(branch)
        if tree is None:
            return self._not_found(f"branch does not exist [name: {branch}]")
        if path not in tree:
            return self._not_found(f"repository file does not exist [path: {path}]")
        current = _blob_sha(tree[path])
        if options["sha"] != current:
            return self._error(422, f"sha does not match [given: {options['sha']}, expected: {current}]")
        done = self._commit_file(repo, options, path, "PUT")
        if isinstance(done, Reply):
            return done
        target, commit = done
        return Reply(200, self._file_response(repo, target, path, commit))

    def _page(self, ex: Exchange, items: list[Any], *, commits: bool = False) -> Reply:
        query = ex.request.query
        try:
            page = max(1, int(query.get("page", ["1"])[0]))
            limit = int(query.get("limit", [str(_DEFAULT_LIMIT)])[0])
        except ValueError:
            return self._error(422, "page and limit must be integers")
        limit = _DEFAULT_LIMIT if limit <= 0 else min(limit, _MAX_LIMIT)
        total = len(items)
        chunk = items[(page - 1) * limit: page * limit]
        pages = max(1, math.ceil(total / limit))
        headers = {"X-Total-Count": str(total), "Access-Control-Expose-Headers": "X-Total-Count, Link"}
        if page < pages:
            base = f"{self.url}{ex.request.path}?limit={limit}"
            headers["Link"] = f'<{base}&page={page + 1}>; rel="next",<{base}&page={pages}>; rel="last"'
        if commits:
            headers.update({"X-PerPage": str(limit), "X-Page": str(page), "X-PageCount": str(pages),
                            "X-HasMore": "true" if page < pages else "false"})
        return Reply(200, chunk, headers)

    def _commits(self, ex: Exchange, repo: _Repo) -> Reply:
        branch = self._branch(repo, ex, "sha")
        if not any(repo.history.values()):
            return Reply(409, {"errors": [], "message": "Git Repository is empty.", "url": self._swagger()})
        history = repo.history.get(branch)
        if history is None:
            return self._not_found(f"object does not exist [id: {branch}, rel_path: ]")
        path = ex.request.query.get("path", [""])[0].strip("/")
        chosen = [c for c in reversed(history) if not path or any(f == path or f.startswith(path + "/")
                                                                    for f in c.files)]
        return self._page(ex, [self._commit_json(repo, c) for c in chosen], commits=True)

    def _issues(self, ex: Exchange, repo: _Repo) -> Reply:
        query = ex.request.query
        state = query.get("state", ["open"])[0] or "open"
        if state not in ("open", "closed", "all"):
            return self._error(422, f"unknown state {state!r}")
        kind = query.get("type", [""])[0]
        items: list[dict[str, Any]] = []
        if kind in ("", "issues"):
            items += repo.issues
        if kind in ("", "pulls"):   # without type, Forgejo lists pull requests among the issues
            items += [dict(self._issue_json(repo, p["number"], p["title"], p["body"], p["labels"], p["state"]),
                           pull_request={"merged": False, "merged_at": None, "draft": False,
                                         "html_url": p["html_url"]}) for p in repo.pulls]
        words = query.get("q", [""])[0].lower()
        wanted = {name for text in query.get("labels", []) for name in text.split(",") if name}
        items = [i for i in items
                 if (state == "all" or i["state"] == state)
                 and (not words or words in (i["title"] + " " + i["body"]).lower())
                 and (not wanted or wanted & {label["name"] for label in i["labels"]})]
        items.sort(key=lambda i: -i["number"])
        return self._page(ex, items)

    def _create_issue(self, ex: Exchange, repo: _Repo) -> Reply:
        try:
            option = ex.request.json()
        except ValueError:
            return self._error(422, "invalid JSON body")
        if not isinstance(option, dict) or not option.get("title"):
            return self._error(422, "[Title]: Required")
        labels = [{"id": int(i), "name": f"label-{int(i)}", "color": "e11d21", "description": "", "url": ""}
                  for i in option.get("labels") or []]
        number = len(repo.issues) + len(repo.pulls) + 1
        issue = self._issue_json(repo, number, option["title"], option.get("body") or "", labels,
                                 "closed" if option.get("closed") else "open")
        repo.issues.append(issue)
        return Reply(201, issue)

    def _pulls(self, ex: Exchange, repo: _Repo) -> Reply:
        state = ex.request.query.get("state", ["open"])[0] or "open"
        if state not in ("open", "closed", "all"):
            return self._error(422, f"unknown state {state!r}")
        items = [p for p in repo.pulls if state == "all" or p["state"] == state]
        items.sort(key=lambda p: -p["number"])
        return self._page(ex, items)
