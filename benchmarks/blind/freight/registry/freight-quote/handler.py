"""Placeholder handler for the blind evaluation registry.

The tool "freight-quote" is never executed from here; it exists only so that a loader
that requires handler.py for executor: python finds one.
"""


def run(**params):
    raise NotImplementedError("blind eval placeholder: freight-quote is not executable here")


def quote(**params):
    return run(**params)
