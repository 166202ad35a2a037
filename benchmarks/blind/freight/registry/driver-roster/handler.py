"""Placeholder handler for the blind evaluation registry.

The tool "driver-roster" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: driver-roster is not executable here")
