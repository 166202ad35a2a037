"""Placeholder handler for the blind eval registry.

The tool "energy-report" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: energy-report is not executable here")
