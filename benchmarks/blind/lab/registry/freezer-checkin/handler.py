"""Placeholder handler: freezer-checkin is not executable in this eval registry."""


def record_move(**params):
    raise NotImplementedError("eval registry placeholder: freezer-checkin is not executable here")
