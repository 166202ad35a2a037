"""Placeholder handler: "contract-renewal-reminder" exists only for intent-matching evaluation."""


def run(**params):
    raise NotImplementedError("devset placeholder: contract-renewal-reminder is not executable here")
