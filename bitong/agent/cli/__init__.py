"""The ``bitong`` command (:mod:`.commands`) and the tools it gives a tool
author: ``init`` (:mod:`.scaffold`), ``lint`` (:mod:`.lint`), ``show``
(:mod:`.toolpage`) and ``audit`` (:mod:`.tool_audit`).
"""
