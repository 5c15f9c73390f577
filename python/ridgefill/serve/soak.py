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
range), fill requests switch their sink and tail rows, selected and routed shares per request (`ridgefill_sink`,
`ridgefill_tail`, `ridgefill_select`, `ridgefill_route`; the settings the server refuses are left out),
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
from ..fit.route import share_rows
from .server import LlamaServer, ServerError, maps_flags, ridgefill_flags
from .soak_client import (N_SLOTS, SETTINGS, SINKS, TAIL, Outcome, Request, Slots, request_body, exact_from, make_requests,
                          send, settings)

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
    return any(settings(r) == settings(o.req) and exact_from(r) <= exact_from(o.req)
               and _common_prefix(o.req.prompt, r.prompt) >= cached for r in earlier_fill)


def rows_ok(o: Outcome) -> bool:
    """A fill request selected ceil(q*n) of the n rows it filled (the fork's rule: every filled row is a candidate)
    and routed rows only where it asked to route or select."""
    filled = int(o.timings.get("ridgefill_filled_n", 0))
    selected = int(o.timings.get("ridgefill_selected_n", 0))
    routed = int(o.timings.get("ridgefill_routed_n", 0))
    if selected != share_rows(o.req.select, filled):
        return False
    return routed == selected if o.req.route == 0 else (routed > selected or filled == 0)


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
            "fill_rows_ok": sum(rows_ok(o) for o in fills),
            "selected_rows": sum(int(o.timings.get("ridgefill_selected_n", 0)) for o in fills),
            "routed_rows": sum(int(o.timings.get("ridgefill_routed_n", 0)) for o in fills),
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


def served_settings(model: Path, args: list[str], tokens: np.ndarray, server_kw: dict) -> tuple[list, dict]:
    """The fill SETTINGS the fork's server serves with `args` (as the soak starts it, one short request each), and
    why it refused the others (a model without routing statistics cannot route, say)."""
    ok, refused = [], {}
    with LlamaServer(model, args, **server_kw) as srv:
        for setting in SETTINGS:
            req = Request(0, True, False, False, tuple(tokens[:300].tolist()), n_predict=1, sink=setting[0],
                          tail=setting[1], select=setting[2], route=setting[3])
            try:
                srv.post("/completion", request_body(req, "ridge"))
                ok.append(setting)
            except ServerError as err:
                if err.status != 400:
                    raise
                refused[str(setting)] = str(err)[:300]
    if not ok:
        raise ServerError(f"the server serves none of the soak's fill settings: {refused}")
    return ok, refused


def _save_flags(work: Path, name: str) -> list[str]:
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    return ["--slot-save-path", str(d)]


def soak(model: Path, base: Path, mode: str, tokens: np.ndarray, n_requests: int, threads: int,
         max_seconds: float, seed: int = 0, split: int | None = None, maps: Path | None = None,
         work: Path | None = None, *, passes: int = 2, floor_requests: int | None = None) -> dict:
    """`work`: where the servers save slots (a temporary folder by default); `passes`: how often each server gets
    the requests; `floor_requests`: the second stock server gets only the first so many (default: all)."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ridgefill-soak-") as tmp:
            return soak(model, base, mode, tokens, n_requests, threads, max_seconds, seed, split, maps, Path(tmp),
                        passes=passes, floor_requests=floor_requests)
    # a bounded RAM prompt cache: full after the first pass, so RSS growth in the second pass is a leak
    # one KV stream for the slots (-kvu): a request may then route and select (a slot spread over streams cannot)
    flags = ["-fa", "on", "-b", "512", "-ub", "128", "-kvu", "--cache-ram", str(CACHE_RAM_MIB)]
    fill_flags = ridgefill_flags(mode, split, SINKS, TAIL) + maps_flags(maps)
    stock_ctx = dict(ctx=N_SLOTS * SLOT_CTX, threads=threads, n_parallel=N_SLOTS)
    fill_settings, refused = served_settings(model, flags + fill_flags, tokens, stock_ctx)
    reqs = make_requests(tokens, n_requests, seed, fill_settings)
    rows, ref, rounds = [], [], range(1, passes + 1)
    with LlamaServer(base, flags + _save_flags(work, "stock"), **stock_ctx) as srv:
        for k in rounds:
            res = run_pass(srv, reqs, None, max_seconds)
            ref.append({o.req.i: o.content for o in res["outcomes"] if o.status == "ok" and not o.req.fill})
            rows.append(summarize(f"stock {k}", res, None, None))
    floor = reqs[:floor_requests] if floor_requests else reqs
    with LlamaServer(base, flags + _save_flags(work, "stock2"), **stock_ctx) as srv:  # a second stock server: llama.cpp's own run-to-run noise
        for k in rounds:
            rows.append(summarize(f"stock' {k} (vs stock {k})", run_pass(srv, floor, None, max_seconds), None, ref[k - 1]))
    with LlamaServer(model, flags + fill_flags + _save_flags(work, "fork"), **stock_ctx) as srv:
        prior, prior_fill = [], []
        for k in rounds:
            res = run_pass(srv, reqs, mode, max_seconds)
            rows.append(summarize(f"fork {k} ({mode}, vs stock {k})", res, mode, ref[k - 1], prior, prior_fill))
            prior += [o.req for o in res["outcomes"] if not o.req.fill]
            prior_fill += [o.req for o in res["outcomes"] if o.req.fill]
    return {"model": str(model), "maps": maps and str(maps), "base": str(base), "mode": mode, "split": split,
            "requests": n_requests, "seed": seed, "slots": N_SLOTS, "slot_ctx": SLOT_CTX, "sinks": SINKS, "tail": TAIL,
            "settings": [list(x) for x in fill_settings], "settings_refused": refused, "passes_each": passes,
            "floor_requests": len(floor),
            "passes": rows, "leak_check": leak_check(base, model, mode, tokens, threads, split, maps)}
