"""The ``git-forgejo`` executor: the Forgejo REST API v1, token-authenticated.

Seed 000 §5: the tools repository lives on a Forgejo instance (BS-SG-001).
A tool's ``method:`` names one operation; its params fill the path, the
query or the JSON body as Forgejo's API documentation (its swagger,
``/api/swagger``) defines them. The base is the endpoint's ``url`` plus
``/api/v1``; the token goes in ``Authorization: token <token>``.

Methods (paths under ``/api/v1/repos/{owner}/{repo}``; the body's schema
is the swagger definition named):

* ``get_file``: ``GET /raw/{filepath}`` (``ref``); the output is the file itself;
* ``get_contents``: ``GET /contents/{filepath}`` (``ref``); a ContentsResponse;
* ``create_file``: ``POST /contents/{filepath}``, ``content`` + CreateFileOptions;
* ``update_file``: ``PUT /contents/{filepath}``, ``content``, ``sha`` + UpdateFileOptions;
* ``write_file``: create or update (below), ``content`` + either's options;
* ``list_commits``: ``GET /commits`` (``sha path stat verification files page limit not``);
* ``list_issues``: ``GET /issues`` (``state labels q type milestones since before ... page limit``);
* ``create_issue``: ``POST /issues``, ``title`` + CreateIssueOption;
* ``list_pulls``: ``GET /pulls`` (``state sort milestone labels poster base head page limit``).

* ``owner``, ``repo`` and ``filepath`` fill the path; ``owner`` and ``repo``
  default to the endpoint's configured ``owner``/``repo``, and the
  endpoint's ``branch`` is the default ``ref`` of reads, ``branch`` of
  writes and ``sha`` (where to start) of ``list_commits``.
* Every other param goes as is into the query (GET) or the JSON body
  (POST/PUT), under the name Forgejo uses, so a tool declares
  ``message``, ``new_branch``, ``labels``... exactly as the API names them.
  For the file methods ``content`` is text, sent base64-encoded as the API
  requires (``content_base64`` passes already encoded bytes through).
  ``list_issues`` takes ``labels``/``milestones`` as a list or the API's
  comma-separated text.
* ``write_file`` without a ``sha`` lists the file's folder at the branch
  (``GET .../contents/{folder}``) to find the file's blob sha: found, it
  PUTs an update with it; absent, it POSTs a new file. Both requests share
  the call's deadline; the output is the answer to the write.
* The output is Forgejo's answer as it came (JSON for everything but
  ``get_file``); a non-2xx status is ``ok=False`` with Forgejo's own error
  body (``{"message": ..., "url": ...}``). See :mod:`.http_client` for
  timeouts, caps, streaming and retries (a 502/504 is retried only for the
  GET and PUT methods; a POST that a gateway gave up on may have landed).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import posixpath
import time
import urllib.parse
from typing import Any

from bitong.v1.agent_pb2 import ToolDef

from ...config import Defaults, Endpoint, SecretUnavailable, Service
from .base import Outcome, Sink
from .http_client import Request, fetch, query_string, quote_segment
from .http_pool import Pool
from .shell import DEFAULT_MAX_OUTPUT

__all__ = ["ForgejoExecutor", "METHODS"]

_LOOKUP_CAP = 4 * 1024 * 1024   # a folder listing, read to find one sha


@dataclasses.dataclass(frozen=True)
class _Method:
    verb: str
    path: str                      # under /api/v1
    into: str                      # "query" or "body"
    required: tuple[str, ...] = ()
    branch_as: str = ""            # which param the endpoint's branch defaults
    file: bool = False             # content goes base64-encoded


METHODS: dict[str, _Method] = {
    "get_file": _Method("GET", "/repos/{owner}/{repo}/raw/{filepath}", "query", ("filepath",), "ref"),
    "get_contents": _Method("GET", "/repos/{owner}/{repo}/contents/{filepath}", "query", ("filepath",), "ref"),
    "create_file": _Method("POST", "/repos/{owner}/{repo}/contents/{filepath}", "body", ("filepath", "content"),
                           "branch", file=True),
    "update_file": _Method("PUT", "/repos/{owner}/{repo}/contents/{filepath}", "body", ("filepath", "content", "sha"),
                           "branch", file=True),
    "write_file": _Method("PUT", "/repos/{owner}/{repo}/contents/{filepath}", "body", ("filepath", "content"),
                          "branch", file=True),
    "list_commits": _Method("GET", "/repos/{owner}/{repo}/commits", "query", (), "sha"),
    "list_issues": _Method("GET", "/repos/{owner}/{repo}/issues", "query"),
    "create_issue": _Method("POST", "/repos/{owner}/{repo}/issues", "body", ("title",)),
    "list_pulls": _Method("GET", "/repos/{owner}/{repo}/pulls", "query"),
}
"""Forgejo API v1 operations by ``method:`` name (the module docstring's table)."""

_PATH_PARAMS = ("owner", "repo", "filepath")


class ForgejoExecutor:
    """``executor: git-forgejo``; one instance per sidecar, holding its endpoints."""

    name = "git-forgejo"

    def __init__(self, service: Service, defaults: Defaults = Defaults(), pool: Pool | None = None) -> None:
        self.service = service
        self.defaults = defaults
        self.pool = pool or Pool()   # kept-alive connections (http_pool.py)

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """One API operation (two for ``write_file``); see the module docstring and base.py."""
        started = time.monotonic()
        spec = METHODS.get(tool.method)
        if spec is None:
            return Outcome(ok=False, error=f"tool definition: git-forgejo has no method {tool.method!r} "
                                           f"(known: {', '.join(METHODS)})")
        try:
            endpoint = self.service.pick(tool.endpoint)
            headers = endpoint.auth_headers()
        except (LookupError, SecretUnavailable) as exc:
            return Outcome(ok=False, error=str(exc))
        values = dict(params)
        values.setdefault("owner", endpoint.owner or None)
        values.setdefault("repo", endpoint.repo or None)
        if spec.branch_as and endpoint.branch:
            values.setdefault(spec.branch_as, endpoint.branch)
        missing = [name for name in ("owner", "repo", *spec.required)
                   if values.get(name) is None and not (name == "content" and "content_base64" in values)]
        if missing:
            return Outcome(ok=False, error=f"git-forgejo {tool.method} needs {', '.join(missing)}: give "
                                           f"{'it' if len(missing) == 1 else 'them'} as params (owner and repo may "
                                           "also come from the [git-forgejo] config)")
        cap = tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT
        verb = spec.verb
        if tool.method == "write_file" and values.get("sha") is None:
            found = await self._find_sha(endpoint, headers, values, deadline)
            if isinstance(found, Outcome):
                return found
            if found:
                values["sha"] = found
            else:
                verb = "POST"
        request = _request(endpoint, headers, spec, verb, values, tool.method)
        outcome = await fetch(request, deadline=deadline, cap=cap, sink=sink, user_agent=self.defaults.user_agent,
                              pool=self.pool)
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        return outcome

    async def _find_sha(self, endpoint: Endpoint, headers: list[tuple[str, str]], values: dict[str, Any],
                        deadline: float) -> str | Outcome:
        """The blob sha of ``filepath`` at the branch, "" if there is no such file, or the failed lookup."""
        folder, name = posixpath.split(str(values["filepath"]).strip("/"))
        path = f"/repos/{quote_segment(str(values['owner']))}/{quote_segment(str(values['repo']))}/contents"
        if folder:
            path += "/" + _quote_path(folder)
        branch = values.get("branch")
        if branch:
            path += "?" + urllib.parse.urlencode({"ref": branch})
        lookup = await fetch(Request("GET", _base(endpoint) + path, list(headers)), deadline=deadline,
                             cap=_LOOKUP_CAP, user_agent=self.defaults.user_agent, pool=self.pool)
        if lookup.http_status == 404:
            return ""  # no such folder yet: creating the file creates it
        if not lookup.ok:
            lookup.error = f"write_file could not look up the file's sha: {lookup.error}"
            return lookup
        try:
            entries = json.loads(lookup.stdout)
        except ValueError:
            return Outcome(ok=False, stdout=lookup.stdout, http_status=lookup.http_status,
                           error="write_file could not look up the file's sha: the folder listing is not JSON")
        if isinstance(entries, dict):  # the folder path is a file: Forgejo answers that file
            entries = [entries]
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("name") == name:
                if entry.get("type") != "file":
                    return Outcome(ok=False, error=f"write_file: {values['filepath']} is a {entry.get('type')}, "
                                                   "not a file")
                return str(entry.get("sha") or "")
        return ""


def _base(endpoint: Endpoint) -> str:
    url = endpoint.url
    return url if url.endswith("/api/v1") else url + "/api/v1"


def _quote_path(path: str) -> str:
    """A repository path: each segment URL-encoded, the slashes between them kept."""
    return "/".join(quote_segment(part) for part in path.strip("/").split("/"))


def _request(endpoint: Endpoint, headers: list[tuple[str, str]], spec: _Method, verb: str, values: dict[str, Any],
             method: str) -> Request:
    path = spec.path
    for name in _PATH_PARAMS:
        hole = "{" + name + "}"
        if hole in path:
            text = str(values[name])
            path = path.replace(hole, _quote_path(text) if name == "filepath" else quote_segment(text))
    rest = {k: v for k, v in values.items() if k not in _PATH_PARAMS and v is not None}
    url = _base(endpoint) + path
    if spec.into == "query":
        if method == "list_issues":  # the API takes these two as comma-separated text
            for key in ("labels", "milestones"):
                if isinstance(rest.get(key), list):
                    rest[key] = ",".join(str(v) for v in rest[key])
        query = query_string(rest)
        return Request(verb, url + (f"?{query}" if query else ""), list(headers))
    if spec.file:
        if "content_base64" in rest:
            rest["content"] = rest.pop("content_base64")
        else:
            rest["content"] = base64.b64encode(str(rest.get("content", "")).encode("utf-8")).decode("ascii")
        if verb == "POST":
            rest.pop("sha", None)
    body = json.dumps(rest, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Request(verb, url, [*headers, ("Content-Type", "application/json; charset=utf-8")], body)
