"""OpenAI's BPE encodings (cl100k_base, o200k_base), loaded from the files vendored in `data/`.

`tiktoken.get_encoding` downloads its rank files on first use, which fails without network. We build
`tiktoken.Encoding` ourselves from the vendored ranks instead, with tiktoken's own split patterns and
special tokens (copied below; a test checks them against `tiktoken_ext.openai_public`), after checking
the sha256 that tiktoken itself expects of each file.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import tiktoken

from ctxwin.errors import EncodingError


@dataclass(frozen=True, slots=True)
class EncodingSpec:
    name: str
    file: str  # gzipped rank file in ctxwin/tokens/data
    sha256: str  # of the decompressed file: the `expected_hash` tiktoken uses for the same file
    pat_str: str
    special_tokens: dict[str, int]


_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

SPECS: dict[str, EncodingSpec] = {
    "cl100k_base": EncodingSpec(
        name="cl100k_base",
        file="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": EncodingSpec(
        name="o200k_base",
        file="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}

# Short names people use for the same encodings.
ALIASES = {"cl100k": "cl100k_base", "o200k": "o200k_base"}


def read_ranks(spec: EncodingSpec, data_dir: Path | None = None) -> dict[bytes, int]:
    """The mergeable ranks of `spec`, read from the vendored file (in `data_dir` instead, if given),
    after checking its sha256."""
    source = resources.files("ctxwin.tokens").joinpath("data", spec.file) if data_dir is None else data_dir / spec.file
    try:
        packed = source.read_bytes()
    except FileNotFoundError as error:
        raise EncodingError(f"the vendored encoding file {spec.file} is missing",
                            "reinstall ctxwin; the file ships in ctxwin/tokens/data") from error
    try:
        raw = gzip.decompress(packed)
    except (OSError, EOFError) as error:  # not gzip, or cut short
        raise EncodingError(f"{spec.file} is not a readable gzip file ({error})",
                            "the file is corrupt; reinstall ctxwin") from error
    digest = hashlib.sha256(raw).hexdigest()
    if digest != spec.sha256:
        raise EncodingError(f"{spec.file} has sha256 {digest[:12]}…, expected {spec.sha256[:12]}…",
                            "the file is corrupt; reinstall ctxwin")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def build_encoding(name: str, data_dir: Path | None = None) -> tiktoken.Encoding:
    """A fresh `tiktoken.Encoding` for `name` (about half a second; use `get_encoding` to share one),
    from the vendored rank file (or the one in `data_dir`). Never touches the network or tiktoken's
    download cache."""
    spec = SPECS.get(ALIASES.get(name, name))
    if spec is None:
        raise EncodingError(f"unknown encoding {name!r}", f"use one of {', '.join(SPECS)}")
    return tiktoken.Encoding(spec.name, pat_str=spec.pat_str, mergeable_ranks=read_ranks(spec, data_dir),
                             special_tokens=dict(spec.special_tokens))


# A process-wide cache of built encodings. It holds immutable data that takes ~0.5 s and ~100 MB to
# build, and every counter of the same encoding can share it (tiktoken's `Encoding` is thread-safe);
# building it once per counter instead would make each new session pay that cost again. Nothing
# here is ever mutated after it is stored, so it is a cache, not state.
_ENCODINGS: dict[str, tiktoken.Encoding] = {}
_LOCK = threading.Lock()


def get_encoding(name: str) -> tiktoken.Encoding:
    """The shared encoding for `name` ("cl100k_base", "o200k_base" or their short names), built on
    first use."""
    key = ALIASES.get(name, name)
    encoding = _ENCODINGS.get(key)
    if encoding is None:
        with _LOCK:
            encoding = _ENCODINGS.get(key)
            if encoding is None:
                encoding = _ENCODINGS[key] = build_encoding(key)
    return encoding
