"""The registry: tools roots to immutable snapshots, swapped atomically, and what keeps them current.

Depends on :mod:`bitong.parser` and :mod:`bitong.agent.matching` only: the
snapshot carries its match index, and nothing here runs a tool.
"""
