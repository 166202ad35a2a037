"""The tool agent, one room per concern; imports run one way, down this list.

* :mod:`~bitong.agent.matching`: an intent to the 1-3 tools that fit it, or none
  (lexical and semantic indexes, calibration, the optional vocabulary, ``eval``).
* :mod:`~bitong.agent.registry`: tools roots to immutable snapshots (loading,
  approval, versions and rollback, the cache agent, the git-synced repository).
* :mod:`~bitong.agent.config`: the configuration file, read by the rooms below.
* :mod:`~bitong.agent.calling`: a call's parameters, allow-lists and
  confirmation, and the executors that run it.
* :mod:`~bitong.agent.serving`: the transport-free service and the gRPC
  sidecar around it (identity, audit, metrics, traces, the admin socket).
* :mod:`~bitong.agent.mcp`: the same service as an MCP server.
* :mod:`~bitong.agent.cli`: the ``bitong`` command and the author's tools
  (``init``, ``lint``, ``show``, ``audit``).

The format's parser is its own package, :mod:`bitong.parser`; the wire
contract is :mod:`bitong.v1`, generated from ``proto/`` by the build.
"""
