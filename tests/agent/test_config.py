"""bitong.agent.config: the TOML file, where secrets come from, and every refusal saying what to write."""

from __future__ import annotations

import re
import textwrap
from typing import Any
from pathlib import Path

import pytest

from bitong.agent import config
from bitong.agent.config import ConfigError, Secret, SecretUnavailable, from_dict

SECRET = "ghp-very-secret-value-123"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bitong.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, text))
    return str(info.value)


def test_the_readme_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEKEEPER_TOKEN", SECRET)
    monkeypatch.setenv("FORGEJO_TOKEN", SECRET)
    secret_file = tmp_path / "gz-token"
    secret_file.write_text(SECRET + "\n")
    cfg = config.load(write(tmp_path, f"""
        [defaults]
        user_agent = "bitong/0.1.0"
        retry_backoff_ms = 50
        retry_backoff_max_ms = 800
        http_max_connections = 8
        http_idle_ms = 1500

        [gatekeeper]
        default = "BS-SG-001"
        [gatekeeper.endpoints.BS-SG-001]
        url = "http://10.0.0.1:3911/"
        token_env = "GATEKEEPER_TOKEN"
        [gatekeeper.endpoints.BS-GZ-006]
        url = "http://10.0.0.6:3910"
        token_file = "{secret_file}"

        [hlpd-api]
        url = "http://127.0.0.1:8700/api"

        [git-forgejo]
        url = "https://git.example.org"
        token_env = "FORGEJO_TOKEN"
        owner = "zhuyuan"
        repo = "native-repo"
        branch = "main"
        """))
    gk = cfg.service("gatekeeper")
    assert gk.default == "BS-SG-001" and sorted(gk.endpoints) == ["BS-GZ-006", "BS-SG-001"]
    assert gk.pick("").url == "http://10.0.0.1:3911"                      # trailing slash dropped
    assert gk.pick("BS-GZ-006").auth_headers() == [("Authorization", f"Bearer {SECRET}")]   # file, stripped
    fj = cfg.service("git-forgejo").pick("")
    assert (fj.owner, fj.repo, fj.branch, fj.auth_scheme) == ("zhuyuan", "native-repo", "main", "token")
    assert cfg.service("hlpd-api").pick("").token is None
    assert cfg.defaults.retry_backoff_s == 0.05 and cfg.defaults.user_agent == "bitong/0.1.0"
    assert (cfg.defaults.http_max_connections, cfg.defaults.http_idle_s) == (8, 1.5)
    assert SECRET not in repr(cfg) and SECRET not in str(gk.pick("BS-GZ-006"))


@pytest.mark.parametrize("key", ["token", "password", "api_key", "secret", "gitea-token"])
def test_a_literal_secret_is_a_load_error_that_never_repeats_it(tmp_path: Path, key: str) -> None:
    message = refused(tmp_path, f"""
        [git-forgejo]
        url = "https://git.example.org"
        {key} = "{SECRET}"
        """)
    assert f"[git-forgejo] {key}: a secret is never written in the config file" in message
    assert 'token_env = "VARIABLE" or token_file = "/path/to/file"' in message
    assert SECRET not in message


def test_a_url_with_credentials_is_refused_without_repeating_them(tmp_path: Path) -> None:
    message = refused(tmp_path, f"""
        [hlpd-api]
        url = "http://admin:{SECRET}@10.0.0.1/api"
        """)
    assert "must not carry a user or password" in message and SECRET not in message


def test_token_sources_must_exist_at_load_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    message = refused(tmp_path, """
        [git-forgejo]
        url = "https://git.example.org"
        token_env = "NOPE_TOKEN"
        """)
    assert message.endswith("[git-forgejo]: the environment variable NOPE_TOKEN holds no token (it is unset or empty)")
    message = refused(tmp_path, f"""
        [git-forgejo]
        url = "https://git.example.org"
        token_file = "{tmp_path}/missing"
        """)
    assert f"cannot read the token from file {tmp_path}/missing: No such file or directory" in message


def test_a_token_file_is_read_again_at_each_use(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    secret = Secret("file", str(path))
    assert secret.reveal() == "first"
    path.write_text("rotated\n")
    assert secret.reveal() == "rotated"
    path.write_text("two\nlines")
    with pytest.raises(SecretUnavailable, match="contains a line break") as info:
        secret.reveal()
    assert "two" not in str(info.value)
    assert repr(secret) == f"Secret(file {path})"


@pytest.mark.parametrize("text, expected", [
    ("[gatekeeper]\nurl = \"http://a:1\"\nendpoints = {}\n", "not both"),
    ("[gatekeeper]\ndefault = \"X\"\n[gatekeeper.endpoints.A]\nurl = \"http://a:1\"\n",
     "default = 'X' names no endpoint"),
    ("[gatekeeper]\n[gatekeeper.endpoints.A]\nurl = \"http://a:1\"\n[gatekeeper.endpoints.B]\nurl = \"http://b:1\"\n",
     None),
    ("[hlpd-api]\nurll = \"http://a:1\"\n", "unknown key (expected one of: default, endpoints, url, token_env, "
                                           "token_file, auth_scheme); did you mean 'url'?"),
    ("[hlpd-api]\nurl = \"ftp://a\"\n", "expected an http:// or https:// URL with a host"),
    ("[gatekeepr]\n", "[gatekeepr]: unknown table (expected one of: [defaults], [python], [gatekeeper], "
                       "[hlpd-api], [git-forgejo], [auth], [callers], [approve], [confirm], [secrets], "
                       "[network_hosts]); did you mean 'gatekeeper'?"),
    ("[defaults]\nhttp_max_connections = -1\n", "http_max_connections: expected a whole number from 0 to 10000"),
    ("[defaults]\nhttp_idle_ms = 1.5\n", "http_idle_ms: expected whole milliseconds"),
    ("[defaults]\nretry_backoff_ms = 500\nretry_backoff_max_ms = 100\n", "must be at least retry_backoff_ms"),
    ("[python]\ninterpreter = \"python3\"\n", "absolute path of an executable Python"),
    ("[python]\nzygote = \"no\"\n", "[python] zygote: expected true or false, found 'no'"),
    ("[hlpd-api\n", "not valid TOML"),
])
def test_mistakes_say_what_was_expected(tmp_path: Path, text: str, expected: str | None) -> None:
    if expected is None:   # two endpoints and no default: fine to load, but a tool must then name one
        service = config.load(write(tmp_path, text)).service("gatekeeper")
        with pytest.raises(LookupError, match="names no endpoint and \\[gatekeeper\\] sets no default"):
            service.pick("")
        return
    assert expected in refused(tmp_path, text)


def test_python_zygote_can_be_turned_off(tmp_path: Path) -> None:
    assert config.load(write(tmp_path, "[python]\nzygote = false\n")).python.zygote is False
    assert config.load(write(tmp_path, "[python]\n")).python.zygote is True


def test_no_config_means_no_endpoints() -> None:
    cfg = config.Config()
    with pytest.raises(LookupError, match="has no endpoint configured"):
        cfg.service("git-forgejo").pick("")


@pytest.mark.parametrize(("table", "message"), [
    ({"deploy": {"DEPLOY_TOKEN": "plain-value"}}, "a secret is never written in the config file"),
    ({"deploy": {"PATH": {"token_env": "X"}}}, "expected the name of the environment variable"),
    ({"deploy": {"DEPLOY_TOKEN": {}}}, "expected { token_env"),
    ({"Deploy!": {}}, "expected a tool's name"),
    ({"deploy": {"T": {"token_env": "BITONG_SURELY_UNSET_VAR"}}}, "holds no token"),
])
def test_tool_secrets_name_where_the_value_lives(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_dict({"secrets": table})


def test_tool_secrets_load_and_their_files_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "t"
    token.write_text("x\n")
    monkeypatch.setenv("BITONG_T", "y")
    cfg = from_dict({"secrets": {"deploy": {"A": {"token_file": str(token)}, "B": {"token_env": "BITONG_T"}}}})
    assert {k: v.reveal() for k, v in cfg.tool_secrets["deploy"].items()} == {"A": "x", "B": "y"}
    assert cfg.secret_files() == [str(token)]


def test_approvals_and_confirmation_settings_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPROVALS_TOKEN", "a-long-random-approvals-token")
    cfg = config.load(write(tmp_path, """
        [approve]
        tools = ["shell-exec", "file-write@0123456789ab"]

        [confirm]
        by = "human"
        ttl_s = 120
        http_token_env = "APPROVALS_TOKEN"
        """))
    assert [str(g) for g in cfg.approve.grants] == ["shell-exec", "file-write@0123456789ab"]
    assert cfg.approve.origin == f"the config file {tmp_path / 'bitong.toml'}"
    assert (cfg.confirm.by, cfg.confirm.ttl_s) == ("human", 120.0)
    assert cfg.confirm.http_token is not None and cfg.confirm.http_token.reveal() == "a-long-random-approvals-token"


def test_a_config_file_without_approve_approves_nothing(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, "[defaults]\n"))
    assert cfg.approve.grants == () and cfg.confirm.by == "agent"


@pytest.mark.parametrize("text, expected", [
    ('[approve]\ntools = "shell-exec"', "[approve] tools: expected a list"),
    ('[approve]\ntools = ["file-*"]', "'*' and patterns are not approvals"),
    ('[approve]\ntool = ["shell-exec"]', "did you mean 'tools'"),
    ('[confirm]\nby = "model"', '[confirm] by: expected "agent" or "human"'),
    ("[confirm]\nttl_s = 0", "[confirm] ttl_s: expected seconds"),
    ('[confirm]\nhttp_token = "abc"', "a secret is never written in the config file"),
    ('[confirm]\nhttp_token_env = "NOT_SET_ANYWHERE_42"', "holds no token"),
])
def test_approval_and_confirm_mistakes_say_what_to_write(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refused(tmp_path, text)


def test_a_short_approvals_token_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc\n")
    assert "shorter than 16 characters" in refused(tmp_path, f'[confirm]\nhttp_token_file = "{short}"')
