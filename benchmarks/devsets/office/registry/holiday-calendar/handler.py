"""Placeholder handler for the office dev registry.

This registry exists to test intent matching; the tool "holiday-calendar" is
never executed from here.
"""


def lookup(**params):
    raise NotImplementedError("dev registry placeholder: holiday-calendar is not executable here")
