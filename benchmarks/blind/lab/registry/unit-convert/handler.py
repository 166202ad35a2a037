"""Placeholder handler: unit-convert is not executable in this eval registry."""


def convert(**params):
    raise NotImplementedError("eval registry placeholder: unit-convert is not executable here")
