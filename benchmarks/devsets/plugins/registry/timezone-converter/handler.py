"""Placeholder handler for the plugins dev registry.

This registry exists to test intent matching; the tool "timezone-converter" is never
executed from here.
"""


def convert_time(**params):
    raise NotImplementedError("dev registry placeholder: timezone-converter is not executable here")
