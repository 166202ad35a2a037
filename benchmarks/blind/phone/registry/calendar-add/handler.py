"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "calendar-add" is never executed from here; calling it fails loudly.
"""


def add_event(**params):
    raise NotImplementedError("eval registry placeholder: calendar-add is not executable here")
