"""Placeholder handler: exp-compare is not executable in this eval registry."""


def compare_runs(**params):
    raise NotImplementedError("eval registry placeholder: exp-compare is not executable here")
