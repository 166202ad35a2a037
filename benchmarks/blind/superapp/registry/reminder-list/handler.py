"""Placeholder handler for the superapp blind evaluation registry.

This registry exists to test intent matching; the tool "reminder-list" is never
executed from here. A loader that requires handler.py for executor: python
finds one; calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("eval registry placeholder: reminder-list is not executable here")
