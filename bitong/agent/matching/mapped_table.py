"""A read-only str -> int table in one file, mapped from disk instead of loaded.

The model's tokenizer looks pieces up in a dictionary of 250,000 strings;
unpickling it costs ~0.15 s at every start of a one-shot ``bitong match``,
for the few hundred lookups one request makes. :class:`MappedTable` answers
the same ``get`` from the file through the page cache: opening it costs
microseconds, a lookup about one (a CRC-32 and a slot or two of an
open-addressing hash table, the key compared byte for byte).

File layout (little-endian int32 unless said)::

    b"BTMT0001"  n  slots  order_n          header: keys, hash slots (a power of 2), ordered keys
    slot[slots]                              key index, -1 empty (linear probing from crc32 & (slots-1))
    offset[n + 1]                            where each key's UTF-8 bytes start in the blob
    value[n]
    order[order_n]                           key indexes in a caller's order (the tokenizer: piece ids)
    blob                                     the keys' UTF-8 bytes, concatenated
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Sequence

__all__ = ["MappedTable", "OrderedKeys", "write_table"]

_MAGIC = b"BTMT0001"
_HEAD = struct.Struct("<8s3i")


def write_table(path: str, items: Iterable[tuple[str, int]], order: Sequence[str] = ()) -> None:
    """Write ``items`` (key, value) to ``path``; ``order``: keys whose indexes :meth:`MappedTable.key_at` gives."""
    if not _little():   # pragma: no cover - no big-endian machine here
        raise ValueError("a mapped table is written on little-endian machines only")
    keys: list[bytes] = []
    values = array("i")
    index: dict[str, int] = {}
    for key, value in items:
        index[key] = len(keys)
        keys.append(key.encode("utf-8"))
        values.append(value)
    n = len(keys)
    slots = 8
    while slots < 2 * n:
        slots *= 2
    mask = slots - 1
    table = array("i", [-1]) * slots
    for i, kb in enumerate(keys):
        h = zlib.crc32(kb) & mask
        while table[h] >= 0:
            h = (h + 1) & mask
        table[h] = i
    offsets = array("i", [0])
    for kb in keys:
        offsets.append(offsets[-1] + len(kb))
    ordered = array("i", (index[k] for k in order))
    with open(path, "wb") as fh:
        fh.write(_HEAD.pack(_MAGIC, n, slots, len(ordered)))
        for part in (table, offsets, values, ordered):
            fh.write(part.tobytes())
        fh.write(b"".join(keys))


def _little() -> bool:
    return array("i").itemsize == 4 and struct.pack("=i", 1) == struct.pack("<i", 1)


class MappedTable:
    """``get(key)`` over a :func:`write_table` file, mapped read-only; raises ValueError on a malformed one."""

    __slots__ = ("_map", "_slots", "_mask", "_offsets", "_values", "_order", "_blob", "n")

    def __init__(self, path: str) -> None:
        if not _little():   # pragma: no cover - no big-endian machine here
            raise ValueError("a mapped table is read on little-endian machines only")
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < _HEAD.size:
                raise ValueError(f"{path}: not a mapped table (too short)")
            self._map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        magic, n, slots, order_n = _HEAD.unpack_from(self._map)
        if magic != _MAGIC or n < 0 or order_n < 0 or slots < 8 or slots & (slots - 1):
            raise ValueError(f"{path}: not a mapped table of this format")
        ints = memoryview(self._map)[_HEAD.size:]
        words = slots + (n + 1) + n + order_n
        if len(ints) < 4 * words:
            raise ValueError(f"{path}: a mapped table cut short")
        ints = ints[:4 * words].cast("i")
        self.n = n
        self._slots = ints[:slots]
        self._mask = slots - 1
        self._offsets = ints[slots:slots + n + 1]
        self._values = ints[slots + n + 1:slots + 2 * n + 1]
        self._order = ints[slots + 2 * n + 1:]
        self._blob = memoryview(self._map)[_HEAD.size + 4 * words:]
        if len(self._blob) != (self._offsets[n] if n else 0):
            raise ValueError(f"{path}: a mapped table whose keys do not add up")

    def get(self, key: str, default: int | None = None) -> int | None:
        kb = key.encode("utf-8")
        mask = self._mask
        slots, offsets, blob = self._slots, self._offsets, self._blob
        h = zlib.crc32(kb) & mask
        for _ in range(mask + 1):   # (a table is at most half full; a damaged one never loops for ever)
            i = slots[h]
            if i < 0:
                return default
            if blob[offsets[i]:offsets[i + 1]] == kb:
                return self._values[i]   # type: ignore[no-any-return]
            h = (h + 1) & mask
        return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return int(self.n)

    def key_at(self, position: int) -> str:
        """The key ``order[position]`` names (IndexError past the end)."""
        i = self._order[position]
        return bytes(self._blob[self._offsets[i]:self._offsets[i + 1]]).decode("utf-8")

    @property
    def ordered(self) -> int:
        """How many keys ``order`` holds."""
        return len(self._order)


class OrderedKeys(Sequence[str]):
    """The table's ``order`` as a read-only sequence of str (the tokenizer's pieces, by id)."""

    __slots__ = ("_table",)

    def __init__(self, table: MappedTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return int(self._table.ordered)

    def __getitem__(self, position: int) -> str:  # type: ignore[override]   # no slices: the tokenizer takes none
        return self._table.key_at(position)
