"""Placeholder handler: freezer-search is not executable in this eval registry."""


def find_sample(**params):
    raise NotImplementedError("eval registry placeholder: freezer-search is not executable here")
