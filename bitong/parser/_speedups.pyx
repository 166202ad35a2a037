# cython: language_level=3, boundscheck=False
"""Compiled twin of parser/lexer.py plus an LALR driver over hdlp.lark's table.

The lexer is the same algorithm as the pure twin, with the same tokens and
error texts (tests/parser/test_parity.py), but it writes tokens into a C
array (kind, line, column) instead of making an object per token. The driver
walks the LALR table that lark builds from hdlp.lark, converted to a flat int
array by ``grammar.lalr_program`` together with each rule's child filter as
lark would apply it; a reduction is dispatched by rule number to the value
constructors of nodes.py compiled as ``bitong.parser._nodes``, instead of
lark's filter-wrapped Python callbacks. The grammar stays the one definition
of the syntax: change hdlp.lark and this driver runs the new table.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from cpython.unicode cimport Py_UNICODE_ISSPACE

cimport cython

from bitong.parser._nodes cimport block_node, flow_node, map_node, null_node, scalar_node

from bitong.parser.errors import ParseError
from bitong.parser.lexer import EMPTY_ERROR, ESCAPE_HELP, FOLDED_ERROR, MULTILINE_HINT

# Token kinds: their numbers are the first symbol numbers of the driver's table.
cdef enum:
    T_HEADER, T_KEY, T_STRING, T_INT, T_FLOAT, T_TRUE, T_FALSE, T_TEXT, T_BLOCK
    T_LBRACE, T_LBRACK, T_COLON, T_COMMA, T_RBRACE, T_RBRACK, T_NL, T_INDENT, T_DEDENT
    T_END, T_COUNT

TERMINALS = ("HEADER", "KEY", "STRING", "INT", "FLOAT", "TRUE", "FALSE", "TEXT", "BLOCK",
             "LBRACE", "LBRACK", "_COLON", "_COMMA", "_RBRACE", "_RBRACK", "_NL", "_INDENT", "_DEDENT",
             "$END")
# The value a token without text of its own carries (the pure twin's Tok.value).
cdef tuple FIXED_VALUE = (u"", u"", u"", u"", u"", u"", u"", u"", u"",
                          u"{", u"[", u":", u",", u"}", u"]", u"", u"", u"", u"")

# The rule callbacks of nodes.Rules, by the number the driver dispatches on.
# "" is lark's helper tree (its children are spliced into the parent's) and
# "?" a ``?rule`` with one child (the child itself).
cdef enum:
    R_LIST, R_SINGLE, R_START, R_HEADER, R_MAPPING, R_SCALAR_ENTRY, R_BLOCK_TEXT_ENTRY
    R_NESTED_ENTRY, R_EMPTY_ENTRY, R_FLOW_MAP, R_FLOW_LIST, R_PAIR, R_SCALAR

cdef dict RULE_CODES = {
    "": R_LIST, "?": R_SINGLE, "start": R_START, "header": R_HEADER, "mapping": R_MAPPING,
    "scalar_entry": R_SCALAR_ENTRY, "block_text_entry": R_BLOCK_TEXT_ENTRY,
    "nested_entry": R_NESTED_ENTRY, "empty_entry": R_EMPTY_ENTRY, "flow_map": R_FLOW_MAP,
    "flow_list": R_FLOW_LIST, "pair": R_PAIR, "scalar": R_SCALAR,
}
KNOWN_RULES = frozenset(name for name in RULE_CODES if name not in ("", "?"))


@cython.freelist(64)
cdef class Tok:
    """A token as an object: what ``tokenize`` returns, and what the parse makes
    of the tokens a value keeps (a key, the header, an opening bracket)."""
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


cdef inline Tok new_tok(str type, str value, int line, int column):
    cdef Tok t = Tok.__new__(Tok)
    t.type = type
    t.value = value
    t.line = line
    t.column = column
    return t


cdef struct CTok:
    int kind
    int line
    int column
    Py_ssize_t val  # index in Lexed.vals, -1 for a token whose value is FIXED_VALUE[kind]


cdef class Lexed:
    """The token stream of one file: a C array plus the texts of the tokens that have one."""
    cdef CTok* toks
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef list vals

    def __cinit__(self):
        self.cap = 256
        self.n = 0
        self.toks = <CTok*>PyMem_Malloc(self.cap * sizeof(CTok))
        if self.toks is NULL:
            raise MemoryError()
        self.vals = []

    def __dealloc__(self):
        PyMem_Free(self.toks)

    cdef int grow(self) except -1:
        cdef CTok* more = <CTok*>PyMem_Realloc(self.toks, 2 * self.cap * sizeof(CTok))
        if more is NULL:
            raise MemoryError()
        self.toks = more
        self.cap *= 2
        return 0

    cdef inline int add(self, int kind, int line, int column) except -1:
        if self.n == self.cap:
            self.grow()
        cdef CTok* t = &self.toks[self.n]
        t.kind = kind
        t.line = line
        t.column = column
        t.val = -1
        self.n += 1
        return 0

    cdef inline int addv(self, int kind, str value, int line, int column) except -1:
        if self.n == self.cap:
            self.grow()
        cdef CTok* t = &self.toks[self.n]
        t.kind = kind
        t.line = line
        t.column = column
        t.val = len(self.vals)
        self.vals.append(value)
        self.n += 1
        return 0

    cdef inline str value(self, Py_ssize_t i):
        cdef CTok* t = &self.toks[i]
        if t.val < 0:
            return <str>FIXED_VALUE[t.kind]
        return <str>self.vals[t.val]

    cdef Tok tok(self, Py_ssize_t i):
        cdef CTok* t = &self.toks[i]
        return new_tok(<str>TERMINALS[t.kind], self.value(i), t.line, t.column)


cdef inline bint is_key_char(Py_UCS4 c):
    return (c >= u'a' and c <= u'z') or (c >= u'A' and c <= u'Z') or (c >= u'0' and c <= u'9') \
        or c == u'_' or c == u'-'


cdef inline bint is_digit(Py_UCS4 c):
    return c >= u'0' and c <= u'9'


cdef int classify_kind(str text):
    """The terminal of an unquoted scalar: T_TRUE, T_FALSE, T_INT, T_FLOAT or T_TEXT."""
    cdef Py_ssize_t n = len(text), i = 0, start, frac, exp
    if text == "true":
        return T_TRUE
    if text == "false":
        return T_FALSE
    if n and (text[0] == u'+' or text[0] == u'-'):
        i = 1
    start = i
    while i < n and is_digit(text[i]):
        i += 1
    if i == start:
        return T_TEXT
    if i == n:
        return T_INT
    if text[i] == u'.':
        i += 1
        frac = i
        while i < n and is_digit(text[i]):
            i += 1
        if i == frac:
            return T_TEXT
    elif text[i] != u'e' and text[i] != u'E':
        return T_TEXT
    if i < n and (text[i] == u'e' or text[i] == u'E'):
        i += 1
        if i < n and (text[i] == u'+' or text[i] == u'-'):
            i += 1
        exp = i
        while i < n and is_digit(text[i]):
            i += 1
        if i == exp:
            return T_TEXT
    return T_FLOAT if i == n else T_TEXT


def classify(str text):
    """The terminal of an unquoted scalar: TRUE, FALSE, INT, FLOAT or TEXT."""
    return TERMINALS[classify_kind(text)]


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


cdef str quoted(str path, str line, Py_ssize_t pos, int lineno, int base, Py_ssize_t* end):
    """Read a quoted string starting at ``line[pos]``; its end goes to ``end``."""
    cdef Py_UCS4 quote = line[pos], c, e
    cdef list out
    cdef Py_ssize_t i = pos + 1, n = len(line), run
    cdef str ch
    if quote == u"'":
        run = i
        while i < n and line[i] != u"'":
            i += 1
        if i < n and not (i + 1 < n and line[i + 1] == u"'"):
            end[0] = i + 1  # the common case: no '' inside
            return line[run:i]
        out = [line[run:i]]
        while i < n:
            c = line[i]
            if c == u"'":
                if i + 1 < n and line[i + 1] == u"'":
                    out.append(u"'")
                    i += 2
                    continue
                end[0] = i + 1
                return u"".join(out)
            run = i
            while i < n and line[i] != u"'":
                i += 1
            out.append(line[run:i])
    else:
        run = i
        while i < n and line[i] != u'"' and line[i] != u'\\':
            i += 1
        if i < n and line[i] == u'"':
            end[0] = i + 1  # the common case: no escapes
            return line[run:i]
        out = [line[run:i]]
        while i < n:
            c = line[i]
            if c == u'"':
                end[0] = i + 1
                return u"".join(out)
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


cdef int after_value(str path, str line, Py_ssize_t pos, int lineno, int base, str what) except -1:
    cdef Py_ssize_t n = len(line), i = pos
    while i < n and (line[i] == u' ' or line[i] == u'\t'):
        i += 1
    if i < n and not (line[i] == u'#' and i > pos):
        raise ParseError(path, lineno, base + i + 1, f"unexpected text after {what}: expected the end of the line")
    return 0


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


cdef inline str rstrip_slice(str line, Py_ssize_t start, Py_ssize_t end):
    """``line[start:end].rstrip()`` without the intermediate string when nothing trails."""
    while end > start and Py_UNICODE_ISSPACE(line[end - 1]):  # str.rstrip's own test
        end -= 1
    return line[start:end]


cdef Py_ssize_t flow(str path, str line, Py_ssize_t pos, int lineno, int base, Lexed lx) except -1:
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
            lx.add(T_LBRACE, lineno, col)
            stack.append((u"{", i))
            expect_key = True
            i += 1
            continue
        if c == u'[':
            lx.add(T_LBRACK, lineno, col)
            stack.append((u"[", i))
            expect_key = False
            i += 1
            continue
        if c == u'}' or c == u']':
            lx.add(T_RBRACE if c == u'}' else T_RBRACK, lineno, col)
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
            lx.add(T_COMMA, lineno, col)
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
                lx.addv(T_KEY, line[i:j], lineno, col)
                lx.add(T_COLON, lineno, base + k + 1)
                i = k + 1
                expect_key = False
                continue
            if j > i and k < n and (line[k] == u',' or line[k] == u'}'):
                raise ParseError(path, lineno, base + k + 1,
                                 f"expected ':' after the key {line[i:j]!r} in a flow map")
        if c == u':':
            lx.add(T_COLON, lineno, col)
            i += 1
            continue
        if c == u'"' or c == u"'":
            text = quoted(path, line, i, lineno, base, &end)
            i = end
            lx.addv(T_STRING, text, lineno, col)
        else:
            end = plain_end(line, i, 2 if expect_key else 1)
            text = rstrip_slice(line, i, end)
            lx.addv(classify_kind(text), text, lineno, col)
            i = end
        expect_key = False


cdef str block(list lines, Py_ssize_t start, Py_ssize_t parent, Py_ssize_t* after):
    """``|`` block text: the lines below ``start`` indented deeper than ``parent``."""
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
    after[0] = i
    return u"\n".join(body)


cdef inline bint blank_or_comment(str line, Py_ssize_t j, Py_ssize_t width):
    """After ``j`` leading spaces: nothing but spaces/tabs, or a ``#`` first."""
    cdef Py_UCS4 c
    while j < width:
        c = line[j]
        if c == u'#':
            return True
        if c != u' ' and c != u'\t':
            return False
        j += 1
    return True


cdef Lexed lex(str text, str path):
    """Turn a whole file into tokens; raise ParseError on a lexical error."""
    cdef Lexed lx = Lexed()
    cdef list lines, stack = [0]
    cdef Py_ssize_t unit = 0, i = 0, n, j, width, k, c, p, q, end, step, top, after
    cdef bint first = True
    cdef int lineno
    cdef str line, value, body, found
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
        if blank_or_comment(line, j, width):
            i += 1
            continue
        if line[j] == u'\t':
            raise ParseError(path, lineno, j + 1, "tab in indentation: expected spaces (2 or 4 per level)")
        if j == 0 and line.startswith(u"HLDP://"):
            if not first:
                raise ParseError(path, lineno, 1, "an HLDP:// address may only be the first line: expected key: value")
            first = False
            lx.addv(T_HEADER, rstrip_slice(line, 0, plain_end(line, 0, 0)), lineno, 1)
            lx.add(T_NL, lineno, width + 1)
            i += 1
            continue
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
            lx.add(T_INDENT, lineno, j + 1)
        elif j < top:
            while j < stack[-1]:
                stack.pop()
                lx.add(T_DEDENT, lineno, j + 1)
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
        lx.addv(T_KEY, line[j:k], lineno, j + 1)
        c = k
        while c < width and line[c] == u' ':
            c += 1
        if c >= width or line[c] != u':':
            found = repr(line[c]) if c < width else "the end of the line"
            raise ParseError(path, lineno, c + 1, f"expected ':' after the key {line[j:k]!r}, found {found}"
                             + (MULTILINE_HINT if lx.n > 1 and lx.toks[lx.n - 2].kind == T_INDENT else ""))
        lx.add(T_COLON, lineno, c + 1)
        p = c + 1
        if p < width and line[p] != u' ' and line[p] != u'\t':
            raise ParseError(path, lineno, p + 1, "expected a space after ':'")
        while p < width and (line[p] == u' ' or line[p] == u'\t'):
            p += 1
        if p >= width or line[p] == u'#':
            lx.add(T_NL, lineno, width + 1)
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
            body = block(lines, i + 1, stack[-1], &after)
            i = after
            lx.addv(T_BLOCK, body, lineno, p + 1)
            lx.add(T_NL, lineno, width + 1)
            continue
        if ch == u'{' or ch == u'[':
            end = flow(path, line, p, lineno, 0, lx)
            after_value(path, line, end, lineno, 0, "the closing bracket")
        elif ch == u'"' or ch == u"'":
            value = quoted(path, line, p, lineno, 0, &end)
            lx.addv(T_STRING, value, lineno, p + 1)
            after_value(path, line, end, lineno, 0, "the closing quote")
        else:
            value = rstrip_slice(line, p, plain_end(line, p, 0))
            lx.addv(classify_kind(value), value, lineno, p + 1)
        lx.add(T_NL, lineno, width + 1)
        i += 1
    while len(stack) > 1:
        stack.pop()
        lx.add(T_DEDENT, n, 1)
    return lx


def tokenize(str text, str path="<string>"):
    """Turn a whole file into tokens (objects, for tests and tools); raise ParseError on a lexical error."""
    cdef Lexed lx = lex(text, path)
    return [lx.tok(i) for i in range(lx.n)]


cdef struct Slot:
    PyObject* obj  # an owned reference, or NULL for a token not (yet) made an object
    Py_ssize_t tok  # the token's index in the Lexed array when obj is NULL


cdef inline CTok* token(Lexed lx, Slot* s) except NULL:
    """The token a rule callback reads as a token (nodes.Rules does the same with attributes)."""
    if s.tok < 0:
        raise TypeError("hdlp.lark and the compiled rule callbacks disagree: a token was expected")
    return &lx.toks[s.tok]


cdef class Program:
    """hdlp.lark's LALR table and rule shapes (``grammar.lalr_program``) as C arrays, and the loop over them.

    ``syntax_error(path, token, expected)`` words an unexpected token, the
    same function the pure twin uses.
    """
    cdef int nsyms, nstates, start_state, end_state, nrules
    cdef int* action
    cdef int* r_lhs
    cdef int* r_size
    cdef int* r_code
    cdef int* r_filter  # 0: every child as is; 1: the include list below
    cdef int* r_inc_at
    cdef int* r_inc_n
    cdef int* r_append_none
    cdef int* inc_index
    cdef int* inc_splice
    cdef int* inc_nones
    cdef tuple names
    cdef object syntax_error

    def __cinit__(self):
        self.action = self.r_lhs = self.r_size = self.r_code = self.r_filter = NULL
        self.r_inc_at = self.r_inc_n = self.r_append_none = NULL
        self.inc_index = self.inc_splice = self.inc_nones = NULL

    def __init__(self, tuple program, syntax_error):
        cdef Py_ssize_t i, r, at, total = 0
        names, action, start_state, end_state, rules = program
        self.names = tuple(names)
        self.nsyms = len(names)
        self.nstates = len(action) // self.nsyms
        self.start_state = start_state
        self.end_state = end_state
        self.syntax_error = syntax_error
        self.nrules = len(rules)
        self.action = self.ints(len(action))
        for i in range(len(action)):
            self.action[i] = action[i]
        for lhs, size, callback, shape, append_none in rules:
            if shape is not None:
                total += len(shape)
        self.r_lhs = self.ints(self.nrules)
        self.r_size = self.ints(self.nrules)
        self.r_code = self.ints(self.nrules)
        self.r_filter = self.ints(self.nrules)
        self.r_inc_at = self.ints(self.nrules)
        self.r_inc_n = self.ints(self.nrules)
        self.r_append_none = self.ints(self.nrules)
        self.inc_index = self.ints(total + 1)
        self.inc_splice = self.ints(total + 1)
        self.inc_nones = self.ints(total + 1)
        at = 0
        for r, (lhs, size, callback, shape, append_none) in enumerate(rules):
            self.r_lhs[r] = lhs
            self.r_size[r] = size
            self.r_code[r] = RULE_CODES[callback]
            self.r_filter[r] = shape is not None
            self.r_inc_at[r] = at
            self.r_inc_n[r] = len(shape) if shape is not None else 0
            self.r_append_none[r] = append_none
            for index, splice, nones in (shape if shape is not None else ()):
                self.inc_index[at] = index
                self.inc_splice[at] = splice
                self.inc_nones[at] = nones
                at += 1

    cdef int* ints(self, Py_ssize_t n) except NULL:
        cdef int* p = <int*>PyMem_Malloc((n if n > 0 else 1) * sizeof(int))
        if p is NULL:
            raise MemoryError()
        return p

    def __dealloc__(self):
        PyMem_Free(self.action)
        PyMem_Free(self.r_lhs)
        PyMem_Free(self.r_size)
        PyMem_Free(self.r_code)
        PyMem_Free(self.r_filter)
        PyMem_Free(self.r_inc_at)
        PyMem_Free(self.r_inc_n)
        PyMem_Free(self.r_append_none)
        PyMem_Free(self.inc_index)
        PyMem_Free(self.inc_splice)
        PyMem_Free(self.inc_nones)

    def tree(self, str text, str path):
        """Lex and parse one file: (header token or None, root map Node)."""
        cdef Lexed lx = lex(text, path)
        if lx.n == 0:
            raise ParseError(path, 1, 1, EMPTY_ERROR)
        return self.run(lx, path)

    cdef object unexpected(self, Lexed lx, Py_ssize_t ti, int state, str path):
        cdef Tok tok
        cdef CTok* last
        if ti < lx.n:
            tok = lx.tok(ti)
        else:
            last = &lx.toks[lx.n - 1]
            tok = new_tok(u"$END", u"", last.line, last.column)
        row = state * self.nsyms
        expected = [self.names[s] for s in range(self.nsyms) if self.action[row + s] != 0]
        return self.syntax_error(path, tok, expected)

    cdef tuple run(self, Lexed lx, str path):
        """The LALR loop. States and values live in C arrays; a shifted token
        stays a C struct and becomes an object only if a callback keeps it."""
        cdef int* action = self.action
        cdef int nsyms = self.nsyms
        cdef Py_ssize_t cap = 64, sp = 1, ti = 0, nt = lx.n, size, k
        cdef int* states = <int*>PyMem_Malloc(cap * sizeof(int))
        cdef Slot* vals = <Slot*>PyMem_Malloc(cap * sizeof(Slot))  # vals[k] is the value under states[k + 1]
        cdef void* grown
        cdef int kind, act, r, goto
        cdef object value
        if states is NULL or vals is NULL:
            PyMem_Free(states)
            PyMem_Free(vals)
            raise MemoryError()
        try:
            states[0] = self.start_state
            kind = lx.toks[0].kind
            while True:
                act = action[states[sp - 1] * nsyms + kind]
                if act == 0:
                    raise self.unexpected(lx, ti, states[sp - 1], path)
                if sp == cap:
                    grown = PyMem_Realloc(states, 2 * cap * sizeof(int))
                    if grown is NULL:
                        raise MemoryError()
                    states = <int*>grown
                    grown = PyMem_Realloc(vals, 2 * cap * sizeof(Slot))
                    if grown is NULL:
                        raise MemoryError()
                    vals = <Slot*>grown
                    cap *= 2
                if act > 0:  # shift
                    states[sp] = act - 1
                    vals[sp - 1].obj = NULL
                    vals[sp - 1].tok = ti
                    sp += 1
                    ti += 1
                    kind = lx.toks[ti].kind if ti < nt else T_END
                    continue
                # reduce by rule r over the top `size` values
                r = -act - 1
                size = self.r_size[r]
                value = self.reduce(r, lx, vals + (sp - 1 - size))
                for k in range(sp - 1 - size, sp - 1):
                    Py_XDECREF(vals[k].obj)
                sp -= size
                goto = action[states[sp - 1] * nsyms + self.r_lhs[r]] - 1
                states[sp] = goto
                Py_INCREF(value)
                vals[sp - 1].obj = <PyObject*>value
                vals[sp - 1].tok = -1
                sp += 1
                if kind == T_END and goto == self.end_state:
                    return <tuple?>value
        finally:
            for k in range(sp - 1):
                Py_XDECREF(vals[k].obj)
            PyMem_Free(states)
            PyMem_Free(vals)

    cdef object reduce(self, int r, Lexed lx, Slot* base):
        """nodes.Rules, rule by rule, calling the same constructors.

        ``base`` points at the rule's first child. The children a callback
        gets are lark's: those its filter keeps (``include``), helper lists
        spliced in, Nones where ``[...]`` matched nothing.
        """
        cdef int code = self.r_code[r], at, end, k
        cdef Slot* s
        cdef CTok* t
        cdef list children
        cdef object first, key
        cdef Tok opener
        if self.r_filter[r]:
            at = self.r_inc_at[r]
            end = at + self.r_inc_n[r]
        else:
            at = end = -1
        if code == R_SCALAR:
            s = base + (self.inc_index[at] if at >= 0 else 0)
            t = token(lx, s)
            return scalar_node(<str>TERMINALS[t.kind], lx.value(s.tok), t.line, t.column)
        if code == R_SCALAR_ENTRY or code == R_PAIR or code == R_NESTED_ENTRY:
            return (self.slot(lx, base + (self.inc_index[at] if at >= 0 else 0)),
                    self.slot(lx, base + (self.inc_index[at + 1] if at >= 0 else 1)))
        if code == R_SINGLE:
            return self.slot(lx, base + (self.inc_index[at] if at >= 0 else 0))
        if code == R_BLOCK_TEXT_ENTRY:
            key = self.slot(lx, base + (self.inc_index[at] if at >= 0 else 0))
            s = base + (self.inc_index[at + 1] if at >= 0 else 1)
            t = token(lx, s)
            return (key, block_node(lx.value(s.tok), t.line, t.column))
        if code == R_EMPTY_ENTRY:
            s = base + (self.inc_index[at] if at >= 0 else 0)
            t = token(lx, s)
            return (self.slot(lx, s), null_node(t.line, t.column + len(lx.value(s.tok)) + 1))
        if code == R_HEADER:
            return self.slot(lx, base + (self.inc_index[at] if at >= 0 else 0))
        # the rest take a list of children, as lark's ChildFilterLALR builds it
        if at < 0:
            children = [self.slot(lx, base + k) for k in range(self.r_size[r])]
        else:
            children = []
            while at < end:
                for k in range(self.inc_nones[at]):
                    children.append(None)
                first = self.slot(lx, base + self.inc_index[at])
                if not self.inc_splice[at]:
                    children.append(first)
                elif children:
                    children.extend(<list?>first)
                else:
                    children = <list?>first  # left recursion: reuse the helper's list, as lark does
                at += 1
            for k in range(self.r_append_none[r]):
                children.append(None)
        if code == R_LIST:
            return children
        if code == R_MAPPING:
            return map_node(children)
        if code == R_FLOW_MAP or code == R_FLOW_LIST:
            opener = <Tok?>children[0]
            return flow_node(u"map" if code == R_FLOW_MAP else u"list", children[1:], opener.line, opener.column)
        # R_START
        if len(children) == 2:
            return (children[0], children[1])
        return (None, children[0])

    cdef inline object slot(self, Lexed lx, Slot* s):
        """A value as an object: a token becomes a Tok the first time it is asked for."""
        if s.obj is NULL:
            value = lx.tok(s.tok)
            Py_INCREF(value)
            s.obj = <PyObject*>value
        return <object>s.obj
