"""Placeholder handler: "interview-schedule" exists only for intent-matching evaluation."""


def run(**params):
    raise NotImplementedError("devset placeholder: interview-schedule is not executable here")
