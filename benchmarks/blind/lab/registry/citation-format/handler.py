"""Placeholder handler: citation-format is not executable in this eval registry."""


def format_citation(**params):
    raise NotImplementedError("eval registry placeholder: citation-format is not executable here")
