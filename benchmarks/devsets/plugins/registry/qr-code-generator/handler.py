"""Placeholder handler for the plugins dev registry.

This registry exists to test intent matching; the tool "qr-code-generator" is never
executed from here.
"""


def generate(**params):
    raise NotImplementedError("dev registry placeholder: qr-code-generator is not executable here")
