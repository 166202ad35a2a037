# Types for agent/text.py compiled as agent._text (Cython pure-Python mode):
# the same source as the pure twin, with Analyzer as an extension type whose
# tables are C struct members and whose inner steps are C methods. Nothing
# here may change what the code does: tests/agent/test_matcher_twins.py
# holds both twins to the same terms, analyses and hits.

cimport cython


cdef class Analyzer:
    cdef readonly object vocabulary
    cdef dict _forms
    cdef dict _kinds
    cdef dict _codes
    cdef dict _concept_weight
    cdef frozenset _operations
    cdef dict _multi_forms
    cdef dict _first
    cdef dict _words

    @cython.locals(t=str, payload=str, breaks=list, out=list, pieces=list, last=Py_ssize_t,
                   host_at=Py_ssize_t, has_number=bint, kind=str, value=str, slot=str, at=Py_ssize_t,
                   clause=Py_ssize_t, port=object, operations=frozenset, term=tuple, f=str, surface=str,
                   start=Py_ssize_t, feature=str, weight=double)
    cpdef list request(self, str text, object known_words=*, object names=*)

    cdef bint _keep_name(self, str value, object names) except -1

    @cython.locals(kinds=dict, out=list, base=str, ext=str, f=str)
    cdef list _path_terms(self, str path)

    @cython.locals(codes=dict, cache=dict, pieces=list, words=dict, gaps=set, starts=list, ends=list,
                   n=Py_ssize_t, prev_cjk=bint, at=Py_ssize_t, s=str, a=Py_ssize_t, k=Py_ssize_t, hit=tuple, w=str,
                   code=str, fixed=str, c=str, first=dict, lookup=dict, out=list, run=Py_ssize_t,
                   i=Py_ssize_t, ch=str, info=tuple, sizes=tuple, found=tuple, size=Py_ssize_t,
                   longer=Py_ssize_t)
    cdef list _scan(self, str text, object known_words, bint correct, list spans, bint unigrams, list bounds)

    @cython.locals(spans=list, feats=list, weights=dict, out=list, j=Py_ssize_t, a=Py_ssize_t, f=str,
                   kind=Py_UCS4, weight=double, surface=str)
    cdef list _segment(self, str text, object known_words, bint correct, list breaks)


@cython.locals(n=Py_ssize_t, b=Py_ssize_t)
cdef Py_ssize_t _clause(list breaks, Py_ssize_t at) except -1

@cython.locals(k=Py_ssize_t)
cdef _flush(str c, Py_ssize_t start, Py_ssize_t end, list out, list spans, list starts, bint unigrams)
