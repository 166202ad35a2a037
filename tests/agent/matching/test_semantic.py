"""The model, its vectors in the registry's state, and the background step that computes them."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import numpy as np

from bitong.agent.registry.cache import CacheAgent
from bitong.agent.matching.semantic import USEEmbedder, default_embedder, negation_stripped
from bitong.agent.registry.snapshot import Registry

TOOL = """name: {name}
display: {display}
intent: {intent}
method: run
executor: shell
command: echo ok
params_schema: {{}}
constraints: {{}}
author: tests
created: 2026-11-30
why: 团队需要
"""


class Counting:
    """The real model, counting the tool texts it is asked to embed."""

    def __init__(self, inner: USEEmbedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.passages_embedded = 0

    def query(self, text: str) -> np.ndarray:
        return self.inner.query(text)

    def passages(self, texts: list[str]) -> np.ndarray:
        self.passages_embedded += len(texts)
        return self.inner.passages(texts)


def write_tools(root: Path) -> None:
    for name, display, intent in (("pdf-merge", "PDF合并", "把多个PDF文件合并成一个"),
                                  ("currency-convert", "Currency converter", "Convert money between currencies"),
                                  ("meeting-book", "会议室预订", "预订公司会议室"),
                                  ("weather-now", "Weather now", "Current weather for a city")):
        (root / name).mkdir(parents=True)
        (root / name / "TOOL.hdlp").write_text(TOOL.format(name=name, display=display, intent=intent), "utf-8")


def test_the_model_is_multilingual_and_its_vectors_are_unit_length() -> None:
    emb = default_embedder()
    assert emb is not None
    q = emb.query("美元兑人民币汇率")
    p = emb.passages(["货币换算：按汇率把一种货币换成另一种", "天气预报"])
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-3
    assert float(p[0] @ q) > float(p[1] @ q)
    assert emb.query("美元兑人民币汇率") is q  # requests are cached


def test_a_non_goal_is_compared_without_its_negation() -> None:
    assert negation_stripped("不做升级") == "升级"
    assert negation_stripped("does not upgrade packages") == "upgrade packages"
    assert negation_stripped("只读") == "只读"


def test_a_restart_from_state_reuses_the_vectors(tmp_path: Path) -> None:
    root, state = tmp_path / "tools", str(tmp_path / "state.pb")
    write_tools(root)
    emb = default_embedder()
    assert emb is not None
    first = Counting(emb)
    reg = Registry([str(root)], embedder=first)
    before = reg.rescan().index
    assert not before.semantic_ready
    assert reg.refresh_semantics()
    assert reg.snapshot.index.semantic_ready
    assert first.passages_embedded == 4 + 4   # each tool's vector, and the calibration's held-out view of it
    reg.save_state(state)

    again = Counting(emb)
    restarted = Registry([str(root)], embedder=again)
    assert restarted.load_state(state)
    assert restarted.snapshot.index.semantic_ready and not restarted.snapshot.index.pending_vectors()
    assert not restarted.refresh_semantics()        # the calibration is stored with the vectors
    assert again.passages_embedded == 0             # nothing is embedded again: no vector, no held-out view
    hits = restarted.snapshot.index.match("美元兑人民币汇率", 3).hits
    assert hits[0].name == "currency-convert"


async def test_the_cache_agent_computes_vectors_in_the_background(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    write_tools(root)
    reg = Registry([str(root)], embedder=default_embedder())
    agent = CacheAgent(reg, poll_s=0.05)
    await agent.start()
    try:
        deadline = time.monotonic() + 60
        while not reg.snapshot.index.semantic_ready and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert reg.snapshot.index.semantic_ready
        # a new tool: served by words at once, by meaning once its vector is in
        shutil.copytree(root / "pdf-merge", root / "pdf-split")
        (root / "pdf-split" / "TOOL.hdlp").write_text(
            TOOL.format(name="pdf-split", display="PDF拆分", intent="把一个PDF按页拆成多个文件"), "utf-8")
        while time.monotonic() < deadline and not ("pdf-split" in reg.snapshot.index
                                                   and reg.snapshot.index.semantic_ready):
            await asyncio.sleep(0.02)
        assert "pdf-split" in reg.snapshot.index and reg.snapshot.index.semantic_ready
    finally:
        await agent.stop()
