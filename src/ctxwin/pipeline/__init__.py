"""The request pipeline: small deterministic stages over the view, each returning the new view, the
events that say what it did, and the decisions to record. The engine composes them in this order:
bootstrap, result budget, spill, dedup (once per message), then masking, pruning, compaction, fit and
repair over the whole view (`ctxwin.engine.run` writes that order once). Imports: errors, messages,
tokens, policy; nothing above."""
