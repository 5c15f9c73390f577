"""Split prefill: the one orchestration of a prompt's head, hook and tail, and the scoring
built on it (continuation log-probabilities, greedy answers).

A prompt of N rows with sinks k and tail T: the head, rows [0, N-T), is decoded without
outputs, rows [k, N-T) through the fill graph when a fill mode is set; an optional hook then
reads or overwrites the cache; the tail, rows [N-T, N), runs the full model. Exact mode runs
the same phases with an empty fill range. `SplitPrefill` holds these methods once; runtime.Context,
which wraps the bindings, inherits them. The evaluations (evals.prefill) build on prefill_head().
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError

PROBE_ROWS = 64  # the prompt's last rows that select its filled rows (Context.set_select), as the fork defaults


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


class SplitPrefill:
    """A prompt's split prefill and the scoring on it, as methods of a context (runtime.Context): what they
    call on `self` is the bindings' decode, fill range, fill counts and logits."""

    def prefill(self, tokens, *, pos0: int = 0, seq_id: int = 0, sinks: int | None = None, tail: int | None = None,
                on_chunk: Callable | None = None, before_tail: Callable | None = None) -> PrefillResult:
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
                res = self._decode_rows(tokens, pos0, seq_id, on_chunk)
        else:
            head = self.prefill_head(tokens, sinks=sinks, tail=tail, pos0=pos0, seq_id=seq_id, on_chunk=on_chunk)
            before_tail(self)
            stop = head.n_tokens
            res = self._decode_rows(tokens[stop:], pos0 + stop, seq_id, on_chunk, offset=stop)
            res.n_tokens, rng = len(tokens), head.fill_range
        res.n_filled, res.n_full = self.fill_counts()
        res.fill_range = rng
        return res

    def prefill_head(self, tokens, *, sinks: int | None = None, tail: int | None = None, pos0: int = 0,
                     seq_id: int = 0, on_chunk: Callable | None = None, keep_range: bool = False) -> PrefillResult:
        """The first phase of a split prefill: rows [0, N-T) with no outputs, rows [k, N-T) filled.

        The rest of the prompt (the tail, from row head.n_tokens on) is for the caller to
        decode, e.g. with token_logprobs() outputs, after reading or splicing the cache.
        `keep_range`: the fill range stays set after the head, so that the tail's output call runs the
        selection probe (set_select) over the rows the head filled; the next prefill sets it anew.
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise InputError("prefill needs a non-empty 1-D token array")
        sinks, tail = self._sinks_tail(sinks, tail)
        stop = head_stop(len(tokens), tail)
        rng = (0, 0) if self.fill_mode == "exact" else fill_range(stop, sinks, 0, pos0)
        if stop == 0:  # a one-row prompt: all tail
            self.reset_fill_counts()
            res = PrefillResult(0, 0.0, np.empty(0, np.float32), [])
        else:
            with self._filling(seq_id, rng, keep=keep_range):
                res = self._decode_rows(tokens[:stop], pos0, seq_id, on_chunk, last_output=False)
        res.n_filled, res.n_full = self.fill_counts()
        res.fill_range = rng
        return res

    def continuation_logprobs(self, prefix, continuation, *, seq_id: int = 0) -> np.ndarray:
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
                out[idx] = self.token_logprobs(cont[idx])
        return out

    def greedy(self, prompt, n_new: int, *, seq_id: int = 0, stop: Sequence[int] = (), sinks: int | None = None,
               tail: int | None = None) -> list[int]:
        """Clear `seq_id`, prefill `prompt` (sinks/tail as in prefill), then decode greedily (argmax)
        up to n_new tokens; every decoding step runs the full model."""
        self.seq_rm(seq_id)
        res = self.prefill(prompt, seq_id=seq_id, sinks=sinks, tail=tail)
        return self.greedy_continue(res.logits, len(prompt), n_new, seq_id=seq_id, stop=stop)

    def greedy_continue(self, logits: np.ndarray, pos: int, n_new: int, *, seq_id: int = 0,
                        stop: Sequence[int] = ()) -> list[int]:
        """Up to n_new greedy tokens after a prompt of `pos` rows whose last row gave `logits`."""
        out: list[int] = []
        stops = {int(s) for s in stop} | {self.model.eos}
        for _ in range(n_new):
            tok = int(np.argmax(logits))
            if tok in stops or pos >= self.n_ctx:
                break
            out.append(tok)
            self.decode(np.array([tok], dtype=np.int32), pos, seq_id, "last")
            logits = self.logits()[0]
            pos += 1
        return out

    def _sinks_tail(self, sinks: int | None, tail: int | None) -> tuple[int, int]:
        return (self.model.rf_sink_rows if sinks is None else sinks, self.model.rf_tail_rows if tail is None else tail)

    @contextmanager
    def _filling(self, seq_id: int, rng: tuple[int, int], keep: bool = False):
        """Fill positions [rng) of seq_id while decoding inside (row counts from zero); later decodes run exact
        (`keep`: the range stays set after a clean exit; later rows lie after it and run exact all the same)."""
        self.set_fill_range(seq_id, *rng)
        self.reset_fill_counts()
        ok = False
        try:
            yield
            ok = True
        finally:
            if not (keep and ok):
                self.set_fill_range(seq_id, 0, 0)

    def _decode_rows(self, tokens, pos0, seq_id, on_chunk, last_output: bool = True, offset: int = 0) -> PrefillResult:
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
        logits = self.logits()[0] if last_output else np.empty(0, np.float32)
        return PrefillResult(len(tokens), seconds, logits, chunks)
