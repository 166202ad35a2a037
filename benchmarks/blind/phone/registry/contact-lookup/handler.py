"""Placeholder handler: this registry is a blind eval set for intent matching.

The tool "contact-lookup" is never executed from here; calling it fails loudly.
"""


def find_contact(**params):
    raise NotImplementedError("eval registry placeholder: contact-lookup is not executable here")
