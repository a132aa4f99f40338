"""Test helpers that run real components: a fake model provider over real HTTP on 127.0.0.1."""

from ctxwin.testing.fake_provider import FakeProvider, ForcedResponse, RecordedRequest

__all__ = ["FakeProvider", "ForcedResponse", "RecordedRequest"]
