"""Placeholder handler: "payroll-fx-rates" exists only for intent-matching evaluation."""


def run(**params):
    raise NotImplementedError("devset placeholder: payroll-fx-rates is not executable here")
