"""Placeholder handler for the office dev registry.

This registry exists to test intent matching; the tool "salary-tax-calc" is
never executed from here.
"""


def calc(**params):
    raise NotImplementedError("dev registry placeholder: salary-tax-calc is not executable here")
