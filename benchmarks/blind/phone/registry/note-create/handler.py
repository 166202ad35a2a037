"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "note-create" is never executed from here; calling it fails loudly.
"""


def create_note(**params):
    raise NotImplementedError("eval registry placeholder: note-create is not executable here")
