"""The pure and compiled twins agree: tokens, ToolDefs and error messages.

Over every bundled tool (``tools/*/TOOL.hdlp``), every file of the eval
registry (``../shared/eval/registry``, beside the repo as CI lays it out), the
invalid cases of ``hdlp_cases``, and seeded random mutations of all of those.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from bitong import parser
from tests.parser.hdlp_cases import INVALID, VALID, Case
from tests.support import BUNDLED as TOOLS_ROOT
from tests.support import EVAL_REGISTRY as EVAL_ROOT
from bitong.parser import ParseError, parse_bytes, parse_file
from bitong.parser._backend import Backend, compiled, pure

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled twin (bitong.parser._speedups) is not built")

TOOL_FILES = sorted(TOOLS_ROOT.glob("*/TOOL.hdlp"))
EVAL_FILES = sorted(EVAL_ROOT.glob("*/TOOL.hdlp")) if EVAL_ROOT.is_dir() else []
EVAL_MISSING = f"no eval registry at {EVAL_ROOT} (CI clones the repo beside shared/)"


def _ids(files: list[Path]) -> list[str]:
    return [f.parent.name for f in files]


def outcome(backend: Backend, data: bytes, path: str) -> tuple[str, Any]:
    """("ok", serialized ToolDef) or ("error", message); anything else is a bug."""
    try:
        tool = parse_bytes(data, path, backend=backend)
    except ParseError as err:
        return "error", str(err)
    return "ok", tool.SerializeToString(deterministic=True)


def tokens(backend: Backend, text: str, path: str = "t.hdlp") -> list[tuple] | str:
    """The token stream as plain tuples, or the lexer's error."""
    try:
        return [(t.type, t.value, t.line, t.column) for t in backend.tokenize(text, path)]
    except ParseError as err:
        return str(err)


# ---------------------------------------------------------------- the live backend

def test_compiled_twin_is_live_when_built() -> None:
    """The compiled twin serves by default when it was built; BITONG_PURE=1 forces the pure one."""
    forced = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
    built = any(Path(parser.__file__).parent.glob("_speedups*.so")) or any(
        Path(parser.__file__).parent.glob("_speedups*.pyd"))
    if forced:
        assert parser.BACKEND == "pure"
    elif built:
        assert compiled is not None, "_speedups is built but does not import"
        assert parser.BACKEND == "cython"
    else:
        assert parser.BACKEND == "pure"


@needs_compiled
def test_the_twins_are_different_code() -> None:
    assert compiled is not None
    assert compiled.tokenize is not pure.tokenize
    assert type(compiled.tokenize).__name__ in ("builtin_function_or_method", "cython_function_or_method")


# ---------------------------------------------------------------- real files

@needs_compiled
@pytest.mark.parametrize("path", TOOL_FILES, ids=_ids(TOOL_FILES))
def test_bundled_tools_parse_identically(path: Path) -> None:
    a, b = parse_file(path, backend=pure), parse_file(path, backend=compiled)
    assert a == b


@needs_compiled
@pytest.mark.skipif(not EVAL_FILES, reason=EVAL_MISSING)
@pytest.mark.parametrize("path", EVAL_FILES, ids=_ids(EVAL_FILES))
def test_eval_registry_parses_identically(path: Path) -> None:
    a, b = parse_file(path, backend=pure), parse_file(path, backend=compiled)
    assert a == b
    assert a.name == path.parent.name


@needs_compiled
@pytest.mark.parametrize("path", TOOL_FILES + EVAL_FILES, ids=_ids(TOOL_FILES) + _ids(EVAL_FILES))
def test_token_streams_are_identical(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert tokens(pure, text) == tokens(compiled, text)


@pytest.mark.skipif(not EVAL_FILES, reason=EVAL_MISSING)
def test_eval_registry_covers_the_syntax_variety() -> None:
    """Guard against the registry shrinking silently: the README promises 40 files."""
    assert len(EVAL_FILES) >= 40


# ---------------------------------------------------------------- our cases

@needs_compiled
@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_samples_identical(name: str) -> None:
    data = VALID[name].encode("utf-8")
    assert outcome(pure, data, "demo.hdlp") == outcome(compiled, data, "demo.hdlp")
    assert tokens(pure, VALID[name]) == tokens(compiled, VALID[name])


@needs_compiled
@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_error_messages_identical(case: Case) -> None:
    data = case.text if isinstance(case.text, bytes) else case.text.encode("utf-8")
    a, b = outcome(pure, data, case.path), outcome(compiled, data, case.path)
    assert a[0] == "error" and a == b
    if isinstance(case.text, str):
        assert tokens(pure, case.text) == tokens(compiled, case.text)


# ---------------------------------------------------------------- random mutations

_INSERTS = ["\t", ":", '"', "'", "[", "]", "{", "}", ",", "#", " #", " ", "  ", "\n", "\r\n", "|", "- ",
            "\\", "\\u", "\\ud83d", "x", "0", "-1", "1e999", "\ufeff", "中", "HLDP://", ": ", "{x}"]
_BYTES = [b"\xff", b"\xe4\xb8", b"\xc0\xaf", b"\x00", b"\xed\xa0\x80"]
FUZZ_PER_FILE = int(os.environ.get("BITONG_FUZZ_N", "40"))


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random edits: delete, insert a troublesome piece, swap or repeat lines, bad bytes."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        text = data.decode("utf-8", "surrogateescape")
        if kind == 0 and text:
            i = rng.randrange(len(text))
            text = text[:i] + text[i + 1:]
        elif kind in (1, 2):
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(_INSERTS) + text[i:]
        elif kind == 3:
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == 4:
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
            text = "\n".join(lines)
        else:
            raw = text.encode("utf-8", "surrogateescape")
            i = rng.randrange(len(raw) + 1)
            data = raw[:i] + rng.choice(_BYTES) + raw[i:]
            continue
        data = text.encode("utf-8", "surrogateescape")
    return data


def _seeds() -> list[tuple[str, bytes, str]]:
    out = [(f"valid-{k}", v.encode("utf-8"), "demo.hdlp") for k, v in VALID.items()]
    for f in TOOL_FILES + EVAL_FILES:
        out.append((f"{f.parent.parent.name}/{f.parent.name}", f.read_bytes(), f"/r/{f.parent.name}/TOOL.hdlp"))
    return out


SEEDS = _seeds()


@pytest.mark.parametrize("seed", SEEDS, ids=[s[0] for s in SEEDS])
def test_mutations_raise_only_parse_error_and_twins_agree(seed: tuple[str, bytes, str]) -> None:
    name, data, path = seed
    rng = random.Random(f"bitong:{name}")
    for _ in range(FUZZ_PER_FILE):
        mutated = mutate(rng, data)
        results = []
        for backend in (pure, compiled) if compiled is not None else (pure,):
            try:
                results.append(outcome(backend, mutated, path))
            except Exception as exc:  # the point is that nothing but ParseError escapes
                pytest.fail(f"{backend.name} raised {type(exc).__name__}: {exc}\ninput: {mutated!r}")
        assert all(r == results[0] for r in results), f"twins disagree on {mutated!r}:\n{results}"
        if compiled is not None:
            text = mutated.decode("utf-8", "replace")
            assert tokens(pure, text) == tokens(compiled, text), f"token streams differ on {mutated!r}"
        kind, detail = results[0]
        if kind == "error":
            where = detail[len(path) + 1:].split(":", 2)
            line, column = int(where[0]), int(where[1])
            assert 1 <= line <= mutated.count(b"\n") + 1 and column >= 1, detail
