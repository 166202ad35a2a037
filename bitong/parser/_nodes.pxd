# Types for bitong/parser/nodes.py compiled as bitong.parser._nodes (Cython pure-Python mode):
# the same source as the pure twin's values, with Node as an extension type
# whose fields the compiled builder (bitong.parser._build) reads as C struct members.

cimport cython


# A value tree has no cycles (values only point down), so Nodes need not be
# tracked by the cycle collector: cheaper to make and to free, ~70 a file.
@cython.no_gc
@cython.freelist(128)
cdef class Node:
    cdef public str kind
    cdef public object value
    cdef public int line
    cdef public int column
    cdef public str raw


@cython.locals(node=Node)
cdef Node _new(str kind, object value, int line, int column, str raw)
cpdef Node scalar_node(str terminal, str value, int line, int column)
cpdef Node block_node(str value, int line, int column)
cpdef Node flow_node(str kind, list items, int line, int column)
cpdef Node null_node(int line, int column)
cpdef Node map_node(list entries)
