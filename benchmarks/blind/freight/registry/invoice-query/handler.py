"""Placeholder handler for the blind evaluation registry.

The tool "invoice-query" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: invoice-query is not executable here")
