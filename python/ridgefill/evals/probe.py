"""The probe of the selection splices: one exact pass of a prompt with every layer up to the split captured,
and the attention scores computed from those layer inputs (numpy, fit/attention.py), kept for the variants of
one item: what the prompt's last rows pay each row (attention_paid), and what each row pays rows already
chosen (CausalAttention.paid_to, a hop)."""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import InputError
from ..fit.attention import CausalAttention, attention_layers, attention_paid
from .prefill import Head

HOP_GAP = 64  # what a row pays its neighbours says nothing about what it reads from afar


class Probe:
    """Layer inputs of the last prompt seen (one exact pass, every layer up to the split captured) and the
    attention scores computed from them, per layer and probe size."""

    def __init__(self):
        self.key, self.inputs, self.scores, self.causal = None, {}, {}, {}
        self._ctx, self._layers = {}, {}

    def scores_of(self, head: Head, layers: tuple[int, ...], probe_rows: int) -> np.ndarray:
        ctx, split = head.ctx, head.ctx.fill_split
        bad = [il for il in layers if not 0 <= il <= split]
        if bad:
            raise InputError(f"probe layer(s) {bad}: the fill computes keys exactly only up to the split layer {split}")
        self._capture(head, split)
        attn = self.attention(ctx.model, split)
        out = None
        for il in layers:
            if il not in attn:
                raise InputError(f"probe layer {il} of {ctx.model.arch} has no attention")
            if attn[il].window:
                raise InputError(f"probe layer {il} attends within a {attn[il].window}-row window: it cannot see "
                                 "the filled rows from the prompt's end")
            if (il, probe_rows) not in self.scores:
                self.scores[il, probe_rows] = attention_paid(attn[il], self.inputs[il], probe_rows)
            s = self.scores[il, probe_rows]
            out = s if out is None else np.maximum(out, s)
        return out

    def paid_to(self, head: Head, layers: tuple[int, ...], chosen: np.ndarray) -> np.ndarray:
        """(N,): what each row pays the rows `chosen` (CausalAttention.paid_to), the largest over `layers`, from
        the inputs scores_of captured."""
        attn = self.attention(head.ctx.model, head.ctx.fill_split)
        out = None
        for il in layers:
            if il not in self.causal:
                self.causal[il] = CausalAttention(attn[il], self.inputs[il])
            s = self.causal[il].paid_to(chosen, HOP_GAP)
            out = s if out is None else np.maximum(out, s)
        return out

    def _capture(self, head: Head, split: int) -> None:
        ctx = head.ctx
        key = (ctx.model.source, hashlib.sha1(head.tokens.tobytes()).hexdigest(), split)
        if key == self.key:
            return
        k = (ctx.model.source, ctx.n_ctx, ctx.n_batch, ctx.n_ubatch, split)
        if k not in self._ctx:
            self._ctx.clear()  # one capture context at a time
            self._ctx[k] = ctx.model.context(n_ctx=ctx.n_ctx, n_batch=ctx.n_batch, n_ubatch=ctx.n_ubatch,
                                             threads=ctx.threads, kv_type=ctx.kv_type, flash_attn=ctx.flash_attn,
                                             capture=range(split + 1))
        cap = self._ctx[k]
        cap.seq_rm(0)
        n, d = len(head.tokens), ctx.model.n_embd
        self.inputs = {il: np.empty((n, d), np.float32) for il in range(split + 1)}
        for start, m in cap.decode_chunks(head.tokens, 0, 0, "none"):
            for il in range(split + 1):
                self.inputs[il][start : start + m] = cap.layer_input(il)
        cap.seq_rm(0)
        self.key, self.scores, self.causal = key, {}, {}

    def attention(self, model, split: int):
        key = (model.source, split)
        if key not in self._layers:
            self._layers = {key: attention_layers(model.path, list(range(split + 1)))}
        return self._layers[key]


PROBE = Probe()
