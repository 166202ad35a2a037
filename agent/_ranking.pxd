# Types for agent/ranking.py compiled as agent._ranking (Cython pure-Python
# mode): the same source as the pure twin, with Ranker as an extension type,
# scores as C doubles and the helpers as C functions. Nothing here may change
# what the code does: tests/agent/test_matcher_twins.py holds both twins to
# the same hits, scores and matched terms.

cimport cython

cdef double ALPHA, OP_MISMATCH, NO_OBJECT, OP_UNASKED, NON_GOAL, REFERRAL, KEYWORD_BONUS, CMDLINE_BONUS
cdef double CORE_SHARE
cdef Py_ssize_t SHORTLIST, PRESELECT, COMMON_MIN, COMMON_SHARE


cdef class Ranker:
    cdef readonly dict entries
    cdef readonly dict postings
    cdef readonly frozenset ops
    cdef readonly frozenset acts
    cdef readonly frozenset objects
    cdef readonly Py_ssize_t n
    cdef readonly double idf_norm
    cdef readonly Py_ssize_t common

    @cython.locals(entries=dict, postings=dict, n=Py_ssize_t, idf_norm=double, mass=dict, surface=dict,
                   f=str, sf=str, weight=double, p=dict, df=Py_ssize_t, m=double, prev=double, total=double,
                   denom=double, acc=list, objects=frozenset, acts=frozenset, asked=frozenset,
                   asked_ops=frozenset, pairs=dict, heads=dict, into=str, content=list, cmdline=bint,
                   in_cmd=set, spans=list, start=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, scores=dict,
                   fits=dict, referred=dict, name=str, raw=double, weights=dict, e_ops=frozenset,
                   non_goals=tuple, core=frozenset,
                   done=frozenset, s=double, fit=double, runs_cmd=bint, missing=double, named=Py_ssize_t,
                   hit=tuple, shared=frozenset, refers_to=str, before=double, given=double, bonus=double,
                   kw=frozenset, explained=double, best=list, hits=list, why=list)
    cpdef list rank(self, list terms, Py_ssize_t top_k, dict trace=*)

    @cython.locals(postings=dict, order=list, p=dict, f=str, first=str, unit=double, acc=dict,
                   deferred=list, common=Py_ssize_t, size=Py_ssize_t, m=double, name=str, w=double,
                   prev=double, entries=dict, weights=dict, s=double)
    cdef list _accumulate(self, dict mass, Py_ssize_t top_k)

    @cython.locals(ng_ops=frozenset, distinct=frozenset, feats=frozenset, refers_to=str,
                   shared_ops=frozenset, named=frozenset)
    cdef tuple _refused(self, str name, frozenset e_ops, tuple non_goals, frozenset done, frozenset asked,
                        frozenset asked_ops, dict heads)


@cython.locals(cut=double, out=list, room=Py_ssize_t, name=str, s=double)
cdef list _top(dict acc, Py_ssize_t k)

@cython.locals(f=str, on=frozenset)
cdef double _op_fit(frozenset e_ops, frozenset things, frozenset outputs, frozenset asked_ops, frozenset done,
                    frozenset acts, dict pairs, str into) except? -1.0

@cython.locals(things=list, around=dict, ahead=dict, f=str, start=Py_ssize_t, clause=Py_ssize_t, same=list,
               near=set, after=list, hit=set)
cdef tuple _pairs(list terms, frozenset acts, frozenset objects)

@cython.locals(f=str, at=Py_ssize_t, clause=Py_ssize_t, last=str, start=Py_ssize_t, c=Py_ssize_t)
cdef str _into(list terms, frozenset objects)
