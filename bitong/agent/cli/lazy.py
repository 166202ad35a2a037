"""Loading on demand, so a command pays only for what it uses.

A CLI that imports protobuf, lark and numpy before it reads its arguments
spends a third of a second on ``bitong --help``. The CLI names its heavy
modules through :func:`lazy_module` (the standard library's
``importlib.util.LazyLoader``: the module runs at its first attribute
access), and ``--version`` asks :func:`twin` which twin an install has built
without importing either.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["lazy_module", "twin"]


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module whose code runs at its first attribute access (parents are imported now)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def twin(package: str, extension: str) -> str:
    """``cython`` when ``package`` has its compiled ``extension`` built and BITONG_PURE is unset, else ``pure``.

    Found on disk, not imported: ``bitong --version`` stays as quick as
    ``python -c pass``. The backends' own ``BACKEND`` (what runs) is the
    same unless the built extension cannot load on this interpreter.
    """
    if os.environ.get("BITONG_PURE", "").strip() not in ("", "0"):
        return "pure"
    top, _, rest = package.partition(".")
    spec = _find(top)
    if spec is None or not spec.submodule_search_locations:
        return "pure"
    folders = [os.path.join(folder, *rest.split(".")) if rest else folder
               for folder in spec.submodule_search_locations]
    found = importlib.machinery.PathFinder.find_spec(extension, folders)
    compiled = found is not None and isinstance(found.loader, importlib.machinery.ExtensionFileLoader)
    return "cython" if compiled else "pure"


def _find(top: str) -> importlib.machinery.ModuleSpec | None:
    """A top-level package's spec from the import system's finders, never running its __init__.

    Not ``importlib.util.find_spec``: for a name in sys.modules it reads the
    module's ``__spec__``, which loads a :func:`lazy_module`.
    """
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(top, None) if find is not None else None
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None
