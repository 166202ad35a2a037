"""Placeholder handler for the blind shop eval registry.

The tool "order-export" is never executed from here; this file exists so that a
loader that requires handler.py for executor: python finds one.
"""


def export_orders(**params):
    raise NotImplementedError("eval registry placeholder: order-export is not executable here")
