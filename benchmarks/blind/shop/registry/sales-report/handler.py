"""Placeholder handler for the blind shop eval registry.

The tool "sales-report" is never executed from here; this file exists so that a
loader that requires handler.py for executor: python finds one.
"""


def build_report(**params):
    raise NotImplementedError("eval registry placeholder: sales-report is not executable here")
