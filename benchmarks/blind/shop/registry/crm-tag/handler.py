"""Placeholder handler for the blind shop eval registry.

The tool "crm-tag" is never executed from here; this file exists so that a
loader that requires handler.py for executor: python finds one.
"""


def apply_tag(**params):
    raise NotImplementedError("eval registry placeholder: crm-tag is not executable here")
