"""ctxwin inside the frameworks Python agents already use, each through the framework's own hook.

`ctxwin.adapters.langchain` (extra `langchain`), `ctxwin.adapters.openai_agents` (extra
`openai-agents`), `ctxwin.adapters.pydantic_ai` (extra `pydantic-ai`). Nothing here is imported by
the core; each module imports its framework at the top and fails with the extra to install."""
