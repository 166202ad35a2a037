"""Placeholder handler: "onboarding-checklist" exists only for intent-matching evaluation."""


def run(**params):
    raise NotImplementedError("devset placeholder: onboarding-checklist is not executable here")
