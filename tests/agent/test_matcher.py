"""What a caller of Match sees: the right tools for ops requests, and an honest "no"."""

from __future__ import annotations

import glob
import os

import pytest
from parser import parse

from agent import _backend
from agent.matcher import DEFAULT_THRESHOLD, SUGGESTION, Hit, Index, MatchResult, ToolTerms, analyze
from agent.vocabulary import VocabularyError, load_vocabulary

EVAL_REGISTRY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "eval", "registry")


def tool(name: str, display: str, intent: str, *, why: str = "运维需要", extra: str = "",
         params: str = "{}") -> "object":
    """A minimal valid TOOL.hdlp, parsed by the real parser."""
    return parse(
        f"name: {name}\ndisplay: {display}\nintent: {intent}\nmethod: run\nexecutor: shell\n"
        f"params_schema: {params}\nconstraints: {{}}\nauthor: test\ncreated: 2026-06-01\n"
        f"why: {why}\n{extra}"
    )


TWINS = _backend.backends()


@pytest.fixture(scope="module", params=TWINS, ids=[b.name for b in TWINS])
def twin(request: pytest.FixtureRequest) -> _backend.Backend:
    """Each matcher twin in turn: the pure one, and the compiled one when built
    (tests/agent/test_matcher_twins.py holds them to the same answers)."""
    return request.param


@pytest.fixture(scope="module")
def small(twin: _backend.Backend) -> Index:
    return Index.build([
        tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间"),
        tool("log-tail", "日志尾部", "显示日志文件最后 N 行", extra="trigger_keywords: [日志, tail]\n",
             params="{ path: { type: string, normalize: [path] }, lines: { type: integer } }"),
        tool("service-restart", "重启服务", "用 systemctl 重启一个系统服务",
             extra="non_goals: |\n  不重启整台服务器\n  只看状态用 service-status\n"),
        tool("service-status", "服务状态", "查看某个 systemd 服务是否在运行"),
        tool("user-list", "系统用户列表", "列出服务器上的系统账号",
             extra="non_goals: [不修改密码, 不新建或删除用户]\n"),
    ]).using(twin)


@pytest.fixture(scope="module")
def registry(twin: _backend.Backend) -> Index:
    paths = sorted(glob.glob(os.path.join(EVAL_REGISTRY, "*", "TOOL.hdlp")))
    if not paths:
        pytest.skip("../shared/eval/registry is not checked out next to the repository")
    from parser import parse_file

    return Index.build(parse_file(p) for p in paths).using(twin)


def first(result: MatchResult) -> str | None:
    return result.hits[0].name if result.found and result.hits else None


# ---------------------------------------------------------------- languages and forms


@pytest.mark.parametrize("intent, expected", [
    ("分区还剩多少容量", "disk-usage"),                    # Chinese, no shared wording with the title
    ("is the disk getting full", "disk-usage"),          # English
    ("帮我 restart 一下 nginx", "service-restart"),       # mixed
    ("拉起来 redis 服务", "service-restart"),             # colloquial synonym of 重启
    ("ｄｉｓｋ 还剩多少", "disk-usage"),                    # full-width letters
    ("show me the LAST lines of the app log", "log-tail"),  # case and plural
])
def test_phrasings_find_the_tool(small: Index, intent: str, expected: str) -> None:
    assert first(small.match(intent)) == expected


@pytest.mark.parametrize("intent, expected", [
    ("列出系统账号, only the account deploy", "user-list"),   # a name after its noun
    ("list the system accounts for user backup", "user-list"),
    ("restart the service called deploy", "service-restart"),          # "called X", "named X"
    ("is the service named backup still running", "service-status"),
])
def test_a_name_after_its_noun_is_a_value_not_an_operation(small: Index, intent: str, expected: str) -> None:
    assert first(small.match(intent)) == expected


def test_a_pasted_or_said_file_reads_as_reading() -> None:
    index = Index.build([
        tool("file-read", "读取文件", "读取服务器上一个文本文件的内容"),
        tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间"),
    ])
    assert first(index.match("把 /etc/fstab 贴给我")) == "file-read"
    assert first(index.match("what does /etc/fstab say")) == "file-read"


def test_a_typo_in_an_english_word_is_forgiven(small: Index) -> None:
    assert first(small.match("resatrt the nginx service")) == "service-restart"


def test_embedded_parameters_do_not_drown_the_request(small: Index) -> None:
    plain = small.match("看日志最后几行")
    noisy = small.match("看 /opt/very/long/path/to/some/app-2026-06-01.log 最后 200 行，谢谢")
    assert first(plain) == first(noisy) == "log-tail"
    assert noisy.hits[0].score > DEFAULT_THRESHOLD


def test_off_topic_request_is_not_found_and_says_so(small: Index) -> None:
    result = small.match("帮我写一首关于大海的诗")
    assert result.found is False
    assert result.suggestion == SUGGESTION
    assert small.match("查看磁盘").suggestion == ""


# ---------------------------------------------------------------- keywords and non-goals


def test_trigger_keyword_boosts_its_tool() -> None:
    texts = dict(display="文件查看", intent="显示一个文件的内容")
    plain = Index.build([tool("a-viewer", **texts), tool("b-viewer", **texts)])
    boosted = Index.build([tool("a-viewer", **texts),
                           tool("b-viewer", **texts, extra="trigger_keywords: [看文件]\n")])
    assert plain.match("看文件").hits[0].score == plain.match("看文件").hits[1].score
    top = boosted.match("看文件").hits
    assert top[0].name == "b-viewer" and top[0].score > top[1].score


def test_request_for_a_non_goal_loses_the_tool(small: Index) -> None:
    # 重启 a service is the tool's job; 重启 the whole host is its non-goal.
    assert first(small.match("把 mysql 服务重启一下")) == "service-restart"
    assert small.match("整台主机重启一遍").found is False


def test_read_only_tool_does_not_answer_a_write(small: Index) -> None:
    assert first(small.match("看看机器上有哪些账号")) == "user-list"
    assert small.match("把 deploy 账号的密码改掉").found is False
    assert small.match("删掉 tester 这个用户").found is False


def test_non_goal_referral_sends_the_request_to_the_named_tool(small: Index) -> None:
    # service-restart says "只看状态用 service-status".
    assert first(small.match("只想看看 nginx 服务状态")) == "service-status"


# ---------------------------------------------------------------- results


def test_hits_are_ranked_bounded_and_explained(small: Index) -> None:
    result = small.match("看 nginx 日志最后 50 行", top_k=2)
    assert len(result.hits) <= 2
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert all(0.0 < h.score <= 1.0 for h in result.hits)
    assert isinstance(result.hits[0], Hit)
    assert "日志" in result.hits[0].matched_terms


def test_threshold_decides_found(small: Index) -> None:
    score = small.match("查看磁盘空间").hits[0].score
    assert small.match("查看磁盘空间", threshold=score).found
    assert not small.match("查看磁盘空间", threshold=min(1.0, score + 0.01) if score < 1 else 1.01).found


def test_empty_index_and_empty_request() -> None:
    empty = Index.build([])
    assert len(empty) == 0 and empty.match("查看磁盘").found is False
    assert Index.build([tool("x-tool", "磁盘", "查看磁盘")]).match("   ").found is False


# ---------------------------------------------------------------- incremental re-index


def test_updated_adds_replaces_and_removes_without_touching_the_old_index(small: Index) -> None:
    before = [(h.name, h.score) for h in small.match("列出所有 docker 容器").hits]
    added = small.updated(upsert=[tool("docker-ps", "容器列表", "列出本机所有 Docker 容器及其状态")])
    assert len(added) == len(small) + 1
    assert first(added.match("列出所有 docker 容器")) == "docker-ps"
    assert [(h.name, h.score) for h in small.match("列出所有 docker 容器").hits] == before

    renamed = added.updated(upsert=[tool("docker-ps", "镜像列表", "列出本机所有 Docker 镜像")])
    assert first(renamed.match("列出所有 docker 镜像")) == "docker-ps"
    assert "容器" not in renamed.match("列出所有 docker 镜像").hits[0].matched_terms

    removed = renamed.updated(remove=["docker-ps", "not-there"])
    assert "docker-ps" not in removed and len(removed) == len(small)


def test_updated_index_ranks_like_a_fresh_build(registry: Index) -> None:
    from parser import parse_file

    tools = [parse_file(p) for p in sorted(glob.glob(os.path.join(EVAL_REGISTRY, "*", "TOOL.hdlp")))]
    changed = type(tools[0])()
    changed.CopyFrom(next(t for t in tools if t.name == "cron-list"))
    changed.intent = "列出某个系统用户的 crontab 定时任务和 systemd timer"
    incremental = registry.updated(upsert=[changed], remove=["text-translate"])
    fresh = Index.build([changed if t.name == "cron-list" else t for t in tools if t.name != "text-translate"])
    for q in ["看下 systemd timer 都有哪些", "把这句话翻成英文", "磁盘还剩多少", "重启 nginx"]:
        assert incremental.match(q) == fresh.match(q)


# ---------------------------------------------------------------- the eval registry


@pytest.mark.parametrize("intent, expected", [
    ("机器内存还够用吗", "memory-usage"),
    ("查下 10.2.3.4 上 3306 端口开没开", "port-check"),
    ("把 /tmp/app.tar.gz 解到 /srv/app 下", "archive-extract"),
    ("what does the mx record of example.org point to", "dns-lookup"),
    ("给值班群推一条消息说发布完了", "send-notification"),
    ("tail the last 30 lines of /var/log/auth.log", "log-tail"),
])
def test_eval_registry_neighbours_are_told_apart(registry: Index, intent: str, expected: str) -> None:
    assert first(registry.match(intent)) == expected


@pytest.mark.parametrize("intent", [
    "把 users 表清空",                 # db-query is read-only
    "close the issue about the login page",  # forgejo-create-issue does not close
    "帮我订一张去广州的火车票",
    "帮我新建一个 redis 账号",           # create, but not a backup: backup-create creates backups
    "给 report 库加一张 visits 表",      # db-query reads; creating tables is nobody's job
    "在 forgejo 上新建一个仓库",          # forgejo-create-issue: "不建仓库"
    "kill the docker container named api",  # process-kill kills processes, not containers
    "重启这台物理机",                    # service-restart restarts services, not hosts
    "把这个 settings.json 转成 yaml",     # csv-to-json makes JSON, it does not read it
    "把 /data/q3.xlsx 转成 csv",
])
def test_eval_registry_says_no(registry: Index, intent: str) -> None:
    assert registry.match(intent).found is False


@pytest.mark.parametrize("intent, expected", [
    # the operation pairs with its object
    ("在 ops/infra 仓库里提个 bug：备份脚本周日失败", "forgejo-create-issue"),
    ("把 4410 号进程停了", "process-kill"),
    ("please restart the php-fpm unit", "service-restart"),
    # a state or a question about the past is not an operation to do
    ("ops/infra 最近关掉的 issue 有哪些", "forgejo-list-issues"),
    ("what changed in the local repo at /srv/site", "git-ops"),
    ("analytics 库里昨天新增了多少行", "db-query"),
    # the text of a message or a reminder is not the request
    ("在值班群里说一声 mysql 已经重启好了", "send-notification"),
    ("remind me in 10 minutes to check the backup", "scheduled-reminder"),
    # a spelled-out command line is run as it is
    ("apt install htop", "shell-exec"),
    ("执行一下 `du -sh /var/cache`", "shell-exec"),
    # a non-goal that names another tool's topic sends the request there
    ("去 sales 库里查一下今天有几笔订单", "db-query"),
    # a converter is found by what it makes
    ("把 /tmp/leads.csv 转成 json", "csv-to-json"),
])
def test_eval_registry_pairs_operations_with_their_objects(registry: Index, intent: str, expected: str) -> None:
    assert first(registry.match(intent)) == expected


# ---------------------------------------------------------------- vocabulary


def test_user_vocabulary_teaches_a_new_word(tmp_path: "os.PathLike[str]") -> None:
    tools = [tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间")]
    extra = os.path.join(tmp_path, "mine.tsv")
    with open(extra, "w", encoding="utf-8") as fh:
        fh.write("# our team's words\ndisk\t\tlvm | 卷组\n")
    taught = Index.build(tools, vocabulary=load_vocabulary([extra]))
    assert first(taught.match("瞅一眼卷组")) == "disk-usage"
    assert first(taught.match("check the LVM")) == "disk-usage"
    assert Index.build(tools).match("瞅一眼卷组").found is False


def test_an_act_only_goes_to_a_tool_about_its_object(tmp_path: "os.PathLike[str]") -> None:
    extra = os.path.join(tmp_path, "k8s.tsv")
    with open(extra, "w", encoding="utf-8") as fh:
        fh.write("cluster\tobj\t集群 | cluster\nresize\t\t加节点\n")
    index = Index.build([tool("cluster-resize", "集群扩容", "给 k8s 集群加减节点"),
                         tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间")],
                        vocabulary=load_vocabulary([extra]))
    assert first(index.match("把 prod 集群扩容一下")) == "cluster-resize"
    assert first(index.match("scale out the staging cluster")) == "cluster-resize"
    assert index.match("给 /data 分区扩容 50G").found is False   # resize, but a partition


@pytest.mark.parametrize("content, message", [
    ("disk\n", "expected concept<TAB>kind<TAB>forms"),
    ("brandnew\t\tfoo\n", "needs a kind"),
    ("disk\tverb\tfoo\n", "unknown kind"),
    ("disk\top\tfoo\n", "is 'obj' elsewhere"),
])
def test_malformed_vocabulary_names_file_and_line(tmp_path: "os.PathLike[str]", content: str,
                                                  message: str) -> None:
    path = os.path.join(tmp_path, "bad.tsv")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# comment\n" + content)
    with pytest.raises(VocabularyError, match=f"bad.tsv:2: .*{message}"):
        load_vocabulary([path])


# ---------------------------------------------------------------- persisted analyses


def _eval_tools() -> list:
    paths = sorted(glob.glob(os.path.join(EVAL_REGISTRY, "*", "TOOL.hdlp")))
    if not paths:
        pytest.skip("../shared/eval/registry is not checked out next to the repository")
    from parser import parse_file

    return [parse_file(p) for p in paths]


def test_an_index_built_from_stored_analyses_ranks_like_a_fresh_build() -> None:
    tools = _eval_tools()
    stored = {t.name: analyze(t).to_bytes() for t in tools}
    restored = [ToolTerms.load(stored[t.name], t) for t in tools]
    assert all(r is not None for r in restored)
    fresh, rebuilt = Index.build(tools), Index.build_from(restored)
    mixed = Index.build_from([r if i % 2 else t for i, (t, r) in enumerate(zip(tools, restored))])
    for q in ["看下 systemd timer 都有哪些", "把这句话翻成英文", "磁盘还剩多少", "重启 nginx", "订一张机票"]:
        assert rebuilt.match(q) == fresh.match(q) == mixed.match(q)
    assert rebuilt.analysis("disk-usage") == analyze(next(t for t in tools if t.name == "disk-usage"))


def test_a_stale_or_broken_analysis_is_never_used(tmp_path: "os.PathLike[str]") -> None:
    before = tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间")
    after = tool("disk-usage", "磁盘空间", "查看各个分区的 inode 用量")
    data = analyze(before).to_bytes()
    assert ToolTerms.load(data, before) is not None
    assert ToolTerms.load(data, after) is None                      # the file changed
    extra = os.path.join(tmp_path, "mine.tsv")
    with open(extra, "w", encoding="utf-8") as fh:
        fh.write("disk\t\tlvm\n")
    other = load_vocabulary([extra])
    assert ToolTerms.load(data, before, other) is None               # another vocabulary
    assert ToolTerms.load(analyze(before, other).to_bytes(), before, other) is not None
    for junk in (b"", b"nonsense", data[:-7], data[:4] + b"\xff" * 40):
        assert ToolTerms.load(junk, before) is None
    unhashed = type(before)()
    unhashed.CopyFrom(before)
    unhashed.content_sha256 = ""                                      # built in code, not read from a file
    assert ToolTerms.load(analyze(unhashed).to_bytes(), unhashed) is None


def test_an_analysis_for_another_vocabulary_is_refused_by_the_index(tmp_path: "os.PathLike[str]") -> None:
    extra = os.path.join(tmp_path, "mine.tsv")
    with open(extra, "w", encoding="utf-8") as fh:
        fh.write("disk\t\tlvm\n")
    t = tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间")
    foreign = analyze(t, load_vocabulary([extra]))
    with pytest.raises(ValueError, match="stale analysis"):
        Index.build_from([foreign])
    with pytest.raises(ValueError, match="stale analysis"):
        Index.build([]).updated(upsert=[foreign])
    assert Index.build([]).updated(upsert=[analyze(t)]).match("磁盘还剩多少").hits[0].name == "disk-usage"


def test_one_pass_over_many_texts_equals_one_call_a_text() -> None:
    from agent.text import Analyzer
    from agent.vocabulary import default_vocabulary

    an = Analyzer(default_vocabulary())
    texts = ["查看磁盘", "", "tar 包解开", "A记录\x01指向", "load average 太高", "ｄｉｓｋ full", "磁盘", "空间"]
    assert an.features_many(texts) == [an.features(t) for t in texts]
    # a border between texts ends forms and bigrams: 磁盘 + 空间 is not 磁盘空间
    assert an.features_many(["磁盘", "空间"]) != [an.features("磁盘空间")]
