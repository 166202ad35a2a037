"""Placeholder handler for the blind evaluation registry.

The tool "dg-check" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: dg-check is not executable here")


def check(**params):
    return run(**params)
