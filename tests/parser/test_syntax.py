"""Every construct of the spec's Syntax section parses, to the value a reader expects.

Written from shared/spec/TOOL-hdlp.md ("Everything below must parse") and,
where the spec is silent, from docs/format.md. Each test runs on both twins.
"""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from tests.parser.hdlp_cases import MINIMAL, VALID, make, variant
from bitong.parser import ParseError, ToolDef, parse, parse_bytes
from bitong.parser._backend import Backend


def p(text: str, backend: Backend, path: str = "demo.hdlp") -> ToolDef:
    return parse(text, path, backend=backend)


def default_of(tool: ToolDef, param: str):
    """A parameter's default as plain Python data."""
    return json_format.MessageToDict(tool.params_schema[param].default)


def param_with(spec: str, backend: Backend, name: str = "p") -> ToolDef:
    """A tool with one parameter whose flow-map spec is ``spec``."""
    return p(make(params_schema=f"params_schema:\n  {name}: {spec}"), backend)


# ---------------------------------------------------------------- the spec's own example

SPEC_EXAMPLE = """\
HLDP://zhuyuan/tool/shell-exec          # optional first line: the tool's HLDP address
# a comment line; also allowed after a value:  key: value   # note
name: shell-exec                         # scalar
display: Shell命令执行                    # unquoted text runs to the end of the line
why: "quoted text, with \\"escapes\\" and \\n"
created: 2026-05-31                      # date (kept as the text YYYY-MM-DD)
trigger_keywords: [执行命令, 跑命令, "run command"]   # inline list
params_schema:                           # nested block, indented (2 or 4 spaces, consistent)
  cmd: { type: string, required: true, description: "要执行的shell命令" }   # inline map
  cwd:
    type: string
    required: false
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
non_goals: |                             # block text: the indented lines that follow
  不做文件内容搜索
  不做删除操作
intent: 在服务器上执行一条shell命令并返回结果
method: exec
executor: gatekeeper
author: ICE-GL-ZY001
"""

SEED_EXAMPLE = """\
name: shell-exec
display: Shell命令执行
intent: 在服务器上执行一条shell命令并返回结果
method: exec
executor: gatekeeper
params_schema:
  cmd: { type: string, required: true, description: "要执行的shell命令" }
  cwd: { type: string, required: false, description: "工作目录" }
constraints:
  timeout_ms: 30000
  max_output_bytes: 65536
  require_confirm: false
author: ICE-GL-ZY001
created: 2026-05-31
why: 铸渊需要通过gatekeeper执行服务器命令。这是所有系统操作的基础工具。
"""


def test_spec_syntax_example(backend: Backend) -> None:
    """The Syntax section's block, completed with the fields it leaves out."""
    tool = p(SPEC_EXAMPLE, backend)
    assert tool.address == "HLDP://zhuyuan/tool/shell-exec"
    assert tool.name == "shell-exec"
    assert tool.display == "Shell命令执行"
    assert tool.why == 'quoted text, with "escapes" and \n'
    assert tool.created == "2026-05-31"
    assert list(tool.trigger_keywords) == ["执行命令", "跑命令", "run command"]
    assert list(tool.param_order) == ["cmd", "cwd"]
    cmd = tool.params_schema["cmd"]
    assert (cmd.type, cmd.required, cmd.description) == ("string", True, "要执行的shell命令")
    assert (tool.params_schema["cwd"].type, tool.params_schema["cwd"].required) == ("string", False)
    assert (tool.constraints.timeout_ms, tool.constraints.max_output_bytes) == (30000, 65536)
    assert tool.constraints.require_confirm is False
    assert list(tool.non_goals) == ["不做文件内容搜索", "不做删除操作"]


def test_seed_example(backend: Backend) -> None:
    """Seed §7's TOOL.hdlp, verbatim."""
    tool = p(SEED_EXAMPLE, backend, "/tools/shell-exec/TOOL.hdlp")
    assert tool.executor == "gatekeeper"
    assert tool.params_schema["cwd"].description == "工作目录"
    assert tool.why.endswith("这是所有系统操作的基础工具。")


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_samples(name: str, backend: Backend) -> None:
    assert p(VALID[name], backend).name in ("demo", "demo-tool")


# ---------------------------------------------------------------- the first line

def test_header_is_optional(backend: Backend) -> None:
    assert p(make(), backend).address == ""


def test_header_with_comment_and_trailing_space(backend: Backend) -> None:
    tool = p(make(header="HLDP://zhuyuan/tool/demo   # its address   "), backend)
    assert tool.address == "HLDP://zhuyuan/tool/demo"


def test_header_after_leading_comments_and_blank_lines(backend: Backend) -> None:
    tool = p("# about this file\n\n" + make(header="HLDP://zhuyuan/tool/demo"), backend)
    assert tool.address == "HLDP://zhuyuan/tool/demo"


# ---------------------------------------------------------------- comments

def test_comment_lines_anywhere(backend: Backend) -> None:
    text = make(
        params_schema="params_schema:\n# at column 0 inside a block\n  a: { type: string }\n"
                      "      # deeper than the block\n  b: { type: string }\n  # at the block's level",
    )
    tool = p("# first\n" + text + "# last, no newline after", backend)
    assert list(tool.param_order) == ["a", "b"]


def test_comment_after_values(backend: Backend) -> None:
    tool = p(make(
        display="display: 演示   # a note",
        why='why: "quoted"  # after a string',
        constraints="constraints: { timeout_ms: 5 }   # after a map",
        params_schema="params_schema: {}  # after an empty map",
    ), backend)
    assert (tool.display, tool.why, tool.constraints.timeout_ms) == ("演示", "quoted", 5)


def test_comment_after_key_of_nested_block(backend: Backend) -> None:
    tool = p(make(
        params_schema="params_schema:   # the parameters\n  a:   # first\n    type: string  # its type",
        constraints="constraints:   # all defaults but one\n  timeout_ms: 7  # ms",
    ), backend)
    assert tool.params_schema["a"].type == "string"
    assert tool.constraints.timeout_ms == 7


def test_comment_after_block_text_marker(backend: Backend) -> None:
    tool = p(make(why="why: |   # kept out of the text\n  the text"), backend)
    assert tool.why == "the text"


def test_tab_before_a_comment_is_not_indentation(backend: Backend) -> None:
    """Tabs are refused as indentation; a comment line has none that matters."""
    tool = p(make(display="display: x\t# tab then comment", why="why: y\n\t# tab-indented comment line"), backend)
    assert (tool.display, tool.why) == ("x", "y")


# ---------------------------------------------------------------- unquoted text

@pytest.mark.parametrize("raw, value", [
    ('say "hi" to them', 'say "hi" to them'),      # quotes inside
    ("C# and F#", "C# and F#"),                      # '#' without a space before it
    ("issue#12 is open", "issue#12 is open"),
    ("url: http://x:80/a?b=c", "url: http://x:80/a?b=c"),  # ':' inside
    ("key: value: more", "key: value: more"),
    ("a, b, [c], {d}", "a, b, [c], {d}"),            # brackets after the start are text
    ("  padded  ", "padded"),                        # trimmed
    ("it's", "it's"),
    ("100%", "100%"),
    ("tab\tinside", "tab\tinside"),
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("null", "null"), ("~", "~"),  # not YAML 1.1 magic
    ("True", "True"), ("FALSE", "FALSE"),
    ("1.2.3", "1.2.3"), (".5", ".5"), ("0x1F", "0x1F"), ("1_000", "1_000"),
    ("Shell命令执行", "Shell命令执行"),
    ("a # comment", "a"),
    ("a\t# comment after a tab", "a"),
])
def test_unquoted_text(raw: str, value: str, backend: Backend) -> None:
    assert p(make(display=f"display: {raw}"), backend).display == value


def test_unquoted_text_keeps_number_spelling_for_text_fields(backend: Backend) -> None:
    """A text field takes any scalar as written: ``1.10`` stays "1.10", not 1.1."""
    tool = p(make(display="display: 1.10", method="method: 007", why="why: true"), backend)
    assert (tool.display, tool.method, tool.why) == ("1.10", "007", "true")


# ---------------------------------------------------------------- quoted strings

@pytest.mark.parametrize("raw, value", [
    (r'"plain"', "plain"),
    (r'"a \"quoted\" word"', 'a "quoted" word'),
    (r'"back\\slash"', "back\\slash"),
    (r'"C:\\path\\to"', "C:\\path\\to"),
    (r'"line\nbreak"', "line\nbreak"),
    (r'"tab\there"', "tab\there"),
    (r'"cr\rlf"', "cr\rlf"),
    (r'"\b\f\0\/"', "\b\f\0/"),
    (r'"\u4e2d\u6587"', "中文"),
    (r'"\u00E9"', "é"),
    (r'"\ud83d\ude00"', "😀"),
    (r'"\U0001F600"', "😀"),
    (r'"has # hash"', "has # hash"),
    (r'"has: colon, comma"', "has: colon, comma"),
    (r'"  spaces kept  "', "  spaces kept  "),
    (r'"[not a list]"', "[not a list]"),
    (r'"中文 \"引号\""', '中文 "引号"'),
    ("'single'", "single"),
    ("'it''s'", "it's"),
    (r"'back\slash stays'", "back\\slash stays"),
    ("'a \"b\"'", 'a "b"'),
])
def test_quoted_strings(raw: str, value: str, backend: Backend) -> None:
    assert p(make(why=f"why: {raw}"), backend).why == value
    assert p(make(intent=f"intent: {raw}  # note", why="why: x"), backend).intent == value


def test_quoted_empty_string_where_allowed(backend: Backend) -> None:
    tool = param_with('{ type: string, description: "", default: "" }', backend)
    assert tool.params_schema["p"].description == ""
    assert default_of(tool, "p") == ""


# ---------------------------------------------------------------- scalars

@pytest.mark.parametrize("raw, value", [
    ("0", 0), ("42", 42), ("-7", -7), ("+7", 7), ("007", 7),
    ("9007199254740992", 2**53),  # ParamSpec defaults are protobuf Values: doubles
])
def test_integers(raw: str, value: int, backend: Backend) -> None:
    tool = param_with(f"{{ type: integer, default: {raw} }}", backend)
    assert default_of(tool, "p") == value
    assert tool.params_schema["p"].default.WhichOneof("kind") == "number_value"


@pytest.mark.parametrize("raw, value", [
    ("0.5", 0.5), ("-0.25", -0.25), ("10.0", 10.0), ("+1.5", 1.5), ("1.5e3", 1500.0), ("2E-2", 0.02), ("1e3", 1000.0),
])
def test_decimals(raw: str, value: float, backend: Backend) -> None:
    tool = param_with(f"{{ type: number, default: {raw}, min: -1.5, max: 1e6 }}", backend)
    assert default_of(tool, "p") == value
    assert (tool.params_schema["p"].min, tool.params_schema["p"].max) == (-1.5, 1e6)


def test_negative_bounds(backend: Backend) -> None:
    tool = param_with("{ type: integer, min: -10, max: -1, default: -5 }", backend)
    spec = tool.params_schema["p"]
    assert (spec.min, spec.max, default_of(tool, "p")) == (-10, -1, -5)


@pytest.mark.parametrize("raw, value", [("true", True), ("false", False)])
def test_booleans(raw: str, value: bool, backend: Backend) -> None:
    tool = p(make(constraints=f"constraints: {{ require_confirm: {raw} }}"), backend)
    assert tool.constraints.require_confirm is value
    assert default_of(param_with(f"{{ type: boolean, default: {raw} }}", backend), "p") is value


def test_quoted_true_is_text(backend: Backend) -> None:
    assert default_of(param_with('{ type: string, default: "true" }', backend), "p") == "true"


def test_dates_are_text(backend: Backend) -> None:
    tool = p(make(created='created: "2026-12-31"'), backend)
    assert tool.created == "2026-12-31"
    assert p(make(created="created: 2024-02-29   # leap day"), backend).created == "2024-02-29"
    assert default_of(param_with("{ type: string, default: 2026-01-02 }", backend), "p") == "2026-01-02"


# ---------------------------------------------------------------- inline lists and maps

def test_inline_lists(backend: Backend) -> None:
    tool = p(make(
        'trigger_keywords: ["a, with comma", \'b, too\', plain text, 42, true, "#not comment"]',
    ), backend)
    assert list(tool.trigger_keywords) == ["a, with comma", "b, too", "plain text", "42", "true", "#not comment"]


def test_inline_list_spacing_and_trailing_comma(backend: Backend) -> None:
    assert list(p(make("trigger_keywords: [a,b ,  c,]"), backend).trigger_keywords) == ["a", "b", "c"]


def test_empty_collections(backend: Backend) -> None:
    tool = p(make("trigger_keywords: []", "non_goals: []", "permissions: {}",
                  params_schema="params_schema: {}", constraints="constraints: {}"), backend)
    assert list(tool.trigger_keywords) == [] and list(tool.non_goals) == []
    assert len(tool.params_schema) == 0 and tool.constraints.timeout_ms == 30000
    obj = param_with("{ type: object, default: {} }", backend)
    assert default_of(obj, "p") == {}
    assert default_of(param_with("{ type: array, default: [] }", backend), "p") == []
    assert default_of(param_with("{type: array,default: [ ]}", backend), "p") == []


def test_nested_inline_collections(backend: Backend) -> None:
    tool = param_with('{ type: object, default: { a: [1, [2, 3], {}], b: { c: "x, y", d: [] }, e: -1.5 } }', backend)
    assert default_of(tool, "p") == {"a": [1, [2, 3], {}], "b": {"c": "x, y", "d": []}, "e": -1.5}


def test_inline_map_without_spaces(backend: Backend) -> None:
    tool = param_with("{type:string,required:true,enum:[a,b],default:a}", backend)
    spec = tool.params_schema["p"]
    assert (spec.type, spec.required, default_of(tool, "p")) == ("string", True, "a")


def test_inline_map_text_values_with_colons(backend: Backend) -> None:
    tool = param_with("{ type: string, default: http://h:8080/x, description: 注意: 必填 }", backend)
    assert default_of(tool, "p") == "http://h:8080/x"
    assert tool.params_schema["p"].description == "注意: 必填"


def test_inline_lists_inside_inline_maps(backend: Backend) -> None:
    tool = p(make(
        "permissions: { fs_read: true, fs_read_paths: [\"/etc/**\", /srv/**], fs_write_paths: [] }",
        params_schema="params_schema:\n  m: { type: string, enum: [GET, POST], normalize: [trim, lower], default: GET }",
    ), backend)
    assert list(tool.permissions.fs_read_paths) == ["/etc/**", "/srv/**"]
    assert list(tool.params_schema["m"].normalize) == ["trim", "lower"]
    assert [v.string_value for v in tool.params_schema["m"].enum] == ["GET", "POST"]


# ---------------------------------------------------------------- nested blocks

@pytest.mark.parametrize("unit", [2, 4])
def test_nested_blocks(unit: int, backend: Backend) -> None:
    i = " " * unit
    text = make(
        params_schema=f"params_schema:\n{i}path:\n{i * 2}type: string\n{i * 2}required: true\n"
                      f"{i}mode: {{ type: string, enum: [r, w] }}\n{i}deep:\n{i * 2}type: object\n"
                      f"{i * 2}default: {{ k: v }}",
        constraints=f"constraints:\n{i}timeout_ms: 100\n{i}max_output_bytes: 200",
    )
    tool = p(text, backend)
    assert list(tool.param_order) == ["path", "mode", "deep"]
    assert tool.params_schema["path"].required is True
    assert (tool.constraints.timeout_ms, tool.constraints.max_output_bytes) == (100, 200)


def test_blank_lines_inside_nested_blocks(backend: Backend) -> None:
    tool = p(make(params_schema="params_schema:\n\n  a:\n\n    type: string\n   \n  b: { type: integer }\n"), backend)
    assert list(tool.param_order) == ["a", "b"]


def test_dedent_several_levels_at_once(backend: Backend) -> None:
    text = make(params_schema="params_schema:\n  a:\n    type: object\n    default: {}", why="why: after a two-level dedent")
    assert p(text, backend).why == "after a two-level dedent"


def test_nested_block_at_end_of_file_without_newline(backend: Backend) -> None:
    text = make(drop=("constraints",)) + "constraints:\n  timeout_ms: 9"
    assert p(text, backend).constraints.timeout_ms == 9


def test_space_before_colon(backend: Backend) -> None:
    assert p(make(display="display : 演示"), backend).display == "演示"


def test_key_characters(backend: Backend) -> None:
    tool = p(make("x-note_2: kept out", params_schema="params_schema:\n  dry-run_2: { type: boolean }"), backend)
    assert list(tool.param_order) == ["dry-run_2"]


def test_param_named_like_a_field(backend: Backend) -> None:
    """A parameter named ``method`` or ``type`` is just a name (eval: http-request, dns-lookup)."""
    tool = p(make(params_schema="params_schema:\n  method: { type: string }\n  type:\n    type: string\n    default: A"), backend)
    assert list(tool.param_order) == ["method", "type"]
    assert tool.method == "run"


# ---------------------------------------------------------------- block text

def test_block_text(backend: Backend) -> None:
    text = make(why="why: |\n  first line\n\n    deeper line\n  # not a comment: block text is verbatim\n  last  ")
    assert p(text, backend).why == "first line\n\n  deeper line\n# not a comment: block text is verbatim\nlast  "


def test_block_text_drops_trailing_blank_lines(backend: Backend) -> None:
    text = make(why="why: |\n  only line\n\n   \n", display="display: d")
    assert p(text, backend).why == "only line"


def test_block_text_in_a_four_space_file(backend: Backend) -> None:
    text = make(
        why="why: |\n    four\n      six",
        constraints="constraints:\n    timeout_ms: 5",
    )
    tool = p(text, backend)
    assert (tool.why, tool.constraints.timeout_ms) == ("four\n  six", 5)


def test_block_text_indented_any_depth(backend: Backend) -> None:
    """Block text lines need only be deeper than their key; their own indentation is not a level."""
    assert p(make(why="why: |\n     five spaces"), backend).why == "five spaces"


def test_block_text_inside_a_nested_block(backend: Backend) -> None:
    text = make(params_schema="params_schema:\n  a:\n    type: string\n    description: |\n      line one\n      line two\n  b: { type: string }")
    tool = p(text, backend)
    assert tool.params_schema["a"].description == "line one\nline two"
    assert list(tool.param_order) == ["a", "b"]


def test_block_text_at_end_of_file(backend: Backend) -> None:
    assert p(make(drop=("why",)) + "why: |\n  last\n  lines", backend).why == "last\nlines"


def test_block_text_chomping_indicators(backend: Backend) -> None:
    assert p(make(why="why: |-\n  text"), backend).why == "text"
    assert p(make(why="why: |+\n  text"), backend).why == "text"


def test_non_goals_forms(backend: Backend) -> None:
    as_block = p(make("non_goals: |\n  不做 A\n\n    不做 B  \n"), backend)
    as_list = p(make('non_goals: [不做 A, "不做 B"]'), backend)
    as_text = p(make("non_goals: 不做 A, 也不做 B"), backend)
    assert list(as_block.non_goals) == ["不做 A", "不做 B"]
    assert list(as_list.non_goals) == ["不做 A", "不做 B"]
    assert list(as_text.non_goals) == ["不做 A, 也不做 B"]


# ---------------------------------------------------------------- the bytes of the file

def test_crlf_line_endings(backend: Backend) -> None:
    text = make("non_goals: |\n  a\n  b", why="why: |\n  x\n\n  y").replace("\n", "\r\n")
    tool = p(text, backend)
    assert (tool.why, list(tool.non_goals), tool.author) == ("x\n\ny", ["a", "b"], "ICE-GL-ZY001")


def test_utf8_bom(backend: Backend) -> None:
    data = b"\xef\xbb\xbf" + make(header="HLDP://zhuyuan/tool/demo").encode()
    tool = parse_bytes(data, "demo.hdlp", backend=backend)
    assert (tool.address, tool.name) == ("HLDP://zhuyuan/tool/demo", "demo")


def test_bom_before_first_key(backend: Backend) -> None:
    assert p("\ufeff" + make(), backend).name == "demo"


def test_trailing_whitespace(backend: Backend) -> None:
    text = "\n".join(line + " \t " for line in make(why='why: "x"', params_schema="params_schema:\n  a: { type: string }").split("\n"))
    tool = p(text, backend)
    assert (tool.name, tool.why, list(tool.param_order)) == ("demo", "x", ["a"])


def test_no_final_newline(backend: Backend) -> None:
    assert p(make().rstrip("\n"), backend).why == MINIMAL["why"].split(": ", 1)[1]
    assert p(make(why='why: "x"').rstrip("\n"), backend).why == "x"
    assert p(make(why="why: |\n  block").rstrip("\n"), backend).why == "block"


def test_blank_lines_and_whitespace_lines_between_entries(backend: Backend) -> None:
    text = "\n\n" + make().replace("\n", "\n   \n\t\n") + "\n\n"
    assert p(text, backend).name == "demo"


def test_any_field_order(backend: Backend) -> None:
    lines = make().splitlines()
    assert p("\n".join(reversed(lines)), backend).name == "demo"


def test_full_example_with_every_field(backend: Backend) -> None:
    tool = p(variant(), backend)
    assert tool.command == "ls -l {path} -n {count}"


def test_tab_indentation_is_an_error(backend: Backend) -> None:
    """The one syntax rule stated as a refusal in the spec's Syntax section."""
    with pytest.raises(ParseError):
        p(make(constraints="constraints:\n\ttimeout_ms: 5"), backend)
