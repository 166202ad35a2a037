# Types for bitong/parser/build.py compiled as bitong.parser._build (Cython pure-Python mode):
# the compiled twin runs the very rules of build.py, with Node fields read as
# C struct members and the helpers called as C functions. Nothing here may
# change what the code does; tests/parser holds both twins to the same results.

cimport cython

from bitong.parser._nodes cimport Node


cdef class _Ctx:
    cdef readonly str path
    cdef readonly object source
    cdef object _lines
    cpdef object fail(self, object node, str message)
    cpdef str line(self, Py_ssize_t lineno)


@cython.locals(line=str, i=Py_ssize_t, quote=str)
cdef object _value_column(_Ctx ctx, Node node, Py_ssize_t offset)

@cython.locals(stack=list, seen=dict, node=Node, kind=str)
cdef object _check_tree(_Ctx ctx, Node root)

cdef bint _is_extension(str key) except -1

@cython.locals(out=dict, name=str, value=Node)
cdef dict _entries(_Ctx ctx, Node node, str where, dict allowed)

@cython.locals(value=str)
cdef str _text(_Ctx ctx, Node node, str what, bint empty_ok=*)

cdef object _int(_Ctx ctx, Node node, str what, object minimum, object maximum=*)

cdef object _bool(_Ctx ctx, Node node, str what)

cdef list _text_list(_Ctx ctx, Node node, str what, bint lines=*)

@cython.locals(stack=list, src=Node, dst=object, child=Node, is_map=bint)
cdef object _plain(Node node)

cdef object _to_value(object data)

cdef bint _fits(str ptype, Node node) except -1

@cython.locals(fields=dict, type_node=Node, ptype=str, bnode=Node, pnode=Node, nnode=Node, enode=Node,
               dnode=Node, item=Node, rules=list, name=str, where=str, bounds=dict, pattern=str)
cdef object _param(_Ctx ctx, object key, Node node, object spec)

cdef object _default_in_bounds(_Ctx ctx, Node node, object default, str ptype, str where,
                               object lo, object hi, str pattern)

cpdef list placeholders(str command)

cdef str _command(_Ctx ctx, Node node, object params)

cdef list _non_goals(_Ctx ctx, Node node)

@cython.locals(ctx=_Ctx, fields=dict, name_node=Node, ex_node=Node, created_node=Node, schema_node=Node,
               cnode=Node, vnode=Node, schema=dict, cfields=dict, pfields=dict, name=str, executor=str,
               created=str, version=str)
cpdef object build(object header, Node root, str path, object source, object folder=*)
