"""`ridgefill model`, `info`, `inspect`, `hf-to-gguf`, `synth`: model files in and out."""

from __future__ import annotations

import json
import os

from ..sources import models

def _cmd_model_fetch(args) -> int:
    path = models.fetch_model(args.name, offline=args.offline)
    print(path)
    return 0


def _cmd_model_list(args) -> int:
    for name, e in sorted(models.REGISTRY.items()):
        cached = models.cached_path(name)
        mark = "cached" if cached.is_file() else "not fetched"
        default = " (default)" if name == models.DEFAULT_MODEL else ""
        print(f"{name}{default}\tarch={e.arch}\t{e.licence}\t{mark}")
    return 0


def _cmd_info(args) -> int:
    from ..runtime import Model, version

    info = Model(args.gguf).info()
    info["libllama"] = version()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            if k != "metadata_keys":
                print(f"{k:12s} {v}")
    return 0


def _cmd_hf_to_gguf(args) -> int:
    from ..sources.hf_convert import hf_to_gguf

    out = hf_to_gguf(args.hf_dir, args.output, args.outtype, args.quantize, args.threads)
    print(f"wrote {out}; next: ridgefill fit {out} --split S -o OUT.gguf")
    return 0


def _cmd_inspect(args) -> int:
    from .. import format as fmt

    info = fmt.inspect(args.gguf, base=args.base)
    failed = [c for c in info["checks"] if not c["ok"]]
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if failed else 0
    for k, v in info["metadata"].items():
        if not isinstance(v, list):
            print(f"ridgefill.{k:18s} {v}")
    print("layer  type        input  lambda      alpha  R2 ridge  R2 identity  K err  bytes")
    for row in info["layers"]:
        inputs = "+".join(["row"] + ["lag"] * row["previous_row"] + ["win"] * row.get("window", False))
        print(f"{row['layer']:5d}  {row['type']:4s}  {inputs:>11s}  "
              f"{_num(row['lambda'], '.3e'):>9s}  {_num(row['blend'], '5.2f'):>5s}  "
              f"{_num(row['r2_ridge'], '8.4f')}  {_num(row['r2_identity'], '11.4f')}  {_num(row['k_err'], '5.3f'):>5s}  "
              f"{row['bytes']}")
    if info["kv"]:
        kv = info["kv"]
        own = f"; input maps kept for layers {kv['input_map_layers']}" if kv["input_map_layers"] else ""
        print(f"K/V maps: {kv['rows']} rows{' (and the previous row)' if kv['previous_row'] else ''}, {kv['bytes']} bytes{own}")
    if info["kv"] or any(r.get("kv_k_err") is not None for r in info["layers"]):
        rows = info["kv"]["layers"] if info["kv"] else info["layers"]
        print("held-out relative error  layer  input maps K  K/V maps K  K/V maps V")
        for r in rows:
            print(f"{'':24s}{r['layer']:6d}  {_num(r['k_err'], '12.4f'):>12s}  {_num(r['kv_k_err'], '10.4f'):>10s}  "
                  f"{_num(r['kv_v_err'], '10.4f'):>10s}")
    if info["window"]:
        print(f"window: rows t-1..t-{info['window']['rows']} through {info['window']['rank']} columns")
    print(f"map memory: {info['map_bytes'] / 2**20:.1f} MiB")
    for c in info["checks"]:
        print(f"check {c['name']:15s} {'ok  ' if c['ok'] else 'FAIL'}  {c['message']}")
    print("the fork loads this file" if info["loads"] else "the fork refuses this file (a loader check failed)")
    return 1 if failed else 0


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def _cmd_synth(args) -> int:
    from ..bench import synth

    if args.list:
        for name, sh in synth.SHAPES.items():
            print(f"{name}\t{sh.arch}\tlayers={sh.n_layer} d={sh.d} heads={sh.n_head}/{sh.n_kv}"
                  + (f" experts={sh.n_expert}/{sh.n_expert_used}" if sh.n_expert else "")
                  + (f" hybrid: attention every {sh.attn_interval}" if sh.hybrid else ""))
        return 0
    if not args.shape or not args.output:
        raise SystemExit("ridgefill synth: --shape and -o are required (or --list)")
    import tempfile
    from pathlib import Path

    tok = args.tokenizer_from or models.fetch_model(models.DEFAULT_MODEL)
    final = Path(args.output)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        out = synth.random_model(args.shape, Path(tmp) / "base.gguf", tok, seed=args.seed,
                                 weight_type=args.weight_type, n_ctx=args.ctx, shared_layers=args.shared_layers)
        if args.passthrough is not None:
            out = synth.passthrough(out, args.passthrough, Path(tmp) / "pt.gguf")
        if args.identity_maps is not None:
            out = synth.identity_maps(out, args.identity_maps, Path(tmp) / "maps.gguf")
        os.replace(out, final)
    print(final)
    return 0


def add_commands(sub) -> None:
    m = sub.add_parser("model", help="pinned default models").add_subparsers(dest="model_cmd", required=True)
    f = m.add_parser("fetch", help="download, verify and cache a model; print the GGUF path")
    f.add_argument("name", nargs="?", default=models.DEFAULT_MODEL, choices=sorted(models.REGISTRY))
    f.add_argument("--offline", action="store_true", help="use the cache only")
    f.set_defaults(func=_cmd_model_fetch)
    m.add_parser("list", help="known models").set_defaults(func=_cmd_model_list)

    i = sub.add_parser("info", help="load a GGUF and print its shape")
    i.add_argument("gguf")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_cmd_info)

    hf = sub.add_parser("hf-to-gguf", help="Hugging Face checkpoint -> GGUF (upstream convert_hf_to_gguf.py), "
                                           "optionally quantized (llama-quantize); then `ridgefill fit` it")
    hf.add_argument("hf_dir", help="checkpoint folder (config.json, safetensors, tokenizer)")
    hf.add_argument("--outtype", default="f16", help="what the converter writes: f32, f16 (default), bf16, q8_0")
    hf.add_argument("--quantize", metavar="TYPE", help="then llama-quantize to TYPE (e.g. Q4_K_M, Q8_0)")
    hf.add_argument("--threads", type=int, default=None)
    hf.add_argument("-o", "--output", required=True, help="GGUF to write")
    hf.set_defaults(func=_cmd_hf_to_gguf)

    ins = sub.add_parser("inspect", help="RidgeFill metadata, map sizes and the loader's checks of an augmented GGUF "
                                         "(exit 1 if a check fails)")
    ins.add_argument("gguf")
    ins.add_argument("--base", help="base GGUF: also check that ridgefill.base_sha256 is its sha256")
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=_cmd_inspect)

    sy = sub.add_parser("synth", help="seeded random-weight GGUF of a real model's shape (speed and correctness only)")
    sy.add_argument("--shape", help="see --list")
    sy.add_argument("-o", "--output")
    sy.add_argument("--list", action="store_true", help="list the shapes")
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--weight-type", default="q8_0", choices=["q8_0", "q4_0", "f16"])
    sy.add_argument("--shared-layers", action="store_true",
                    help="every layer of a kind reuses the same draws (same speed; fast to write large shapes)")
    sy.add_argument("--ctx", type=int, default=131072, help="context length written to the metadata")
    sy.add_argument("--tokenizer-from", help="GGUF whose tokenizer is copied (default: the default model)")
    sy.add_argument("--passthrough", type=int, metavar="S", help="zero attention-output and FFN-down from layer S on")
    sy.add_argument("--identity-maps", type=int, metavar="S", help="add identity ridge maps fitted 'at' split S")
    sy.set_defaults(func=_cmd_synth)
