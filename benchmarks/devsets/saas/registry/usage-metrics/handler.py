"""Placeholder handler for the saas dev registry.

This registry exists to evaluate intent matching; the tool "usage-metrics" is never
executed from here. Calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("dev registry placeholder: usage-metrics is not executable here")
