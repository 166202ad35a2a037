"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "photo-search" is never executed from here; calling it fails loudly.
"""


def search_photos(**params):
    raise NotImplementedError("eval registry placeholder: photo-search is not executable here")
