"""Model clients (httpx, no SDK in the core) behind the `ModelClient` protocol."""

from ctxwin.providers.base import Completion, ModelClient, Usage

__all__ = ["Completion", "ModelClient", "Usage"]
