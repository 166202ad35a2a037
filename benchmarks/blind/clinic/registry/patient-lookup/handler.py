"""Placeholder handler for the clinic blind registry.

The tool "patient-lookup" is never executed from here; this file only exists because
executor: python expects a handler.py in the tool folder.
"""


def run(**params):
    raise NotImplementedError("blind registry placeholder: patient-lookup is not executable here")
