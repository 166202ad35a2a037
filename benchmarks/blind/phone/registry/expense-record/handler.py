"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "expense-record" is never executed from here; calling it fails loudly.
"""


def add_record(**params):
    raise NotImplementedError("eval registry placeholder: expense-record is not executable here")
