"""Serving: the tool agent's flow free of any transport (:mod:`.service`), the
gRPC sidecar around it (:mod:`.server`), and what an operator sees and
controls of it (identity, audit, metrics, traces, logs, the admin socket).
"""
