"""Placeholder handler: this evaluation tool is never executed."""


def run(**params):
    raise NotImplementedError("evaluation placeholder")
