"""Placeholder handler for the blind eval registry.

The tool "committee-room-booking" is never executed from here; calling it fails loudly.
"""


def run(**params):
    raise NotImplementedError("blind eval registry placeholder: committee-room-booking is not executable here")
