"""Pythonic wrapper of ridgefill._core: models, contexts, prefill, scoring and capture."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from . import _core
from .errors import InputError, LoadError, MissingFile

GGUF_MAGIC = b"GGUF"

# architectures whose graph builders record each layer's input (upstream + patch 0003);
# capture on any other architecture would abort inside llama.cpp, so it is refused here
CAPTURE_ARCHS = frozenset({"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "qwen35", "qwen35moe", "qwen3next"})


def version() -> str:
    """libllama's version string; the fork's ends in '+ridgefill'."""
    return _core.version()


def _check_gguf_file(path: Path) -> None:
    if not path.exists():
        raise MissingFile(f"model file not found: {path}")
    if not path.is_file():
        raise InputError(f"model path is not a file: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise InputError(f"{path} is not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")


class Model:
    """A loaded GGUF model. Cheap to share between contexts."""

    def __init__(self, path: str | os.PathLike, n_gpu_layers: int = 0, use_mmap: bool = True):
        self.path = Path(path)
        _check_gguf_file(self.path)
        try:
            self._m = _core.Model(str(self.path), n_gpu_layers=n_gpu_layers, use_mmap=use_mmap)
        except RuntimeError as err:
            raise LoadError(str(err)) from None
        self._meta: dict[str, str] | None = None

    @property
    def metadata(self) -> dict[str, str]:
        if self._meta is None:
            self._meta = dict(self._m.metadata())
        return self._meta

    @property
    def arch(self) -> str:
        return self.metadata.get("general.architecture", "")

    n_layer = property(lambda self: self._m.n_layer)
    n_embd = property(lambda self: self._m.n_embd)
    n_head = property(lambda self: self._m.n_head)
    n_head_kv = property(lambda self: self._m.n_head_kv)
    n_vocab = property(lambda self: self._m.n_vocab)
    n_ctx_train = property(lambda self: self._m.n_ctx_train)
    bos = property(lambda self: self._m.bos)
    eos = property(lambda self: self._m.eos)
    add_bos = property(lambda self: self._m.add_bos)  # whether the vocab starts sequences with BOS
    # ridgefill.* metadata (split layer 0 = no maps)
    rf_split_layer = property(lambda self: self._m.rf_split_layer)
    rf_sink_rows = property(lambda self: self._m.rf_sink_rows)
    rf_tail_rows = property(lambda self: self._m.rf_tail_rows)

    @property
    def head_dim(self) -> int:
        """Width of one key head (the K cache holds n_head_kv of them per row)."""
        key = self.metadata.get(f"{self.arch}.attention.key_length")
        return int(key) if key else self.n_embd // self.n_head

    def info(self) -> dict:
        return {
            "path": str(self.path),
            "arch": self.arch,
            "desc": self._m.desc,
            "n_layer": self.n_layer,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "n_vocab": self.n_vocab,
            "n_ctx_train": self.n_ctx_train,
            "n_params": self._m.n_params,
            "size_bytes": self._m.size,
            "metadata_keys": sorted(self.metadata),
        }

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        return self._m.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int] | np.ndarray, special: bool = False) -> str:
        return self._m.detokenize_bytes(np.asarray(tokens, dtype=np.int32), special=special).decode("utf-8", "replace")

    def context(self, **kwargs) -> "Context":
        return Context(self, **kwargs)


@dataclass
class PrefillResult:
    n_tokens: int
    seconds: float
    logits: np.ndarray  # last row's logits, (n_vocab,)
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (start, length) of each decode call
    n_filled: int = 0  # rows that ran the fill graph
    n_full: int = 0  # rows that ran the full model
    fill_range: tuple[int, int] = (0, 0)  # positions [p0, p1) that were eligible for fill


def fill_range(n_tokens: int, sinks: int, tail: int, pos0: int = 0) -> tuple[int, int]:
    """Filled positions [pos0+k, pos0+N-T) of a prompt; empty when N - T <= k."""
    if sinks < 0 or tail < 0:
        raise InputError(f"sinks and tail must be >= 0 (got sinks={sinks}, tail={tail})")
    lo, hi = pos0 + sinks, pos0 + n_tokens - tail
    return (lo, hi) if hi > lo else (0, 0)


def nothing_filled(n_tokens: int, sinks: int, tail: int) -> str | None:
    """A warning when a prompt of n_tokens has no row to fill (tail >= N - sinks), else None."""
    if fill_range(n_tokens, sinks, tail) != (0, 0):
        return None
    return (f"WARNING: a {n_tokens}-token prompt with {sinks} sinks and tail {tail} fills nothing "
            f"(tail >= N - sinks): every fill mode runs the exact model there")


def head_stop(n_tokens: int, tail: int) -> int:
    """First tail row of a split prefill; the last row always belongs to the tail (it carries an output)."""
    return max(0, min(n_tokens - tail, n_tokens - 1))


class Context:
    """An inference context: KV cache, batch sizes, threads, optional layer-input capture."""

    def __init__(
        self,
        model: Model,
        n_ctx: int = 4096,
        n_batch: int = 2048,
        n_ubatch: int | None = None,
        threads: int | None = None,
        flash_attn: str = "auto",
        kv_type: str = "f16",
        capture: Iterable[int] = (),
        n_seq_max: int = 1,
    ):
        self.model = model
        self.threads, self.flash_attn, self.kv_type = threads, flash_attn, kv_type
        self.capture = sorted(set(int(i) for i in capture))
        if self.capture and model.arch not in CAPTURE_ARCHS:
            raise InputError(f"layer-input capture is not supported for architecture {model.arch!r} "
                             f"(supported: {', '.join(sorted(CAPTURE_ARCHS))})")
        try:
            self._c = _core.Context(
                model._m,
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=min(512, n_batch) if n_ubatch is None else n_ubatch,
                n_threads=threads or os.cpu_count() or 1,
                flash_attn=flash_attn,
                type_k=kv_type,
                type_v=kv_type,
                capture_layers=self.capture,
                n_seq_max=n_seq_max,
            )
        except ValueError as err:
            raise InputError(str(err)) from None
        except RuntimeError as err:
            raise LoadError(str(err)) from None

    n_ctx = property(lambda self: self._c.n_ctx)
    n_batch = property(lambda self: self._c.n_batch)
    n_ubatch = property(lambda self: self._c.n_ubatch)

    def decode(self, tokens, pos0: int, seq_id: int = 0, outputs="last") -> None:
        """One llama_decode call of at most n_batch tokens; see decode_chunks() for longer inputs."""
        self._c.decode(np.asarray(tokens, dtype=np.int32), pos0, seq_id, outputs)

    def decode_chunks(self, tokens, pos0: int = 0, seq_id: int = 0, outputs="none") -> Iterator[tuple[int, int]]:
        """Decode `tokens` at positions pos0.. in n_batch chunks, yielding (start, n) after each call
        (read its logits or log-probabilities then). outputs: 'none', 'all', 'last' (the last row of
        all tokens) or a boolean mask over the tokens."""
        tokens = np.asarray(tokens, dtype=np.int32)
        mask = None if isinstance(outputs, str) else np.asarray(outputs, dtype=bool)
        for start in range(0, len(tokens), self.n_batch):
            piece = tokens[start : start + self.n_batch]
            if mask is not None:
                out = mask[start : start + len(piece)]
            elif outputs == "last":
                out = "last" if start + len(piece) == len(tokens) else "none"
            else:
                out = outputs
            self._c.decode(piece, pos0 + start, seq_id, out)
            yield start, len(piece)

    def logits(self) -> np.ndarray:
        """Logits of the last decode's output rows, (n_outputs, n_vocab)."""
        return self._c.logits()

    def layer_input(self, layer: int, out: np.ndarray | None = None) -> np.ndarray:
        """Input of `layer` for every row of the last decode call, (n_tokens, n_embd) float32."""
        return self._c.layer_input(layer, out)

    # ---- split prefill ------------------------------------------------------------------

    def set_fill(self, mode: str = "exact", split: int | None = None) -> None:
        """Fill mode for later prefills: 'exact', 'identity' or 'ridge' at `split` (default: the maps')."""
        try:
            self._c.set_fill(mode, -1 if split is None else int(split))
        except ValueError as err:
            raise InputError(str(err)) from None

    fill_mode = property(lambda self: self._c.fill_mode)
    fill_split = property(lambda self: self._c.fill_split)

    def prefill(
        self,
        tokens,
        pos0: int = 0,
        seq_id: int = 0,
        on_chunk: Callable[["Context", int, int], None] | None = None,
        sinks: int | None = None,
        tail: int | None = None,
        before_tail: Callable[["Context"], None] | None = None,
    ) -> PrefillResult:
        """Decode a prompt of any length in n_batch chunks; logits of the last row only.

        With a fill mode set, rows [k, N-T) are filled (k = sinks, T = tail; defaults from the
        model's ridgefill metadata); the first k and last T rows run the full model.
        `on_chunk(ctx, start, n)` runs after each decode call, e.g. to read captured layer inputs.
        `before_tail(ctx)` runs once the rows before the tail are in the cache and before the tail
        is decoded (in every mode, so that exact and fill runs see the same batches), e.g. to
        splice exact K/V into the filled rows.
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        if before_tail is None:
            sinks, tail = self._sinks_tail(sinks, tail)
            rng = (0, 0) if self.fill_mode == "exact" else fill_range(len(tokens), sinks, tail, pos0)
            with self._filling(seq_id, rng):
                res = self._prefill(tokens, pos0, seq_id, on_chunk)
        else:
            head = self.prefill_head(tokens, sinks, tail, pos0, seq_id, on_chunk)
            before_tail(self)
            stop = head.n_tokens
            res = self._prefill(tokens[stop:], pos0 + stop, seq_id, on_chunk, offset=stop)
            res.n_tokens, rng = len(tokens), head.fill_range
        res.n_filled, res.n_full = self._c.fill_counts()
        res.fill_range = rng
        return res

    def prefill_head(self, tokens, sinks: int | None = None, tail: int | None = None, pos0: int = 0, seq_id: int = 0,
                     on_chunk: Callable[["Context", int, int], None] | None = None) -> PrefillResult:
        """The first phase of a split prefill: rows [0, N-T) with no outputs, rows [k, N-T) filled.

        The rest of the prompt (the tail, from row head.n_tokens on) is for the caller to
        decode, e.g. with token_logprobs() outputs, after reading or splicing the cache.
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise InputError("prefill needs a non-empty 1-D token array")
        sinks, tail = self._sinks_tail(sinks, tail)
        stop = head_stop(len(tokens), tail)
        rng = (0, 0) if self.fill_mode == "exact" else fill_range(stop, sinks, 0, pos0)
        if stop == 0:  # a one-row prompt: all tail
            self._c.reset_fill_counts()
            res = PrefillResult(0, 0.0, np.empty(0, np.float32), [])
        else:
            with self._filling(seq_id, rng):
                res = self._prefill(tokens[:stop], pos0, seq_id, on_chunk, last_output=False)
        res.n_filled, res.n_full = self._c.fill_counts()
        res.fill_range = rng
        return res

    def token_logprobs(self, targets) -> np.ndarray:
        """log p(targets[i]) under output row i of the last decode call (float64)."""
        return self._c.token_logprobs(np.asarray(targets, dtype=np.int32))

    def _sinks_tail(self, sinks: int | None, tail: int | None) -> tuple[int, int]:
        return (self.model.rf_sink_rows if sinks is None else sinks, self.model.rf_tail_rows if tail is None else tail)

    @contextmanager
    def _filling(self, seq_id: int, rng: tuple[int, int]):
        """Fill positions [rng) of seq_id while decoding inside (row counts from zero); later decodes run exact."""
        self._c.set_fill_range(seq_id, *rng)
        self._c.reset_fill_counts()
        try:
            yield
        finally:
            self._c.set_fill_range(seq_id, 0, 0)

    def _prefill(self, tokens, pos0, seq_id, on_chunk, last_output: bool = True, offset: int = 0) -> PrefillResult:
        """`offset`: index of tokens[0] in the caller's prompt (on_chunk gets prompt indices)."""
        if tokens.ndim != 1 or len(tokens) == 0:
            raise InputError("prefill needs a non-empty 1-D token array")
        if pos0 + len(tokens) > self.n_ctx:
            raise InputError(f"prompt of {len(tokens)} tokens at position {pos0} does not fit n_ctx={self.n_ctx}")
        chunks = []
        t0 = time.perf_counter()
        for start, n in self.decode_chunks(tokens, pos0, seq_id, "last" if last_output else "none"):
            chunks.append((offset + start, n))
            if on_chunk is not None:
                on_chunk(self, offset + start, n)
        seconds = time.perf_counter() - t0
        logits = self._c.logits()[0] if last_output else np.empty(0, np.float32)
        return PrefillResult(len(tokens), seconds, logits, chunks)

    def continuation_logprobs(self, prefix, continuation, seq_id: int = 0) -> np.ndarray:
        """log p(continuation[i] | prefix, continuation[:i]) for every i, after clearing `seq_id`.

        The primitive for every loss metric: the prefix is decoded without outputs, the
        continuation with outputs on every row that predicts a continuation token.
        """
        prefix = np.asarray(prefix, dtype=np.int32)
        cont = np.asarray(continuation, dtype=np.int32)
        if len(prefix) == 0 or len(cont) == 0:
            raise InputError("prefix and continuation must both be non-empty")
        seq = np.concatenate([prefix, cont])
        if len(seq) > self.n_ctx:
            raise InputError(f"{len(seq)} tokens do not fit n_ctx={self.n_ctx}")
        self.seq_rm(seq_id)
        # rows [len(prefix)-1, len(seq)-1) predict the continuation tokens
        first = len(prefix) - 1
        rows = np.arange(len(seq) - 1)
        out = np.empty(len(cont), dtype=np.float64)
        for start, n in self.decode_chunks(seq[:-1], 0, seq_id, rows >= first):
            idx = rows[start : start + n][rows[start : start + n] >= first] - first
            if len(idx):
                out[idx] = self._c.token_logprobs(cont[idx])
        return out

    def greedy(self, prompt, n_new: int, seq_id: int = 0, stop: Sequence[int] = (),
               sinks: int | None = None, tail: int | None = None) -> list[int]:
        """Clear `seq_id`, prefill `prompt` (sinks/tail as in prefill), then decode greedily (argmax)
        up to n_new tokens; every decoding step runs the full model."""
        self.seq_rm(seq_id)
        res = self.prefill(prompt, seq_id=seq_id, sinks=sinks, tail=tail)
        return self.greedy_continue(res.logits, len(prompt), n_new, seq_id, stop)

    def greedy_continue(self, logits: np.ndarray, pos: int, n_new: int, seq_id: int = 0,
                        stop: Sequence[int] = ()) -> list[int]:
        """Up to n_new greedy tokens after a prompt of `pos` rows whose last row gave `logits`."""
        out: list[int] = []
        stops = {int(s) for s in stop} | {self.model.eos}
        for _ in range(n_new):
            tok = int(np.argmax(logits))
            if tok in stops or pos >= self.n_ctx:
                break
            out.append(tok)
            self._c.decode(np.array([tok], dtype=np.int32), pos, seq_id, "last")
            logits = self._c.logits()[0]
            pos += 1
        return out

    # ---- cache access (splice tests) ----------------------------------------------------

    def state_get(self, layer: int, part: str, p0: int = 0, p1: int = -1, seq_id: int = 0) -> np.ndarray:
        """Cached rows of one layer as float32 (n_rows, row_size).

        part: 'k' or 'v' (rows at positions [p0, p1), in position order; p1 = -1: to the end)
        or 'conv' / 'ssm' (the sequence's recurrent state, one row). F32/F16 caches only.
        """
        return self._c.state_get(layer, part, seq_id, p0, p1)

    def state_set(self, layer: int, part: str, values: np.ndarray, p0: int = 0, p1: int = -1, seq_id: int = 0) -> int:
        """Overwrite what state_get(layer, part, p0, p1) returns; values must have its shape."""
        return self._c.state_set(layer, part, seq_id, p0, p1, np.asarray(values, dtype=np.float32))

    def clear(self) -> None:
        self._c.memory_clear()

    def seq_rm(self, seq_id: int = 0, p0: int = -1, p1: int = -1) -> bool:
        return self._c.seq_rm(seq_id, p0, p1)

    def seq_pos_max(self, seq_id: int = 0) -> int:
        return self._c.seq_pos_max(seq_id)

    def perf(self) -> dict:
        return dict(self._c.perf())

    def perf_reset(self) -> None:
        self._c.perf_reset()
