"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "step-count" is never executed from here; calling it fails loudly.
"""


def get_steps(**params):
    raise NotImplementedError("eval registry placeholder: step-count is not executable here")
