"""Placeholder handler for the blind eval registry.

The tool "fee-bill-query" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: fee-bill-query is not executable here")
