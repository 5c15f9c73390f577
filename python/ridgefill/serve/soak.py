"""`ridgefill bench soak`: a 4-slot llama-server under a seeded mix of exact and fill requests.

One request list (seeded) is replayed, twice on each server, against servers that differ only
in RidgeFill:
- `stock`: the base GGUF with no --ridgefill flag (the fork's exact path); its answers are
  the reference, pass for pass (the second pass meets a warm prompt cache);
- `stock'`: a second stock server: its disagreement with `stock`, pass for pass, is
  llama.cpp's own batch-dependence (it is not batch-invariant), the noise floor;
- `fork`: the augmented GGUF (or base + --ridgefill-maps) with --ridgefill MODE; fill requests ask for MODE,
  exact requests for "exact"; pass k is compared with stock's pass k.
Requests share prefixes (cache_prompt on), half stream, some are cancelled mid-prompt (the client
closes its connection), some retry an earlier prompt cut short (it ends inside the earlier one's fill
range), fill requests switch their sink and tail rows per request (`ridgefill_sink`, `ridgefill_tail`),
and some requests first save the slot that served an earlier request to a file (`/slots/ID?action=save`;
the fork refuses a slot that holds filled KV) or restore a saved file into a slot. Per pass: errors,
whether the server died, the filled share of every fill request (filled rows / rows in its fill range that
it processed), whether an earlier prompt of the same settings explains every fill request's reused rows
beyond its own fill range (rows it asked to run in full), for every exact request whether an exact
prompt explains the prefix it reused, exact answers that differ from stock's, slot saves, refusals and
restores, server RSS before and after, prompt time per token. Then a leak check on a 1-slot server (fill, then exact on the
same slot, against stock). Loopback; passes bounded by --max-seconds.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..runtime import fill_range
from .server import LlamaServer, maps_flags, ridgefill_flags
from .soak_client import N_SLOTS, SETTINGS, SINKS, TAIL, Outcome, Request, Slots, exact_from, make_requests, send

SLOT_CTX = 1024
CACHE_RAM_MIB = 256


def rss_mb(srv: LlamaServer) -> float:
    for line in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_pass(srv: LlamaServer, reqs: list[Request], fill_mode: str | None, max_seconds: float) -> dict:
    """Send `reqs` through N_SLOTS client threads; stop sending after max_seconds."""
    deadline = time.monotonic() + max_seconds
    rss0 = rss_mb(srv)
    lock, outcomes, slots = threading.Lock(), [], Slots()

    def one(req):
        if time.monotonic() > deadline or not srv.alive():
            return
        action = slots.act(srv, req) if req.slot_action else None
        o = send(srv, req, fill_mode)
        o.slot_action = action
        slots.record(o)
        with lock:
            outcomes.append(o)

    t0 = time.monotonic()
    with ThreadPoolExecutor(N_SLOTS) as pool:
        list(pool.map(one, reqs))
    alive = srv.alive()
    time.sleep(1.0)  # let cancelled tasks wind down before reading RSS
    return {"outcomes": sorted(outcomes, key=lambda o: o.req.i), "seconds": time.monotonic() - t0,
            "alive": alive, "rss_mb": (rss0, rss_mb(srv) if alive else float("nan"))}


def filled_share(o: Outcome) -> float | None:
    """Filled rows / rows of the fill range [sinks, n - tail) that this request processed (not reused)."""
    lo, hi = fill_range(len(o.req.prompt), o.req.sink, o.req.tail)
    eligible = max(0, hi - max(lo, int(o.timings.get("cache_n", 0))))
    if eligible == 0:
        return None
    return int(o.timings.get("ridgefill_filled_n", 0)) / eligible


def fill_reuse_ok(o: Outcome, earlier_fill: list[Request]) -> bool:
    """A fill request read no filled row where it asked for the full model: the rows it reused end within its fill
    range, or an earlier fill prompt of the same settings, whose own fill range ends there, explains them. Necessary,
    not sufficient, as exact_kv_only."""
    cached = int(o.timings.get("cache_n", 0))
    if cached <= exact_from(o.req):
        return True
    return any((r.sink, r.tail) == (o.req.sink, o.req.tail) and exact_from(r) <= exact_from(o.req)
               and _common_prefix(o.req.prompt, r.prompt) >= cached for r in earlier_fill)


def exact_kv_only(o: Outcome, earlier_exact: list[tuple[int, ...]]) -> bool:
    """An exact request ran no filled row, and an exact request's prompt explains the prefix it reused.

    Necessary, not sufficient (a filled slot may share the prefix too); the answers compared with
    stock's and the leak check are the rest of the evidence."""
    if int(o.timings.get("ridgefill_filled_n", 0)) != 0:
        return False
    cached = int(o.timings.get("cache_n", 0))
    return cached == 0 or any(_common_prefix(o.req.prompt, p) >= cached for p in earlier_exact)


def _common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def summarize(name: str, res: dict, fill_mode: str | None, reference: dict[int, str] | None,
              prior_exact: list = (), prior_fill: list = ()) -> dict:
    """One pass's row. Fill columns only where the server fills (fill_mode); `reference`: answers
    to compare exact requests with; `prior_exact`, `prior_fill`: exact and fill requests sent to this server in
    earlier passes."""
    outs = res["outcomes"]
    ok = [o for o in outs if o.status == "ok"]
    fills = [o for o in ok if o.req.fill]
    exacts = [o for o in ok if not o.req.fill]
    row = {
        "pass": name,
        "requests": len(outs),
        "errors": sum(o.status == "error" for o in outs),
        "cancelled": sum(o.status == "cancelled" for o in outs),
        "server_alive": res["alive"],
        "seconds": round(res["seconds"], 1),
        "rss_mb_before": round(res["rss_mb"][0], 1),
        "rss_mb_after": round(res["rss_mb"][1], 1),
        "exact_requests": len(exacts),
        "ms_per_token_exact": _ms_per_token(exacts),
        "error_samples": [o.error for o in outs if o.status == "error"][:3],
        "slot_saved": sum(o.slot_action == "saved" for o in outs),
        "slot_refused": sum(o.slot_action == "refused" for o in outs),
        "slot_restored": sum(o.slot_action == "restored" for o in outs),
        "slot_errors": [o.slot_action for o in outs if o.slot_action not in (None, "saved", "refused", "restored",
                                                                              "skipped")][:3],
    }
    if fill_mode is not None:
        shares = [s for s in (filled_share(o) for o in fills) if s is not None]
        # what other requests of this pass and every request of earlier passes sent (a request repeats by pass)
        def others(o, fill):
            return [x.req for x in outs if x.req.fill == fill and x is not o] + list(prior_fill if fill else prior_exact)

        row.update({
            "fill_requests": len(fills),
            "fill_reuse_ok": sum(fill_reuse_ok(o, others(o, True)) for o in fills),
            "filled_share_min": min(shares) if shares else None,
            "filled_share_mean": statistics.fmean(shares) if shares else None,
            "exact_kv_only": sum(exact_kv_only(o, [r.prompt for r in others(o, False)]) for o in exacts),
            "ms_per_token_fill": _ms_per_token(fills),
        })
    if reference is not None:
        compared = [o for o in exacts if o.req.i in reference]
        row["exact_compared"] = len(compared)
        row["exact_mismatch"] = sum(o.content != reference[o.req.i] for o in compared)
    return row


def _ms_per_token(outs: list[Outcome]) -> float | None:
    """Median server prompt time per processed token, over requests that processed >= 100 tokens."""
    v = [o.timings["prompt_ms"] / o.timings["prompt_n"] for o in outs if o.timings.get("prompt_n", 0) >= 100]
    return statistics.median(v) if v else None


def leak_check(base: Path, model: Path, mode: str, tokens: np.ndarray, threads: int, split=None, maps=None) -> dict:
    """One slot: a fill request, then an exact one on the same slot; the exact answer against stock's."""
    args, body = ["-fa", "off", "-b", "256", "-ub", "64"], {"n_predict": 8, "n_probs": 3, "temperature": 0.0, "cache_prompt": True}
    fill_prompt, exact_prompt = tokens[:700].tolist(), tokens[2000:2400].tolist()
    with LlamaServer(base, args, ctx=SLOT_CTX, threads=threads) as srv:
        stock = srv.post("/completion", {"prompt": exact_prompt, **body})
    fill = ridgefill_flags(mode, split, tail=TAIL) + maps_flags(maps)
    with LlamaServer(model, args + fill, ctx=SLOT_CTX, threads=threads) as srv:
        filled = srv.post("/completion", {"prompt": fill_prompt, **body})
        after = srv.post("/completion", {"prompt": exact_prompt, "ridgefill": "exact", **body})
    same = (after["content"] == stock["content"]
            and after["completion_probabilities"] == stock["completion_probabilities"])
    return {"filled_rows": filled["timings"].get("ridgefill_filled_n", 0), "exact_after_fill_equals_stock": same}


def _save_flags(work: Path, name: str) -> list[str]:
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    return ["--slot-save-path", str(d)]


def soak(model: Path, base: Path, mode: str, tokens: np.ndarray, n_requests: int, threads: int,
         max_seconds: float, seed: int = 0, split: int | None = None, maps: Path | None = None,
         work: Path | None = None) -> dict:
    """`work`: where the servers save slots (a temporary folder by default)."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ridgefill-soak-") as tmp:
            return soak(model, base, mode, tokens, n_requests, threads, max_seconds, seed, split, maps, Path(tmp))
    reqs = make_requests(tokens, n_requests, seed)
    # a bounded RAM prompt cache: full after the first pass, so RSS growth in the second pass is a leak
    flags = ["-fa", "on", "-b", "512", "-ub", "128", "--cache-ram", str(CACHE_RAM_MIB)]
    fill_flags = ridgefill_flags(mode, split, SINKS, TAIL) + maps_flags(maps)
    stock_ctx = dict(ctx=N_SLOTS * SLOT_CTX, threads=threads, n_parallel=N_SLOTS)
    rows, ref = [], []
    with LlamaServer(base, flags + _save_flags(work, "stock"), **stock_ctx) as srv:
        for k in (1, 2):
            res = run_pass(srv, reqs, None, max_seconds)
            ref.append({o.req.i: o.content for o in res["outcomes"] if o.status == "ok" and not o.req.fill})
            rows.append(summarize(f"stock {k}", res, None, None))
    with LlamaServer(base, flags + _save_flags(work, "stock2"), **stock_ctx) as srv:  # a second stock server: llama.cpp's own run-to-run noise
        for k in (1, 2):
            rows.append(summarize(f"stock' {k} (vs stock {k})", run_pass(srv, reqs, None, max_seconds), None, ref[k - 1]))
    with LlamaServer(model, flags + fill_flags + _save_flags(work, "fork"), **stock_ctx) as srv:
        prior, prior_fill = [], []
        for k in (1, 2):
            res = run_pass(srv, reqs, mode, max_seconds)
            rows.append(summarize(f"fork {k} ({mode}, vs stock {k})", res, mode, ref[k - 1], prior, prior_fill))
            prior += [o.req for o in res["outcomes"] if not o.req.fill]
            prior_fill += [o.req for o in res["outcomes"] if o.req.fill]
    return {"model": str(model), "maps": maps and str(maps), "base": str(base), "mode": mode, "split": split,
            "requests": n_requests, "seed": seed, "slots": N_SLOTS, "slot_ctx": SLOT_CTX, "sinks": SINKS, "tail": TAIL,
            "settings": [list(x) for x in SETTINGS],
            "passes": rows, "leak_check": leak_check(base, model, mode, tokens, threads, split, maps)}


def render(result: dict) -> str:
    cols = ["pass", "requests", "errors", "cancelled", "server_alive", "fill_requests", "filled_share_min",
            "fill_reuse_ok", "slot_saved", "slot_refused", "slot_restored", "exact_requests", "exact_kv_only", "exact_compared", "exact_mismatch", "rss_mb_before", "rss_mb_after",
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


def report(result: dict, command: str) -> str:
    """The markdown report: what ran, the table, and how to read it."""
    lines = [
        "# Soak: a 4-slot llama-server under mixed exact and fill requests",
        "",
        f"Command: `{command}`",
        "",
        f"Model `{Path(result['model']).name}` ({result['mode']} fill, sinks {result['sinks']}, tail {result['tail']}), "
        f"stock = `{Path(result['base']).name}` with no `--ridgefill` flag. {result['requests']} requests per pass "
        f"(seed {result['seed']}), {result['slots']} slots of {result['slot_ctx']} tokens, "
        f"`-fa on -b 512 -ub 128 --cache-ram {CACHE_RAM_MIB}`, no `-kvu` (one KV stream per slot).",
        "",
        render(result),
        "",
        "How to read it:",
        "- `filled_share_min`: the smallest share, over fill requests, of the rows in their fill range that they",
        "  processed (not reused from the prompt cache) and that ran the fill graph; 1.000 = every row.",
        "- `fill_reuse_ok`: fill requests whose reused rows end within their fill range, or whose reused rows past it",
        "  an earlier prompt of the same settings explains with its own fill range ending no later (rows a request",
        "  asked to run in full never come from filled KV). Fill requests ask for (sink, tail) among "
        + ", ".join(f"({a}, {b})" for a, b in result.get("settings", [])) + "; one in ten requests retries an",
        "  earlier prompt cut 20-100 tokens short.",
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
