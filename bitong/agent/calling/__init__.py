"""Calling a tool: parameters checked against its schema, paths against its
allow-lists, confirmation when it asks for one, then an executor runs it.

Depends on :mod:`bitong.agent.config` and :mod:`bitong.agent.registry`,
never on a transport: the gRPC server, the MCP bridge and the in-process CLI
call through the same code.
"""
