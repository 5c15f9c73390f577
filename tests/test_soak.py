"""The soak's bookkeeping (no server): which rows a fill request had to fill, and which exact
requests' reused prefixes exact prompts explain. The soak itself is `bench/soak`."""

import numpy as np

from ridgefill.serve import soak
from ridgefill.serve.soak import Outcome, Request


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
    a, b = soak.make_requests(toks, 50, seed=3), soak.make_requests(toks, 50, seed=3)
    assert a == b
    assert len({r.prompt[:128] for r in a}) <= 6
    assert {r.fill for r in a} == {True, False} and {r.stream for r in a} == {True, False}
