"""Which splits does the lag criterion on keys send to lagged maps, and does its key error track the true one?

For each split: one capture (`ridgefill fit`'s default corpus and windows, all splits from one pass), then the
fit with the keys deciding the lag too (`fit --lag-keys`) and without (the default), per late layer: held-out input
error gain of the previous row, key error per-row / lagged (key_space.py: Σ‖W_k diag(g) e‖², no RoPE, one RMS
scale) and its gain, and the layers each rule lags.

Usage: gains.py --model GGUF --splits 12 14 16 --tokens 16384 --out DIR [--threads N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ridgefill.fit import pipeline, ridge
from ridgefill.fit.capture import CaptureConfig


def rows(maps_keyed: ridge.Maps, maps_blind: ridge.Maps) -> list[dict]:
    out = []
    for fk, fb in zip(maps_keyed.fits, maps_blind.fits):
        in_gain = None if fk.r2_lag is None else 1 - (1 - fk.r2_lag) / (1 - fk.r2_row)
        k_gain = None if fk.k_err_lag is None else 1 - (fk.k_err_lag / fk.k_err_row) ** 2
        out.append({"layer": fk.layer, "input_gain": in_gain, "k_err_row": fk.k_err_row, "k_err_lag": fk.k_err_lag,
                    "key_gain": k_gain, "lag_keyed": fk.lag, "lag_input_only": fb.lag})
    return out


def table(split: int, r: list[dict]) -> str:
    f = lambda v, p=3: "" if v is None else f"{v:.{p}f}"
    lines = [f"### split {split}", "",
             "| layer | input error gain | key error row | key error lagged | key error gain | lagged (keys) | lagged (input only) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in r:
        lines.append(f"| {x['layer']} | {f(x['input_gain'])} | {f(x['k_err_row'])} | {f(x['k_err_lag'])} | "
                     f"{f(x['key_gain'])} | {'yes' if x['lag_keyed'] else ''} | {'yes' if x['lag_input_only'] else ''} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--splits", type=int, nargs="+", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = CaptureConfig(split=a.splits[0], tokens=a.tokens, threads=a.threads)
    stats = pipeline.calibrate_splits(a.model, cfg, a.splits)
    result, md = {}, []
    for st in stats:
        keyed = ridge.fit(st, keys=pipeline.key_projections(a.model, st), lag_keys=True)
        blind = ridge.fit(st)
        result[st.split] = rows(keyed, blind)
        md.append(table(st.split, result[st.split]))
        print(md[-1], flush=True)
    (out / "gains.json").write_text(json.dumps(result, indent=1))
    (out / "gains.md").write_text(f"{Path(a.model).name}, {a.tokens} calibration tokens, default lag gain "
                                  f"{ridge.DEFAULT_LAG_GAIN}\n\n" + "\n\n".join(md) + "\n")


if __name__ == "__main__":
    main()
