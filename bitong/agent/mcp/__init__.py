"""bitong for Model Context Protocol hosts: the registry as an MCP server, and tool schemas in JSON Schema.

``schema`` needs nothing beyond the protobuf runtime (``bitong tools --format`` uses it);
``bridge`` needs the ``mcp`` extra (``pip install 'bitong[mcp]'``). Imports run one way:
this package uses the service and the registry, never the reverse.
"""
