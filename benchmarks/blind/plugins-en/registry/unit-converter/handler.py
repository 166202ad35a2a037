"""Placeholder handler for the plugins-en blind registry.

This registry exists to test intent matching; the tool "unit-converter" is never
executed from here. A loader that requires handler.py for executor: python
finds one; calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("eval registry placeholder: unit-converter is not executable here")
