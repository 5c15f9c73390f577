"""Tabulate measure.sh's runs: per length, exact and ridge TTFT and ridge's speed-up locally, over RPC with
llama.cpp's placement and with the planned one (and over the shaped link, where shaped.sh ran), the RPC ratio
as a share of the local one, and the placements with their pipelined bounds.

    python experiments/rpc-pipeline/summary.py RESULTS_DIR    # writes RESULTS_DIR/summary.md
"""

import json
import sys
from pathlib import Path

RUNS = [("local", "local, 1 process"), ("rpc-even", "2 rpc-servers, llama.cpp's placement"),
        ("rpc-auto", "2 rpc-servers, planned placement"), ("shaped-auto", "2 rpc-servers behind a 1 Gbit/s link, planned")]


def main(folder: Path) -> str:
    runs = {k: json.loads((folder / f"{k}.json").read_text())["llama-bench"] for k, _ in RUNS
            if (folder / f"{k}.json").exists()}
    local = {r["n_tokens"]: r for r in runs["local"]["results"]}
    lines = ["| tokens | run | -ts exact / ridge | TTFT exact (ms) | TTFT ridge (ms) | ridge speed-up (paired range) "
             "| of local | bound: one device / pipelined |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in sorted(local):
        for key, label in RUNS:
            row = next((r for r in runs.get(key, {}).get("results", []) if r["n_tokens"] == n), None)
            if row is None:
                continue
            ratio, (lo, hi) = row["ratio_ridge"], row["ratio_range_ridge"]
            ts = " / ".join(row.get("placement", {}).get(m, "").removeprefix("-ts ") or "-" for m in ("exact", "ridge"))
            pipe = row.get("pipeline_bound_ridge")
            lines.append(f"| {n} | {label} | {ts} | {row['median_ms']['exact']:.0f} | {row['median_ms']['ridge']:.0f} | "
                         f"{ratio:.2f}x ({lo:.2f}-{hi:.2f}) | {100 * ratio / local[n]['ratio_ridge']:.0f}% | "
                         f"{row['bound_ridge']:.2f}x / {f'{pipe:.2f}x' if pipe else '-'} |")
    s = runs["local"]
    head = (f"{Path(s['model']).name}, split {s['split']}, sinks {s['sinks']}, tail {s['tail']}, 1 thread per process, "
            f"{len(s['results'][0]['samples_ms']['exact'])} interleaved runs per mode (medians)\n\n")
    text = head + "\n".join(lines) + "\n"
    (folder / "summary.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results")))
