"""A request body, read without building what the proxy does not touch.

An agent resends its whole history, 170K tokens and more, on every request; parsing all of it into
Python objects (and freeing them again) would cost more than everything else the proxy does. So the
body is scanned once by msgspec into its top-level fields as raw JSON bytes (`msgspec.Raw`, no
objects built), a field is parsed (orjson) only when asked for, the history is split into one raw
span per message, and a message is parsed only when it is new or changed (compared byte for byte
with the session's previous request). What goes upstream is written the same way: the fields ctxwin
does not manage are copied as the bytes that came, and only what changed is serialized.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec
import orjson

from ctxwin.errors import ProxyRefusal

_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EMPTY = frozenset({b"", b"null", b"[]", b'""', b"{}", b"false"})


def refuse_json(error: Exception) -> ProxyRefusal:
    if isinstance(error, RecursionError):
        return ProxyRefusal(400, "the request body nests arrays or objects deeper than the proxy reads",
                            "send JSON nested less deeply: the APIs themselves refuse such bodies")
    text = str(error)
    if text.startswith("Expected `object`"):
        kind = text.rsplit("`", 2)[-2] if text.count("`") >= 4 else "another value"
        return ProxyRefusal(400, f"the request body is JSON {kind}, not an object", "send a JSON object")
    return ProxyRefusal(400, f"the request body is not valid JSON: {text}", "send a JSON object")


class Body(Mapping[str, Any]):
    """The request's top-level fields: raw bytes, parsed on first access (`body["model"]`)."""

    def __init__(self, raw: bytes) -> None:
        try:
            self.fields: dict[str, msgspec.Raw] = _FIELDS.decode(raw)
        except (msgspec.DecodeError, ValueError, RecursionError) as error:
            raise refuse_json(error) from None
        self.raw = raw
        self._values: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        """The field parsed; a 400 `ProxyRefusal` when it cannot be (nested deeper than orjson reads)."""
        if key not in self._values:
            try:
                self._values[key] = orjson.loads(memoryview(self.fields[key]))
            except orjson.JSONDecodeError as error:
                raise refuse_json(error) from None
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def bytes_of(self, key: str) -> bytes:
        value = self.fields.get(key)
        return bytes(value) if value is not None else b""

    def present(self, key: str) -> bool:
        """Whether the field is there and not empty (null, [], "", {}, false)."""
        value = self.fields.get(key)
        return value is not None and bytes(value).strip() not in _EMPTY

    def raw_list(self, key: str) -> RawList | None:
        """The field as a list of raw items, None when it is not a JSON array."""
        value = self.fields.get(key)
        if value is None:
            return None
        try:
            return RawList(_LIST.decode(value))
        except (msgspec.DecodeError, ValueError):
            return None
        except RecursionError as error:
            raise refuse_json(error) from None

    def encode(self, changes: Mapping[str, bytes | None]) -> bytes:
        """The body with some fields replaced by these JSON bytes (None: left out) and the rest as
        they came, in their order (new fields at the end)."""
        parts = []
        for key, value in self.fields.items():
            if key in changes:
                replaced = changes[key]
                if replaced is not None:
                    parts.append(orjson.dumps(key) + b":" + replaced)
            else:
                parts.append(orjson.dumps(key) + b":" + bytes(value))
        parts += [orjson.dumps(k) + b":" + v for k, v in changes.items() if k not in self.fields and v is not None]
        return b"{" + b",".join(parts) + b"}"


class RawList(Sequence[Any]):
    """Raw JSON items, each parsed on first access and kept."""

    def __init__(self, raws: Sequence[msgspec.Raw], parsed: dict[int, Any] | None = None) -> None:
        self.raws = list(raws)
        self._parsed: dict[int, Any] = parsed or {}

    @classmethod
    def of(cls, values: Sequence[Any]) -> RawList:
        """A list made from values already parsed (a Responses string input, the lead messages)."""
        raws = [msgspec.Raw(orjson.dumps(v)) for v in values]
        return cls(raws, dict(enumerate(values)))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.raws)))]
        if index < 0:
            index += len(self.raws)
        if index not in self._parsed:
            try:
                self._parsed[index] = orjson.loads(memoryview(self.raws[index]))
            except orjson.JSONDecodeError as error:
                raise refuse_json(error) from None
        return self._parsed[index]

    def __len__(self) -> int:
        return len(self.raws)

    def split(self, count: int) -> tuple[RawList, RawList]:
        head = RawList(self.raws[:count], {i: v for i, v in self._parsed.items() if i < count})
        tail = RawList(self.raws[count:], {i - count: v for i, v in self._parsed.items() if i >= count})
        return head, tail

    def encoded(self) -> list[bytes]:
        return [bytes(r) for r in self.raws]


def json_array(items: Sequence[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def append_to_array(array: bytes, item: bytes) -> bytes | None:
    """A JSON array's bytes with one more item at the end (None: `array` is not a JSON array)."""
    body = array.rstrip()
    if not body.endswith(b"]"):
        return None
    inner = body[:-1].rstrip()
    return inner + (b"" if inner.endswith(b"[") else b",") + item + b"]"
