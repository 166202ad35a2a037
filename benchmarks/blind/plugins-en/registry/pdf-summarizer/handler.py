"""Placeholder handler for the plugins-en blind registry.

This registry exists to test intent matching; the tool "pdf-summarizer" is never
executed from here. A loader that requires handler.py for executor: python
finds one; calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("eval registry placeholder: pdf-summarizer is not executable here")
