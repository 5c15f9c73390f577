"""The soak's report: its table and how to read it (`soak.py` runs the soak)."""

from __future__ import annotations

from pathlib import Path

from .soak import CACHE_RAM_MIB


def render(result: dict) -> str:
    cols = ["pass", "requests", "errors", "cancelled", "server_alive", "fill_requests", "filled_share_min",
            "fill_reuse_ok", "fill_rows_ok", "selected_rows", "routed_rows", "slot_saved", "slot_refused", "slot_restored", "exact_requests", "exact_kv_only", "exact_compared", "exact_mismatch", "rss_mb_before", "rss_mb_after",
            "ms_per_token_exact", "ms_per_token_fill", "seconds"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in result["passes"]:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in cols) + " |")
    lc = result["leak_check"]
    lines += ["", f"leak check (1 slot, FA off): fill request filled {lc['filled_rows']} rows; "
                  f"exact request after it equals stock: {lc['exact_after_fill_equals_stock']}"]
    return "\n".join(lines)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _passes(n: int) -> str:
    return f"{n} pass" if n == 1 else f"{n} passes"


def _refused(result: dict) -> str:
    refused = result.get("settings_refused") or {}
    return f" (the server refused {', '.join(refused)}: see the JSON)" if refused else ""


def report(result: dict, command: str) -> str:
    """The markdown report: what ran, the table, and how to read it."""
    lines = [
        "# Soak: a 4-slot llama-server under mixed exact and fill requests",
        "",
        f"Command: `{command}`",
        "",
        f"Model `{Path(result['model']).name}` ({result['mode']} fill, sinks {result['sinks']}, tail {result['tail']}), "
        + (f"beside the maps file `{Path(result['maps']).name}`, " if result.get("maps") else "")
        + f"stock = `{Path(result['base']).name}` with no `--ridgefill` flag. {result['requests']} requests per pass "
        f"({_passes(result.get('passes_each', 2))} a server; the second stock server, the noise floor, the first "
        f"{result.get('floor_requests', result['requests'])}) "
        f"(seed {result['seed']}), {result['slots']} slots of {result['slot_ctx']} tokens, "
        f"`-fa on -b 512 -ub 128 -kvu --cache-ram {CACHE_RAM_MIB}` (one KV stream for the slots).",
        "",
        render(result),
        "",
        "How to read it:",
        "- `filled_share_min`: the smallest share, over fill requests, of the rows in their fill range that they",
        "  processed (not reused from the prompt cache) and that ran the fill graph; 1.000 = every row.",
        "- `fill_reuse_ok`: fill requests whose reused rows end within their fill range, or whose reused rows past it",
        "  an earlier prompt of the same settings explains with its own fill range ending no later (rows a request",
        "  asked to run in full never come from filled KV). Fill requests ask for (sink, tail, selected fraction,",
        "  routed fraction) among " + ", ".join(f"({a}, {b}, {c:g}, {d:g})" for a, b, c, d in result.get("settings", []))
        + _refused(result) + "; one in ten requests retries an earlier prompt cut 20-100 tokens short.",
        "- `fill_rows_ok`: fill requests that selected ceil(q·n) of the n rows they filled and routed rows only where",
        "  they asked to route (`selected_rows`, `routed_rows`: the sums; routed rows include the selected ones).",
        "- `slot_saved` / `slot_refused` / `slot_restored`: requests that first saved the slot of an earlier request",
        "  (refused where it held filled KV) or restored a saved file into a slot; other slot failures are errors.",
        "- `exact_kv_only`: exact requests that filled no row and whose reused prefix an exact prompt explains.",
        "- `exact_mismatch`: exact answers (greedy, 4 tokens) that differ from stock's answer to the same request in",
        "  the same pass; `stock'` is a second stock server: its mismatches are llama.cpp's own dependence on how",
        "  requests were batched together (it is not batch-invariant), the floor for the fork's.",
        "- `ms_per_token_*`: median server prompt time per processed token, requests with >= 100 new tokens.",
        "- RSS of the server process before and after each pass. Each server gets the same requests twice; the",
        f"  RAM prompt cache ({CACHE_RAM_MIB} MiB) is full after the first, so growth in the second is not the cache.",
    ]
    return "\n".join(lines) + "\n"
