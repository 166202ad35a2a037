"""Placeholder handler for the office dev registry.

This registry exists to test intent matching; the tool "invoice-verify" is
never executed from here.
"""


def verify(**params):
    raise NotImplementedError("dev registry placeholder: invoice-verify is not executable here")
