"""Placeholder handler: expense-record is not executable in this eval registry."""


def add_expense(**params):
    raise NotImplementedError("eval registry placeholder: expense-record is not executable here")
