"""`make demo [MODEL=name]`: the main job on a registry model (default SmolLM2-135M), end to end, with a short table.

Fetch and verify the model, fit ridge maps at 60 % of its depth (split 18 of SmolLM2's 30 layers)
on the default calibration corpus (cached after the first run), write the augmented GGUF, serve it
with the patched llama-server in RidgeFill mode, and compare exact and ridge prefill at 4K prompt tokens:
TTFT (the wall time of a 1-token request, as `bench ttft` measures it; interleaved, median of 3) beside the cost-model
bound, and a needle placed inside the filled region.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from .bench import costmodel
from .sources import models
from . import format as fmt
from . import paths
from .fit import pipeline
from .fit.capture import CaptureConfig
from .evals.needle import single_needle, string_match_all
from .format import Defaults, identity_of, inspect
from .runtime import Model, fill_range
from .paths import tool_path
from .serve.server import LlamaServer, ridgefill_flags, ttft_ms

PROMPT_TOKENS = 4096
SPLIT_DEPTH = 0.6  # split 18 of SmolLM2's 30 layers, 17 of Qwen2.5-Coder-1.5B's 28
SINKS, TAIL = Defaults().sink_rows, Defaults().tail_rows
ROWS_PER_WIDTH = 28  # calibration rows per unit of width: SmolLM2's d = 576 takes 16384 (16K rows pin down its maps)
RUNS = 3


def demo_split(n_layer: int) -> int:
    return round(SPLIT_DEPTH * n_layer)


def calib_tokens(n_embd: int) -> int:
    """Calibration tokens for a d x d map: ROWS_PER_WIDTH * d, in whole 4096-token steps."""
    return 4096 * -(-ROWS_PER_WIDTH * n_embd // 4096)


def fitted_model(base: Path, split: int, tokens: int, threads: int | None, ngl: int = -1) -> Path:
    """The augmented GGUF for `base`, fitted once and cached next to the model cache; a cached file
    fitted from another corpus, other settings or by an older recipe is not reused."""
    cfg = CaptureConfig(split=split, tokens=tokens, threads=threads, n_gpu_layers=ngl)
    out = paths.cache_dir() / "fitted" / f"{base.stem}-s{split}-t{tokens}-{pipeline.recipe_key(cfg)}.gguf"
    if out.is_file():
        try:
            if inspect(out)["metadata"]["base_sha256"] == identity_of(base).base_sha256:
                return out
        except ValueError:
            pass
        out.unlink()
    stats = pipeline.calibrate(base, cfg)
    pipeline.fit_and_pack(base, stats, out, defaults=Defaults(SINKS, TAIL))
    return out


def demo_fit(base: Path, threads: int | None, ngl: int = -1) -> tuple[Path, int, int]:
    """(augmented GGUF, split, calibration tokens) of the demo's fit of `base`, fitted if not cached."""
    ident = identity_of(base)
    split, tokens = demo_split(ident.n_layer), calib_tokens(ident.n_embd)
    return fitted_model(base, split, tokens, threads, ngl), split, tokens


def answer(srv: LlamaServer, tokens, mode: str) -> str:
    """The greedy answer after the prompt (untimed; the slot's KV from the last timed run may be reused)."""
    return srv.post("/completion", {"prompt": [int(t) for t in tokens], "n_predict": 12, "cache_prompt": True,
                                    "temperature": 0.0, "ridgefill": mode})["content"]


def main(model_name: str = models.DEFAULT_MODEL, threads: int | None = None, ngl: int = -1) -> int:
    t0 = time.monotonic()
    print(f"[1/4] fetching {model_name} (verified by sha256)", flush=True)
    base = models.fetch_model(model_name)
    ident = identity_of(base)
    print(f"[2/4] ridge maps at split {demo_split(ident.n_layer)} of {ident.n_layer} from "
          f"{calib_tokens(ident.n_embd)} calibration tokens (cached after the first run)", flush=True)
    gguf, split, _ = demo_fit(base, threads, ngl)
    model = Model(gguf, n_gpu_layers=0)  # its tokenizer and shape; the server measures
    item = single_needle(model, PROMPT_TOKENS, depth=0.5, seed=7)
    lo, hi = fill_range(item.n_tokens, SINKS, TAIL)
    assert lo <= item.needle_rows[0] and item.needle_rows[1] <= hi, "needle must lie in the filled region"

    log = Path(tempfile.gettempdir()) / "ridgefill-demo-server.log"
    args = ["-b", "2048", "-ub", "512", "-fa", "on", "-ngl", str(ngl), *ridgefill_flags("ridge", sinks=SINKS, tail=TAIL)]
    ctx = PROMPT_TOKENS + 64
    print(f"[3/4] serving {gguf.name} with the patched llama-server (log: {log})", flush=True)
    ms = {"exact": [], "ridge": []}
    answers, filled = {}, 0
    with LlamaServer(gguf, args, ctx=ctx, threads=threads, log=log) as srv:
        print(f"[4/4] TTFT at {item.n_tokens} tokens, exact and ridge interleaved x{RUNS}, then the needle", flush=True)
        prompt = [int(t) for t in item.tokens]
        for run in range(RUNS):
            for mode in ms:
                t, res = ttft_ms(srv, prompt, mode)
                ms[mode].append(t)
                filled = res["timings"].get("ridgefill_filled_n", filled)
        for mode in reversed(ms):  # ridge first: its slot still holds the last timed (ridge) prompt
            answers[mode] = answer(srv, item.tokens, mode)
    shape = costmodel.Shape.from_model(model)
    bound = costmodel.bound(shape, item.n_tokens, split, SINKS, TAIL, lagged=fmt.earlier_row_products(gguf))
    med = {m: statistics.median(v) for m, v in ms.items()}
    print()
    if filled == 0:
        print(f"WARNING: the ridge requests filled no rows (sinks {SINKS}, tail {TAIL}, {item.n_tokens} tokens): "
              "both modes ran the exact model")
    print(f"{model_name} ({base.name}), split {split}, sinks {SINKS}, tail {TAIL}, {item.n_tokens} prompt tokens "
          f"({filled} filled), needle '{item.answers[0]}' at row {item.needle_rows[0]}")
    print("| mode | TTFT ms (median of 3) | speed-up | cost-model bound | needle |")
    print("| --- | --- | --- | --- | --- |")
    for mode in ms:
        found = "found" if string_match_all(answers[mode], item.answers) == 100 else "missed"
        speed = med["exact"] / med[mode]
        b = "" if mode == "exact" else f"{bound:.2f}x"
        print(f"| {mode} | {med[mode]:.0f} | {speed:.2f}x | {b} | {found}: {answers[mode].strip()[:20]!r} |")
    print()
    print(f"augmented GGUF : {gguf}")
    print(f"serve it       : {tool_path('llama-server')} -m {gguf} -c {ctx} -np 1 {' '.join(args)}")
    print(f"demo took {time.monotonic() - t0:.0f} s")
    return 0
