"""An inference context (ridgefill._core.Context): KV cache, decoding, fill mode, cached rows; its
prompt-level methods (prefill, greedy, scoring) are split_prefill.SplitPrefill's, which it inherits."""

from __future__ import annotations

import os
from functools import cache
from typing import Iterable, Iterator

import numpy as np

from .. import _core
from ..errors import InputError, LoadError
from .split_prefill import PROBE_ROWS, SplitPrefill


@cache
def supported_archs() -> frozenset[str]:
    """Architectures whose graph builders have the fork's fill branch (llm_arch_supports_rf) and record
    each layer's input: the ones that can be fitted, filled and captured; read from the fork."""
    return frozenset(_core.rf_supported_archs())


class Context(SplitPrefill):
    """An inference context: KV cache, batch sizes, threads, optional layer-input capture; a prompt's split
    prefill and the scoring on it are SplitPrefill's methods."""

    def __init__(
        self,
        model,  # a runtime.Model
        n_ctx: int = 4096,
        n_batch: int = 2048,
        n_ubatch: int | None = None,
        threads: int | None = None,
        flash_attn: str = "auto",
        kv_type: str = "f16",
        capture: Iterable[int] = (),
        n_seq_max: int = 1,
        swa_full: bool = True,  # a sliding-window model caches every position (llama.cpp's default; selection needs it)
    ):
        self.model = model
        self.threads, self.flash_attn, self.kv_type = threads, flash_attn, kv_type
        self.capture = sorted(set(int(i) for i in capture))
        if self.capture and model.arch not in supported_archs():
            raise InputError(f"layer-input capture is not supported for architecture {model.arch!r} "
                             f"(supported: {', '.join(sorted(supported_archs()))})")
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
                swa_full=swa_full,
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

    def set_route(self, p: float) -> None:
        """Routed rows for later fills: of each fill ubatch, the ceil(p·n) rows of highest leverage
        (route.py) run every layer from the split on in full. 0 routes none."""
        try:
            self._c.set_route(float(p))
        except ValueError as err:
            raise InputError(str(err)) from None

    route = property(lambda self: self._c.route)
    routed_count = property(lambda self: self._c.routed_count)  # routed rows since the last reset_fill_counts

    def set_select(self, q: float, probe: int = PROBE_ROWS) -> None:
        """Selected rows for later prompts: the prompt's last `probe` rows (up to its output) score every
        filled row by their attention at the exact layers; the top ceil(q·n) of the n filled rows run every
        layer from the split on in full, then the probe rows run again (docs/fill-semantics.md). 0 selects none."""
        try:
            self._c.set_select(float(q), int(probe))
        except ValueError as err:
            raise InputError(str(err)) from None

    select = property(lambda self: self._c.select)
    probe = property(lambda self: self._c.probe)
    selected_count = property(lambda self: self._c.selected_count)  # selected rows since the last reset_fill_counts

    def select_scores(self) -> np.ndarray:
        """The last probe's scores over its sequence's positions (largest over the probe layers, not pooled)."""
        return self._c.select_scores()

    def selected_rows(self) -> np.ndarray:
        """The positions the last probe selected, ascending."""
        return self._c.selected_rows()

    def token_logprobs(self, targets) -> np.ndarray:
        """log p(targets[i]) under output row i of the last decode call (float64)."""
        return self._c.token_logprobs(np.asarray(targets, dtype=np.int32))

    def set_fill_range(self, seq_id: int, p0: int, p1: int) -> None:
        """Rows of seq_id at positions [p0, p1) take the fill path while a fill mode is set; p1 <= p0 clears."""
        self._c.set_fill_range(seq_id, p0, p1)

    def fill_counts(self) -> tuple[int, int]:
        """(rows that ran the fill graph, rows that ran the full model) since the last reset."""
        return self._c.fill_counts()

    def reset_fill_counts(self) -> None:
        self._c.reset_fill_counts()


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
