"""Selection as a splice: the filled rows the prompt's question reads get exact keys and values.

After the head rows of a fill, a variant picks some filled rows and writes their exact K and V (and
nothing else) into every late layer (split+1 .. L-1), then the tail runs; the exact values are the
`exact-cut` cache's (splice.py). What it measures is how far a selector of a few rows brings the fill
towards exact before any of it is built into the fork. Three selectors, by name:

- `ridge-select{q}[-L{l}[+{l}...]|-Lall][-P{rows}][-{max|avg}{k}|-nopool]`: the top q % of the filled rows
  by the attention the prompt's last P rows (default 64) pay them at probe layer(s) l (default: the split
  layer; any layer up to it, whose keys the fill computes exactly; `Lall`: every one of them), from the layer's own norm, query
  projection and RoPE over its captured inputs (fit.attention.attention_paid: the largest share any head
  of any probe row pays a row; over several layers the largest of them), pooled over k neighbouring rows
  as SnapKV pools (default max over 7; `fwd{k}`: the largest of a row's and the k-1 rows' before it, so the
  rows after an attended row come with it; `nopool`: the rows' own scores); `-hop{h}`: then, h times, k more
  rows pooled around the filled row that pays the rows chosen so far the largest share of its attention at
  the same layers (probe.py, pairs more than HOP_GAP rows apart): a variable chain's next link names the
  previous variable, not the value the question asks for;
- `ridge-random{q}`: as many filled rows, uniformly at random (seeded by the prompt): the control;
- `ridge-evidence[{w}]`: the rows of the item's evidence (what its answers are read from), widened by w
  rows each side (default 4): the ceiling a perfect selector of those rows reaches.

Any of them with `-after` takes the fork's order instead of the splice's: the tail's rows before the last P run
first (over the plain fill), then the chosen rows get exact K/V, then the last P rows run (in the fork they run
again, which leaves their cache rows as this does): what a server can do, where the question arrives with the
prompt's last batch. Answers only (needles, RULER): the tail's first rows are decoded without outputs.

`identity-...` is the same on identity fill. Each record notes how many rows were chosen and which share
of the evidence rows inside the fill range they cover. The layer inputs come from one exact pass of the
whole prompt with every layer up to the split captured, kept for the item's variants (probe.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..fit.route import share_rows
from ..runtime import PROBE_ROWS
from .prefill import Head
from .probe import PROBE
from .session import Variant, register, register_parser
from .splice import _EXACT, ROW_PARTS, late_layers, layer_parts, write

POOL = ("max", 7)
EVIDENCE_WIDEN = 4
_NAME = re.compile(r"^(ridge|identity)-(?:(select|random)(\d+(?:\.\d+)?)|(evidence)(\d+)?)((?:-[A-Za-z0-9+]+)*)$")


@dataclass(frozen=True)
class Selector:
    kind: str  # select | random | evidence
    share: float = 0.0  # of the filled rows (select, random)
    layers: tuple[int, ...] | str = ()  # probe layers; () = the split layer, "all" = every attention layer up to it
    probe_rows: int = PROBE_ROWS
    pool: tuple[str, int] = POOL
    widen: int = EVIDENCE_WIDEN
    after: bool = False  # the fork's order: the tail before the last P rows first, then the splice
    hops: int = 0  # rounds of the rows that read the chosen ones (select)

    def count(self, n_filled: int) -> int:
        return share_rows(self.share, n_filled)


def parse(name: str) -> tuple[str, Selector] | None:
    """(mode, selector) of a selection variant's name; None when the name is not one."""
    m = _NAME.match(name)
    if m is None:
        return None
    mode, kind, pct, evidence, widen, opts = m.groups()
    opts = [o for o in opts.split("-") if o]
    after = "after" in opts
    opts = [o for o in opts if o != "after"]
    if evidence:
        if opts:
            raise InputError(f"{name}: the evidence ceiling takes no options but -after")
        return mode, Selector("evidence", widen=EVIDENCE_WIDEN if widen is None else int(widen), after=after)
    share = float(pct) / 100
    if not 0 < share <= 1:
        raise InputError(f"{name}: the selected share must be a percentage in (0, 100]")
    sel = Selector(kind, share, after=after)
    for opt in opts:
        if kind == "random":
            raise InputError(f"{name}: the random control takes no options but -after")
        sel = _option(name, sel, opt)
    return mode, sel


def _option(name: str, sel: Selector, opt: str) -> Selector:
    from dataclasses import replace

    if opt == "Lall":
        return replace(sel, layers="all")
    if re.fullmatch(r"L\d+(\+\d+)*", opt):
        return replace(sel, layers=tuple(sorted({int(x) for x in opt[1:].split("+")})))
    if re.fullmatch(r"P\d+", opt) and int(opt[1:]) > 0:
        return replace(sel, probe_rows=int(opt[1:]))
    if opt == "nopool":
        return replace(sel, pool=("none", 1))
    if re.fullmatch(r"hop\d+", opt) and int(opt[3:]) > 0:
        return replace(sel, hops=int(opt[3:]))
    m = re.fullmatch(r"(max|avg|fwd)(\d+)", opt)
    if m and (int(m.group(2)) % 2 == 1 or m.group(1) == "fwd") and int(m.group(2)) > 0:
        return replace(sel, pool=(m.group(1), int(m.group(2))))
    raise InputError(f"{name}: unknown option {opt!r} (L<layer>[+<layer>...], Lall, P<rows>, max<k>, avg<k> with k "
                     "odd, fwd<k>, nopool, hop<h>)")


def pooled(scores: np.ndarray, pool: tuple[str, int]) -> np.ndarray:
    """Each row's score pooled over the k rows centred on it (zero beyond the ends), as SnapKV pools; `fwd`: the
    largest score of the row and the k-1 rows before it, so the rows that follow an attended row come with it (an
    answer is read from the rows after the key the question matches)."""
    kind, k = pool
    if kind == "none" or k == 1:
        return scores
    if kind == "fwd":
        win = np.lib.stride_tricks.sliding_window_view(np.pad(scores, (k - 1, 0)), k)
        return win.max(1)
    pad = np.pad(scores, k // 2)
    win = np.lib.stride_tricks.sliding_window_view(pad, k)
    return win.max(1) if kind == "max" else win.mean(1)


def top_rows(scores: np.ndarray, lo: int, hi: int, count: int) -> np.ndarray:
    """The `count` rows of [lo, hi) with the highest scores (earlier rows first among ties), sorted."""
    order = np.argsort(-scores[lo:hi], kind="stable")[:count]
    return np.sort(order) + lo


def next_hop(chosen: np.ndarray, paid: np.ndarray, pool: tuple[str, int], lo: int, hi: int) -> np.ndarray:
    """`chosen` and the rows of [lo, hi) pooled around the one not chosen that pays them the most (`paid`), as
    many as the pool is wide."""
    s = paid.copy()
    s[chosen] = 0
    s = pooled(s, pool)
    s[chosen] = -1
    return np.union1d(chosen, top_rows(s, lo, hi, pool[1]))


def probe_layers(head: Head, sel: Selector) -> tuple[int, ...]:
    split = head.ctx.fill_split
    if sel.layers == "all":  # every layer up to the split that attends to the whole prompt
        attn = PROBE.attention(head.ctx.model, split)
        return tuple(il for il in range(split + 1) if il in attn and not attn[il].window)
    return sel.layers or (split,)


def chosen_rows(head: Head, sel: Selector) -> np.ndarray:
    lo, hi = head.fill_range
    if sel.kind == "evidence":
        if head.evidence is None:
            raise InputError("the evidence ceiling needs items that record their evidence rows (RULER, needles)")
        rows = {r for a, b in head.evidence for r in range(a - sel.widen, b + sel.widen)}
        return np.array(sorted(r for r in rows if lo <= r < hi), dtype=np.int64)
    count = sel.count(hi - lo)
    if sel.kind == "random":
        seed = int.from_bytes(hashlib.sha1(head.tokens.tobytes()).digest()[:8], "little")
        return np.sort(np.random.default_rng(seed).choice(np.arange(lo, hi), count, replace=False))
    layers = probe_layers(head, sel)
    rows = top_rows(pooled(PROBE.scores_of(head, layers, sel.probe_rows), sel.pool), lo, hi, count)
    for _ in range(sel.hops):
        rows = next_hop(rows, PROBE.paid_to(head, layers, rows), sel.pool, lo, hi)
    return rows


def runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """Sorted rows as [first, end) runs of consecutive rows."""
    if len(rows) == 0:
        return []
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(rows, cut)]


def check_rows_only(ctx) -> None:
    """Selection writes K/V rows: a hybrid's late recurrent layers hold one state a sequence, not rows."""
    kinds = layer_parts(ctx.model)
    recurrent = [il for il in late_layers(ctx) if kinds[il] != ROW_PARTS]
    if recurrent:
        raise InputError(f"selection writes K/V rows, and late layers {recurrent} of {ctx.model.arch} keep a "
                         "recurrent state that rows cannot be spliced into")


def splice_rows(head: Head, rows: np.ndarray) -> None:
    """Exact K and V in `rows` (positions inside the fill range) of every late layer."""
    ctx, (lo, _) = head.ctx, head.fill_range
    layers = late_layers(ctx)
    exact = _EXACT.get(head, layers)
    for il in layers:
        for part in ("k", "v"):
            for a, b in runs(rows):
                write(ctx, il, part, exact[il, part][a - lo : b - lo], a, b, head.seq_id)


def evidence_share(head: Head, rows: np.ndarray) -> float | None:
    """Share of the evidence rows inside the fill range that `rows` covers (None: no evidence recorded)."""
    if head.evidence is None:
        return None
    lo, hi = head.fill_range
    ev = {r for a, b in head.evidence for r in range(max(a, lo), min(b, hi))}
    return round(len(ev & set(rows.tolist())) / len(ev), 4) if ev else None


def tail_before_probe(head: Head, probe_rows: int) -> None:
    """Decode the tail's rows before the last `probe_rows` (no outputs); the tail goes on from there."""
    start, end = head.stop, max(head.stop, len(head.tokens) - probe_rows)
    for _ in head.ctx.decode_chunks(head.tokens[start:end], start, head.seq_id, "none"):
        pass
    head.tail_from = end


def hook(sel: Selector):
    def run(head: Head) -> None:
        lo, hi = head.fill_range
        if hi <= lo:
            return
        check_rows_only(head.ctx)
        rows = chosen_rows(head, sel)
        if sel.after:
            tail_before_probe(head, sel.probe_rows)
        splice_rows(head, rows)
        head.notes.update(n_selected=int(len(rows)), evidence_selected=evidence_share(head, rows))
    return run


def variant(name: str) -> Variant | None:
    parsed = parse(name)
    if parsed is None:
        return None
    mode, sel = parsed
    return register(Variant(name, mode, hook=hook(sel)))


register_parser(variant)
