"""The `ctxwin` command line: thin wrappers over library calls.

An edge: imports anything; nothing imports it.
"""
