"""A layer's queries, keys and values as llama.cpp computes them, in numpy, from the GGUF's weights.

The fill's numpy reference for what a layer writes and reads: the pre-attention RMS norm, the Q/K/V
projections (with qwen2's biases), per-head q/k norms (qwen3, qwen3moe, gemma3), RoPE at each row's
position (adjacent pairs for llama, halves for the others, on the first n_rot dimensions, linear
frequency scaling), and the factor on q·k (1/sqrt(head_dim), or gemma3's query scale). Sliding-window
layers (gemma3's local layers) carry their window. `attention_paid` is what a row receives from the
prompt's last rows: the probe that selection scores rows by; `CausalAttention.paid_to` what each row pays a
set of rows (a selection's next hop).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

# llama.cpp's rope type per architecture (llama_model_rope_type): which pairs RoPE rotates. The hybrids' attention
# layers rotate halves too (qwen35's multi-section RoPE gives a text row the same angles as NEOX: tests/test_kv_fill.py)
NEOX = {"qwen2": True, "qwen3": True, "qwen3moe": True, "gemma3": True, "llama": False,
        "qwen35": True, "qwen35moe": True, "qwen3next": True}
# architectures whose attn_q projects each head's query and then its output gate, one after the other
Q_GATE = {"qwen35", "qwen35moe", "qwen3next"}


@dataclass
class AttentionLayer:
    layer: int
    norm: np.ndarray  # attn_norm weight (d,)
    eps: float
    wq: np.ndarray  # (n_head * head_dim, d), numpy order
    wk: np.ndarray  # (n_head_kv * head_dim, d)
    wv: np.ndarray
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    q_norm: np.ndarray | None  # per-head RMS norm weights (head_dim,)
    k_norm: np.ndarray | None
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    neox: bool
    freq_base: float
    freq_scale: float
    scale: float  # what q·k is multiplied by before the softmax
    window: int = 0  # sliding window (0: the layer attends to every earlier row)

    def normed(self, h: np.ndarray) -> np.ndarray:
        return _rms(h, self.eps) * self.norm

    def queries(self, h: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """(n, n_head, head_dim), RoPE applied, not scaled."""
        return self._project(self.normed(h), self.wq, self.bq, self.q_norm, self.n_head, pos)

    def keys(self, h: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """(n, n_head_kv, head_dim), RoPE applied: what the K cache holds."""
        return self._project(self.normed(h), self.wk, self.bk, self.k_norm, self.n_head_kv, pos)

    def values(self, h: np.ndarray) -> np.ndarray:
        """(n, n_head_kv * head_dim): what the V cache holds."""
        v = self.normed(h) @ self.wv.T
        return v if self.bv is None else v + self.bv

    def keys_pre_rope(self, h: np.ndarray) -> np.ndarray:
        """(n, n_head_kv * head_dim): the keys before RoPE (what a K/V map predicts; RoPE is applied after)."""
        return self._heads(self.normed(h), self.wk, self.bk, self.k_norm, self.n_head_kv).reshape(len(h), -1)

    def _heads(self, x, w, b, head_norm, n_heads):
        y = x @ w.T
        if b is not None:
            y = y + b
        y = y.reshape(len(x), n_heads, self.head_dim)
        return y if head_norm is None else _rms(y, self.eps) * head_norm

    def _project(self, x, w, b, head_norm, n_heads, pos):
        y = self._heads(x, w, b, head_norm, n_heads)
        return rope(y, np.asarray(pos), self.n_rot, self.freq_base, self.freq_scale, self.neox)


def _rms(x: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, freq_scale: float = 1.0,
         neox: bool = True) -> np.ndarray:
    """ggml_rope_ext without YaRN: the first n_rot dimensions of each head rotated by
    pos·freq_scale·base^(-2i/n_rot); pairs (x[i], x[i + n_rot/2]) (neox) or (x[2i], x[2i+1])."""
    theta = (pos.astype(np.float64) * freq_scale)[:, None] * base ** (-np.arange(0, n_rot, 2) / n_rot)[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    out = x.astype(np.float64, copy=True)
    if neox:
        a, b = x[..., : n_rot // 2], x[..., n_rot // 2 : n_rot]
        out[..., : n_rot // 2], out[..., n_rot // 2 : n_rot] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2], out[..., 1:n_rot:2] = a * c - b * s, a * s + b * c
    return out


def attention_paid(layer: AttentionLayer, h: np.ndarray, probe_rows: int, pos0: int = 0) -> np.ndarray:
    """(N,) for rows t of h (the layer's inputs of a prompt's rows at positions pos0..): the largest share of
    attention that any head of the last `probe_rows` rows pays row t (causal softmax over every row it sees)."""
    n = len(h)
    p = min(int(probe_rows), n)
    if p < 1:
        raise InputError(f"the probe needs at least one row (got {probe_rows})")
    pos = np.arange(pos0, pos0 + n)
    k = layer.keys(h, pos).astype(np.float32)  # (n, kv, hd)
    q = layer.queries(h[n - p :], pos[n - p :]).astype(np.float32)  # (p, heads, hd)
    group = layer.n_head // layer.n_head_kv
    q = q.reshape(p, layer.n_head_kv, group, layer.head_dim)
    logits = np.einsum("pkgd,nkd->kgpn", q, k) * np.float32(layer.scale)  # (kv, group, p, n)
    rows, probes = np.arange(n), np.arange(n - p, n)
    hidden = rows[None, :] > probes[:, None]
    if layer.window:
        hidden |= probes[:, None] - rows[None, :] >= layer.window
    logits[..., hidden] = -np.inf
    logits -= logits.max(-1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(-1, keepdims=True)
    return w.max(axis=(0, 1, 2))


class CausalAttention:
    """One attention layer over one prompt's rows: the queries, the keys and each row's log-normalizer of its
    causal softmax over every row it sees, so that what any rows pay any others is a product away."""

    CHUNK = 256  # rows a step: (heads, CHUNK, n) floats

    def __init__(self, layer: AttentionLayer, h: np.ndarray, pos0: int = 0):
        n, pos = len(h), np.arange(pos0, pos0 + len(h))
        self.window, self.scale = layer.window, np.float32(layer.scale)
        group = layer.n_head // layer.n_head_kv
        self.k = np.ascontiguousarray(layer.keys(h, pos).astype(np.float32).transpose(1, 0, 2))  # (kv, n, hd)
        q = layer.queries(h, pos).astype(np.float32).reshape(n, layer.n_head_kv, group, layer.head_dim)
        self.q = np.ascontiguousarray(q.transpose(1, 2, 0, 3))  # (kv, group, n, hd)
        self.lse = np.empty(self.q.shape[:3], np.float32)
        for a in range(0, n, self.CHUNK):
            rows = np.arange(a, min(n, a + self.CHUNK))
            lg = self.logits(rows, np.arange(rows[-1] + 1))
            m = lg.max(-1, keepdims=True)
            np.exp(lg - m, out=lg)
            self.lse[..., rows] = m[..., 0] + np.log(lg.sum(-1))

    @property
    def n(self) -> int:
        return self.q.shape[2]

    def logits(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(kv, group, rows, cols): row's scaled q·k for col; -inf where the row does not see col."""
        lg = np.matmul(self.q[:, :, rows], self.k[:, None, cols].transpose(0, 1, 3, 2)) * self.scale
        hidden = cols[None, :] > rows[:, None]
        if self.window:
            hidden |= rows[:, None] - cols[None, :] >= self.window
        return np.where(hidden, np.float32(-np.inf), lg)

    def shares(self, rows: np.ndarray, cols: np.ndarray, gap: int = 0) -> np.ndarray:
        """(kv, group, rows, cols): the share of each head's attention row pays col, 0 within `gap` rows."""
        lg = self.logits(rows, cols)
        lg = np.where(rows[:, None] - cols[None, :] <= gap, np.float32(-np.inf), lg) if gap else lg
        return np.exp(lg - self.lse[:, :, rows, None])

    def paid_to(self, chosen: np.ndarray, gap: int) -> np.ndarray:
        """(n,): the largest share of its attention any head of each row pays the rows `chosen` more than `gap`
        rows before it, summed over them: a later row that reads a chosen one (a chain's next link)."""
        chosen = np.asarray(chosen, dtype=np.int64)
        out = np.zeros(self.n, np.float32)
        for a in range(0, self.n if len(chosen) else 0, self.CHUNK):
            rows = np.arange(a, min(self.n, a + self.CHUNK))
            out[rows] = self.shares(rows, chosen, gap).sum(-1).max(axis=(0, 1))
        return out


def attention_layers(path: str | os.PathLike, layers: list[int]) -> dict[int, AttentionLayer]:
    """The attention layers among `layers` of a GGUF, read and dequantized (float32)."""
    from ..format.gguf_io import field, open_gguf, tensor_array

    reader = open_gguf(path)
    arch = field(reader, "general.architecture")
    if arch not in NEOX:
        raise InputError(f"no numpy attention for architecture {arch!r} (one of {', '.join(sorted(NEOX))})")
    get = lambda key, default=None: _scalar(field(reader, f"{arch}.{key}"), default)
    n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
    n_head_kv = int(get("attention.head_count_kv", n_head))
    head_dim = int(get("attention.key_length", n_embd // n_head))
    scaling = field(reader, f"{arch}.rope.scaling.type") or "linear"
    if scaling not in ("none", "linear"):
        raise InputError(f"RoPE scaling {scaling!r} is not modelled here (none or linear)")
    factor = float(get("rope.scaling.factor", 0.0) or get("rope.scale_linear", 0.0) or 0.0)
    names = {t.name for t in reader.tensors}
    tensor = lambda name: tensor_array(reader, name).astype(np.float32) if name in names else None
    swa = _swa_layers(arch, get, int(get("block_count")))
    out = {}
    for il in layers:
        if f"blk.{il}.attn_k.weight" not in names:
            continue
        local = il in swa
        out[il] = AttentionLayer(
            il, tensor(f"blk.{il}.attn_norm.weight"), float(get("attention.layer_norm_rms_epsilon")),
            _queries(tensor(f"blk.{il}.attn_q.weight"), arch, n_head, head_dim),
            tensor(f"blk.{il}.attn_k.weight"), tensor(f"blk.{il}.attn_v.weight"),
            tensor(f"blk.{il}.attn_q.bias"), tensor(f"blk.{il}.attn_k.bias"), tensor(f"blk.{il}.attn_v.bias"),
            tensor(f"blk.{il}.attn_q_norm.weight"), tensor(f"blk.{il}.attn_k_norm.weight"),
            n_head, n_head_kv, head_dim, int(get("rope.dimension_count", head_dim)), NEOX[arch],
            float(get("rope.freq_base_swa", 10000.0)) if local else float(get("rope.freq_base", 10000.0)),
            1.0 if local else (1.0 / factor if factor else 1.0),
            _kq_scale(arch, n_embd, n_head, head_dim, int(get("block_count"))),
            int(get("attention.sliding_window", 0)) if local else 0)
    return out


def _queries(wq: np.ndarray, arch: str, n_head: int, head_dim: int) -> np.ndarray:
    """The query rows of attn_q (without a gated architecture's output-gate rows)."""
    if arch not in Q_GATE:
        return wq
    return np.ascontiguousarray(wq.reshape(n_head, 2, head_dim, -1)[:, 0].reshape(n_head * head_dim, -1))


def _scalar(value, default):
    return default if value is None else value


def _swa_layers(arch: str, get, n_layer: int) -> set[int]:
    """gemma3's local layers: all but every sliding_window_pattern-th (default 6), as llama.cpp sets them."""
    if arch != "gemma3" or not get("attention.sliding_window", 0):
        return set()
    pattern = get("attention.sliding_window_pattern", 6)
    if isinstance(pattern, (list, tuple)):
        return {il for il, local in enumerate(pattern) if local}
    n = int(pattern)
    return {il for il in range(n_layer) if n == 0 or il % n < n - 1}


def _kq_scale(arch: str, n_embd: int, n_head: int, head_dim: int, n_layer: int) -> float:
    if arch == "gemma3" and n_layer == 62:  # gemma3 27B scales queries by the model width per head
        return 1.0 / np.sqrt(n_embd / n_head)
    return 1.0 / np.sqrt(head_dim)
