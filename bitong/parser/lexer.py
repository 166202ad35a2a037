"""The line-based, contextual lexer of TOOL.hdlp (pure-Python twin).

``parser/_speedups.pyx`` is the compiled twin: same algorithm, same tokens,
same error texts; ``tests/parser/test_parity.py`` holds them to that.

Tokens are :class:`Tok` objects carrying the terminal names that
``hdlp.lark`` declares. Indentation, ``|`` block text and one-line flow
collections need to know where on the line they are, which is why this is a
hand-written lexer and not a regex table.
"""

from __future__ import annotations

from .errors import ParseError

__all__ = ["Tok", "tokenize"]

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_DIGITS = frozenset("0123456789")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}
_HEX = frozenset("0123456789abcdefABCDEF")
MULTILINE_HINT = " (text over several lines is written as  key: |  with the lines indented below it)"
EMPTY_ERROR = "empty file: expected the tool definition (name: ..., display: ..., ...)"
FOLDED_ERROR = "folded block text '>' is not part of TOOL.hdlp: expected '|' (the lines are kept as written)"
ESCAPE_HELP = "expected one of \\\" \\\\ \\/ \\n \\t \\r \\b \\f \\0 \\uXXXX \\UXXXXXXXX; for a regex use single quotes or unquoted text"


class Tok:
    """A token: the shape lark's LALR parser and transformers expect."""

    __slots__ = ("type", "value", "line", "column")
    # lark borrows these when it makes the $END token
    start_pos = end_line = end_column = end_pos = None

    def __init__(self, type: str, value: str, line: int, column: int) -> None:
        self.type = type
        self.value = value
        self.line = line
        self.column = column

    def __repr__(self) -> str:
        return f"Tok({self.type!r}, {self.value!r}, {self.line}, {self.column})"


def classify(text: str) -> str:
    """The terminal of an unquoted scalar: TRUE, FALSE, INT, FLOAT or TEXT.

    INT is ``[-+]?[0-9]+``; FLOAT is ``[-+]?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?``
    with a fraction or an exponent (JSON's numbers, plus a sign). Everything
    else, ``1.2.3``, ``2026-05-31``, ``.5``, ``yes`` and ``null`` included, is text.
    """
    if text == "true":
        return "TRUE"
    if text == "false":
        return "FALSE"
    n = len(text)
    i = 1 if n and text[0] in "+-" else 0
    start = i
    while i < n and text[i] in _DIGITS:
        i += 1
    if i == start:
        return "TEXT"
    if i == n:
        return "INT"
    if text[i] == ".":
        i += 1
        frac = i
        while i < n and text[i] in _DIGITS:
            i += 1
        if i == frac:
            return "TEXT"
    elif text[i] not in "eE":
        return "TEXT"
    if i < n and text[i] in "eE":
        i += 1
        if i < n and text[i] in "+-":
            i += 1
        exp = i
        while i < n and text[i] in _DIGITS:
            i += 1
        if i == exp:
            return "TEXT"
    return "FLOAT" if i == n else "TEXT"


def _hex_at(line: str, pos: int, width: int) -> int:
    """The value of ``width`` hex digits at ``pos``, or -1 when they are not there."""
    digits = line[pos : pos + width]
    if len(digits) != width or any(d not in _HEX for d in digits):
        return -1
    return int(digits, 16)


def _code_point(path: str, line: str, i: int, lineno: int, base: int) -> tuple[str, int]:
    """Decode ``\\uXXXX`` (a UTF-16 surrogate pair joins into one character)
    or ``\\UXXXXXXXX`` at ``line[i]``; a lone surrogate cannot become UTF-8."""
    if line[i + 1] == "U":
        cp = _hex_at(line, i + 2, 8)
        if cp < 0 or cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            raise ParseError(path, lineno, base + i + 1, "bad \\U escape: expected eight hex digits of a Unicode code point")
        return chr(cp), i + 10
    cp = _hex_at(line, i + 2, 4)
    if cp < 0:
        raise ParseError(path, lineno, base + i + 1, "bad \\u escape: expected four hex digits")
    if 0xDC00 <= cp <= 0xDFFF:
        raise ParseError(path, lineno, base + i + 1, "lone low surrogate in \\u escape: expected a high surrogate before it")
    if 0xD800 <= cp <= 0xDBFF:
        low = _hex_at(line, i + 8, 4) if line[i + 6 : i + 8] == "\\u" else -1
        if not 0xDC00 <= low <= 0xDFFF:
            raise ParseError(path, lineno, base + i + 1, "lone high surrogate in \\u escape: expected a \\uDC00-\\uDFFF escape after it")
        return chr(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)), i + 12
    return chr(cp), i + 6


def _quoted(path: str, line: str, pos: int, lineno: int, base: int) -> tuple[str, int]:
    """Read a quoted string starting at ``line[pos]``; return (value, end)."""
    quote = line[pos]
    out: list[str] = []
    i = pos + 1
    n = len(line)
    if quote == "'":
        while i < n:
            c = line[i]
            if c == "'":
                if i + 1 < n and line[i + 1] == "'":
                    out.append("'")
                    i += 2
                    continue
                return "".join(out), i + 1
            out.append(c)
            i += 1
    else:
        while i < n:
            c = line[i]
            if c == '"':
                return "".join(out), i + 1
            if c == "\\":
                if i + 1 >= n:
                    break
                e = line[i + 1]
                if e == "u" or e == "U":
                    ch, i = _code_point(path, line, i, lineno, base)
                    out.append(ch)
                    continue
                if e not in _ESCAPES:
                    raise ParseError(path, lineno, base + i + 1, f"unknown escape '\\{e}': {ESCAPE_HELP}")
                out.append(_ESCAPES[e])
                i += 2
                continue
            out.append(c)
            i += 1
    raise ParseError(path, lineno, base + pos + 1, f"unterminated string: expected a closing {quote}")


def _after_value(path: str, line: str, pos: int, lineno: int, base: int, what: str) -> None:
    """Only spaces and a ` #` comment may follow a complete value."""
    n = len(line)
    i = pos
    while i < n and line[i] in " \t":
        i += 1
    if i < n and not (line[i] == "#" and i > pos):
        raise ParseError(path, lineno, base + i + 1, f"unexpected text after {what}: expected the end of the line")


def _plain_end(line: str, pos: int, stops: str) -> int:
    """Where unquoted text starting at ``pos`` ends: a stop char, ` #`, or EOL."""
    n = len(line)
    i = pos
    while i < n:
        c = line[i]
        if c in stops:
            return i
        if c == "#" and i > pos and line[i - 1] in " \t":
            return i
        i += 1
    return n


def _flow(path: str, line: str, pos: int, lineno: int, base: int, toks: list[Tok]) -> int:
    """Lex one flow collection (``{...}`` or ``[...]``, nesting allowed) on one line."""
    n = len(line)
    stack: list[tuple[str, int]] = []
    expect_key = False
    i = pos
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or (line[i] == "#" and i > 0 and line[i - 1] in " \t"):
            opener, at = stack[-1]
            kind = "map" if opener == "{" else "list"
            raise ParseError(
                path, lineno, base + at + 1,
                f"unclosed '{opener}': a flow {kind} must close on the same line",
            )
        c = line[i]
        col = base + i + 1
        if c == "{":
            toks.append(Tok("LBRACE", c, lineno, col))
            stack.append((c, i))
            expect_key = True
            i += 1
            continue
        if c == "[":
            toks.append(Tok("LBRACK", c, lineno, col))
            stack.append((c, i))
            expect_key = False
            i += 1
            continue
        if c in "}]":
            toks.append(Tok("_RBRACE" if c == "}" else "_RBRACK", c, lineno, col))
            if stack and stack[-1][0] == ("{" if c == "}" else "["):
                stack.pop()
            elif not stack:
                raise ParseError(path, lineno, col, f"unexpected '{c}'")
            else:
                raise ParseError(
                    path, lineno, col,
                    f"unexpected '{c}': expected '{'}' if stack[-1][0] == '{' else ']'}' to close col {base + stack[-1][1] + 1}",
                )
            i += 1
            if not stack:
                return i
            expect_key = False
            continue
        if c == ",":
            toks.append(Tok("_COMMA", c, lineno, col))
            expect_key = stack[-1][0] == "{"
            i += 1
            continue
        if expect_key:
            j = i
            while j < n and line[j] in _KEY_CHARS:
                j += 1
            k = j
            while k < n and line[k] in " \t":
                k += 1
            if j > i and k < n and line[k] == ":":
                toks.append(Tok("KEY", line[i:j], lineno, col))
                toks.append(Tok("_COLON", ":", lineno, base + k + 1))
                i = k + 1
                expect_key = False
                continue
            if j > i and k < n and line[k] in ",}":
                raise ParseError(path, lineno, base + k + 1,
                                 f"expected ':' after the key {line[i:j]!r} in a flow map")
        if c == ":":
            toks.append(Tok("_COLON", c, lineno, col))
            i += 1
            continue
        if c == '"' or c == "'":
            value, i = _quoted(path, line, i, lineno, base)
            toks.append(Tok("STRING", value, lineno, col))
        else:
            end = _plain_end(line, i, ",]}:" if expect_key else ",]}")
            text = line[i:end].rstrip()
            toks.append(Tok(classify(text), text, lineno, col))
            i = end
        expect_key = False


def _block(lines: list[str], start: int, parent: int) -> tuple[str, int]:
    """Collect ``|`` block text: the lines below ``start`` indented deeper than ``parent``.

    The first non-blank line sets the block's indentation, which is removed;
    trailing blank lines are dropped and there is no final newline.
    Returns the text and the index of the first line after the block.
    """
    body: list[str] = []
    indent = -1
    i = start
    n = len(lines)
    while i < n:
        raw = lines[i]
        if raw.endswith("\r"):
            raw = raw[:-1]
        stripped = raw.lstrip(" ")
        if not stripped.strip():
            body.append("")
            i += 1
            continue
        lead = len(raw) - len(stripped)
        if lead <= parent:
            break
        if indent < 0:
            indent = lead
        body.append(raw[min(indent, lead):])
        i += 1
    while body and not body[-1]:
        body.pop()
    return "\n".join(body), i


def tokenize(text: str, path: str = "<string>") -> list[Tok]:
    """Turn a whole file into tokens; raise :class:`ParseError` on a lexical error."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    toks: list[Tok] = []
    stack = [0]
    unit = 0
    first = True
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.endswith("\r"):
            line = line[:-1]
        lineno = i + 1
        j = 0
        width = len(line)
        while j < width and line[j] == " ":
            j += 1
        rest = line[j:]
        if not rest.strip(" \t"):
            i += 1
            continue
        if rest.lstrip(" \t")[0] == "#":
            i += 1
            continue
        if rest[0] == "\t":
            raise ParseError(path, lineno, j + 1, "tab in indentation: expected spaces (2 or 4 per level)")
        if first and j == 0 and rest.startswith("HLDP://"):
            first = False
            value = rest[: _plain_end(rest, 0, "")].rstrip()
            toks.append(Tok("HEADER", value, lineno, 1))
            toks.append(Tok("_NL", "", lineno, len(line) + 1))
            i += 1
            continue
        if j == 0 and rest.startswith("HLDP://"):
            raise ParseError(path, lineno, 1, "an HLDP:// address may only be the first line: expected key: value")
        first = False
        if j > stack[-1]:
            step = j - stack[-1]
            if unit == 0:
                if step != 2 and step != 4:
                    raise ParseError(path, lineno, j + 1, f"indented {step} spaces: expected 2 or 4 spaces")
                unit = step
            elif step != unit:
                raise ParseError(
                    path, lineno, j + 1,
                    f"inconsistent indentation: {j} spaces, expected {stack[-1] + unit} ({unit} per level)",
                )
            stack.append(j)
            toks.append(Tok("_INDENT", "", lineno, j + 1))
        elif j < stack[-1]:
            while j < stack[-1]:
                stack.pop()
                toks.append(Tok("_DEDENT", "", lineno, j + 1))
            if j != stack[-1]:
                raise ParseError(
                    path, lineno, j + 1,
                    f"indentation of {j} spaces matches no outer level (expected {stack[-1]})",
                )
        # the key
        if line[j] == "-" and (j + 1 == width or line[j + 1] in " \t"):
            raise ParseError(path, lineno, j + 1, "'- item' lists are not part of TOOL.hdlp: expected key: value (write a list as [a, b])")
        k = j
        while k < width and line[k] in _KEY_CHARS:
            k += 1
        if k == j:
            raise ParseError(path, lineno, j + 1, f"expected a key (letters, digits, '_' or '-'), found {line[j]!r}")
        toks.append(Tok("KEY", line[j:k], lineno, j + 1))
        c = k
        while c < width and line[c] == " ":
            c += 1
        if c >= width or line[c] != ":":
            found = repr(line[c]) if c < width else "the end of the line"
            raise ParseError(path, lineno, c + 1, f"expected ':' after the key {line[j:k]!r}, found {found}"
                             + (MULTILINE_HINT if len(toks) > 1 and toks[-2].type == "_INDENT" else ""))
        toks.append(Tok("_COLON", ":", lineno, c + 1))
        p = c + 1
        if p < width and line[p] not in " \t":
            raise ParseError(path, lineno, p + 1, "expected a space after ':'")
        while p < width and line[p] in " \t":
            p += 1
        if p >= width or line[p] == "#":
            toks.append(Tok("_NL", "", lineno, width + 1))
            i += 1
            continue
        ch = line[p]
        if ch == ">" and line[p + 1:].lstrip("-+").split("#", 1)[0].strip() == "":
            raise ParseError(path, lineno, p + 1, FOLDED_ERROR)
        if ch == "|":
            q = p + 1
            if q < width and line[q] in "-+":
                q += 1
            _after_value(path, line, q, lineno, 0, "'|'")
            body, i = _block(lines, i + 1, stack[-1])
            toks.append(Tok("BLOCK", body, lineno, p + 1))
            toks.append(Tok("_NL", "", lineno, width + 1))
            continue
        if ch == "{" or ch == "[":
            end = _flow(path, line, p, lineno, 0, toks)
            _after_value(path, line, end, lineno, 0, "the closing bracket")
        elif ch == '"' or ch == "'":
            value, end = _quoted(path, line, p, lineno, 0)
            toks.append(Tok("STRING", value, lineno, p + 1))
            _after_value(path, line, end, lineno, 0, "the closing quote")
        else:
            text_ = line[p : _plain_end(line, p, "")].rstrip()
            toks.append(Tok(classify(text_), text_, lineno, p + 1))
        toks.append(Tok("_NL", "", lineno, width + 1))
        i += 1
    last = n
    while len(stack) > 1:
        stack.pop()
        toks.append(Tok("_DEDENT", "", last, 1))
    return toks
