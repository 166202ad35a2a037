"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "sleep-report" is never executed from here; calling it fails loudly.
"""


def get_sleep(**params):
    raise NotImplementedError("eval registry placeholder: sleep-report is not executable here")
