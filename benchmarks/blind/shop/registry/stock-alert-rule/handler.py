"""Placeholder handler for the blind shop eval registry.

The tool "stock-alert-rule" is never executed from here; this file exists so that a
loader that requires handler.py for executor: python finds one.
"""


def manage_rules(**params):
    raise NotImplementedError("eval registry placeholder: stock-alert-rule is not executable here")
