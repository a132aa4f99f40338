"""`ctxwin proxy`: context management for an unmodified agent, between it and its provider.

Import `create_app` from `ctxwin.proxy.app` (needs the `proxy` extra)."""
