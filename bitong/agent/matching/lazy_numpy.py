"""numpy, imported at its first use: a server restarting with 10,000 tools answers before it needs numpy.

Importing numpy costs 0.1-0.3 s, and nothing the server does before it
answers uses it (lexical matching does not; the model, the vectors and the
calibration come after). ``np`` here stands for the module: its first
attribute read imports numpy through the import system (whose module lock
makes a first use from several threads at once safe, which a
``LazyLoader`` module is not before Python 3.12), and each read after that
is the module's attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["np"]


class _OnDemand:
    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)

    def __repr__(self) -> str:
        return "<numpy, imported at its first use>"


if TYPE_CHECKING:
    import numpy as np
else:
    np = _OnDemand()
