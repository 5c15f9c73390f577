"""The soak's client: the seeded request mix (shared prefixes, cut-short retries, per-request fill settings,
cancellations, slot saves and restores) and how each request is sent and read back (`soak.py` runs the passes)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .server import LlamaServer

N_SLOTS = 4
SINKS, TAIL = 4, 64
# (sink, tail, selected fraction, routed fraction) a fill request asks for; the first: the server's. Selection keeps
# the tail at least the probe's 64 rows; settings a model cannot serve (no routing statistics, say) are left out
SETTINGS = ((SINKS, TAIL, 0.0, 0.0), (8, 128, 0.0, 0.0), (SINKS, 32, 0.0, 0.0), (SINKS, TAIL, 0.1, 0.0),
            (8, 128, 0.0, 0.05), (8, 128, 0.05, 0.05))
REFUSED_SAVE = "cannot save a slot whose KV cache was filled by RidgeFill"


@dataclass(frozen=True)
class Request:
    i: int
    fill: bool        # asks for the server's fill mode (stock servers: a plain request)
    stream: bool
    cancel: bool      # the client hangs up while the prompt is processed
    prompt: tuple[int, ...]
    n_predict: int = 4
    sink: int = SINKS  # the fill settings a fill request asks for
    tail: int = TAIL
    select: float = 0.0
    route: float = 0.0
    slot_action: str | None = None  # "save" (the slot that served request `other`) or "restore" (its file), first
    other: int = -1


def settings(req: Request) -> tuple:
    """What a request's KV depends on beside its prompt: the server keys its cache by it."""
    return req.sink, req.tail, req.select, req.route


def exact_from(req: Request) -> int:
    """The first row, at or after the sinks, that the request asks to run in full: the end of its fill range."""
    return max(len(req.prompt) - req.tail, req.sink)


@dataclass
class Outcome:
    req: Request
    status: str                      # ok, error, cancelled
    content: str = ""
    timings: dict = field(default_factory=dict)
    error: str = ""
    id_slot: int | None = None
    slot_action: str | None = None   # what the request's slot action did (Slots.act)


def make_requests(tokens: np.ndarray, n: int, seed: int = 0, fill_settings=SETTINGS) -> list[Request]:
    """`n` requests: prompts = one of 6 shared 128-token prefixes + a 100-350-token suffix, or (one in ten) an
    earlier prompt cut 20-100 tokens short; fill requests take one of `fill_settings`; one in twenty-five first
    saves the slot of an earlier request, one in twenty-five first restores an earlier save."""
    rng = np.random.default_rng(seed)
    prefixes = [tokens[k * 128:(k + 1) * 128] for k in range(6)]
    out: list[Request] = []
    for i in range(n):
        if out and rng.random() < 0.1:
            parent = out[int(rng.integers(0, len(out)))].prompt
            prompt = parent[:len(parent) - int(rng.integers(20, min(100, len(parent) - 128) + 1))]
        else:
            start = int(rng.integers(1000, len(tokens) - 700))
            suffix = tokens[start:start + int(rng.integers(100, 350))]
            prompt = tuple(int(t) for t in np.concatenate([prefixes[int(rng.integers(0, 6))], suffix]))
        fill, stream, cancel = bool(rng.random() < 0.5), bool(rng.random() < 0.5), bool(rng.random() < 0.05)
        sink, tail, select, route = fill_settings[int(rng.integers(0, len(fill_settings)))] if fill else SETTINGS[0]
        action, other = None, -1
        if out and rng.random() < 0.08:
            action, other = ("save", "restore")[int(rng.integers(0, 2))], int(rng.integers(0, len(out)))
        out.append(Request(i, fill, stream, cancel, prompt, sink=sink, tail=tail, select=select, route=route,
                           slot_action=action, other=other))
    return out


def request_body(req: Request, fill_mode: str | None) -> dict:
    body = {"prompt": list(req.prompt), "n_predict": req.n_predict, "temperature": 0.0, "cache_prompt": True,
            "stream": req.stream}
    if fill_mode is not None:
        body["ridgefill"] = fill_mode if req.fill else "exact"
        if req.fill:
            body.update(ridgefill_sink=req.sink, ridgefill_tail=req.tail)
            # selection and routing only where asked: a server that cannot route refuses the field itself
            body.update({k: v for k, v in (("ridgefill_select", req.select), ("ridgefill_route", req.route)) if v})
    return body


class Slots:
    """Which slot served each request, and the slot files saved so far: the bookkeeping of save and restore."""

    def __init__(self):
        self.lock = threading.Lock()
        self.served: dict[int, int] = {}  # request -> id_slot
        self.saved: list[str] = []

    def record(self, o: Outcome) -> None:
        if o.id_slot is not None:
            with self.lock:
                self.served[o.req.i] = o.id_slot

    def act(self, srv: "LlamaServer", req: Request) -> str | None:
        """Run the request's slot action first; what happened: saved, refused (filled KV), restored, skipped, or
        an error message."""
        with self.lock:
            slot = self.served.get(req.other)
            files = list(self.saved)
        if req.slot_action == "save":
            if slot is None:
                return "skipped"
            name = f"r{req.i}.bin"
            reply = _slot_post(srv, slot, "save", name)
            if reply.get("n_saved") is not None:
                with self.lock:
                    self.saved.append(name)
                return "saved"
            return "refused" if REFUSED_SAVE in json.dumps(reply) else f"save: {reply}"
        if not files:
            return "skipped"
        reply = _slot_post(srv, req.other % N_SLOTS, "restore", files[req.other % len(files)])
        return "restored" if reply.get("n_restored") is not None else f"restore: {reply}"


def _slot_post(srv: "LlamaServer", slot: int, action: str, filename: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    try:
        conn.request("POST", f"/slots/{slot}?action={action}", json.dumps({"filename": filename}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", "replace")
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return {"error": f"HTTP {resp.status}: {raw[:200]}"}
    except (OSError, http.client.HTTPException) as err:
        return {"error": repr(err)}
    finally:
        conn.close()


def send(srv: LlamaServer, req: Request, fill_mode: str | None, timeout: float = 300.0) -> Outcome:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        conn.request("POST", "/completion", json.dumps(request_body(req, fill_mode)), {"Content-Type": "application/json"})
        if req.cancel:
            time.sleep(0.05)
            conn.close()  # before the prompt is through: the server cancels the task
            return Outcome(req, "cancelled")
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            return Outcome(req, "error", error=f"HTTP {resp.status}: {raw[:300]}")
        if not req.stream:
            data = json.loads(raw)
            return Outcome(req, "ok", data.get("content", ""), data.get("timings", {}), id_slot=data.get("id_slot"))
        content, timings, slot = "", {}, None
        for line in raw.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                chunk = json.loads(line[6:])
                content += chunk.get("content", "")
                timings, slot = chunk.get("timings", timings), chunk.get("id_slot", slot)
        return Outcome(req, "ok", content, timings, id_slot=slot)
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as err:
        return Outcome(req, "error", error=repr(err))
    finally:
        conn.close()
