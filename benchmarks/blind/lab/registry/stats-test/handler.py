"""Placeholder handler: stats-test is not executable in this eval registry."""


def run_test(**params):
    raise NotImplementedError("eval registry placeholder: stats-test is not executable here")
