"""Placeholder handler for the saas dev registry.

This registry exists to evaluate intent matching; the tool "sso-config-check" is never
executed from here. Calling it fails loudly instead of pretending to work.
"""


def run(**params):
    raise NotImplementedError("dev registry placeholder: sso-config-check is not executable here")
