"""Running a GGUF through the fork: the bindings' wrapper and split prefill as one `Context`.

`Model` loads a (possibly augmented) GGUF; `Context` decodes, sets the fill mode, split, range
and routing, reads and overwrites cached rows, and runs a whole prompt's split prefill (head,
hook, tail) and the scoring on top of it (`split_prefill`, whose functions take a Context).

The names load on first use: `split_prefill`'s row arithmetic needs no compiled extension, so
bench/gpu.sh's generator runs where `ridgefill._core` was never built.
"""

from importlib import import_module

_WHERE = {"Context": "context", "supported_archs": "context", "ALL_LAYERS": "model", "Model": "model",
          "add_rpc_servers": "model", "devices": "model", "version": "model", "PrefillResult": "split_prefill",
          "fill_range": "split_prefill", "head_stop": "split_prefill", "nothing_filled": "split_prefill",
          "PROBE_ROWS": "split_prefill"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
