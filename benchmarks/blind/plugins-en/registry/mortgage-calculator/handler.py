"""Placeholder handler for the plugins-en blind registry.

This registry exists to test intent matching; the tool "mortgage-calculator" is never
executed from here. A loader that requires handler.py for executor: python
finds one; calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("eval registry placeholder: mortgage-calculator is not executable here")
