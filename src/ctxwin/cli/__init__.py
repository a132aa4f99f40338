"""The `ctxwin` command line: thin wrappers over library calls."""
