"""Placeholder handler: "offboarding-checklist" exists only for intent-matching evaluation."""


def run(**params):
    raise NotImplementedError("devset placeholder: offboarding-checklist is not executable here")
