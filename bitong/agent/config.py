"""The configuration file: endpoints, where tokens come from, and defaults.

One TOML file (read with the standard library's :mod:`tomllib`), given as
``bitong serve --config FILE`` (and to the in-process CLI commands). Every
table is optional; a sidecar without a config runs the ``shell``, ``python``
and ``http`` executors, and the configured ones answer that they have no
endpoint::

    [defaults]
    user_agent = "bitong/0.1.0"      # sent by every HTTP executor
    retry_backoff_ms = 100           # the first wait before a retry; doubles each time
    retry_backoff_max_ms = 2000      # the longest single wait
    http_max_connections = 32        # kept-alive connections per HTTP endpoint, busy or idle
    http_idle_ms = 2000              # an idle one is closed after this (0: a connection per request)

    [gatekeeper]                     # POST {url}/exec
    default = "BS-SG-001"            # for tools without `endpoint:`
    [gatekeeper.endpoints.BS-SG-001]
    url = "http://10.0.0.1:3911"
    token_env = "GATEKEEPER_TOKEN"   # sent as "Authorization: Bearer <token>"
    [gatekeeper.endpoints.BS-GZ-006]
    url = "http://10.0.0.6:3910"
    token_file = "/run/secrets/gatekeeper-gz"

    [hlpd-api]                       # one endpoint: url right in the table
    url = "http://127.0.0.1:8700/api"

    [git-forgejo]
    url = "https://git.example.org"  # the instance; /api/v1 is added
    token_env = "FORGEJO_TOKEN"      # sent as "Authorization: token <token>"
    owner = "zhuyuan"                # defaults for calls that do not name them
    repo = "native-repo"

    [auth.tokens.agent-a]            # a caller over TCP says who it is with this bearer token
    token_env = "BITONG_TOKEN_AGENT_A"
    [auth.tokens.ci]
    token_file = "/run/secrets/bitong-ci"

    [callers.agent-a]                # what one caller may call (glob patterns of tool names)
    tools = ["file-*", "git-ops"]
    [callers."uid:1000"]             # a unix socket peer, by uid
    tools = ["*"]
    [callers."*"]                    # every other identified caller (without it: nothing)
    tools = ["system-info"]
    branch = "main"

    [python]
    interpreter = "/usr/bin/python3" # default: the server's own interpreter

    [approve]                        # tools that may declare exec, fs_write, network, secret
    tools = ["shell-exec", "file-write@3f9a1c2b7d04"]   # by name, or pinned to a sha256 prefix

    [confirm]                        # require_confirm tools
    by = "human"                     # "agent" (default): each tool's confirm_by decides
    ttl_s = 300                      # how long a request waits for a person
    http_token_env = "BITONG_APPROVALS_TOKEN"   # the approvals page's token (or http_token_file);
                                     # default: a random one, printed at start

    [network_hosts]                  # an http tool's hosts here replace its definition's network_hosts
    http-request = ["api.example.com", "*.internal.example.com", "10.0.0.0/8"]

    [secrets.deploy]                 # given to the tool "deploy" only, and only if it declares secret: true
    DEPLOY_TOKEN = { token_env = "DEPLOY_TOKEN" }            # the child's variable = where the value lives
    REGISTRY_PASSWORD = { token_file = "/run/secrets/registry" }

Rules, each a :class:`ConfigError` at load time that says what to write:

* **Secrets are never in the file.** A token is named by where it lives:
  ``token_env = "VAR"`` (an environment variable) or ``token_file = "/path"``
  (a file; surrounding whitespace is dropped). A literal ``token``,
  ``password``, ``secret``, ``api_key``... and a URL with a user or password
  in it are errors. The message names the key, never the value.
* Each named variable or file must exist and hold a token when the file is
  loaded, so a broken deployment fails at start, not at the first call. The
  value is read again at each call (a rotated secret file is picked up) and
  exists only in the request's header: :class:`Secret` prints as its
  source, never its value.
* Unknown keys are errors (with a did-you-mean), like unknown TOOL.hdlp keys.
* A table for an HTTP executor holds either one endpoint (``url`` and its
  token keys right in the table) or ``endpoints.NAME`` tables, not both; a
  tool's ``endpoint:`` picks one by name, ``default`` names the one used
  otherwise (required when there are several).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import tomllib
import urllib.parse
from typing import Any
from collections.abc import Mapping

from .registry import approval

__all__ = ["Config", "ConfigError", "ConfirmSettings", "Defaults", "Endpoint", "PythonSettings", "Secret",
           "SecretUnavailable", "Service", "HTTP_SERVICES", "TOKEN_NAME", "load", "from_dict"]

TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A bearer token's name: the caller id it establishes (no ``:`` or ``=``, so never a uid or a subject)."""

HTTP_SERVICES = ("gatekeeper", "hlpd-api", "git-forgejo")
"""The executors whose endpoints come from the config, each a table of that name."""

_AUTH_SCHEMES = {"gatekeeper": "Bearer", "hlpd-api": "Bearer", "git-forgejo": "token"}
_ENDPOINT_KEYS = ("url", "token_env", "token_file", "auth_scheme")
_FORGEJO_KEYS = ("owner", "repo", "branch")
# Keys that would hold a secret's value: refused with the reason, whatever the table.
_SECRET_KEY = re.compile(r"(?:^|[_-])(?:token|password|passwd|secret|api[_-]?key|apikey|credentials?|auth)$",
                         re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ConfigError(ValueError):
    """The config file cannot be used; ``str()`` is ``path: where: what to write instead``."""


class SecretUnavailable(LookupError):
    """A token's source is gone at call time; ``str()`` names the source, never a value."""


@dataclasses.dataclass(frozen=True)
class Secret:
    """Where a token lives. It prints as its source; only :meth:`reveal` reads the value."""

    kind: str    # "env" or "file"
    source: str  # the variable's name or the file's path

    def __repr__(self) -> str:
        return f"Secret({self.describe()})"

    __str__ = __repr__

    def describe(self) -> str:
        return f"environment variable {self.source}" if self.kind == "env" else f"file {self.source}"

    def reveal(self) -> str:
        """The token, read now; raises :class:`SecretUnavailable` (a sentence without the value)."""
        if self.kind == "env":
            value = os.environ.get(self.source, "")
        else:
            try:
                with open(self.source, encoding="utf-8") as fh:
                    value = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                raise SecretUnavailable(f"cannot read the token from {self.describe()}: {reason}") from None
        value = value.strip()
        if not value:
            raise SecretUnavailable(f"the {self.describe()} holds no token (it is unset or empty)")
        if _CONTROL.search(value):
            raise SecretUnavailable(f"the token from {self.describe()} contains a line break or control "
                                    "character, which cannot go into an HTTP header")
        return value


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One configured server: a base URL and, optionally, where its token lives."""

    name: str
    url: str                 # no trailing slash
    token: Secret | None = None
    auth_scheme: str = "Bearer"
    owner: str = ""          # git-forgejo only: defaults for calls that do not name them
    repo: str = ""
    branch: str = ""

    def auth_headers(self) -> list[tuple[str, str]]:
        """``[("Authorization", "<scheme> <token>")]``, or ``[]``; raises :class:`SecretUnavailable`."""
        if self.token is None:
            return []
        return [("Authorization", f"{self.auth_scheme} {self.token.reveal()}")]


@dataclasses.dataclass(frozen=True)
class Service:
    """One HTTP executor's endpoints by name, and the default one."""

    executor: str
    endpoints: Mapping[str, Endpoint] = dataclasses.field(default_factory=dict)
    default: str = ""

    def pick(self, name: str) -> Endpoint:
        """The endpoint a tool names (or the default); raises LookupError with the sentence to answer."""
        if not self.endpoints:
            raise LookupError(f"executor {self.executor} has no endpoint configured: add a [{self.executor}] table "
                              "to the config file (bitong serve --config FILE)")
        chosen = name or self.default
        if not chosen:
            raise LookupError(f"the tool names no endpoint and [{self.executor}] sets no default "
                              f"(configured: {', '.join(sorted(self.endpoints))})")
        try:
            return self.endpoints[chosen]
        except KeyError:
            raise LookupError(f"executor {self.executor} has no endpoint named {chosen!r} "
                              f"(configured: {', '.join(sorted(self.endpoints))})") from None


@dataclasses.dataclass(frozen=True)
class Defaults:
    """Settings every executor shares."""

    user_agent: str = "bitong"
    retry_backoff_s: float = 0.1
    retry_backoff_max_s: float = 2.0
    http_max_connections: int = 32     # open connections per HTTP endpoint (busy + idle); 0: none kept
    http_idle_s: float = 2.0           # an idle kept-alive connection is closed after this; 0: none kept


@dataclasses.dataclass(frozen=True)
class PythonSettings:
    """The ``python`` executor: which interpreter runs handlers."""

    interpreter: str = sys.executable
    zygote: bool = True
    """Fork each call from a pre-started interpreter per tool (zygote.py); False: a fresh one per call."""
    zygotes: int = 8
    """At most this many zygotes (one per tool profile), least recently used retired first."""
    zygote_idle_s: float = 60.0
    """A zygote with no call for this long exits (the next call starts another)."""


@dataclasses.dataclass(frozen=True)
class ConfirmSettings:
    """``[confirm]``: who confirms require_confirm calls, and for how long a person may take."""

    by: str = "agent"            # "human": every require_confirm tool waits for a person
    ttl_s: float = 300.0
    http_token: Secret | None = None   # the approvals page's token; None: a random one at start


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything the executors need from the config file (or the defaults, without one)."""

    path: str = ""
    defaults: Defaults = Defaults()
    services: Mapping[str, Service] = dataclasses.field(
        default_factory=lambda: {name: Service(name) for name in HTTP_SERVICES})
    python: PythonSettings = PythonSettings()
    tool_secrets: Mapping[str, Mapping[str, Secret]] = dataclasses.field(default_factory=dict)
    """``[secrets.TOOL]``: environment variables for a tool that declares ``secret: true``, by name."""
    network_hosts: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """``[network_hosts]``: per tool, the hosts its http calls may reach (replacing the definition's list)."""
    # [auth.tokens.NAME]: where each caller's bearer token lives
    tokens: Mapping[str, Secret] = dataclasses.field(default_factory=dict)
    # [callers.ID] tools = [...]: the tool name patterns each caller may use (empty: no per-caller policy)
    callers: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    approve: approval.Policy = approval.Policy()   # a config file approves only what it lists
    confirm: ConfirmSettings = ConfirmSettings()

    def secrets(self) -> list[Secret]:
        """Every configured secret's source (endpoint, caller and approvals-page tokens), for redaction."""
        found = [ep.token for svc in self.services.values() for ep in svc.endpoints.values() if ep.token]
        page = [self.confirm.http_token] if self.confirm.http_token is not None else []
        tool = [secret for named in self.tool_secrets.values() for secret in named.values()]
        return [*found, *self.tokens.values(), *page, *tool]

    def service(self, executor: str) -> Service:
        return self.services.get(executor) or Service(executor)

    def secret_files(self) -> list[str]:
        """Every file a token is read from: the sandbox hides them from every tool."""
        return sorted({t.source for t in self.secrets() if t.kind == "file"})


# ---------------------------------------------------------------- loading


def load(path: str) -> Config:
    """Read and check the file; raises :class:`ConfigError`."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return from_dict(data, path)


def from_dict(data: Mapping[str, Any], path: str = "<config>") -> Config:
    """Check an already parsed document (what :func:`load` does after reading); raises :class:`ConfigError`."""
    tables = ("defaults", "python", *HTTP_SERVICES, "auth", "callers", "approve", "confirm", "secrets",
              "network_hosts")
    _known(path, "", data, tables)
    defaults = _defaults(path, _table(path, "defaults", data.get("defaults", {})))
    python = _python(path, _table(path, "python", data.get("python", {})))
    services = {name: _service(path, name, _table(path, name, data.get(name, {}))) for name in HTTP_SERVICES}
    tokens = _tokens(path, _table(path, "auth", data.get("auth", {})))
    callers = _callers(path, _table(path, "callers", data.get("callers", {})))
    approve = _approve(path, _table(path, "approve", data.get("approve", {})))
    confirm = _confirm(path, _table(path, "confirm", data.get("confirm", {})))
    secrets = _tool_secrets(path, _table(path, "secrets", data.get("secrets", {})))
    hosts = _network_hosts(path, _table(path, "network_hosts", data.get("network_hosts", {})))
    return Config(path=path, defaults=defaults, services=services, python=python, tokens=tokens, callers=callers,
                  approve=approve, confirm=confirm, tool_secrets=secrets, network_hosts=hosts)


def _network_hosts(path: str, table: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for tool, hosts in table.items():
        where = f"[network_hosts] {tool}"
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", tool):
            raise ConfigError(f"{path}: {where}: expected a tool's name (a-z, 0-9, _ and -)")
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h.strip() for h in hosts):
            raise ConfigError(f"{path}: {where}: expected a non-empty list of host names, addresses or networks, "
                              'such as ["api.example.com", "10.0.0.0/8"]')
        out[tool] = tuple(h.strip() for h in hosts)
    return out


_RESERVED_VARS = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR")


def _tool_secrets(path: str, table: Mapping[str, Any]) -> dict[str, dict[str, Secret]]:
    out: dict[str, dict[str, Secret]] = {}
    for tool, entries in table.items():
        where = f"[secrets.{tool}]"
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", tool):
            raise ConfigError(f"{path}: {where}: expected a tool's name (a-z, 0-9, _ and -)")
        named: dict[str, Secret] = {}
        for var, spec in _table(path, f"secrets.{tool}", entries).items():
            at = f"{where} {var}"
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var) or var.startswith(("BITONG_", "LC_")) \
                    or var in _RESERVED_VARS:
                raise ConfigError(f"{path}: {at}: expected the name of the environment variable the tool reads "
                                  "(letters, digits, _; not PATH, HOME, LC_*, BITONG_* or the like)")
            if not isinstance(spec, dict):
                raise ConfigError(f"{path}: {at}: a secret is never written in the config file; name where it "
                                  "comes from instead: { token_env = \"VARIABLE\" } or { token_file = \"/path\" }")
            _known(path, at, spec, ("token_env", "token_file"))
            secret = _secret(path, at, spec)
            if secret is None:
                raise ConfigError(f"{path}: {at}: expected {{ token_env = \"VARIABLE\" }} or "
                                  "{ token_file = \"/path\" }")
            named[var] = secret
        out[tool] = named
    return out


def _tokens(path: str, table: Mapping[str, Any]) -> dict[str, Secret]:
    _known(path, "[auth]", table, ("tokens",))
    named = _table(path, "auth.tokens", table.get("tokens", {}))
    tokens: dict[str, Secret] = {}
    for name, entry in named.items():
        where = f"[auth.tokens.{name}]"
        if not TOKEN_NAME.fullmatch(name):
            raise ConfigError(f"{path}: {where}: a token's name is the caller's id: letters, digits, '.', '_' "
                              "and '-' (at most 64), starting with a letter or digit")
        entry = _table(path, f"auth.tokens.{name}", entry)
        _known(path, where, entry, ("token_env", "token_file"))
        secret = _secret(path, where, entry)
        if secret is None:
            raise ConfigError(f"{path}: {where}: expected token_env = \"VARIABLE\" or token_file = \"/path\"")
        tokens[name] = secret
    values = [(name, secret.reveal()) for name, secret in tokens.items()]
    for i, (name, value) in enumerate(values):
        for other, again in values[:i]:
            if value == again:
                raise ConfigError(f"{path}: [auth.tokens.{name}] and [auth.tokens.{other}] hold the same token: "
                                  "a token must say which caller presents it")
    return tokens


def _callers(path: str, table: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    callers: dict[str, tuple[str, ...]] = {}
    for name, entry in table.items():
        where = f"[callers.{name}]" if TOKEN_NAME.fullmatch(name) else f'[callers."{name}"]'
        entry = _table(path, f"callers.{name}", entry)
        _known(path, where, entry, ("tools",))
        tools = entry.get("tools")
        if not isinstance(tools, list) or not all(isinstance(t, str) and t and not _CONTROL.search(t)
                                                  for t in tools):
            raise ConfigError(f"{path}: {where} tools: expected a list of tool names or patterns, "
                              "such as [\"file-*\", \"git-ops\"] ([] allows nothing)")
        callers[name] = tuple(tools)
    return callers



def _approve(path: str, table: Mapping[str, Any]) -> approval.Policy:
    _known(path, "[approve]", table, ("tools",))
    try:
        grants = approval.parse(table.get("tools", []))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return approval.Policy(grants, f"the config file {path}")


def _confirm(path: str, table: Mapping[str, Any]) -> ConfirmSettings:
    _known(path, "[confirm]", table, ("by", "ttl_s", "http_token_env", "http_token_file"))
    by = _text(path, "[confirm] by", table.get("by", "agent"))
    if by not in ("agent", "human"):
        raise ConfigError(f"{path}: [confirm] by: expected \"agent\" or \"human\", found {by!r}")
    ttl = table.get("ttl_s", 300)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 1 <= ttl <= 86_400:
        raise ConfigError(f"{path}: [confirm] ttl_s: expected seconds between 1 and 86400")
    token: Secret | None = None
    if "http_token_env" in table and "http_token_file" in table:
        raise ConfigError(f"{path}: [confirm]: give http_token_env or http_token_file, not both")
    if "http_token_env" in table:
        var = _text(path, "[confirm] http_token_env", table["http_token_env"])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise ConfigError(f"{path}: [confirm] http_token_env: expected the name of an environment variable")
        token = Secret("env", var)
    elif "http_token_file" in table:
        file = _text(path, "[confirm] http_token_file", table["http_token_file"])
        if not os.path.isabs(file):
            raise ConfigError(f"{path}: [confirm] http_token_file: expected an absolute path")
        token = Secret("file", file)
    if token is not None:
        try:
            value = token.reveal()
        except SecretUnavailable as exc:
            raise ConfigError(f"{path}: [confirm]: {exc}") from None
        if len(value) < 16:
            raise ConfigError(f"{path}: [confirm]: the approvals page's token from {token.describe()} is shorter "
                              "than 16 characters: use a long random one")
    return ConfirmSettings(by=by, ttl_s=float(ttl), http_token=token)


def _defaults(path: str, table: Mapping[str, Any]) -> Defaults:
    _known(path, "[defaults]", table, ("user_agent", "retry_backoff_ms", "retry_backoff_max_ms",
                                       "http_max_connections", "http_idle_ms"))
    base = Defaults()
    agent = _text(path, "[defaults] user_agent", table.get("user_agent", base.user_agent))
    if _CONTROL.search(agent):
        raise ConfigError(f"{path}: [defaults] user_agent: expected one line of text without control characters")
    first = _millis(path, "[defaults] retry_backoff_ms", table.get("retry_backoff_ms", 100))
    most = _millis(path, "[defaults] retry_backoff_max_ms", table.get("retry_backoff_max_ms", 2000))
    if most < first:
        raise ConfigError(f"{path}: [defaults] retry_backoff_max_ms ({most}) must be at least retry_backoff_ms "
                          f"({first})")
    most_open = table.get("http_max_connections", base.http_max_connections)
    if isinstance(most_open, bool) or not isinstance(most_open, int) or not 0 <= most_open <= 10_000:
        raise ConfigError(f"{path}: [defaults] http_max_connections: expected a whole number from 0 to 10000, "
                          f"found {most_open!r}")
    idle = _millis(path, "[defaults] http_idle_ms", table.get("http_idle_ms", round(base.http_idle_s * 1000)))
    return Defaults(user_agent=agent, retry_backoff_s=first / 1000, retry_backoff_max_s=most / 1000,
                    http_max_connections=most_open, http_idle_s=idle / 1000)


def _python(path: str, table: Mapping[str, Any]) -> PythonSettings:
    _known(path, "[python]", table, ("interpreter", "zygote"))
    interpreter = _text(path, "[python] interpreter", table.get("interpreter", sys.executable))
    if not os.path.isabs(interpreter) or not os.access(interpreter, os.X_OK):
        raise ConfigError(f"{path}: [python] interpreter: expected the absolute path of an executable Python, "
                          f"found {interpreter!r}")
    zygote = table.get("zygote", True)
    if not isinstance(zygote, bool):
        raise ConfigError(f"{path}: [python] zygote: expected true or false, found {zygote!r}")
    return PythonSettings(interpreter=interpreter, zygote=zygote)


def _service(path: str, name: str, table: Mapping[str, Any]) -> Service:
    extra = _FORGEJO_KEYS if name == "git-forgejo" else ()
    where = f"[{name}]"
    _known(path, where, table, ("default", "endpoints", *_ENDPOINT_KEYS, *extra))
    if not table:
        return Service(name)
    default = _text(path, f"{where} default", table["default"]) if "default" in table else ""
    inline = {k: v for k, v in table.items() if k in _ENDPOINT_KEYS}
    endpoints: dict[str, Endpoint] = {}
    if "endpoints" in table:
        if inline:
            raise ConfigError(f"{path}: {where}: put url and the token keys either right in the table (one endpoint) "
                              f"or in [{name}.endpoints.NAME] tables, not both (found {', '.join(sorted(inline))})")
        named = _table(path, f"{name}.endpoints", table["endpoints"])
        if not named:
            raise ConfigError(f"{path}: [{name}.endpoints] is empty: expected at least one [{name}.endpoints.NAME]")
        shared = {k: table[k] for k in extra if k in table}
        for ep_name, ep_table in named.items():
            ep = _table(path, f"{name}.endpoints.{ep_name}", ep_table)
            _known(path, f"[{name}.endpoints.{ep_name}]", ep, (*_ENDPOINT_KEYS, *extra))
            endpoints[ep_name] = _endpoint(path, name, ep_name, {**shared, **ep}, f"[{name}.endpoints.{ep_name}]")
    elif "url" in table:
        endpoints["default"] = _endpoint(path, name, "default", table, where)
        default = default or "default"
    else:
        raise ConfigError(f"{path}: {where}: expected url = \"http://...\" or [{name}.endpoints.NAME] tables")
    if default and default not in endpoints:
        raise ConfigError(f"{path}: {where} default = {default!r} names no endpoint "
                          f"(configured: {', '.join(sorted(endpoints))})")
    if not default and len(endpoints) == 1:
        default = next(iter(endpoints))
    return Service(name, endpoints, default)


def _endpoint(path: str, service: str, name: str, table: Mapping[str, Any], where: str) -> Endpoint:
    """One endpoint from its keys (already checked against the allowed ones by the caller)."""
    extra = _FORGEJO_KEYS if service == "git-forgejo" else ()
    if "url" not in table:
        raise ConfigError(f"{path}: {where}: url is missing: expected url = \"http://host:port\"")
    url = _url(path, f"{where} url", table["url"])
    token = _secret(path, where, table)
    scheme = _text(path, f"{where} auth_scheme", table.get("auth_scheme", _AUTH_SCHEMES.get(service, "Bearer")))
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", scheme):
        raise ConfigError(f"{path}: {where} auth_scheme: expected one word such as Bearer or token")
    values = {k: _text(path, f"{where} {k}", table[k]) for k in extra if k in table}
    return Endpoint(name=name, url=url, token=token, auth_scheme=scheme, **values)


def _secret(path: str, where: str, table: Mapping[str, Any]) -> Secret | None:
    """The token source a table names (token_env or token_file), checked readable now; None without one."""
    token: Secret | None = None
    if "token_env" in table and "token_file" in table:
        raise ConfigError(f"{path}: {where}: give token_env or token_file, not both")
    if "token_env" in table:
        var = _text(path, f"{where} token_env", table["token_env"])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise ConfigError(f"{path}: {where} token_env: expected the name of an environment variable "
                              "(letters, digits, _), not a value")
        token = Secret("env", var)
    elif "token_file" in table:
        file = _text(path, f"{where} token_file", table["token_file"])
        if not os.path.isabs(file):
            raise ConfigError(f"{path}: {where} token_file: expected an absolute path")
        token = Secret("file", file)
    if token is not None:
        try:
            token.reveal()
        except SecretUnavailable as exc:
            raise ConfigError(f"{path}: {where}: {exc}") from None
    return token


# ---------------------------------------------------------------- checks


def _known(path: str, where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key in allowed:
            continue
        at = f"{where} {key}".strip()
        if _SECRET_KEY.search(key):
            raise ConfigError(f"{path}: {at}: a secret is never written in the config file; name where it comes "
                              "from instead: token_env = \"VARIABLE\" or token_file = \"/path/to/file\"")
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if not where:
            raise ConfigError(f"{path}: [{key}]: unknown table (expected one of: "
                              f"{', '.join(f'[{t}]' for t in allowed)}){hint}")
        raise ConfigError(f"{path}: {at}: unknown key (expected one of: {', '.join(allowed)}){hint}")


def _table(path: str, where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where}: expected a table ([{where}]), found {type(value).__name__}")
    return value


def _text(path: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: {where}: expected non-empty text")
    return value


def _millis(path: str, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 60_000:
        raise ConfigError(f"{path}: {where}: expected whole milliseconds between 0 and 60000")
    millis: int = value
    return millis


def _url(path: str, where: str, value: Any) -> str:
    text = _text(path, where, value)
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{path}: {where}: expected an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{path}: {where}: a URL must not carry a user or password; name the token's source with "
                          "token_env or token_file instead")
    if parts.query or parts.fragment:
        raise ConfigError(f"{path}: {where}: expected a base URL without ?query or #fragment")
    try:
        _ = parts.port  # urllib checks the port only when it is read
    except ValueError:
        raise ConfigError(f"{path}: {where}: the port is not a number between 0 and 65535") from None
    return text.rstrip("/")
