"""The optional vocabulary: concepts joined on top of the words, from files that say where they are wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from bitong.agent.matching import Index
from bitong.agent.matching.vocabulary import VocabularyError, load_vocabulary

from .registry import tool


def test_the_packaged_vocabulary_finds_concepts_and_the_spans_they_cover() -> None:
    vocab = load_vocabulary()
    concepts, covered = vocab.find("帮我重启一下 nginx")
    assert "restart" in concepts and {2, 3} <= covered
    assert vocab.fingerprint != load_vocabulary(packaged=False).fingerprint


def test_a_users_form_teaches_a_word(tmp_path: Path) -> None:
    mine = tmp_path / "mine.tsv"
    mine.write_text("# our words\nread\t\t东东瞅瞅\n", encoding="utf-8")
    tools = [tool("file-read", "读取文件", "读取一个文本文件的内容",
                  params="{ path: { type: string, normalize: [path] } }"),
             tool("file-delete", "删除文件", "删除指定路径的文件",
                  params="{ path: { type: string, normalize: [path] } }")]
    before = Index.build(tools, vocabulary=load_vocabulary())
    after = Index.build(tools, vocabulary=load_vocabulary([str(mine)]))
    request = "东东瞅瞅 /etc/hosts"
    assert after.match(request).hits[0].name == "file-read"
    assert after.match(request).hits[0].score > before.match(request).hits[0].score


def test_without_the_packaged_vocabulary_only_the_users_files_apply(tmp_path: Path) -> None:
    mine = tmp_path / "mine.tsv"
    mine.write_text("invoice\tobj\t发票 | invoice | fapiao\n", encoding="utf-8")
    vocab = load_vocabulary([str(mine)], packaged=False)
    assert vocab.find("开一张 fapiao")[0] == ["invoice"]
    assert vocab.find("重启 nginx")[0] == []


@pytest.mark.parametrize(("content", "where"), [
    ("just one field\n", ":1: expected concept<TAB>kind<TAB>forms"),
    ("x\tnoun\ta | b\n", ":1: unknown kind 'noun'"),
    ("# c\nnewthing\t\tfoo\n", ":2: new concept 'newthing' needs a kind"),
    ("restart\tobj\treboot\n", ":1: concept 'restart' is 'act' elsewhere"),
])
def test_a_broken_vocabulary_names_file_and_line(tmp_path: Path, content: str, where: str) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(VocabularyError, match=f"^{bad}{where}"):
        load_vocabulary([str(bad)])
