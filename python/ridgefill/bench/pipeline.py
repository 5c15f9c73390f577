"""Where the layers go when a prefill is pipelined over several devices (rpc-servers, GPUs).

With every layer offloaded and more than one device, llama.cpp pipelines a prompt's ubatches over
the devices (the scheduler's pipeline parallelism): device j works on ubatch k while device j+1
works on ubatch k-1, so the prefill takes about as long as its busiest device (a flow shop). Its
loader places layers by free memory, evenly between equal devices, which suits the exact prefill,
where every layer costs about the same. A fill makes the late layers cheap: the device that holds
them idles while the one with the lower layers sets the pace, and on two rpc-servers the fill's
speed-up was gone (0.96-1.03x). Balancing each device's share of the filled prefill restores it.

The placement is passed to llama.cpp as `-ts` with one layer count per device (output layer
included): the loader's split points are then exactly these counts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .costmodel import Shape, layer_costs, mode_costs, prefill_cost
from ..errors import InputError

EXHAUSTIVE_LIMIT = 200_000  # placements tried one by one; above it, local searches (a few % off the best where tried)


@dataclass(frozen=True)
class Fill:
    """What a prefill fills (split None: exact); the arguments of costmodel.layer_costs."""
    split: int | None = None
    sinks: int = 0
    tail: int = 0
    with_map: bool = True
    route: float = 0.0
    lagged: float = 0
    kv: float = 0
    select: float = 0.0


@dataclass(frozen=True)
class Placement:
    counts: tuple[int, ...]  # layers per device, the output layer counted on the last
    makespan: float  # multiply-adds on the critical path of the pipelined prefill

    @property
    def tensor_split(self) -> str:
        return tensor_split_of(self.counts)


def tensor_split_of(counts) -> str:
    """llama.cpp's -ts value for these layer counts."""
    return "/".join(map(str, counts))


def ubatch_costs(sh: Shape, n: int, ubatch: int, fill: Fill) -> list[list[float]]:
    """Per ubatch, per layer (the output layer last, costed 0: a prefill's one logits row), multiply-adds.
    Ubatches are cut every `ubatch` rows from row 0; the fork also cuts where the sinks and the tail begin,
    which moves work between neighbouring ubatches and is left out."""
    return [layer_costs(sh, lo, min(lo + ubatch, n), fill.split, fill.sinks, fill.tail, fill.with_map, fill.route,
                        fill.lagged, n=n, kv=fill.kv, select=fill.select) + [0.0] for lo in range(0, n, ubatch)]


def makespan(costs: list[list[float]], counts) -> float:
    """Flow shop: ubatches in order through the devices, each device one ubatch at a time."""
    bounds = list(itertools.accumulate(counts, initial=0))
    done = [0.0] * len(counts)
    for row in costs:
        ready = 0.0
        for j in range(len(counts)):
            ready = max(ready, done[j]) + sum(row[bounds[j]:bounds[j + 1]])
            done[j] = ready
    return done[-1]


def even(n_units: int, n_devices: int) -> tuple[int, ...]:
    """llama.cpp's default placement between equal devices (layer il on device floor(il * n_devices / n_units))."""
    return tuple(sum(1 for il in range(n_units) if il * n_devices // n_units == j) for j in range(n_devices))


def plan(sh: Shape, n_devices: int, n: int, ubatch: int, fill: Fill = Fill()) -> Placement:
    """The placement of the model's n_layer + 1 layers (output included) on n_devices equal devices that
    minimizes the pipelined prefill of an n-token prompt."""
    units = sh.n_layer + 1
    if not 1 <= n_devices <= units:
        raise InputError(f"{n_devices} devices for {units} layers: each device needs a layer")
    if n < 1 or ubatch < 1:
        raise InputError(f"prompt of {n} tokens in ubatches of {ubatch}: both must be positive")
    if fill.split is not None and not (0 <= fill.split < sh.n_layer and fill.sinks >= 0 and fill.tail >= 0):
        raise InputError(f"split {fill.split}, sinks {fill.sinks}, tail {fill.tail}: need 0 <= split < "
                         f"{sh.n_layer} and sinks, tail >= 0")
    costs = ubatch_costs(sh, n, ubatch, fill)
    if math.comb(units - 1, n_devices - 1) <= EXHAUSTIVE_LIMIT:
        candidates = (_counts(cut, units) for cut in itertools.combinations(range(1, units), n_devices - 1))
        best = min(candidates, key=lambda c: makespan(costs, c))
    else:
        starts = (_balanced([sum(col) for col in zip(*costs)], n_devices), even(units, n_devices))
        best = min((_local_search(costs, c) for c in starts), key=lambda c: makespan(costs, c))
    return Placement(best, makespan(costs, best))


def _counts(cuts, units: int) -> tuple[int, ...]:
    edges = (0, *cuts, units)
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def _balanced(load: list[float], n_devices: int) -> tuple[int, ...]:
    """Contiguous parts, one per device, of least maximal load (linear partition by dynamic programming)."""
    prefix = list(itertools.accumulate(load, initial=0.0))
    units = len(load)
    # worst[k][i]: the least maximal load of the first i layers on k devices; cut[k][i]: where the last part starts
    worst = [[math.inf] * (units + 1) for _ in range(n_devices + 1)]
    cut = [[0] * (units + 1) for _ in range(n_devices + 1)]
    worst[0][0] = 0.0
    for k in range(1, n_devices + 1):
        for i in range(k, units + 1):
            for j in range(k - 1, i):
                w = max(worst[k - 1][j], prefix[i] - prefix[j])
                if w < worst[k][i]:
                    worst[k][i], cut[k][i] = w, j
    edges = [units]
    for k in range(n_devices, 0, -1):
        edges.append(cut[k][edges[-1]])
    return _counts(edges[::-1][1:-1], units)


def _local_search(costs, counts: tuple[int, ...]) -> tuple[int, ...]:
    """Move one boundary at a time to its best position between its neighbours while that shortens the pipeline."""
    units = sum(counts)
    cuts = list(itertools.accumulate(counts[:-1]))
    span = makespan(costs, counts)
    improved = True
    while improved:
        improved = False
        for j in range(len(cuts)):
            lo, hi = (cuts[j - 1] if j else 0) + 1, (cuts[j + 1] if j + 1 < len(cuts) else units) - 1
            for pos in range(lo, hi + 1):
                trial = _counts(cuts[:j] + [pos] + cuts[j + 1:], units)
                if (s := makespan(costs, trial)) < span:
                    cuts[j], span, improved = pos, s, True
    return _counts(cuts, units)


def fill_of(mode: str, split: int | None, sinks: int, tail: int, lagged: float = 0, kv: float = 0) -> Fill:
    """The Fill of a bench mode (exact, identity, ridge, identity@P, ridge@P, any of them ^Q)."""
    if mode == "exact":
        return Fill()
    return Fill(split, sinks, tail, lagged=lagged, kv=kv, **mode_costs(mode))


def pipelined(n_devices: int, n_layer: int, ngl: int) -> bool:
    """llama.cpp pipelines ubatches only with more than one device and every layer, output included, offloaded."""
    return n_devices > 1 and (ngl < 0 or ngl > n_layer)


def parse_tensor_split(value: str) -> str:
    """--tensor-split: auto, even, or llama.cpp's -ts (non-negative numbers joined by /)."""
    if value in ("auto", "even"):
        return value
    try:
        parts = [float(x) for x in value.split("/")]
    except ValueError:
        parts = []
    if not parts or any(not math.isfinite(x) or x < 0 for x in parts) or sum(parts) == 0:
        raise InputError(f"--tensor-split {value!r}: auto, even, or non-negative numbers joined by / (e.g. 9/22)")
    return value


def counts_of(tensor_split: str, units: int, n_devices: int) -> tuple[int, ...]:
    """The layer counts llama.cpp's loader makes of a -ts value (layer il goes to the first device whose
    cumulative share exceeds il / units); "even" is the default placement between equal devices."""
    if tensor_split in ("auto", "even"):
        return even(units, n_devices)
    shares = ([float(x) for x in tensor_split.split("/")] + [0.0] * n_devices)[:n_devices]
    cum = list(itertools.accumulate(shares))
    device = [next((j for j, c in enumerate(cum) if c / cum[-1] > il / units), n_devices - 1) for il in range(units)]
    return tuple(device.count(j) for j in range(n_devices))


@dataclass(frozen=True)
class Placer:
    """Per bench mode and prompt length, where a pipelined run puts the layers and the -ts flag that says so:
    tensor_split "auto" plans each mode's own placement, "even" keeps llama.cpp's, anything else is passed on."""
    shape: Shape
    n_devices: int
    ubatch: int
    split: int | None
    sinks: int
    tail: int
    lagged: float = 0
    tensor_split: str = "auto"
    ngl: int = -1
    kv: float = 0

    @property
    def active(self) -> bool:
        return pipelined(self.n_devices, self.shape.n_layer, self.ngl)

    def counts(self, mode: str, n: int) -> tuple[int, ...] | None:
        if not self.active:
            return None
        if self.tensor_split != "auto":
            return counts_of(self.tensor_split, self.shape.n_layer + 1, self.n_devices)
        return plan(self.shape, self.n_devices, n, self.ubatch, self._fill(mode)).counts

    def flags(self, mode: str, n: int) -> list[str]:
        if self.tensor_split not in ("auto", "even"):
            return ["-ts", self.tensor_split]
        counts = self.counts(mode, n) if self.tensor_split == "auto" else None
        return ["-ts", tensor_split_of(counts)] if counts else []

    def bound(self, mode: str, n: int, planned_at: int | None = None) -> float | None:
        """exact's pipelined multiply-adds over the mode's for an n-token prompt, each at the placement it runs
        with (planned for a planned_at-token prompt; default n)."""
        if not self.active:
            return None
        at = planned_at or n
        span = lambda m: makespan(ubatch_costs(self.shape, n, self.ubatch, self._fill(m)), self.counts(m, at))  # noqa: E731
        return span("exact") / span(mode)

    def one_device_bound(self, mode: str, n: int) -> float:
        """costmodel.bound of the mode: the speed-up on one device."""
        f = self._fill(mode)
        return prefill_cost(self.shape, n) / prefill_cost(self.shape, n, f.split, f.sinks, f.tail, f.with_map, f.route,
                                                          f.lagged, f.kv, f.select)

    def _fill(self, mode: str) -> Fill:
        return fill_of(mode, self.split, self.sinks, self.tail, self.lagged, self.kv)


def annotate(out: dict, placer: Placer, modes, planned_at) -> dict:
    """A bench summary with the -ts each mode ran with and, pipelined, the bound at those placements
    (planned_at(n): the prompt length the placement used at length n was planned for)."""
    out["tensor_split"] = placer.tensor_split
    for row in out["results"]:
        n = row["n_tokens"]
        row["placement"] = {m: " ".join(placer.flags(m, planned_at(n))) for m in modes}
        if placer.active:
            for m in modes:
                if m != "exact":
                    row[f"pipeline_bound_{m}"] = placer.bound(m, n, planned_at(n))
    return out
