"""Offline exact counting: the vendored encodings load with no network and no tiktoken cache, match
tiktoken's own definitions, and a corrupt file is refused by its sha256."""

from __future__ import annotations

import gzip
import shutil
from importlib import resources
from pathlib import Path
from unittest import mock

import pytest
import tiktoken
from tiktoken_ext import openai_public

from ctxwin.tokens.encodings import SPECS, EncodingError, build_encoding, read_ranks


def _vendored(name: str) -> Path:
    return Path(str(resources.files("ctxwin.tokens").joinpath("data", SPECS[name].file)))


@pytest.mark.parametrize("name", list(SPECS))
def test_split_patterns_and_special_tokens_are_tiktokens_own(name: str) -> None:
    # tiktoken's definitions download the ranks; hand them an empty table to read the rest
    with mock.patch.object(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {}):
        theirs = getattr(openai_public, name)()
    assert SPECS[name].pat_str == theirs["pat_str"]
    assert SPECS[name].special_tokens == theirs["special_tokens"]


def test_encodings_load_with_an_empty_tiktoken_cache_and_no_network(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    # plain tiktoken would have to download (the autouse fixture makes that fail) ...
    with pytest.raises(Exception):  # noqa: B017 (requests' ConnectionError or our OSError, whichever surfaces)
        tiktoken.get_encoding("r50k_base")
    # ... ours builds from the vendored files, writes nothing to the cache and counts correctly
    for name in SPECS:
        encoding = build_encoding(name)
        assert len(encoding.encode_ordinary("hello world")) == 2
        assert encoding.n_vocab == max(SPECS[name].special_tokens.values()) + 1
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_vendored_file_is_refused(tmp_path: Path) -> None:
    spec = SPECS["cl100k_base"]
    raw = bytearray(gzip.decompress(_vendored("cl100k_base").read_bytes()))
    raw[1000] ^= 0x01  # one flipped bit in a copy (the package data stays untouched)
    (tmp_path / spec.file).write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(EncodingError, match="sha256"):
        read_ranks(spec, tmp_path)
    with pytest.raises(EncodingError, match="sha256"):
        build_encoding("cl100k_base", tmp_path)


def test_a_truncated_or_missing_file_is_refused(tmp_path: Path) -> None:
    spec = SPECS["o200k_base"]
    with pytest.raises(EncodingError, match="missing"):
        read_ranks(spec, tmp_path)
    (tmp_path / spec.file).write_bytes(_vendored("o200k_base").read_bytes()[:5000])
    with pytest.raises(EncodingError, match=r"corrupt|sha256"):
        read_ranks(spec, tmp_path)


def test_an_intact_copy_loads(tmp_path: Path) -> None:
    spec = SPECS["cl100k_base"]
    shutil.copy(_vendored("cl100k_base"), tmp_path / spec.file)
    assert len(read_ranks(spec, tmp_path)) == 100_256


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(EncodingError, match="unknown encoding"):
        build_encoding("p50k_base")
