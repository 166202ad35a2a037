"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "expense-report" is never executed from here; calling it fails loudly.
"""


def summarize(**params):
    raise NotImplementedError("eval registry placeholder: expense-report is not executable here")
