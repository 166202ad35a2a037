"""Placeholder handler for the blind eval registry.

The tool "resident-lookup" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: resident-lookup is not executable here")
