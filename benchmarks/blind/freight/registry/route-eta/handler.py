"""Placeholder handler for the blind evaluation registry.

The tool "route-eta" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: route-eta is not executable here")


def estimate(**params):
    return run(**params)
