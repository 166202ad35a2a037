"""A str -> int table mapped from disk: the answers of the dict it was written from, and a bad file said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from bitong.agent.matching.mapped_table import MappedTable, OrderedKeys, write_table

ITEMS = {"": 7, "a": 0, "ab": 2, "abc": 3, "磁盘": 11, "磁": 0, "▁show": 5, "🎉": -4, "Ä": 9}


def test_every_key_answers_as_the_dict_does_and_others_do_not(tmp_path: Path) -> None:
    many = dict(ITEMS, **{f"k{i}": i for i in range(5000)})   # enough keys for probing chains
    path = tmp_path / "t.table"
    write_table(str(path), many.items(), order=["abc", "磁盘", "🎉"])
    table = MappedTable(str(path))
    assert len(table) == len(many)
    for key, value in many.items():
        assert table.get(key) == value and key in table
    for absent in ("abcd", "b", "磁盘空间", "k5000", " a", "A"):
        assert table.get(absent) is None and table.get(absent, -1) == -1 and absent not in table
    pieces = OrderedKeys(table)
    assert len(pieces) == 3 and [pieces[i] for i in range(3)] == ["abc", "磁盘", "🎉"] and pieces[-1] == "🎉"
    with pytest.raises(IndexError):
        pieces[3]


def test_a_file_that_is_not_a_whole_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.table"
    write_table(str(path), ITEMS.items())
    data = path.read_bytes()
    for bad, why in [(b"", "too short"), (b"XXXX" + data[4:], "not a mapped table of this format"),
                     (data[:40], "cut short"), (data[:-1], "do not add up")]:
        path.write_bytes(bad)
        with pytest.raises(ValueError, match=why):
            MappedTable(str(path))


def test_a_damaged_table_without_an_empty_slot_answers_instead_of_looping(tmp_path: Path) -> None:
    path = tmp_path / "t.table"
    write_table(str(path), [("a", 1)])   # 8 slots, one used
    data = bytearray(path.read_bytes())
    slots_at = 20   # after the header (8 + 3 * 4 bytes)
    data[slots_at:slots_at + 32] = (0).to_bytes(4, "little") * 8   # every slot names key 0
    path.write_bytes(bytes(data))
    table = MappedTable(str(path))
    assert table.get("a") == 1 and table.get("b") is None
