"""Placeholder handler for the plugins dev registry.

This registry exists to test intent matching; the tool "math-solver" is never
executed from here.
"""


def solve(**params):
    raise NotImplementedError("dev registry placeholder: math-solver is not executable here")
