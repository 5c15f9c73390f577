"""The soak's bookkeeping (no server): which rows a fill request had to fill, and which exact
requests' reused prefixes exact prompts explain. The soak itself is `bench/soak`."""

import numpy as np

from ridgefill.serve import soak, soak_client
from ridgefill.serve.soak_client import Outcome, Request


def _out(prompt_len, cache_n, filled, fill=True):
    return Outcome(Request(0, fill, False, False, tuple(range(prompt_len))), "ok",
                   timings={"cache_n": cache_n, "ridgefill_filled_n": filled, "prompt_n": prompt_len - cache_n})


def test_filled_share_counts_only_rows_the_request_processed():
    n = 500
    assert soak.filled_share(_out(n, 0, n - soak.SINKS - soak.TAIL)) == 1.0
    assert soak.filled_share(_out(n, 200, n - soak.TAIL - 200)) == 1.0       # prefix reused from the cache
    assert soak.filled_share(_out(n, 200, 100)) == 100 / (n - soak.TAIL - 200)
    assert soak.filled_share(_out(n, n - 1, 0)) is None                      # nothing left to fill


def test_exact_kv_only_needs_no_filled_row_and_an_exact_prompt_for_the_reused_prefix():
    o = _out(300, 128, 0, fill=False)
    assert soak.exact_kv_only(o, [tuple(range(128)) + (9,)])
    assert not soak.exact_kv_only(o, [tuple(range(100))])                   # reuse longer than any exact prefix
    assert not soak.exact_kv_only(_out(300, 0, 5, fill=False), [])          # an exact request that filled rows
    assert soak.exact_kv_only(_out(300, 0, 0, fill=False), [])


def test_requests_are_seeded_and_share_prefixes():
    toks = np.arange(5000)
    a, b = soak_client.make_requests(toks, 50, seed=3), soak_client.make_requests(toks, 50, seed=3)
    assert a == b
    assert len({r.prompt[:128] for r in a}) <= 6
    assert {r.fill for r in a} == {True, False} and {r.stream for r in a} == {True, False}


def test_fill_reuse_is_ok_within_the_fill_range_or_explained_by_a_prompt_whose_range_ends_no_later():
    long = Request(1, True, False, False, tuple(range(700)))
    short = Request(2, True, False, False, tuple(range(576)))
    o = Outcome(short, "ok", timings={"cache_n": 512})
    assert soak.fill_reuse_ok(o, [long])                                     # 512 = 576 - 64: within its range
    o = Outcome(short, "ok", timings={"cache_n": 575})
    assert not soak.fill_reuse_ok(o, [long])                                 # rows 512..574 were filled for `long`
    assert soak.fill_reuse_ok(o, [long, Request(0, True, False, False, tuple(range(576)))])   # its own retry
    other = Request(0, True, False, False, tuple(range(576)), sink=8, tail=128)
    assert not soak.fill_reuse_ok(o, [other])                                # other settings explain nothing
    selecting = Request(0, True, False, False, tuple(range(576)), select=0.1)
    assert not soak.fill_reuse_ok(o, [selecting])                            # nor another selected fraction


def _rows(filled, selected, routed, select=0.0, route=0.0):
    req = Request(0, True, False, False, tuple(range(500)), select=select, route=route)
    return Outcome(req, "ok", timings={"ridgefill_filled_n": filled, "ridgefill_selected_n": selected,
                                       "ridgefill_routed_n": routed})


def test_rows_ok_holds_the_fork_to_ceil_q_n_selected_rows_and_routes_only_when_asked():
    assert soak.rows_ok(_rows(432, 0, 0))
    assert not soak.rows_ok(_rows(432, 0, 3))                                # routed without asking
    assert soak.rows_ok(_rows(432, 44, 44, select=0.1))                      # ceil(43.2)
    assert not soak.rows_ok(_rows(432, 43, 43, select=0.1))
    assert soak.rows_ok(_rows(430, 43, 43, select=0.1))                      # exactly 43: no rounding up
    assert soak.rows_ok(_rows(432, 0, 9, route=0.05))
    assert not soak.rows_ok(_rows(432, 0, 0, route=0.05))                   # asked to route, routed nothing
    assert soak.rows_ok(_rows(432, 22, 31, select=0.05, route=0.05))
    assert soak.rows_ok(_rows(0, 0, 0, select=0.1, route=0.05))               # nothing filled: nothing to pick


def test_requests_retry_cut_prompts_switch_settings_and_act_on_slots():
    reqs = soak_client.make_requests(np.arange(5000), 400, seed=1)
    prompts = [r.prompt for r in reqs]
    cut = [r for r in reqs if any(len(p) > len(r.prompt) and p[:len(r.prompt)] == r.prompt for p in prompts[:r.i])]
    assert len(cut) > 10 and all(len(r.prompt) > 128 for r in cut)
    assert {soak_client.settings(r) for r in reqs if r.fill} == set(soak_client.SETTINGS)
    assert {soak_client.settings(r) for r in reqs if not r.fill} == {soak_client.SETTINGS[0]}
    only = soak_client.SETTINGS[:2]
    assert {soak_client.settings(r) for r in soak_client.make_requests(np.arange(5000), 100, 1, only) if r.fill} == set(only)
    acts = [r for r in reqs if r.slot_action]
    assert {r.slot_action for r in acts} == {"save", "restore"} and all(0 <= r.other < r.i for r in acts)


def test_a_fill_request_carries_its_settings_and_an_exact_one_none():
    fill = Request(0, True, False, False, (1, 2, 3), sink=8, tail=128)
    body = soak_client.request_body(fill, "ridge")
    assert (body["ridgefill"], body["ridgefill_sink"], body["ridgefill_tail"]) == ("ridge", 8, 128)
    assert "ridgefill_select" not in body and "ridgefill_route" not in body   # only where asked
    body = soak_client.request_body(Request(0, True, False, False, (1, 2, 3), select=0.1, route=0.05), "ridge")
    assert (body["ridgefill_select"], body["ridgefill_route"]) == (0.1, 0.05)
    exact = soak_client.request_body(Request(1, False, False, False, (1, 2, 3)), "ridge")
    assert exact["ridgefill"] == "exact" and "ridgefill_tail" not in exact
    assert "ridgefill" not in soak_client.request_body(fill, None)                         # stock servers get plain requests
