"""Placeholder handler for the blind shop eval registry.

The tool "tax-summary" is never executed from here; this file exists so that a
loader that requires handler.py for executor: python finds one.
"""


def summarize(**params):
    raise NotImplementedError("eval registry placeholder: tax-summary is not executable here")
