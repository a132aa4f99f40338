"""`ctxwin inspect FILE`: where a session's tokens go. (Filled in by the foundation work.)"""

from ctxwin.cli.app import app  # noqa: F401
