"""bitong (笔筒): the tool agent. The wire contract lives in ``bitong.v1``,
generated from ``proto/bitong/v1/agent.proto`` at build time."""

__version__ = "0.1.0"
