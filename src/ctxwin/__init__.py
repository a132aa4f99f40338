"""ctxwin: the context window of an LLM agent, managed. Nothing is lost."""

__version__ = "0.1.0"
