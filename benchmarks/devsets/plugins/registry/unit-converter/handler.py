"""Placeholder handler for the plugins dev registry.

This registry exists to test intent matching; the tool "unit-converter" is never
executed from here.
"""


def convert(**params):
    raise NotImplementedError("dev registry placeholder: unit-converter is not executable here")
