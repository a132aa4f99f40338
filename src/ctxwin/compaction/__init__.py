"""Compaction: summarize the oldest span of the view into a structured summary and keep a recent
tail, never splitting a tool call from its result.

`cuts` holds the shared cut-point rules, `strategy` the interface, and one module per anchor
implements it (`pi`, `openclaw`, `claude_code`, `letta`, `checkpoint`, `ctxwin`); `compact` runs a
strategy's plan through a summarizer (`extractive`, the embedded default, or `llm`), the identifier
guard (`identifiers`) and the recall index. Imports: errors, messages, tokens, policy, store,
pipeline; nothing above.
"""
