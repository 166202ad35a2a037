"""Stand-ins for the services bitong's executors call, as real local HTTP servers.

They are not the services: each implements only what the tests exercise,
and says so in its docstring (``forgejo.py`` lists the Forgejo API v1
endpoints it covers).
"""
