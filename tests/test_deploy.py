"""deploy/: the systemd unit and the container recipe start bitong with options it really has."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from bitong.agent.cli.commands import _parser

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _accepted(argv: list[str]) -> None:
    assert argv[0] == "bitong" or argv[0].endswith("/bitong"), argv
    args = _parser().parse_args(argv[1:])   # argparse exits (SystemExit) on an option bitong does not have
    assert args.command == "serve"


def test_the_unit_starts_bitong_serve_with_real_options() -> None:
    unit = (DEPLOY / "bitong.service").read_text(encoding="utf-8")
    [line] = re.findall(r"^ExecStart=(.+)$", unit, flags=re.M)
    _accepted(shlex.split(line))
    assert "--sandbox required" in line   # a service runs tools in the OS sandbox or not at all


def test_the_container_starts_bitong_serve_with_real_options() -> None:
    recipe = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.+\])$", recipe, flags=re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (\[.+\])$", recipe, flags=re.M).group(1))  # type: ignore[union-attr]
    _accepted(entry + cmd)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / "bitong.service"
    unit.write_text((DEPLOY / "bitong.service").read_text(encoding="utf-8").replace(
        "/usr/local/bin/bitong", shutil.which("true") or "/bin/true"), encoding="utf-8")
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
