"""Build steps that pyproject.toml cannot say: protobuf codegen and Cython.

* ``proto/bitong/v1/*.proto`` -> ``bitong/v1/*_pb2*.py`` with grpcio-tools,
  at build time, every build (generated code is never committed).
* ``bitong/parser/_speedups.pyx`` -> the compiled twin of the parser, unless
  ``BITONG_PURE=1`` is set; ``BITONG_CYTHON_ANNOTATE=1`` writes the HTML
  annotation next to it for profiling.
* ``bitong/agent/calling/executors/reaper.c`` -> the executable ``bitong/agent/calling/executors/_reaper``
  (each call's PID namespace; see reaper.py), always, pure or not: it is a
  program, not an extension. Without a C compiler the install goes on and
  the server falls back to process-group kills, with a warning.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO_ROOT = ROOT / "proto"
PURE = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")


def generate_protos() -> None:
    """Run protoc (from grpcio-tools) over proto/ into the bitong package."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    well_known = str(Path(grpc_tools.__file__).parent / "_proto")
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}",
            f"--python_out={ROOT}", f"--pyi_out={ROOT}", f"--grpc_python_out={ROOT}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + " ".join(protos))
    for proto in protos:
        pkg = ROOT / Path(proto).parent
        while pkg != ROOT:
            init = pkg / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated from proto/ at build time; do not edit."""\n')
            pkg = pkg.parent


def extensions() -> list[Extension]:
    """The compiled twins of the parser and the matcher, unless BITONG_PURE=1.

    ``_speedups.pyx`` is the compiled lexer and LALR driver; ``nodes.py`` and
    ``build.py`` are compiled as they are (Cython pure-Python mode, typed by
    ``_nodes.pxd`` / ``_build.pxd``) into ``bitong.parser._nodes`` / ``bitong.parser._build``,
    so the value constructors and the format's rules have one source. The
    matcher's hot path is built the same way: ``bitong/agent/matching/analysis.py`` and
    ``bitong/agent/matching/lexical.py`` into ``bitong.agent.matching._analysis`` /
    ``bitong.agent.matching._lexical``. These keep Python's bounds checks and ignore
    annotations: they are Python code and must behave as such.
    """
    if PURE:
        return []
    from Cython.Build import cythonize

    annotate = os.environ.get("BITONG_CYTHON_ANNOTATE") == "1"

    def stale(source: str, *pxds: str) -> bool:
        # cythonize notices a .py's own .pxd by the file's name (build.pxd), not
        # the module's (_build.pxd): rebuild when one of ours is newer than the C.
        c = ROOT / Path(source).with_suffix(".c")
        return c.exists() and any((ROOT / p).stat().st_mtime > c.stat().st_mtime for p in pxds)

    exts = cythonize(
        [Extension("bitong.parser._speedups", ["bitong/parser/_speedups.pyx"])],
        compiler_directives={"language_level": "3", "boundscheck": False},
        annotate=annotate,
    )
    parser, matching = "bitong/parser", "bitong/agent/matching"
    for name, source, pxds in (("bitong.parser._nodes", f"{parser}/nodes.py", (f"{parser}/_nodes.pxd",)),
                               ("bitong.parser._build", f"{parser}/build.py", (f"{parser}/_build.pxd", f"{parser}/_nodes.pxd")),
                               ("bitong.agent.matching._analysis", f"{matching}/analysis.py", ()),
                               ("bitong.agent.matching._lexical", f"{matching}/lexical.py", ())):
        exts += cythonize(
            [Extension(name, [source])],
            compiler_directives={"language_level": "3", "annotation_typing": False},
            annotate=annotate,
            force=stale(source, *pxds),
        )
    return exts


EXECUTORS = "bitong/agent/calling/executors"
REAPER_SOURCES = (f"{EXECUTORS}/reaper.c", f"{EXECUTORS}/sandbox.c", f"{EXECUTORS}/sandbox.h")
REAPER_TARGET = f"{EXECUTORS}/_reaper"


class build_py_and_reaper(build_py):
    """build_py, then compile the reaper program beside the package's modules.

    Static where the C library allows it (exec of a static program skips
    the dynamic loader: ~0.1 ms of every call); dynamic otherwise.
    """

    def run(self) -> None:
        super().run()
        root = ROOT if self.editable_mode else Path(self.build_lib)
        self.build_reaper(root / REAPER_TARGET)
        self.build_lark_table(root)
        if self.editable_mode:
            self.compile_bytecode()

    def build_lark_table(self, root: Path) -> None:
        """bitong/parser/hdlp.lark.cache: the LALR table, so no run pays the ~50 ms of building it (grammar.py).

        Loaded without the packages' __init__ (they import protobuf and RE2,
        which the build environment need not have); lark's key for the file
        includes the lexer class's dotted name, hence ``bitong.parser.grammar``.
        """
        import subprocess
        import sys

        script = ("import sys, types\n"
                  "for name, folder in (('bitong', sys.argv[1]), ('bitong.parser', sys.argv[1] + '/parser')):\n"
                  "    pkg = types.ModuleType(name); pkg.__path__ = [folder]; sys.modules[name] = pkg\n"
                  "import bitong.parser.grammar as g; g.lark_parser()")
        done = subprocess.run([sys.executable, "-c", script, str(root / "bitong")], capture_output=True, text=True)
        if done.returncode != 0 or not (root / "bitong" / "parser" / "hdlp.lark.cache").exists():
            print("warning: bitong/parser/hdlp.lark.cache not written (the table is built at first use instead):\n"
                  f"{done.stderr[-2000:]}", file=sys.stderr)

    def compile_bytecode(self) -> None:
        """.pyc files for an editable install, as pip writes them for a wheel: a run must not depend on
        writing them (PYTHONDONTWRITEBYTECODE, a read-only checkout), and compiling bitong/agent/ costs ~25 ms."""
        import compileall

        compileall.compile_dir(str(ROOT / "bitong"), quiet=2)

    def build_reaper(self, target: Path) -> None:
        import shutil
        import subprocess
        import sys

        sources = [ROOT / name for name in REAPER_SOURCES]
        if target.exists() and all(target.stat().st_mtime >= s.stat().st_mtime for s in sources):
            return
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            print(f"warning: no C compiler: {REAPER_TARGET} not built; tools will be contained by process group "
                  "only", file=sys.stderr)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        base = [cc, "-O2", "-Wall", "-o", str(target), *(str(s) for s in sources if s.suffix == ".c")]
        for extra in (["-static"], []):
            if subprocess.run(base + extra, capture_output=True).returncode == 0:
                return
        result = subprocess.run(base, capture_output=True, text=True)
        print(f"warning: {REAPER_TARGET} did not compile; tools will be contained by process group only:\n"
              f"{result.stderr}", file=sys.stderr)


# Every setuptools entry point (egg_info, build_py, editable) needs bitong/v1 to
# exist before it looks at the package list, so generate first, every time.
generate_protos()

setup(
    packages=["bitong", "bitong.v1", "bitong.tools", "bitong.parser", "bitong.agent", "bitong.agent.matching",
              "bitong.agent.registry", "bitong.agent.calling", "bitong.agent.calling.executors",
              "bitong.agent.serving", "bitong.agent.mcp", "bitong.agent.cli"],
    package_dir={"bitong.tools": "tools"},
    package_data={
        "bitong.parser": ["hdlp.lark", "*.pyx", "*.pxd"],
        "bitong.agent.matching": ["vocabularies/*.tsv"],
        "bitong": ["py.typed"],   # bitong.Client is typed: type checkers of its users read it
        "bitong.v1": ["*.pyi"],
        "bitong.tools": ["*/TOOL.hdlp", "*/*.py", "*/*.md"],
    },
    ext_modules=extensions(),
    cmdclass={"build_py": build_py_and_reaper},
    zip_safe=False,
)
