"""Placeholder handler: budget-query is not executable in this eval registry."""


def query_budget(**params):
    raise NotImplementedError("eval registry placeholder: budget-query is not executable here")
