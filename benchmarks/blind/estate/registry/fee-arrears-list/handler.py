"""Placeholder handler for the blind eval registry.

The tool "fee-arrears-list" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: fee-arrears-list is not executable here")
