"""Valid and invalid TOOL.hdlp texts, written from the spec (shared/spec/TOOL-hdlp.md).

The invalid cases carry where the error must point (line and column, 1-based,
columns counted in characters) and a piece of the message that says what was
expected; ``test_errors`` checks them on each twin and ``test_parity`` checks
that both twins word them identically.
"""

from __future__ import annotations

from dataclasses import dataclass

# The ten required fields, one line each, in the order of seed §7.
MINIMAL: dict[str, str] = {
    "name": "name: demo",
    "display": "display: 演示",
    "intent": "intent: do one thing well",
    "method": "method: run",
    "executor": "executor: gatekeeper",
    "params_schema": "params_schema: {}",
    "constraints": "constraints: {}",
    "author": "author: ICE-GL-ZY001",
    "created": "created: 2026-05-31",
    "why": "why: because the tests need one",
}


def make(*extra: str, header: str | None = None, drop: tuple[str, ...] = (), **replace: str) -> str:
    """A minimal valid file; ``replace`` swaps a field's line(s) for the given
    text, ``drop`` leaves fields out, ``extra`` lines go at the end."""
    lines = [header] if header else []
    for key, line in MINIMAL.items():
        if key in drop:
            continue
        lines.append(replace.pop(key, line))
    if replace:
        raise KeyError(f"not a required field: {sorted(replace)}")
    lines.extend(extra)
    return "\n".join(lines) + "\n"


# A complete shell tool. Line numbers matter: the invalid cases edit single lines.
FULL: list[str] = [
    "HLDP://zhuyuan/tool/demo-tool",                                        # 1
    "# 演示: a complete definition",                                        # 2
    "name: demo-tool",                                                      # 3
    "display: 演示工具",                                                     # 4
    "intent: 列出一个目录里的文件",                                            # 5
    "method: run",                                                          # 6
    "executor: shell",                                                      # 7
    "command: ls -l {path} -n {count}",                                     # 8
    "params_schema:",                                                       # 9
    '  path: { type: string, required: true, description: "目录路径" }',     # 10
    "  count:",                                                             # 11
    "    type: integer",                                                    # 12
    "    default: 10",                                                      # 13
    "    min: 1",                                                           # 14
    "constraints:",                                                         # 15
    "  timeout_ms: 5000",                                                   # 16
    "  require_confirm: false",                                             # 17
    "author: ICE-GL-ZY001",                                                 # 18
    "created: 2026-05-31",                                                  # 19
    "why: 测试需要一个完整的例子",                                              # 20
]


def variant(replace: dict[int, str] | None = None, after: dict[int, list[str]] | None = None,
            drop: tuple[int, ...] = ()) -> str:
    """FULL with lines replaced, inserted after a line, or dropped (1-based line numbers)."""
    out: list[str] = []
    for no, line in enumerate(FULL, 1):
        if no not in drop:
            out.append((replace or {}).get(no, line))
        out.extend((after or {}).get(no, []))
    out.extend((after or {}).get(len(FULL) + 1, []))
    return "\n".join(out) + "\n"


def col(line: str, needle: str, nth: int = 1) -> int:
    """1-based column of the nth occurrence of ``needle`` in ``line``; ``"$"`` is
    just past the end of the line (where a missing value was expected)."""
    if needle == "$":
        return len(line) + 1
    at = -1
    for _ in range(nth):
        at = line.index(needle, at + 1)
    return at + 1


@dataclass(frozen=True)
class Case:
    """An invalid file and where its error must point."""

    id: str
    text: str | bytes
    line: int
    column: int
    expect: str  # part of the message (case-insensitive): what was expected or is wrong
    path: str = "demo.hdlp"


def _line_case(id: str, no: int, line: str, needle: str, expect: str, nth: int = 1) -> Case:
    """FULL with line ``no`` replaced; the error points at ``needle`` in it."""
    return Case(id, variant({no: line}), no, col(line, needle, nth), expect)


def _extra_case(id: str, line: str, needle: str, expect: str) -> Case:
    """FULL plus one more top-level line (line 21); the error points at ``needle``."""
    return Case(id, variant(after={20: [line]}), 21, col(line, needle), expect)


def _field_case(id: str, line: str, needle: str, expect: str, *, extra: tuple[str, ...] = (),
                field: str | None = None) -> Case:
    """A minimal file whose ``field`` line (or an added line) is ``line``."""
    if field:
        text = make(*extra, **{field: line})
        no = list(MINIMAL).index(field) + 1
    else:
        text = make(line, *extra)
        no = len(MINIMAL) + 1
    return Case(id, text, no, col(line, needle), expect)


def _missing(field: str) -> Case:
    return Case(f"missing-{field}", make(drop=(field,)), 1, 1, f"missing required field: {field}")


INVALID: list[Case] = [
    # ---- indentation
    Case("tab-indent", variant({12: "\ttype: integer"}), 12, 1, "tab"),
    Case("tab-after-spaces", variant({12: "  \ttype: integer"}), 12, 3, "tab"),
    Case("indent-2-then-3", variant({17: "   require_confirm: false"}), 17, 4, "inconsistent indentation"),
    Case("indent-3-first", variant({10: '   path: { type: string, required: true }'}), 10, 4, "expected 2 or 4"),
    Case("dedent-to-no-level", variant({14: "   min: 1"}), 14, 4, "matches no outer level"),
    Case("indent-under-scalar", variant(after={3: ["  extra: 1"]}), 4, 3, "indentation"),
    Case("dash-list", make("trigger_keywords:", "  - run"), 12, 3, "[a, b]"),
    Case("indented-first-line", "  " + make(), 1, 3, "unexpected indentation"),
    Case("folded-block-text", make(why="why: >\n  folded"), 10, 6, "expected '|'"),
    Case("plain-text-over-lines", make(why="why:\n  continued text"), 11, 13, "key: |"),
    # ---- keys and colons
    _line_case("missing-colon", 4, "display 演示工具", "演", "expected ':'"),
    _line_case("no-space-after-colon", 6, "method:run", "run", "space after ':'"),
    _line_case("bad-key-char", 6, "me.thod: run", ".", "expected ':'"),
    _line_case("quoted-key", 6, '"method": run', '"', "expected a key"),
    Case("header-not-first", variant(after={3: ["HLDP://zhuyuan/tool/demo-tool"]}), 4, 1, "first line"),
    Case("dup-key-top", variant(after={20: ["name: again"]}), 21, 1, "duplicate key 'name'"),
    Case("dup-key-nested", variant(after={17: ["  timeout_ms: 1"]}), 18, 3, "duplicate key 'timeout_ms'"),
    _line_case("dup-key-inline", 10, "  path: { type: string, required: true, type: integer }", "type", "duplicate key 'type'", 2),
    Case("dup-param", variant(after={14: ["  path: { type: string }"]}), 15, 3, "duplicate key 'path'"),
    _line_case("dup-key-in-default", 10, "  path: { type: object, default: { a: 1, a: 2 } }", "a: 2", "duplicate key 'a'"),
    Case("dup-extension-key", variant(after={20: ["x-note: one", "x-note: two"]}), 22, 1, "duplicate key 'x-note'"),
    _line_case("unknown-key", 6, "mehtod: run", "mehtod", "did you mean 'method'"),
    _line_case("unknown-constraint", 16, "  timeout: 5000", "timeout", "did you mean 'timeout_ms'"),
    _line_case("unknown-param-key", 10, "  path: { type: string, requird: true }", "requird", "did you mean 'required'"),
    _line_case("flow-key-without-colon", 10, "  path: { type: string, required }", "}", "expected ':'"),
    # ---- flow collections and strings
    _field_case("unclosed-list", "trigger_keywords: [a, b", "[", "unclosed '['"),
    _field_case("unclosed-map", "constraints: { timeout_ms: 1", "{", "unclosed '{'", field="constraints"),
    _field_case("unclosed-nested-list", "permissions: { fs_read_paths: [/etc }", "}", "expected ']'"),
    _field_case("list-over-lines", "trigger_keywords: [a,", "[", "same line", extra=("  b]",)),
    _field_case("empty-list-item", "trigger_keywords: [a, , b]", ", b", "expected a value"),
    _field_case("text-after-bracket", "trigger_keywords: [a, b] c", "c", "end of the line"),
    _field_case("unclosed-string", 'why: "never closed', '"', "closing \"", field="why"),
    _field_case("unclosed-single", "why: 'never closed", "'", "closing '", field="why"),
    _field_case("bad-escape", r'why: "bad \q escape"', "\\", "unknown escape", field="why"),
    _field_case("regex-escape", r'why: "\d+"', "\\", "unknown escape", field="why"),
    _field_case("bad-u-escape", r'why: "\u12G4"', "\\", "four hex digits", field="why"),
    _field_case("lone-surrogate", r'why: "\ud83d alone"', "\\", "surrogate", field="why"),
    _field_case("text-after-quote", 'why: "quoted" and more', "and", "end of the line", field="why"),
    _field_case("text-after-single-quote", "why: 'quoted'x", "x", "end of the line", field="why"),
    _field_case("text-after-pipe", "why: | inline", "inline", "end of the line", field="why"),
    # ---- required fields and types
    *[_missing(f) for f in MINIMAL],
    _line_case("timeout-quoted", 16, '  timeout_ms: "abc"', '"', "must be an integer"),
    _line_case("timeout-text", 16, "  timeout_ms: 30s", "30s", "must be an integer"),
    _line_case("timeout-decimal", 16, "  timeout_ms: 1.5", "1.5", "must be an integer"),
    _line_case("timeout-zero", 16, "  timeout_ms: 0", "0", "at least 1"),
    _line_case("timeout-huge", 16, "  timeout_ms: 99999999999999999999", "9", "out of range"),
    _line_case("max-output-negative", 16, "  max_output_bytes: -1", "-1", "at least 1"),
    _line_case("require-confirm-maybe", 17, "  require_confirm: maybe", "maybe", "true or false"),
    _line_case("require-confirm-quoted", 17, '  require_confirm: "true"', '"', "true or false"),
    _line_case("require-confirm-yes", 17, "  require_confirm: yes", "yes", "true or false"),
    Case("confirm-by-unknown", variant(after={17: ["  confirm_by: operator"]}), 18, 15, "one of: agent, human"),
    Case("confirm-by-human-without-confirm", variant(after={17: ["  confirm_by: human"]}), 18, 15,
         "needs require_confirm: true"),
    Case("confirm-by-list", variant(after={17: ["  confirm_by: [human]"]}), 18, 15, "must be text"),
    Case("constraints-scalar", variant({15: "constraints: 5000"}, drop=(16, 17)), 15, 14, "must be a map"),
    _field_case("params-schema-list", "params_schema: [a, b]", "[", "must be a map", field="params_schema"),
    _line_case("name-uppercase", 3, "name: Demo-Tool", "Demo", "^[a-z0-9]"),
    _line_case("name-space", 3, "name: demo tool", "demo", "no spaces"),
    _line_case("name-empty", 3, 'name: ""', '"', "must not be empty"),
    _line_case("name-too-long", 3, "name: " + "a" * 65, "aaaa", "{0,63}"),
    Case("name-not-folder", variant(), 3, 7, "does not match its folder 'other'", path="/srv/tools/other/TOOL.hdlp"),
    _line_case("display-empty", 4, "display:", "$", "must not be empty"),
    _line_case("display-blank-string", 4, 'display: "  "', '"', "must not be empty"),
    _line_case("display-list", 4, "display: [a]", "[", "must be text"),
    _line_case("date-impossible", 19, "created: 2026-02-30", "2026", "real date"),
    _line_case("date-format", 19, "created: 31/05/2026", "31", "YYYY-MM-DD"),
    _line_case("date-with-time", 19, "created: 2026-05-31T10:00", "2026", "YYYY-MM-DD"),
    _extra_case("version-two-parts", "version: 1.0", "1.0", "semantic version"),
    _extra_case("version-v-prefix", "version: v1.2.0", "v1", "semantic version"),
    _line_case("executor-unknown", 7, "executor: bash", "bash", "expected one of"),
    _line_case("executor-uppercase", 7, "executor: Shell", "Shell", "expected one of"),
    _extra_case("retry-negative", "retry: -1", "-1", "at least 0"),
    _extra_case("retry-text", "retry: twice", "twice", "must be an integer"),
    _extra_case("rollout-zero", "rollout: 0", "0", "at least 1"),
    _extra_case("rollout-over-100", "rollout: 101", "101", "at most 100"),
    _extra_case("rollout-percent-sign", "rollout: 10%", "10%", "must be an integer"),
    _extra_case("schedule-neither", "schedule: { params: { path: /tmp } }", "schedule", "exactly one of every_s"),
    _extra_case("schedule-both", 'schedule: { every_s: 30, cron: "* * * * *" }', "schedule", "exactly one of"),
    _extra_case("schedule-every-zero", "schedule: { every_s: 0 }", "0", "at least 1"),
    _extra_case("schedule-cron-fields", 'schedule: { cron: "*/5 * *" }', '"', "five fields"),
    _extra_case("schedule-cron-range", 'schedule: { cron: "61 * * * *" }', '"', "minute: 61 is outside 0-59"),
    _extra_case("schedule-cron-name", 'schedule: { cron: "0 9 * * mon" }', '"', "names are not supported"),
    _extra_case("schedule-unknown-key", "schedule: { every: 30 }", "every", "did you mean 'every_s'"),
    _extra_case("schedule-undeclared-param", "schedule: { every_s: 30, params: { pth: /tmp } }", "pth",
                "params_schema does not declare"),
    _extra_case("schedule-params-list", "schedule: { every_s: 30, params: [a] }", "[", "must be a map"),
    _extra_case("schedule-scalar", "schedule: 30", "30", "must be a map"),
    _extra_case("permission-not-bool", "permissions: { fs_read: yes }", "yes", "true or false"),
    _extra_case("permission-unknown", "permissions: { fs_exec: true }", "fs_exec", "did you mean"),
    _extra_case("keywords-map", "trigger_keywords: { a: b }", "{", "list"),
    _extra_case("endpoint-empty", "endpoint:", "$", "must not be empty"),
    _extra_case("number-overflow", "x-big: 1e999", "1e999", "out of range"),
    # ---- parameters
    _line_case("param-type-unknown", 12, "    type: int", "int", "unknown type 'int'"),
    _line_case("param-type-list", 12, "    type: [string]", "[", "must be text"),
    Case("param-without-type", variant(drop=(12,)), 11, 3, "needs a type"),
    _line_case("param-flow-without-type", 10, "  path: { required: true }", "path", "needs a type"),
    _line_case("param-scalar", 10, "  path: string", "string", "must be a map"),
    _line_case("param-required-text", 10, "  path: { type: string, required: yes }", "yes", "true or false"),
    _line_case("default-not-type", 13, "    default: ten", "ten", "of type integer"),
    _line_case("default-decimal-for-integer", 13, "    default: 2.5", "2.5", "of type integer"),
    _line_case("default-string-for-boolean", 10, "  path: { type: boolean, default: maybe }", "maybe", "of type boolean"),
    _line_case("default-below-min", 13, "    default: 0", "0", "at least 1"),
    _line_case("default-not-in-enum", 10, "  path: { type: string, enum: [a, b], default: c }", "c }", "enum"),
    _line_case("enum-wrong-type", 10, "  path: { type: string, enum: [a, 2] }", "2", "of type string"),
    _line_case("enum-empty", 10, "  path: { type: string, enum: [] }", "[", "non-empty"),
    _line_case("default-against-pattern", 10, '  path: { type: string, pattern: "^/", default: etc }', "etc", "pattern"),
    _line_case("bad-pattern", 10, '  path: { type: string, pattern: "(" }', '"(', "regular expression"),
    _line_case("min-text", 14, "    min: one", "one", "must be a number"),
    _line_case("normalize-unknown", 10, "  path: { type: string, normalize: [trim, squash] }", "squash", "unknown normalize rule 'squash'"),
    # ---- command
    _line_case("command-undeclared", 8, "command: ls -l {path} -n {cnt}", "{cnt}", "does not declare"),
    _line_case("command-undeclared-quoted", 8, 'command: "ls -l {path} -n {cnt}"', "{cnt}", "does not declare"),
    _line_case("command-undeclared-after-escape", 8, r'command: "ls \"-l\" {cnt}"', "{cnt}", "does not declare"),
    Case("command-not-shell", variant({7: "executor: gatekeeper"}), 8, 1, "only for executor: shell"),
    # ---- the file as a whole
    Case("empty-file", "", 1, 1, "empty file"),
    Case("blank-file", "\n  \n\n", 1, 1, "empty file"),
    Case("only-comments", "# one\n  # two\n# three\n", 1, 1, "empty file"),
    Case("only-header", "HLDP://zhuyuan/tool/demo\n# nothing else\n", 1, 25, "expected a key"),
    Case("not-utf8", variant().encode("utf-8").replace("测试需要".encode(), b"\xff\xfe", 1), 20, 6, "utf-8"),
    Case("not-utf8-first-line", b"name: d\xe9mo\n", 1, 8, "utf-8"),
    Case("utf16", "name: demo\n".encode("utf-16"), 1, 1, "utf-8"),
]

# min above max: the error points at max (line 15 of the edited file).
INVALID.append(Case("min-above-max", variant({14: "    min: 5\n    max: 1"}), 15, 10, "below its min"))

# A few files that must parse, beyond FULL and the registries: one per syntax feature.
VALID: dict[str, str] = {
    "full": variant(),
    "minimal": make(),
    "crlf": variant().replace("\n", "\r\n"),
    "bom-no-final-newline": "\ufeff" + variant().rstrip("\n"),
    "four-spaces": "".join(" " * (2 * (len(ln) - len(ln.lstrip(" ")))) + ln.lstrip(" ")
                           for ln in variant().splitlines(keepends=True)),
    "schedule-every": variant(after={20: ["schedule: { every_s: 30, params: { path: /tmp }, report: due }"]}),
    "schedule-cron": variant(after={20: ['schedule: { cron: "*/5 9-17 * * 1-5" }', "rollout: 10"]}),
    "block-text": make(
        "non_goals: |   # one per line",
        "  不做文件内容搜索",
        "",
        "    不做删除操作",
        "",
        why="why: |\n  first line\n\n    deeper line\n  # not a comment\n  last",
    ),
}
