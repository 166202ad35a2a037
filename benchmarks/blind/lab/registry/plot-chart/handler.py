"""Placeholder handler: plot-chart is not executable in this eval registry."""


def plot(**params):
    raise NotImplementedError("eval registry placeholder: plot-chart is not executable here")
