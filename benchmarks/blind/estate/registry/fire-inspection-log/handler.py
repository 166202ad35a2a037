"""Placeholder handler for the blind eval registry.

The tool "fire-inspection-log" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: fire-inspection-log is not executable here")
