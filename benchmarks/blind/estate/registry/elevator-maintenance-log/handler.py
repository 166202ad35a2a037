"""Placeholder handler for the blind eval registry.

The tool "elevator-maintenance-log" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: elevator-maintenance-log is not executable here")
