"""The exactness constructions, each run in a process of its own on whatever devices its environment gives it.

tests/test_vulkan.py runs every case twice, on the CPU (GGML_VK_VISIBLE_DEVICES empty: no Vulkan device) and with
every layer and map on Vulkan, and compares what the two write. A case asserts its own construction on the backend it
runs on (pass-through fill = the same rows run in full, p = 0 = the plain fill, p = 1 = exact computation, lagged
inputs = numpy) and saves the numbers the other backend must reproduce.

    PYTHONPATH=tests python tests/vulkan_cases.py CASE SPEC.json OUT.npz
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from conftest import check_earlier_inputs, random_maps_model  # tests/ is on PYTHONPATH (test_vulkan._env)
from ridgefill.runtime import Model, devices

CTX = dict(n_ctx=512, threads=2)


def _prefill(model, tokens, mode, split, sinks, tail, **kw):
    ctx = model.context(**CTX, **kw)
    ctx.set_fill(mode, split)
    return ctx.prefill(tokens, sinks=sinks, tail=tail)


def passthrough(spec: dict) -> dict:
    """Layers >= split add nothing: identity and ridge (identity maps) fill must equal the rows run in full."""
    model, toks, split = Model(spec["model"]), spec["tokens"], spec["split"]
    kw = dict(n_batch=spec["ubatch"], n_ubatch=spec["ubatch"], flash_attn=spec["flash_attn"])
    rows = dict(sinks=spec["sinks"], tail=spec["tail"])
    ref = _prefill(model, toks, "identity", model.n_layer, **rows, **kw)
    out = {"exact": _prefill(model, toks, "exact", None, **rows, **kw).logits, "ref": ref.logits}
    for mode in ("identity", "ridge"):
        fill = _prefill(model, toks, mode, split, **rows, **kw)
        assert fill.n_filled == len(toks) - spec["sinks"] - spec["tail"] > 0
        np.testing.assert_array_equal(fill.logits, ref.logits, err_msg=f"{mode} fill of the pass-through")
        out[mode] = fill.logits
    return out


def lagged(spec: dict) -> dict:
    """Captured inputs of filled late layers = W h_s(t) + W_prev h_s(t-1) + B P [h_s(t-1); ..; h_s(t-4)] + b
    (numpy: lagged and window maps), across ubatches."""
    split, toks = spec["split"], spec["tokens"]
    model, maps = random_maps_model(spec["base"], split, Path(spec["out"]), seed=1, lag_every=2, window=(4, 8))
    check_earlier_inputs(model, maps, toks, split, [split + 1, split + 2, model.n_layer - 1], n_batch=len(toks),
                        n_ubatch=spec["ubatch"], sinks=spec["sinks"], tail=spec["tail"], tol=spec["input_tol"])
    fill = _prefill(model, toks, "ridge", None, spec["sinks"], spec["tail"], n_batch=len(toks),
                    n_ubatch=spec["ubatch"])
    return {"ridge": fill.logits}


def _cache(ctx, n_layer, n):
    return {f"{part}{il}": ctx.state_get(il, part, 0, n) for il in range(n_layer) for part in ("k", "v")}


def route(spec: dict) -> dict:
    """p = 0 writes the plain fill's cache bit for bit; p = 1 routes every filled row: exact computation's cache."""
    model, _ = random_maps_model(spec["base"], spec["split"], Path(spec["out"]), seed=2, route_stats=True)
    toks = np.asarray(spec["tokens"], np.int32)
    sinks, tail, n = spec["sinks"], spec["tail"], len(spec["tokens"]) - spec["tail"]
    caches = {}
    for name, p in (("plain", None), ("p0", 0.0), ("p1", 1.0)):
        ctx = _route_ctx(model, spec)  # a context each: see switch() for one context that changes its fill
        ctx.set_fill("ridge")
        ctx.set_route(p or 0.0)
        res = ctx.prefill_head(toks, sinks=sinks, tail=tail)
        assert res.n_filled == n - sinks and ctx.routed_count == (n - sinks if p == 1.0 else 0)
        caches[name] = _cache(ctx, model.n_layer, n)
    ctx = _route_ctx(model, spec)
    ctx.decode(toks[:sinks], 0, outputs="none")
    ctx.decode(toks[sinks:n], sinks, outputs="none")
    caches["exact"] = _cache(ctx, model.n_layer, n)
    for key, want in caches["plain"].items():
        np.testing.assert_array_equal(caches["p0"][key], want, err_msg=f"p = 0, {key}")
    tol = spec["route_tol"]
    for key, want in caches["exact"].items():
        np.testing.assert_allclose(caches["p1"][key], want, rtol=tol, atol=tol, err_msg=f"p = 1, {key}")
    return {f"{name}/{key}": v for name in ("p1", "plain") for key, v in caches[name].items()}


def _route_ctx(model, spec):
    return model.context(**CTX, n_batch=len(spec["tokens"]), n_ubatch=spec["ubatch"], flash_attn="on", kv_type="f32")


def switch(spec: dict) -> dict:
    """One context, its fill mode changed between prefills (as llama-server's per-request override does)."""
    model, _ = random_maps_model(spec["base"], spec["split"], Path(spec["out"]), seed=2)
    toks = np.asarray(spec["tokens"], np.int32)
    ctx = _route_ctx(model, spec)
    out = {}
    for i, mode in enumerate(["identity", "ridge"] * 3):
        ctx.seq_rm(0)
        ctx.set_fill(mode)
        out[f"{mode}{i}"] = ctx.prefill(toks, sinks=spec["sinks"], tail=spec["tail"]).logits
    return out


def splits(spec: dict) -> dict:
    """Exact, ridge (lagged and window maps), identity and routed prefills, for the scheduler's log
    (GGML_SCHED_DEBUG=2)."""
    from ridgefill import _core

    _core.set_log_level(1)
    random_maps_model(spec["base"], spec["split"], Path(spec["out"]), seed=3, route_stats=True, lag_every=2,
                      window=(4, 8))
    model = Model(spec["out"], n_gpu_layers=spec.get("ngl", -1))
    toks = spec["tokens"]
    for mode, p in (("exact", 0.0), ("ridge", 0.0), ("identity", 0.0), ("ridge", 0.25)):
        print(f"@@ prefill {mode} route={p}", file=sys.stderr, flush=True)
        ctx = model.context(**CTX, n_batch=len(toks), n_ubatch=spec["ubatch"])
        ctx.set_fill(mode)
        ctx.set_route(p)
        ctx.prefill(toks, sinks=spec["sinks"], tail=spec["tail"])
        sys.stderr.flush()
    return {}


def main(argv: list[str]) -> int:
    case, spec, out = argv[1], json.loads(Path(argv[2]).read_text()), argv[3]
    result = {"passthrough": passthrough, "lagged": lagged, "route": route, "switch": switch,
              "splits": splits}[case](spec) \
        if case != "devices" else {}
    np.savez(out, **result, devices=np.array(json.dumps(devices())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
