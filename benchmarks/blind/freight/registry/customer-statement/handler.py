"""Placeholder handler for the blind evaluation registry.

The tool "customer-statement" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: customer-statement is not executable here")


def build_statement(**params):
    return run(**params)
