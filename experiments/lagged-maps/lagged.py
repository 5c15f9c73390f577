"""Shared pieces of the lagged-map experiment: calibration rows, ridge maps, and K/V from a layer input.

The maps here are plain ridge (λ chosen per layer on held-out rows from the fit's grid, no
identity blend), fitted from rows kept in memory: an experiment beside the fork, not the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from ridgefill.fit import windows as calib_windows
from ridgefill.sources import corpus
from ridgefill.fit.capture import CaptureConfig, assign
from ridgefill.fit.ridge import DEFAULT_GRID


def prefix_rows(model, tokens, layers, threads, n_batch=512) -> dict[int, np.ndarray]:
    """Exact layer inputs {layer: (len(tokens), d)} of a prompt (the full model, no fill)."""
    ctx = model.context(n_ctx=max(n_batch, len(tokens)), n_batch=n_batch, n_ubatch=n_batch, threads=threads,
                        capture=layers)
    rows = {il: [] for il in layers}
    ctx.prefill(tokens, on_chunk=lambda c, start, n: [rows[il].append(c.layer_input(il).copy()) for il in layers])
    return {il: np.concatenate(v) for il, v in rows.items()}


NEEDLE_TASKS = ["single/noise/number", "single/prose/number", "multivalue/noise/number", "multiquery/prose/number"]


def add_needle_args(ap) -> None:
    """The needle eval's items: the frontier's 24 at 4K by default, so records pair with its stores."""
    ap.add_argument("--lengths", default="4096")
    ap.add_argument("--items", default="6")
    ap.add_argument("--needle-tasks", nargs="+", default=NEEDLE_TASKS)


def run_needles(args, modes: list[str], out) -> int:
    """`ridgefill eval needle` over the registered variants `modes`, on add_needle_args' items (tail 1024)."""
    from ridgefill import cli

    return cli.main(["eval", "needle", "--model", args.model, "--split", str(args.split), "--sinks", str(args.sinks),
                     "--tail", "1024", "--lengths", args.lengths, "--needle-tasks", *args.needle_tasks,
                     "--items", args.items, "--modes", *modes, "--threads", str(args.threads), "--out", str(out)])


_prompt: tuple[bytes, dict] = (b"", {})


def prompt_rows(model, tokens, layers, threads) -> dict[int, np.ndarray]:
    """prefix_rows of one prompt, kept while the eval's variants of an item (one prompt) ask for it."""
    global _prompt
    key = tokens.tobytes()
    if _prompt[0] != key:
        _prompt = (key, prefix_rows(model, tokens, layers, threads))
    return _prompt[1]


class Overwrite:
    """An eval hook: the K/V of the filled rows [lo, hi) of every layer after the split, made by that layer's
    own projections of inputs(rows, lo, hi) = {layer: (hi - lo, d)}, given the prompt's exact layer inputs
    (inputs None: those exact inputs, the control)."""

    def __init__(self, kv, split: int, threads: int, inputs=None):
        self.kv, self.split, self.threads, self.inputs = kv, split, threads, inputs

    def __call__(self, head) -> None:
        lo, hi = head.fill_range
        if hi <= lo:
            return
        layers = range(self.split + 1, head.ctx.model.n_layer)
        rows = prompt_rows(head.ctx.model, head.tokens[:hi], [self.split, *layers], self.threads)
        h = {il: rows[il][lo:hi] for il in layers} if self.inputs is None else self.inputs(rows, lo, hi)
        for il in layers:
            k, v = self.kv[il](h[il], np.arange(lo, hi))
            head.ctx.state_set(il, "k", k.astype(np.float32), lo, hi, head.seq_id)
            head.ctx.state_set(il, "v", v.astype(np.float32), lo, hi, head.seq_id)


def calibration_rows(model, cfg: CaptureConfig, layers):
    """((train rows, train previous rows), (held-out rows, held-out previous rows)), each {layer: array}:
    the rows `ridgefill fit` would see (default corpus, calib_windows, sinks excluded)."""
    train_docs, held_docs = assign(corpus.default_calibration(), cfg)
    n_held = int(cfg.tokens * cfg.heldout_frac)
    bos = model.bos if model.add_bos else None
    out = []
    for docs, budget, seed in ((train_docs, cfg.tokens - n_held, cfg.seed), (held_docs, n_held, cfg.seed + 1)):
        cur, prev = {il: [] for il in layers}, {il: [] for il in layers}
        for w in calib_windows.plan(docs, model.tokenize, bos, cfg.window, budget, cfg.min_piece, seed):
            if len(w.tokens) < cfg.sinks + 16:
                continue
            full = prefix_rows(model, w.tokens, layers, cfg.threads, cfg.n_batch)
            for il in layers:
                cur[il].append(full[il][cfg.sinks:])
                prev[il].append(full[il][cfg.sinks - 1 : -1])
        out.append(({il: np.concatenate(v) for il, v in cur.items()}, {il: np.concatenate(v) for il, v in prev.items()}))
    return out


def ridge(xtr, ytr, xho, yho) -> tuple[np.ndarray, np.ndarray, float]:
    """(W (d_in, d_out), b, held-out R²): ridge with λ (scaled by tr(Cxx)/d_in) best on the held-out rows."""
    mx, my = xtr.mean(0), ytr.mean(0)
    xc = (xtr - mx).astype(np.float64)
    cxx = xc.T @ xc / len(xc)
    lam, v = np.linalg.eigh(cxx)
    lam = np.maximum(lam, 0)
    a = v.T @ (xc.T @ (ytr - my) / len(xc))
    scale = np.trace(cxx) / len(mx)
    sst = ((yho - yho.mean(0)) ** 2).sum()
    best = (None, None, -np.inf)
    for g in DEFAULT_GRID:
        w = v @ (a / (lam + g * scale)[:, None])
        b = my - mx @ w
        r2 = 1 - ((yho - (xho @ w + b)) ** 2).sum() / sst
        if r2 > best[2]:
            best = (w, b, float(r2))
    return best


@dataclass
class AttnKV:
    """One layer's K/V projections as llama.cpp computes them for the cache (llama and qwen2 archs, f32 here)."""

    norm: np.ndarray
    wk: np.ndarray  # (d, n_head_kv * head_dim)
    wv: np.ndarray
    eps: float
    head_dim: int
    freq_base: float
    bk: np.ndarray | float = 0.0  # qwen2's K/V biases
    bv: np.ndarray | float = 0.0
    neox: bool = False  # qwen2 rotates the halves (LLAMA_ROPE_TYPE_NEOX), llama adjacent pairs

    def __call__(self, h: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hn = self.normed(h)
        k, v = hn @ self.wk + self.bk, hn @ self.wv + self.bv
        rope = rope_neox if self.neox else rope_norm
        return rope(k.reshape(len(h), -1, self.head_dim), pos, self.freq_base).reshape(k.shape), v

    def normed(self, h: np.ndarray) -> np.ndarray:
        return h / np.sqrt((h.astype(np.float64) ** 2).mean(1, keepdims=True) + self.eps) * self.norm

    def values(self, h: np.ndarray) -> np.ndarray:
        return self.normed(h) @ self.wv + self.bv


def _angles(pos: np.ndarray, dim: int, base: float):
    theta = pos[:, None].astype(np.float64) * base ** (-np.arange(0, dim, 2) / dim)[None, :]
    return np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]


def rope_norm(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """llama.cpp's LLAMA_ROPE_TYPE_NORM: rotate adjacent pairs (x[2i], x[2i+1]) by pos·base^(-2i/dim)."""
    c, s = _angles(pos, x.shape[-1], base)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x, dtype=np.float64)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rope_neox(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """LLAMA_ROPE_TYPE_NEOX: rotate the pairs (x[i], x[i + dim/2]) by pos·base^(-2i/dim)."""
    half = x.shape[-1] // 2
    c, s = _angles(pos, x.shape[-1], base)
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def attn_kv(gguf_path, layers) -> dict[int, AttnKV]:
    r = gguf.GGUFReader(gguf_path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    field = lambda k: float(r.fields[f"{arch}.{k}"].parts[-1][0])
    t = {x.name: x for x in r.tensors}

    def mat(name):
        x = t[name]
        return gguf.quants.dequantize(x.data, x.tensor_type).reshape(int(x.shape[1]), int(x.shape[0])).T

    def vec(name):
        return np.asarray(t[name].data, np.float32) if name in t else 0.0

    if f"{arch}.rope.dimension_count" in r.fields:
        head_dim = int(field("rope.dimension_count"))
    else:
        head_dim = int(field("embedding_length")) // int(field("attention.head_count"))
    return {il: AttnKV(np.asarray(t[f"blk.{il}.attn_norm.weight"].data, np.float32), mat(f"blk.{il}.attn_k.weight"),
                       mat(f"blk.{il}.attn_v.weight"), field("attention.layer_norm_rms_epsilon"), head_dim,
                       field("rope.freq_base"), vec(f"blk.{il}.attn_k.bias"), vec(f"blk.{il}.attn_v.bias"),
                       neox=arch != "llama")
            for il in layers}
