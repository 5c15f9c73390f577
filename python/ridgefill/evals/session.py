"""Models and contexts of one evaluation run, and the fill variants measured on them.

Exact and identity run on the first model; ridge at split s runs on the model whose maps
were fitted at s (a GGUF's ridgefill.split_layer), and is unavailable at other splits.
One context per model, reused for every item; the fill mode is set per measurement.

A routed variant, `ridge@P` or `identity@P` (P percent), routes that share of each fill
ubatch's rows through the full late layers (route.py); it needs the routing statistics stored
with the maps at s, so both modes run on that model.

A selecting variant, `ridge^Q` or `identity^Q` (also `ridge@P^Q`), has the fork select Q % of the
filled rows by the attention of the prompt's last 64 rows before the first output (Context.set_select):
what the splice `ridge-select{Q}-Lall-max63-after` (select.py) measures, built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

from ..fit.route import mode_name, parse_mode, selected_share
from ..runtime import PROBE_ROWS, Context, Model
from .prefill import Hook
from ..errors import InputError


@dataclass(frozen=True)
class Variant:
    """A named way to prefill: a fill mode, and optionally a hook run after the head rows."""

    name: str
    mode: str  # exact | identity | ridge
    hook: Hook | None = None
    all_layers: bool = False  # fill at split = n_layer: exact values, the fill run's batches
    route: float = 0.0  # share of each fill ubatch routed through the full late layers
    select: float = 0.0  # share of the filled rows the fork's probe selects
    probe: int = PROBE_ROWS  # the prompt's last rows that select them

    @property
    def split_free(self) -> bool:
        """Measured once per item and tail, not per split."""
        return self.mode == "exact" or self.all_layers


EXACT, IDENTITY, RIDGE = Variant("exact", "exact"), Variant("identity", "identity"), Variant("ridge", "ridge")
DEFAULT_VARIANTS = (EXACT, IDENTITY, RIDGE)
# Exact computation cut into the same ubatches as a fill run (the filled rows run every layer
# and skip only the logits): beside `exact`, it shows how much of a fill-vs-exact difference
# is llama.cpp's batch-partition noise rather than the fill
EXACT_CUT = Variant("exact-cut", "identity", all_layers=True)
REGISTRY: dict[str, Variant] = {v.name: v for v in (*DEFAULT_VARIANTS, EXACT_CUT)}
PLUGINS = ("ridgefill.evals.splice", "ridgefill.evals.select")  # modules that register variants when imported
PARSERS: list[Callable[[str], Variant | None]] = []  # make a variant from a parametric name (select.py's)


def register(variant: Variant) -> Variant:
    """Make a variant (e.g. a splice: ridge + a hook) selectable by name, as in `--modes`."""
    if variant.mode not in ("exact", "identity", "ridge"):
        raise InputError(f"variant {variant.name!r}: unknown fill mode {variant.mode!r}")
    REGISTRY[variant.name] = variant
    return variant


def register_parser(parse: Callable[[str], Variant | None]) -> None:
    """Variants whose names carry parameters (`ridge-select5-L8`): `parse` returns one, or None for other names."""
    PARSERS.append(parse)


def _load_plugins() -> None:
    import importlib

    for mod in PLUGINS:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise


def routed(name: str) -> Variant:
    """`ridge@5` (or `ridge@5%`): ridge with 5 % of each fill ubatch routed (route.parse_mode); `ridge^10`:
    10 % of the filled rows selected by the fork's probe (route.selected_share)."""
    mode, share = parse_mode(name)
    select = selected_share(name)
    return Variant(mode_name(mode, share, select), mode, route=share, select=select)


def variants_named(names: Sequence[str]) -> tuple[Variant, ...]:
    for n in names:
        if "@" in n or "^" in n:
            REGISTRY.setdefault(n, routed(n))
    if any(n not in REGISTRY for n in names):
        _load_plugins()
    for n in names:
        for parse in PARSERS:
            if n not in REGISTRY:
                parse(n)
    bad = [n for n in names if n not in REGISTRY]
    if bad:
        raise InputError(f"unknown mode(s) {', '.join(bad)} (one of {', '.join(REGISTRY)})")
    return tuple(REGISTRY[n] for n in names)


class Session:
    def __init__(self, paths: Sequence[str | os.PathLike], n_ctx: int, threads: int | None = None,
                 n_gpu_layers: int = -1, n_batch: int = 2048, n_ubatch: int = 512, maps: Sequence = ()):
        """`maps`: maps files beside the one base in `paths`, a model each."""
        if not paths:
            raise InputError("an evaluation needs at least one model")
        if maps and len(paths) != 1:
            raise InputError(f"maps files go beside one base model, not {len(paths)}")
        self.models = ([Model(paths[0], n_gpu_layers=n_gpu_layers, maps=m) for m in maps] if maps else
                       [Model(p, n_gpu_layers=n_gpu_layers) for p in paths])
        check_same_base(self.models)
        check_one_per_split(self.models)
        self._sha: dict[tuple[int, bool], str] = {}
        self._file_sha: dict[int, str] = {}
        self.ctx_args = dict(n_ctx=n_ctx, n_batch=min(n_batch, n_ctx), n_ubatch=min(n_ubatch, n_batch, n_ctx),
                             threads=threads)
        self._ctx: dict[int, Context] = {}

    @property
    def base(self) -> Model:
        return self.models[0]

    def map_splits(self) -> list[int]:
        return sorted({m.rf_split_layer for m in self.models if m.rf_split_layer > 0})

    def model_for(self, variant: Variant, split: int | None) -> Model | None:
        """The model that measures `variant` at `split`; None when none can (no maps, or no routing
        statistics there for a routed variant)."""
        if variant.mode != "ridge" and variant.route == 0:
            return self.base
        model = next((m for m in self.models if m.rf_split_layer > 0 and m.rf_split_layer == split), None)
        if model is not None and variant.route > 0 and not model.rf_has_route:
            return None
        return model

    def context(self, variant: Variant, split: int | None) -> Context | None:
        """The context for `variant` at `split`, fill mode set; None when ridge has no maps there."""
        model = self.model_for(variant, split)
        if model is None:
            return None
        i = self.models.index(model)
        if i not in self._ctx:
            self._ctx[i] = model.context(**self.ctx_args)
        ctx = self._ctx[i]
        if variant.all_layers:
            split = model.n_layer
        ctx.set_route(0.0)  # contexts are shared by variants: no fraction carries over
        ctx.set_select(0.0, min(variant.probe, ctx.n_ubatch))
        ctx.set_fill(variant.mode, None if variant.mode == "exact" else split)
        if variant.route > 0:
            ctx.set_route(variant.route)
        if variant.select > 0:
            ctx.set_select(variant.select, variant.probe)
        return ctx

    def fingerprint(self, variant: Variant, split: int | None) -> str:
        """What measures `variant` at `split` (`fingerprint`, below), cached per model."""
        i, routed = self.models.index(self.model_for(variant, split)), variant.route > 0
        if (i, routed) not in self._sha:
            m = self.models[i]
            self._sha[i, routed] = "+".join(fingerprint(f, m.rf_split_layer, routed) for f in (m.path, m.maps) if f)
        return self._sha[i, routed]

    def file_sha256(self, variant: Variant, split: int | None) -> str:
        """sha256 of the file that measures `variant` at `split` (what records before fingerprints hold)."""
        from ..fetch import sha256_file

        i = self.models.index(self.model_for(variant, split))
        if i not in self._file_sha:
            self._file_sha[i] = "+".join(sha256_file(f) for f in (self.models[i].path, self.models[i].maps) if f)
        return self._file_sha[i]

    def default_rows(self) -> tuple[int, int]:
        """Sinks and tail of the first GGUF's ridgefill.* metadata, else pack.Defaults (4, 1024)."""
        from ..format import Defaults

        meta = self.base.metadata
        d = Defaults.stored(meta.get("ridgefill.sink_rows"), meta.get("ridgefill.tail_rows"))
        return d.sink_rows, d.tail_rows

    def describe(self) -> list[dict]:
        return [{"path": m.source, "split": m.rf_split_layer, "base_sha256": m.metadata.get("ridgefill.base_sha256")}
                for m in self.models]


def check_one_per_split(models: Sequence[Model]) -> None:
    """Ridge at split s must have one model to run on, not whichever comes first."""
    by_split: dict[int, list[str]] = {}
    for m in models:
        if m.rf_split_layer > 0:
            by_split.setdefault(m.rf_split_layer, []).append(m.source)
    for split, found in sorted(by_split.items()):
        if len(found) > 1:
            raise InputError(f"{len(found)} models carry maps at split {split} ({', '.join(found)}): pass one")


def check_same_base(models: Sequence[Model]) -> None:
    """Augmented GGUFs must share one base model (and the first model's layer count)."""
    shas = {m.metadata["ridgefill.base_sha256"] for m in models if "ridgefill.base_sha256" in m.metadata}
    if len(shas) > 1:
        raise InputError("the models were fitted on different base models: " + ", ".join(sorted(shas)))
    shapes = {(m.n_layer, m.n_embd, m.n_vocab) for m in models}
    if len(shapes) > 1:
        raise InputError(f"the models differ in shape (n_layer, n_embd, n_vocab): {sorted(shapes)}")


def fingerprint(path: str | os.PathLike, split: int | None, routed: bool) -> str:
    """The content digest of a GGUF (gguf_io.content_sha256) without the defaults every record states for
    itself (sinks, tail, routed share) and, for an unrouted variant, without the routing statistics it
    never reads. Records are only resumed for the same content, so a refit that adds routing statistics
    to the same maps keeps the maps' records."""
    from ..format.gguf_io import content_sha256
    from ..format.keys import KEY, ROUTE_MEAN, ROUTE_WHITEN

    stats = set() if routed else {ROUTE_MEAN.format(split), ROUTE_WHITEN.format(split)}
    defaults = [KEY.format(k) for k in ("sink_rows", "tail_rows", "route_fraction")]  # every record states its own
    return content_sha256(path, defaults, stats.__contains__)
