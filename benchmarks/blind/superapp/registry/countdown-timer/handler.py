"""Placeholder handler for the superapp blind evaluation registry.

This registry exists to test intent matching; the tool "countdown-timer" is never
executed from here. A loader that requires handler.py for executor: python
finds one; calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("eval registry placeholder: countdown-timer is not executable here")
