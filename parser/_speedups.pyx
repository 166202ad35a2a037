# cython: language_level=3, boundscheck=False
"""Compiled twin of parser/lexer.py plus an LALR driver over hdlp.lark's table.

Same algorithm, same tokens and the same error texts as the pure twin
(tests/parser/test_parity.py); the LALR table and the rule callbacks are the
ones lark builds from hdlp.lark (parser/grammar.py), so the grammar stays the
one definition of the syntax.
"""

from parser.errors import ParseError
from parser.lexer import ESCAPE_HELP, FOLDED_ERROR, MULTILINE_HINT


cdef class Tok:
    cdef public str type
    cdef public str value
    cdef public int line
    cdef public int column

    def __init__(self, str type, str value, int line, int column):
        self.type = type
        self.value = value
        self.line = line
        self.column = column

    def __repr__(self):
        return f"Tok({self.type!r}, {self.value!r}, {self.line}, {self.column})"


cdef inline bint is_key_char(Py_UCS4 c):
    return (c >= u'a' and c <= u'z') or (c >= u'A' and c <= u'Z') or (c >= u'0' and c <= u'9') \
        or c == u'_' or c == u'-'


cdef inline bint is_digit(Py_UCS4 c):
    return c >= u'0' and c <= u'9'


cdef inline bint is_hex(Py_UCS4 c):
    return is_digit(c) or (c >= u'a' and c <= u'f') or (c >= u'A' and c <= u'F')


cpdef str classify(str text):
    """The terminal of an unquoted scalar: TRUE, FALSE, INT, FLOAT or TEXT."""
    cdef Py_ssize_t n = len(text), i = 0, start, frac, exp
    if text == "true":
        return "TRUE"
    if text == "false":
        return "FALSE"
    if n and (text[0] == u'+' or text[0] == u'-'):
        i = 1
    start = i
    while i < n and is_digit(text[i]):
        i += 1
    if i == start:
        return "TEXT"
    if i == n:
        return "INT"
    if text[i] == u'.':
        i += 1
        frac = i
        while i < n and is_digit(text[i]):
            i += 1
        if i == frac:
            return "TEXT"
    elif text[i] != u'e' and text[i] != u'E':
        return "TEXT"
    if i < n and (text[i] == u'e' or text[i] == u'E'):
        i += 1
        if i < n and (text[i] == u'+' or text[i] == u'-'):
            i += 1
        exp = i
        while i < n and is_digit(text[i]):
            i += 1
        if i == exp:
            return "TEXT"
    return "FLOAT" if i == n else "TEXT"


cdef dict ESCAPES = {u'"': u'"', u'\\': u'\\', u'/': u'/', u'n': u'\n', u't': u'\t',
                     u'r': u'\r', u'b': u'\b', u'f': u'\f', u'0': u'\0'}


cdef long hex_at(str line, Py_ssize_t pos, Py_ssize_t width):
    """The value of ``width`` hex digits at ``pos``, or -1 when they are not there."""
    cdef Py_ssize_t k
    cdef long v = 0
    cdef Py_UCS4 c
    if pos + width > len(line):
        return -1
    for k in range(pos, pos + width):
        c = line[k]
        if is_digit(c):
            v = v * 16 + (<long>c - 48)
        elif c >= u'a' and c <= u'f':
            v = v * 16 + (<long>c - 87)
        elif c >= u'A' and c <= u'F':
            v = v * 16 + (<long>c - 55)
        else:
            return -1
    return v


cdef tuple code_point(str path, str line, Py_ssize_t i, int lineno, int base):
    cdef long cp, low
    if line[i + 1] == u'U':
        cp = hex_at(line, i + 2, 8)
        if cp < 0 or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF):
            raise ParseError(path, lineno, base + i + 1, "bad \\U escape: expected eight hex digits of a Unicode code point")
        return chr(cp), i + 10
    cp = hex_at(line, i + 2, 4)
    if cp < 0:
        raise ParseError(path, lineno, base + i + 1, "bad \\u escape: expected four hex digits")
    if cp >= 0xDC00 and cp <= 0xDFFF:
        raise ParseError(path, lineno, base + i + 1, "lone low surrogate in \\u escape: expected a high surrogate before it")
    if cp >= 0xD800 and cp <= 0xDBFF:
        low = hex_at(line, i + 8, 4) if line[i + 6:i + 8] == u"\\u" else -1
        if low < 0xDC00 or low > 0xDFFF:
            raise ParseError(path, lineno, base + i + 1, "lone high surrogate in \\u escape: expected a \\uDC00-\\uDFFF escape after it")
        return chr(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)), i + 12
    return chr(cp), i + 6


cdef tuple quoted(str path, str line, Py_ssize_t pos, int lineno, int base):
    cdef Py_UCS4 quote = line[pos], c, e
    cdef list out = []
    cdef Py_ssize_t i = pos + 1, n = len(line), run
    cdef str ch
    if quote == u"'":
        while i < n:
            c = line[i]
            if c == u"'":
                if i + 1 < n and line[i + 1] == u"'":
                    out.append(u"'")
                    i += 2
                    continue
                return u"".join(out), i + 1
            run = i
            while i < n and line[i] != u"'":
                i += 1
            out.append(line[run:i])
    else:
        while i < n:
            c = line[i]
            if c == u'"':
                return u"".join(out), i + 1
            if c == u'\\':
                if i + 1 >= n:
                    break
                e = line[i + 1]
                if e == u'u' or e == u'U':
                    ch, i = code_point(path, line, i, lineno, base)
                    out.append(ch)
                    continue
                if e not in ESCAPES:
                    raise ParseError(path, lineno, base + i + 1, f"unknown escape '\\{e}': {ESCAPE_HELP}")
                out.append(ESCAPES[e])
                i += 2
                continue
            run = i
            while i < n and line[i] != u'"' and line[i] != u'\\':
                i += 1
            out.append(line[run:i])
    raise ParseError(path, lineno, base + pos + 1, f"unterminated string: expected a closing {quote}")


cdef after_value(str path, str line, Py_ssize_t pos, int lineno, int base, str what):
    cdef Py_ssize_t n = len(line), i = pos
    while i < n and (line[i] == u' ' or line[i] == u'\t'):
        i += 1
    if i < n and not (line[i] == u'#' and i > pos):
        raise ParseError(path, lineno, base + i + 1, f"unexpected text after {what}: expected the end of the line")


cdef Py_ssize_t plain_end(str line, Py_ssize_t pos, int mode):
    """mode 0: to EOL; 1: flow value (stop at , ] }); 2: flow key position (also :)."""
    cdef Py_ssize_t n = len(line), i = pos
    cdef Py_UCS4 c
    while i < n:
        c = line[i]
        if mode and (c == u',' or c == u']' or c == u'}' or (mode == 2 and c == u':')):
            return i
        if c == u'#' and i > pos and (line[i - 1] == u' ' or line[i - 1] == u'\t'):
            return i
        i += 1
    return n


cdef Py_ssize_t flow(str path, str line, Py_ssize_t pos, int lineno, int base, list toks) except -1:
    cdef Py_ssize_t n = len(line), i = pos, j, k, end
    cdef list stack = []
    cdef bint expect_key = False
    cdef Py_UCS4 c
    cdef int col
    cdef str text, opener, kind
    while True:
        while i < n and (line[i] == u' ' or line[i] == u'\t'):
            i += 1
        if i >= n or (line[i] == u'#' and i > 0 and (line[i - 1] == u' ' or line[i - 1] == u'\t')):
            opener, at = stack[-1]
            kind = "map" if opener == "{" else "list"
            raise ParseError(path, lineno, base + at + 1,
                             f"unclosed '{opener}': a flow {kind} must close on the same line")
        c = line[i]
        col = base + i + 1
        if c == u'{':
            toks.append(Tok("LBRACE", u"{", lineno, col))
            stack.append((u"{", i))
            expect_key = True
            i += 1
            continue
        if c == u'[':
            toks.append(Tok("LBRACK", u"[", lineno, col))
            stack.append((u"[", i))
            expect_key = False
            i += 1
            continue
        if c == u'}' or c == u']':
            toks.append(Tok("_RBRACE" if c == u'}' else "_RBRACK", line[i], lineno, col))
            if stack and stack[-1][0] == (u"{" if c == u'}' else u"["):
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
        if c == u',':
            toks.append(Tok("_COMMA", u",", lineno, col))
            expect_key = stack[-1][0] == u"{"
            i += 1
            continue
        if expect_key:
            j = i
            while j < n and is_key_char(line[j]):
                j += 1
            k = j
            while k < n and (line[k] == u' ' or line[k] == u'\t'):
                k += 1
            if j > i and k < n and line[k] == u':':
                toks.append(Tok("KEY", line[i:j], lineno, col))
                toks.append(Tok("_COLON", u":", lineno, base + k + 1))
                i = k + 1
                expect_key = False
                continue
            if j > i and k < n and (line[k] == u',' or line[k] == u'}'):
                raise ParseError(path, lineno, base + k + 1,
                                 f"expected ':' after the key {line[i:j]!r} in a flow map")
        if c == u':':
            toks.append(Tok("_COLON", u":", lineno, col))
            i += 1
            continue
        if c == u'"' or c == u"'":
            text, i = quoted(path, line, i, lineno, base)
            toks.append(Tok("STRING", text, lineno, col))
        else:
            end = plain_end(line, i, 2 if expect_key else 1)
            text = line[i:end].rstrip()
            toks.append(Tok(classify(text), text, lineno, col))
            i = end
        expect_key = False


cdef tuple block(list lines, Py_ssize_t start, Py_ssize_t parent):
    cdef list body = []
    cdef Py_ssize_t indent = -1, i = start, n = len(lines), lead, cut
    cdef str raw, stripped
    while i < n:
        raw = lines[i]
        if raw.endswith(u"\r"):
            raw = raw[:-1]
        stripped = raw.lstrip(u" ")
        if not stripped.strip():
            body.append(u"")
            i += 1
            continue
        lead = len(raw) - len(stripped)
        if lead <= parent:
            break
        if indent < 0:
            indent = lead
        cut = indent if indent < lead else lead
        body.append(raw[cut:])
        i += 1
    while body and not body[-1]:
        body.pop()
    return u"\n".join(body), i


def tokenize(str text, str path="<string>"):
    """Turn a whole file into tokens; raise ParseError on a lexical error."""
    cdef list lines, toks = [], stack = [0]
    cdef Py_ssize_t unit = 0, i = 0, n, j, width, k, c, p, q, end, step, top
    cdef bint first = True
    cdef int lineno
    cdef str line, rest, value, body, found
    cdef Py_UCS4 ch
    if text.startswith(u"\ufeff"):
        text = text[1:]
    lines = text.split(u"\n")
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.endswith(u"\r"):
            line = line[:-1]
        lineno = i + 1
        j = 0
        width = len(line)
        while j < width and line[j] == u' ':
            j += 1
        rest = line[j:]
        if not rest.strip(u" \t"):
            i += 1
            continue
        if rest.lstrip(u" \t")[0] == u'#':
            i += 1
            continue
        if rest[0] == u'\t':
            raise ParseError(path, lineno, j + 1, "tab in indentation: expected spaces (2 or 4 per level)")
        if first and j == 0 and rest.startswith(u"HLDP://"):
            first = False
            value = rest[:plain_end(rest, 0, 0)].rstrip()
            toks.append(Tok("HEADER", value, lineno, 1))
            toks.append(Tok("_NL", u"", lineno, width + 1))
            i += 1
            continue
        if j == 0 and rest.startswith(u"HLDP://"):
            raise ParseError(path, lineno, 1, "an HLDP:// address may only be the first line: expected key: value")
        first = False
        top = stack[-1]
        if j > top:
            step = j - top
            if unit == 0:
                if step != 2 and step != 4:
                    raise ParseError(path, lineno, j + 1, f"indented {step} spaces: expected 2 or 4 spaces")
                unit = step
            elif step != unit:
                raise ParseError(
                    path, lineno, j + 1,
                    f"inconsistent indentation: {j} spaces, expected {top + unit} ({unit} per level)",
                )
            stack.append(j)
            toks.append(Tok("_INDENT", u"", lineno, j + 1))
        elif j < top:
            while j < stack[-1]:
                stack.pop()
                toks.append(Tok("_DEDENT", u"", lineno, j + 1))
            if j != stack[-1]:
                raise ParseError(
                    path, lineno, j + 1,
                    f"indentation of {j} spaces matches no outer level (expected {stack[-1]})",
                )
        if line[j] == u'-' and (j + 1 == width or line[j + 1] == u' ' or line[j + 1] == u'\t'):
            raise ParseError(path, lineno, j + 1, "'- item' lists are not part of TOOL.hdlp: expected key: value (write a list as [a, b])")
        k = j
        while k < width and is_key_char(line[k]):
            k += 1
        if k == j:
            raise ParseError(path, lineno, j + 1, f"expected a key (letters, digits, '_' or '-'), found {line[j]!r}")
        toks.append(Tok("KEY", line[j:k], lineno, j + 1))
        c = k
        while c < width and line[c] == u' ':
            c += 1
        if c >= width or line[c] != u':':
            found = repr(line[c]) if c < width else "the end of the line"
            raise ParseError(path, lineno, c + 1, f"expected ':' after the key {line[j:k]!r}, found {found}"
                             + (MULTILINE_HINT if len(toks) > 1 and toks[-2].type == "_INDENT" else ""))
        toks.append(Tok("_COLON", u":", lineno, c + 1))
        p = c + 1
        if p < width and line[p] != u' ' and line[p] != u'\t':
            raise ParseError(path, lineno, p + 1, "expected a space after ':'")
        while p < width and (line[p] == u' ' or line[p] == u'\t'):
            p += 1
        if p >= width or line[p] == u'#':
            toks.append(Tok("_NL", u"", lineno, width + 1))
            i += 1
            continue
        ch = line[p]
        if ch == u'>' and line[p + 1:].lstrip(u"-+").split(u"#", 1)[0].strip() == u"":
            raise ParseError(path, lineno, p + 1, FOLDED_ERROR)
        if ch == u'|':
            q = p + 1
            if q < width and (line[q] == u'-' or line[q] == u'+'):
                q += 1
            after_value(path, line, q, lineno, 0, "'|'")
            body, i = block(lines, i + 1, stack[-1])
            toks.append(Tok("BLOCK", body, lineno, p + 1))
            toks.append(Tok("_NL", u"", lineno, width + 1))
            continue
        if ch == u'{' or ch == u'[':
            end = flow(path, line, p, lineno, 0, toks)
            after_value(path, line, end, lineno, 0, "the closing bracket")
        elif ch == u'"' or ch == u"'":
            value, end = quoted(path, line, p, lineno, 0)
            toks.append(Tok("STRING", value, lineno, p + 1))
            after_value(path, line, end, lineno, 0, "the closing quote")
        else:
            value = line[p:plain_end(line, p, 0)].rstrip()
            toks.append(Tok(classify(value), value, lineno, p + 1))
        toks.append(Tok("_NL", u"", lineno, width + 1))
        i += 1
    while len(stack) > 1:
        stack.pop()
        toks.append(Tok("_DEDENT", u"", n, 1))
    return toks


def run_lalr(list toks, str path, tuple table, syntax_error):
    """The LALR loop over lark's table for hdlp.lark, calling its rule callbacks."""
    cdef list actions = table[0]
    cdef int state = table[1], end_state = table[2]
    cdef list reductions = table[3]
    cdef list states = [state]
    cdef list values = []
    cdef dict row
    cdef tuple act, red
    cdef Py_ssize_t ti = 0, nt = len(toks), size
    cdef Tok tok, last
    cdef list children
    cdef str kind
    while True:
        if ti < nt:
            tok = toks[ti]
            kind = tok.type
        else:
            last = toks[nt - 1]
            tok = Tok("$END", u"", last.line, last.column)
            kind = "$END"
        row = actions[states[-1]]
        act = row.get(kind)
        if act is None:
            raise syntax_error(path, tok, list(row))
        if act[0]:
            states.append(act[1])
            values.append(tok)
            ti += 1
            continue
        while True:
            red = reductions[act[1]]
            size = red[1]
            if size:
                children = values[len(values) - size:]
                del values[len(values) - size:]
                del states[len(states) - size:]
            else:
                children = []
            value = red[2](children)
            goto = actions[states[-1]][red[0]]
            states.append(goto[1])
            values.append(value)
            if kind == "$END" and states[-1] == end_state:
                return values[-1]
            act = actions[states[-1]].get(kind)
            if act is None:
                raise syntax_error(path, tok, list(actions[states[-1]]))
            if act[0]:
                states.append(act[1])
                values.append(tok)
                ti += 1
                break
